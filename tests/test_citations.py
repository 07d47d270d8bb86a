"""A citation a user can follow: tools/, bench/, tests/, the README and docs/ cite upstream sources (repository, path,
commit) or files of this repository, never a design note the repository does not ship (issue 25)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests import docs

ROOT = Path(__file__).resolve().parent.parent
NOT_SHIPPED = ("REFERENCE" + ".md", "README.md next to this file")  # split: this file names them too
# Folders of the machine the project was written on, or of its design notes: a clone has none of them.
MACHINE_PATHS = ("/" + "work/", ".." + "/shared")


def _texts() -> list[Path]:
    files = list(docs.FILES)
    for folder in ("tools", "bench", "tests"):
        files += [p for p in sorted((ROOT / folder).rglob("*")) if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix in (".py", ".json", ".yaml", ".md", ".txt") and p.resolve() != Path(__file__).resolve()]
    return files


def test_no_citation_of_a_document_the_repository_does_not_have():
    cited = [f"{p.relative_to(ROOT)}: {phrase}" for p in _texts() for phrase in NOT_SHIPPED if phrase in p.read_text()]
    assert not (ROOT / NOT_SHIPPED[0]).exists()
    assert not cited, cited


def _tracked_texts() -> list[Path]:
    """Every text file the repository holds (git's index, plus files not yet added that git does not
    ignore) but recorded upstream data (tests/data) and the generated snapshots: caches the tools write
    (.hypothesis, build/) are not the repository's."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    paths = [ROOT / name for name in listed if name]
    return [p for p in sorted(paths) if p.is_file()
            and p.relative_to(ROOT).parts[:2] not in (("tests", "data"), ("tests", "snapshots"))
            and p.suffix in (".py", ".json", ".yaml", ".md", ".txt", ".toml", "")
            and p.resolve() != Path(__file__).resolve()]


def test_no_machine_path_in_code_or_docs():
    """A command or citation a user can run: no folder of the machine the project was written on."""
    found = [f"{p.relative_to(ROOT)}: {m}" for p in _tracked_texts() for m in MACHINE_PATHS
             if m in p.read_text(errors="replace")]
    assert not found, found
