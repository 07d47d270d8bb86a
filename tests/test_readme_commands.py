"""Every Python command the README names runs from a fresh clone as written (issue 25: the README's
`python bench/job_submit.py` needed `venv/bin/python`): it goes through the venv the quick start makes, and
the module or script it names is in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# `python3 -m venv venv` makes the venv; anything else runs inside it.
COMMAND = re.compile(r"(?P<interp>(?:venv/bin/)?python3?(?:\.\d+)?) +(?:-m +(?P<module>[A-Za-z_.]+)|(?P<flag>-c)\b"
                     r"|(?P<script>[A-Za-z_/]+\.py))")
EXTERNAL = {"venv", "pytest"}  # modules of Python or of requirements-dev.txt, not of this repository


def _commands() -> list[re.Match]:
    found = list(COMMAND.finditer(README))
    assert len(found) > 10, "the pattern no longer finds the README's commands"
    return found


def _line(m: re.Match) -> int:
    return README.count("\n", 0, m.start()) + 1


def test_every_python_command_runs_through_the_venv():
    loose = [f"README.md:{_line(m)}: {m.group(0)}" for m in _commands()
             if m.group("interp") != "venv/bin/python" and m.group("module") != "venv"]
    assert not loose, loose


def test_every_module_and_script_the_readme_runs_is_in_the_repository():
    missing = []
    for m in _commands():
        if (mod := m.group("module")) and mod not in EXTERNAL:
            path = ROOT / mod.replace(".", "/")
            if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
                missing.append(f"README.md:{_line(m)}: -m {mod}")
        elif (script := m.group("script")) and not (ROOT / script).is_file():
            missing.append(f"README.md:{_line(m)}: {script}")
    assert not missing, missing
