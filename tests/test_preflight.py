"""stacks.preflight: lookup checks hold back the first billable resource, or fail the update."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp
import pytest

from catalog.problems import ConfigError, Problem
from stacks import preflight
from tools import mocking

CLUSTER = "gcp:container/cluster:Cluster"


def _program(findings: list[Problem]):
    def program() -> None:
        check = pulumi.Output.from_input(findings)
        version = preflight.gate("1.33.5-gke.1000000", [check])
        gcp.compute.Network("net", auto_create_subnetworks=False)  # free, ungated
        gcp.container.Cluster("gke", location="us-central1", min_master_version=version)
    return program


def test_passing_checks_release_the_value():
    run = mocking.run(_program([Problem("verl-gke:x", "fine", fatal=False)]), {"gcp:project": "p-123456"}, "t")
    assert run.one(CLUSTER).inputs["minMasterVersion"] == "1.33.5-gke.1000000"


def test_a_fatal_finding_stops_the_cluster_and_names_every_key():
    seen = mocking.Run()
    findings = [Problem("verl-gke:gkeVersion", "channel offers 1.30.1-gke.1, floor 1.32.2-gke.1475000"),
                Problem("verl-gke:capacity", "quota PREEMPTIBLE_NVIDIA_B200_GPUS is 0, need 16")]
    with pytest.raises(Exception, match="preflight checks failed") as err:
        mocking.run(_program(findings), {"gcp:project": "p-123456"}, "t", result=seen)
    assert "verl-gke:gkeVersion" in str(err.value) and "verl-gke:capacity" in str(err.value)
    assert seen.of_type(CLUSTER) == [], "the gated cluster must never be registered"


def test_verdict_only_raises_for_fatal_problems():
    preflight.verdict([Problem("k", "just a warning", fatal=False)])
    with pytest.raises(ConfigError) as err:
        preflight.verdict([Problem("k1", "bad"), Problem("k2", "warn", fatal=False)])
    assert [f.key for f in err.value.found] == ["k1"]
