"""The Ray head holds the run supervisor: on Autopilot it asks not to be evicted by upgrades or scale-down."""

from __future__ import annotations

import pytest

from catalog.autopilot import EXTENDED_DURATION
from tests.stack_helpers import composed

RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"


def head_annotations(mode: str) -> dict:
    spec = composed({"accelerator": "b200", "clusterMode": mode}).one(RAYCLUSTER).inputs["spec"]
    return spec["headGroupSpec"]["template"]["metadata"]["annotations"]


def test_the_autopilot_head_asks_for_the_extended_run_time():
    assert EXTENDED_DURATION == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    assert head_annotations("autopilot").items() >= EXTENDED_DURATION.items()


@pytest.mark.parametrize("key", list(EXTENDED_DURATION))
def test_the_standard_head_leaves_eviction_to_the_maintenance_exclusion(key):
    assert key not in head_annotations("standard")
