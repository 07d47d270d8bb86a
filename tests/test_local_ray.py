"""The bench stands on its own: what it shares with the tests (local Ray nodes) lives in tools.local_ray."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests import docs
from tools import local_ray

ROOT = Path(__file__).resolve().parent.parent


def test_the_bench_imports_nothing_from_the_tests():
    for script in sorted((ROOT / "bench").glob("*.py")):
        tree = ast.parse(script.read_text())
        modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in modules if m == "tests" or m.startswith("tests.")], script.name


def test_the_readme_runs_the_bench_with_the_venvs_python():
    text = docs.text()
    assert "bench/job_submit.py" in text
    assert not re.search(r"(?<!venv/bin/)python3? bench/", text)


@pytest.mark.parametrize("ends", ["hangs", "exits 0 and the head never answers"])
def test_a_node_that_fails_to_start_leaves_no_process_behind(ends, tmp_path, monkeypatch):
    """A `ray start` that hangs past the timeout, or a head that never turns healthy: start() raises
    before the caller holds the node, so start() itself stops what `ray start` left running. The second
    leaves its process in a session of its own, as Ray starts a job's entrypoint, with nothing of the node in
    its command line: the node's mark in its environment is what finds it."""
    pids = tmp_path / "pids"
    fake = tmp_path / "ray"
    leave = "sleep 300 &" if ends == "hangs" else "setsid sleep 300 &"
    fake.write_text(f"#!/bin/sh\n{leave}\necho $! >> {pids}\n" + ("wait\n" if ends == "hangs" else "exit 0\n"))
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


def test_ports_given_to_ray_cannot_be_taken_by_an_outgoing_connection():
    """Every port a node is told to listen on lies outside the ephemeral range (where the kernel picks every
    port-0 bind and outgoing source port), is handed out once, and the ports Ray can pick itself are left to it
    (0)."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [local_ray.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(p < low or p > high for p in ports), ports
    head = local_ray.RayNode(gpus=0)
    worker = local_ray.RayNode(gpus=1, join=head)
    for node in (head, worker):
        flags = dict(a.split("=", 1) for a in node.command() if a.startswith("--") and "=" in a)
        assert flags["--dashboard-agent-listen-port"] == flags["--min-worker-port"] == flags["--max-worker-port"] == "0"
        chosen = [int(v) for k, v in flags.items() if k.endswith("port") and v != "0"]
        assert all(p < low or p > high for p in chosen), flags
        os.rmdir(node.temp_dir)


def test_each_test_worker_draws_ports_from_a_slice_of_its_own(monkeypatch):
    """Three xdist workers pick at random in the same range: disjoint slices, so two never pick the same port in
    the seconds before Ray binds it."""
    slices = []
    for worker in ("gw0", "gw1", "gw2", None):
        if worker:
            monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        else:
            monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        slices.append(set(local_ray._port_range()))
    assert all(len(a) > 1000 for a in slices)
    assert all(not (a & b) for i, a in enumerate(slices) for b in slices[i + 1:])


def test_a_head_that_never_turns_healthy_says_what_it_last_saw(tmp_path, monkeypatch):
    fake = tmp_path / "ray"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setattr(local_ray, "RAY", str(fake))
    node = local_ray.RayNode(gpus=0)
    logs = Path(node.temp_dir, "session_latest", "logs")
    logs.mkdir(parents=True)
    (logs / "dashboard_agent.log").write_text("Failed to start HTTP server with exception: address in use\n"
                                              + "".join(f"routine line {i}\n" for i in range(40)))
    with pytest.raises(RuntimeError) as failed:
        node._start(timeout=1, attempts=1)
    assert "did not become healthy in 1s; last: ConnectionError" in str(failed.value)
    # the early bind failure is shown ahead of the tail it has scrolled out of
    assert "--- dashboard_agent.log\nFailed to start HTTP server" in str(failed.value)
    assert "routine line 39" in str(failed.value) and "routine line 20" not in str(failed.value)
    node.stop()
