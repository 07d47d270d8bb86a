"""The bench stands on its own: what it shares with the tests (local Ray nodes) lives in tools.local_ray."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tools import local_ray

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


@pytest.mark.parametrize("ends", ["hangs", "exits 0 and the head never answers"])
def test_a_node_that_fails_to_start_leaves_no_process_behind(ends, tmp_path, monkeypatch):
    """A `ray start` that hangs past the timeout, or a head that never turns healthy: start() raises
    before the caller holds the node, so start() itself stops what `ray start` left running."""
    pids = tmp_path / "pids"
    fake = tmp_path / "ray"
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $! >> {pids}\n" + ("wait\n" if ends == "hangs" else "exit 0\n"))
    fake.chmod(0o755)
    monkeypatch.setattr(local_ray, "RAY", str(fake))
    node = local_ray.RayNode(gpus=0)
    with pytest.raises((subprocess.TimeoutExpired, RuntimeError)):
        node.start(timeout=2, attempts=1)
    child = int(pids.read_text().split()[0])
    deadline = time.monotonic() + 30  # the SIGKILLed child is reaped by init, not at once on a loaded machine
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child) and not os.path.exists(node.temp_dir)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
