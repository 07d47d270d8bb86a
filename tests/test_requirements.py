"""`pulumi up` on a fresh machine: requirements.txt holds what the program and its dynamic provider import
at deploy time, nothing only tools or tests need; __main__.py checks the Python version first."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCAL = {"catalog", "components", "recipe", "stacks", "tools", "tests", "bench", "__main__"}
# Scripts that run alone (in the pods, or as the rehearsal's stand-ins) import their siblings by file name.
LOCAL |= {p.stem for folder in ("components/scripts", "tests/standins") for p in (ROOT / folder).glob("*.py")}
# Runtime code: what `pulumi up` runs, in the program and in the provider process (components/scripts
# run inside the pods, from the image, and are not imported here).
RUNTIME = [ROOT / "__main__.py", *sorted((ROOT / "catalog").rglob("*.py")), *sorted((ROOT / "recipe").rglob("*.py")),
           *sorted((ROOT / "stacks").rglob("*.py")),
           *sorted(p for p in (ROOT / "components").rglob("*.py") if "scripts" not in p.parts)]
# ... except a script the program imports too (stacks.dataset runs the pods' parquet checks offline).
RUNTIME += [p for p in sorted((ROOT / "components" / "scripts").glob("*.py"))
            if any(f"components.scripts.{p.stem}" in f.read_text() for f in RUNTIME)]
TOOLING = [*sorted((ROOT / "tools").rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py"))]
# Needed at deploy time without an import of ours: Pulumi pickles the dynamic provider with dill.
IMPLICIT_RUNTIME = {"dill"}
# `google` is a namespace shared by several distributions: name the one each subpackage comes from.
NAMESPACED = {"google.protobuf": "protobuf", "google.auth": "google-auth", "google.oauth2": "google-auth"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(name: str) -> set[str]:
    names = set()
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            names.add(_norm(re.split(r"[<>=!~\[ ;]", line, maxsplit=1)[0]))
    return names


def _third_party(files: list[Path]) -> dict[str, set[str]]:
    """Distribution -> files that import it (every import, also inside functions)."""
    dists = packages_distributions()
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in LOCAL or top in sys.stdlib_module_names:
                    continue
                sub = ".".join(module.split(".")[:2])
                for dist in [NAMESPACED[sub]] if sub in NAMESPACED else dists.get(top, [top]):
                    found.setdefault(_norm(dist), set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_runtime_imports_are_in_requirements_txt():
    runtime = _requirements("requirements.txt")
    missing = {d: sorted(f) for d, f in _third_party(RUNTIME).items() if d not in runtime}
    assert not missing, f"imported at deploy time but not in requirements.txt: {missing}"


def test_requirements_txt_holds_only_runtime_packages():
    used = set(_third_party(RUNTIME)) | IMPLICIT_RUNTIME
    extra = _requirements("requirements.txt") - used
    assert not extra, f"in requirements.txt but not imported by the program or its provider: {extra}"


def test_tool_and_test_imports_are_in_the_dev_requirements():
    # requirements-verl-test.txt: what the verl-reading tests need, installed without dependencies.
    available = _requirements("requirements.txt") | _requirements("requirements-dev.txt") | \
        _requirements("requirements-verl-test.txt")
    # pulumi's own plugins and packages pulled in by the ones listed (grpc, protobuf, google-api-core...)
    # come with them; what our tools and tests import directly must be listed.
    # (pillow comes with matplotlib, protobuf and grpcio with pulumi).
    transitive = {"grpcio", "protobuf", "pillow"}
    missing = {d: sorted(f) for d, f in _third_party(TOOLING).items() if d not in available | transitive}
    assert not missing, f"imported by tools/tests but in no requirements file: {missing}"


def test_program_imports_without_tool_only_packages(tmp_path):
    """The program and the provider import with the dev-only packages made unimportable."""
    dev_only = ["rich", "matplotlib", "ray", "pytest", "jsonschema", "kubernetes_validate"]
    code = (
        "import sys, importlib.abc\n"
        f"BLOCK = {dev_only!r}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCK:\n"
        "            raise ImportError(f'{name} is dev-only')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import stacks.compose, components.ray_job_provider, components.ray_client\n"
        "print('imported')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]


def test_main_checks_the_python_version_first():
    code = ("import runpy, sys\n"
            "sys.version_info = (3, 10, 12, 'final', 0)\n"
            "try:\n"
            "    runpy.run_path('__main__.py', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    print('EXIT', e.code)\n"
            "print('compose imported:', 'stacks.compose' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "EXIT verl-gke needs Python 3.11 or newer; venv has 3.10" in proc.stdout, proc.stdout + proc.stderr
    # `pulumi install` recreates venv with $PULUMI_PYTHON_CMD, else the first python3 on PATH (pulumi/pulumi
    # @ 1b5949891b3c sdk/python/toolchain/pip.go CommandPath): without naming a newer interpreter the user
    # gets the same old venv back.
    assert "PULUMI_PYTHON_CMD=python3.11 pulumi install" in proc.stdout, proc.stdout
    assert "compose imported: False" in proc.stdout
    assert "Traceback" not in proc.stderr


# What a requirements file's comments name in this repository: a path (`catalog/versions.py`), maybe
# followed by a name defined there (`VERL_VERSION`), or a module of ours (`tools.plan`, `stacks.dataset`).
_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w.-]+\.(?:py|txt|md|yaml|json))(?:\s+([A-Z][A-Z0-9_]+)\b)?")
_MODULE = re.compile(r"(?<![\w./-])((?:catalog|components|stacks|recipe|tools|tests|bench)(?:\.[A-Za-z_]\w*)+)")


def _defines(path: Path, name: str) -> bool:
    return re.search(rf"^(?:def |class )?{re.escape(name)}\b", path.read_text(), re.MULTILINE) is not None


def comment_problems(text: str, root: Path = ROOT) -> list[str]:
    """What a requirements file's comments name that the repository does not have."""
    problems = []
    for comment in (line.split("#", 1)[1] for line in text.splitlines() if "#" in line):
        for rel, name in _PATH.findall(comment):
            if not (root / rel).is_file():
                problems.append(f"{rel}: no such file")
            elif name and not _defines(root / rel, name):
                problems.append(f"{rel} does not define {name}")
        for dotted in _MODULE.findall(comment):
            parts = dotted.split(".")
            # the longest prefix that is a module file or package, the rest a name defined in it
            for cut in range(len(parts), 0, -1):
                base = root.joinpath(*parts[:cut])
                module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
                if module.is_file():
                    if cut < len(parts) and not _defines(module, parts[cut]):
                        problems.append(f"{dotted}: {'.'.join(parts[:cut])} does not define {parts[cut]}")
                    break
            else:
                problems.append(f"{dotted}: no such module")
    return problems


def test_what_requirements_comments_name_exists():
    """Issue 25: requirements-verl-test.txt named `stacks/versions.py` after the file had moved to catalog/."""
    files = sorted(ROOT.glob("requirements*.txt"))
    assert len(files) >= 3
    found = {f.name: comment_problems(f.read_text()) for f in files}
    assert not any(found.values()), found
    named = [m for f in files for line in f.read_text().splitlines() if "#" in line
             for m in (_PATH.findall(line) + [(d, "") for d in _MODULE.findall(line)])]
    assert len(named) >= 5  # the check reads what the comments name


def test_the_comment_check_catches_a_moved_file():
    old = "# verl at the pinned tag (stacks/versions.py VERL_VERSION) for tests/test_verl_config.py\n"
    assert comment_problems(old) == ["stacks/versions.py: no such file"]
    assert comment_problems("# (catalog/versions.py NO_SUCH_NAME)") == [
        "catalog/versions.py does not define NO_SUCH_NAME"]
    assert comment_problems("# tools.nowhere reads it; stacks.dataset.nothing") == [
        "tools.nowhere: tools does not define nowhere",
        "stacks.dataset.nothing: stacks.dataset does not define nothing"]
