"""recipe/ is pure: the GRPO recipe and its models import the catalog and the standard library, never
Pulumi, the program (stacks), the components or the tools; every module of it, at any depth of the code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPE = sorted((ROOT / "recipe").rglob("*.py"))
FORBIDDEN = ("stacks", "components", "tools", "pulumi")


def imported(path: Path) -> set[str]:
    """Every module a file names in an import, at module level or inside a function (relative ones resolved
    to recipe.*)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(f"recipe.{node.module or ''}" if node.level else node.module or "")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            names.add(str(node.args[0].value))
    return names


def test_there_is_a_recipe_to_check():
    assert {p.stem for p in RECIPE} >= {"__init__", "grpo", "tuning", "memory", "sizing"}


@pytest.mark.parametrize("path", RECIPE, ids=[p.name for p in RECIPE])
def test_recipe_imports_nothing_above_it(path):
    bad = sorted(n for n in imported(path) if n.split(".")[0] in FORBIDDEN or n.split(".")[0].startswith("pulumi"))
    assert not bad, f"recipe/{path.name} imports {bad}: the recipe sits under stacks/ and names its own fields"


def test_importing_the_recipe_loads_nothing_above_it():
    """What the interpreter really loads (an import hidden from the AST would show here)."""
    code = ("import sys, recipe.grpo, recipe.tuning, recipe.memory, recipe.sizing; "
            f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} or m.startswith('pulumi')); "
            "assert not bad, bad")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
