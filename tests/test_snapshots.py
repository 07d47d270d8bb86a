"""The checked-in plan of every shipped stack: any change to what a stack registers shows in review.

On drift the test prints the diff; refresh deliberately with `python -m tools.snapshot --update`.
"""

from __future__ import annotations

import json

import pytest

from tests.stack_helpers import shipped_plan
from tools import snapshot

STACKS = snapshot.shipped_stacks()


def test_every_shipped_stack_has_a_snapshot():
    assert STACKS and {p.stem for p in snapshot.SNAPSHOT_DIR.glob("*.json")} >= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_plan_matches_snapshot(stack):
    diff = snapshot.diff(stack, shipped_plan(stack))
    assert not diff, f"the plan of {stack} drifted from tests/snapshots/{stack}.json " \
                     f"(python -m tools.snapshot --update if intended):\n{diff}"


@pytest.mark.parametrize("stack", STACKS)
def test_snapshot_keeps_every_urn_reachable(stack):
    """A type or name change is allowed only with an alias naming what the resource was before."""
    data = json.loads((snapshot.SNAPSHOT_DIR / f"{stack}.json").read_text())
    job = [r for r in data["resources"] if r["type"] == "pulumi-python:dynamic/verl-gke:RayJob"]
    for r in job:
        specs = [json.loads(a)["spec"] for a in r["aliases"]]
        assert {"parentUrn": "", "type": "pulumi-python:dynamic/verl-gke:GrpoJob"} in specs
