"""The checked-in plan of every shipped stack: any change to what a stack registers shows in review.

On drift the test prints the diff; refresh deliberately with `python -m tools.snapshot --update`.
"""

from __future__ import annotations

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
