"""The house's one-way layers, read from the code's own imports.

catalog (facts, no Pulumi) <- components (catalog + SDKs), recipe (pure) <- stacks (the program) <- tools;
__main__ runs stacks; nothing but tests (and the bench, for its local Ray nodes) imports tools; no module
imports another in a cycle.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"catalog": 0, "components": 1, "recipe": 1, "stacks": 2, "tools": 3}
PROJECT_PACKAGES = set(LAYERS) | {"tests", "bench"}


def modules() -> dict[str, Path]:
    found = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(p for p in rel.parts if p != "__init__")
            found[name] = path
    return found


@functools.cache
def imports_of(path: Path) -> frozenset[str]:
    """Project modules a file imports, at module level or inside functions (parsed when a test asks: every
    xdist worker collects this module, one runs it)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return frozenset(n for n in names if n.split(".")[0] in PROJECT_PACKAGES)


MODULES = modules()


@functools.cache
def graph() -> dict[str, set[str]]:
    """Each project module's imports of other project modules."""
    return {m: {i for i in imports_of(p) if i in MODULES} for m, p in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_upward(module):
    layer = LAYERS[module.split(".")[0]]
    for target in imports_of(MODULES[module]):
        top = target.split(".")[0]
        assert top in LAYERS, f"{module} imports {target}: only the layers may be imported by the layers"
        assert LAYERS[top] <= layer, f"{module} (layer {layer}) imports {target} (layer {LAYERS[top]})"


def test_catalog_has_no_pulumi_import():
    for module, path in MODULES.items():
        if module.startswith("catalog"):
            tree = ast.parse(path.read_text())
            used = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            used |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            assert not any(u.split(".")[0].startswith("pulumi") for u in used), module


def test_no_import_cycle():
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph()[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail, m, n]))
            if n not in state:
                visit(n, [*trail, m])
        state[m] = 2

    for m in sorted(graph()):
        if m not in state:
            visit(m, [])


def test_only_tests_and_the_bench_import_tools():
    """The program never runs tools; the bench shares the local Ray nodes with the tests (tools.local_ray)."""
    users = [p for p in ROOT.glob("*.py") if any(i.startswith("tools") for i in imports_of(p))]
    assert [p.name for p in users] == [], "tools are imported by nothing but tests and the bench (and run as commands)"
    bench = {i for p in ROOT.glob("bench/*.py") for i in imports_of(p) if i.startswith("tools")}
    assert all(i == "tools.local_ray" or i.startswith("tools.local_ray.") for i in bench), bench


COMPONENT_MODULES = sorted(m for m in MODULES if m.startswith("components.") and m != "components.scripts.stage_data")


# One fresh interpreter imports each component in turn, after dropping every project module the one before it
# loaded (third-party ones stay: they import nothing of ours), so each import starts from none of our code as a
# process of its own would, without an interpreter and the SDKs' imports per component (~0.4 CPU-seconds each).
_IMPORT_EACH = """
import importlib, json, sys, traceback
ours, path = set(sys.argv[1].split(",")), list(sys.path)
seen = {}
for module in sys.argv[2:]:
    print("importing", module, file=sys.stderr, flush=True)  # names the culprit of a crash or a hang
    for name in [m for m in sys.modules if m.split(".")[0] in ours]:
        del sys.modules[name]
    sys.path[:] = path  # components.scripts.supervise puts its own folder first
    try:
        importlib.import_module(module)
        seen[module] = sorted(m for m in sys.modules if m.split(".")[0] in ("stacks", "tools"))
    except BaseException:
        seen[module] = traceback.format_exc()[-2000:]
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def imported_alone() -> dict[str, list[str] | str]:
    """Component -> the program and tools modules importing it loaded (or the traceback of its import)."""
    run = subprocess.run([sys.executable, "-c", _IMPORT_EACH, ",".join(sorted(PROJECT_PACKAGES | set(LAYERS))),
                          *COMPONENT_MODULES], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("module", COMPONENT_MODULES)
def test_component_module_imports_alone(module, imported_alone):
    """Importing a component drags in nothing of the program or the tools."""
    assert imported_alone[module] == [], imported_alone[module]
