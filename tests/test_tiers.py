"""The tiers of tests/conftest.py: a test's tier follows what it uses, and a test cannot use a real system outside
its tier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import pulumi_cli
from tools.local_ray import RayNode

ROOT = Path(__file__).resolve().parent.parent


def _collected(tier: str, module: str) -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-o", "addopts=", "--collect-only", "-q",
                           "-m", tier, module], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line}


def test_a_test_on_a_ray_head_fixture_is_in_the_ray_tier_and_the_others_are_not():
    """tests/test_watch.py: three tests on the module's head (through its own `head` fixture), the rest parse logs
    (a test is in one tier: tier_of)."""
    ray = _collected("ray", "tests/test_watch.py")
    assert "test_watch_once_on_a_running_job_and_its_png" in ray and len(ray) == 3, ray


def test_a_fast_test_cannot_start_a_real_ray_node():
    node = RayNode(gpus=0)
    try:
        with pytest.raises(pytest.fail.Exception, match="outside the `ray` tier"):
            node.start(timeout=60)
    finally:
        node.stop()


def test_a_fast_test_cannot_run_the_pulumi_cli(tmp_path):
    with pytest.raises(pytest.fail.Exception, match="outside the `cli` tier"):
        pulumi_cli.Workspace(tmp_path, tmp_path)
