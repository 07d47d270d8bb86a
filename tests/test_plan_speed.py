"""What keeps the offline plan fast, tested for what it must not change; the speed itself is measured by
bench/plan_speed.py (no timed assertions here)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pulumi
import pulumi_gcp as gcp
from pulumi.runtime import resource as presource

from bench import plan_speed
from tools import mocking

ROOT = Path(__file__).resolve().parent.parent


def _program() -> None:
    net = gcp.compute.Network("net", auto_create_subnetworks=False)
    gcp.compute.Subnetwork("sub", network=net.id, ip_cidr_range="10.0.0.0/24", region="us-central1",
                           opts=pulumi.ResourceOptions(parent=net, depends_on=[net]))
    pulumi.export("net", net.name)


def _recorded(run: mocking.Run) -> list[dict]:
    return [dict(vars(r)) for r in run.resources]


def test_skipping_the_sdk_s_stack_traces_changes_no_registration(monkeypatch):
    config = {"gcp:project": "p"}
    fast = mocking.run(_program, config, "s")
    monkeypatch.setattr(mocking, "without_stack_traces", contextlib.nullcontext)
    full = mocking.run(_program, config, "s")
    assert _recorded(fast) == _recorded(full) and len(fast.resources) == 2
    assert fast.outputs == full.outputs and "net" in fast.outputs


def test_the_sdk_s_stack_trace_is_restored_after_a_run():
    original = presource._get_stack_trace  # the SDK function the mocks replace (a rename fails here)
    with mocking.without_stack_traces():
        assert presource._get_stack_trace is not original
        assert list(presource._get_stack_trace().frames) == []
    assert presource._get_stack_trace is original


def test_the_bench_says_within_or_over_the_budget():
    assert plan_speed.verdict(1.30) == "within the 1.30x budget"
    assert plan_speed.verdict(1.31) == "OVER the 1.30x budget"


def test_the_bench_s_baseline_imports_sdk_modules_only():
    cmd = plan_speed.import_command(["pulumi", "yaml"])
    assert cmd[1] == "-c" and "importlib.import_module(m)" in cmd[2] and "['pulumi', 'yaml']" in cmd[2]
    assert set(plan_speed.SDK_PACKAGES) >= {"pulumi", "pulumi_gcp", "pulumi_kubernetes"}


def test_the_plan_command_and_the_bench_s_baseline_both_run_without_the_cyclic_collector():
    """`python -m tools.plan` turns the collector off before main() (a quarter of its CPU, no memory); the
    baseline does too, or the ratio would credit our code with the collector's cost on the other side."""
    probe = ("import atexit, gc, runpy, sys\n"
             "atexit.register(lambda: print('collector on:', gc.isenabled()))\n"
             "sys.argv = ['tools.plan', '--stack', 'no-such-stack']\n"
             "runpy.run_module('tools.plan', run_name='__main__', alter_sys=True)\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout.strip() == "collector on: False", (proc.stdout, proc.stderr)
    python, flag, code = plan_speed.import_command(["json"])
    proc = subprocess.run([python, flag, code + "\nprint('collector on:', gc.isenabled())"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "collector on: False", (proc.stdout, proc.stderr)
