"""Issue 11: time to the first step, computed from the plan's own graph (tools.critical_path)."""

from __future__ import annotations

import copy
import functools

import pytest

from catalog import phases
from catalog.accelerators import ACCELERATORS
from catalog.models import GB_PER_GIB, weights_gib
from tests.stack_helpers import ROOT, STACK_FILES, shipped_plan
from tools import critical_path as cp
from tools import plan

STACKS = [p.stem.split(".", 1)[1] for p in STACK_FILES]


@functools.cache
def plans(stack: str) -> dict[str, tuple[dict, float]]:
    raw, secret_keys = plan.read_stack_file(ROOT / f"Pulumi.{stack}.yaml")
    own = shipped_plan(stack)
    # An accelerator without an Autopilot worker size is refused on Autopilot by the config.
    other = shipped_plan(stack, other_mode=True) if ACCELERATORS[own["outputs"]["accelerator"]].autopilot else own
    model = raw.get("verl-gke:model", "Qwen/Qwen2.5-32B-Instruct")
    weights_gb = weights_gib(model) * GB_PER_GIB
    return {p["outputs"]["clusterMode"]: (p, weights_gb) for p in (own, other)}


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("mode", ["autopilot", "standard"])
def test_every_stack_is_within_1_10_of_the_floor(stack, mode):
    if mode not in plans(stack):
        pytest.skip(f"{stack}: its accelerator has no Autopilot worker size (config refuses {mode})")
    p, weights = plans(stack)[mode]
    path = cp.compute(p, weights)
    assert path.ratio <= 1.10, cp.text(path)
    assert path.steps and all(s.why for s in path.steps)


def test_the_old_ordering_is_over_the_bound():
    """The model's teeth: on Standard, make the RayCluster and the staging Job wait for the CPU pool
    again (today's main: the whole cluster component and the pool's name as an output)."""
    p, weights = plans("h200")["standard"]
    old = copy.deepcopy(p)
    pool = next(r["urn"] for r in old["resources"] if r["inputs"].get("name") == "cpu-pool"
                and r["type"] == cp.NODE_POOL)
    for r in old["resources"]:
        if r["type"] in (cp.RAY_CLUSTER, cp.JOB):
            r["dependsOn"].append(pool)
    assert cp.compute(old, weights).ratio > 1.10
    assert cp.compute(p, weights).total < cp.compute(old, weights).total


def test_staging_overlaps_gpu_scale_up():
    for stack in STACKS:
        for mode, (p, _weights) in plans(stack).items():
            resources = {r["urn"]: r for r in p["resources"]}
            job = next(u for u, r in resources.items() if r["type"] == cp.JOB)
            # Neither the staging Job nor anything it waits for is a GPU pool.
            todo, seen = [job], set()
            while todo:
                u = todo.pop()
                if u in seen or u not in resources:
                    continue
                seen.add(u)
                assert resources[u]["inputs"].get("name") != "gpu-pool", f"{stack}/{mode}: staging waits for GPUs"
                todo += resources[u]["dependsOn"]


def test_every_phase_says_where_its_figure_comes_from():
    for name in dir(phases):
        value = getattr(phases, name)
        if isinstance(value, phases.Phase):
            assert value.minutes > 0 and value.source, name
    assert "MB/s" in phases.staging(65.5).source
