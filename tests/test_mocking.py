"""tools.mocking skips the SDK's stack trace of every registration (a tenth of a plan's time): it changes no
registration, and the SDK's function is back after a run."""

from __future__ import annotations

import contextlib

import pulumi
import pulumi_gcp as gcp
from pulumi.runtime import resource as presource

from tools import mocking


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
