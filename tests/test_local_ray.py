"""The bench stands on its own: what it shares with the tests (local Ray nodes) lives in tools.local_ray."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_bench_imports_nothing_from_the_tests():
    for script in sorted((ROOT / "bench").glob("*.py")):
        tree = ast.parse(script.read_text())
        modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in modules if m == "tests" or m.startswith("tests.")], script.name


def test_the_readme_runs_the_bench_with_the_venvs_python():
    text = (ROOT / "README.md").read_text()
    assert "bench/job_submit.py" in text
    assert not re.search(r"(?<!venv/bin/)python3? bench/", text)
