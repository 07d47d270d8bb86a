"""The whole run's wall time by phase, fast / expected / slow, and the GPU node-hours each phase bills. Pure.

From `pulumi up` to the last GPU node gone: the critical path to the first step (cluster, GPU nodes,
staging: tools/critical_path.py, passed in), the job's start-up (the model read through GCS FUSE for the
actor and the reference, vLLM's start and CUDA-graph capture), the training steps and validations
(recipe.sizing), the checkpoint saves (stacks.checkpoints), the merge of the last checkpoint on one GPU
node while the others are released, and the scale-down of idle GPU nodes. GPU nodes bill from the
RayCluster's start (their pods pend and the autoscaler brings them up) to their removal; the CPU nodes,
the cluster fee and the bucket bill the whole wall time (and after it, until `pulumi destroy`).
Each figure is a recipe.sizing.Figure: value per case, basis, source.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.models import ModelSpec
from recipe.sizing import CASES, ESTIMATE, GB, PUBLISHED, Figure, RunSizing
from stacks import checkpoints

FUSE_READ_GBPS = Figure("job start-up: one reader through GCS FUSE", 2.0, 1.0, 0.5, "GB/s", ESTIMATE,
                        "verl loads the actor and the reference on rank 0 (FSDP2 broadcasts the full state dict); "
                        "one sequential reader, well under GoogleCloudPlatform/gcsfuse docs/benchmarks.md's "
                        "many-reader figures")
VLLM_START_MIN = Figure("job start-up: Ray actors, FSDP wrap, vLLM start and CUDA-graph capture", 3.0, 5.0, 10.0, "min",
                        ESTIMATE, "the review of issue #47: 10-20 min with the model read")
MERGE_GBPS = Figure("merge: checkpoint model shards read + bf16 folder written, through GCS FUSE", 1.0, 0.5, 0.25,
                    "GB/s", ESTIMATE, "recipe/grpo.py MERGE_TIMEOUT_S: ~5-10 min for 32B")
SAVE_SPEED = Figure("checkpoint save speed over stacks.checkpoints.WRITE_GBPS_PER_NODE", 2.0, 1.0, 0.5, "x", ESTIMATE,
                    "fast: gcsfuse docs/benchmarks.md sequential writes 2.6-4.4 GiB/s (stacks/checkpoints.py)")
SCALE_DOWN_MIN = Figure("scale-down: an idle GPU node until it is removed", 10.0, 11.0, 15.0, "min", PUBLISHED,
                        "cluster autoscaler --scale-down-unneeded-time default 10 min (openshift/cluster-autoscaler-"
                        "operator#37: 'It takes 10 minutes before a cluster is scaled down'), + node deletion "
                        "(estimate)")
FIGURES = (FUSE_READ_GBPS, VLLM_START_MIN, MERGE_GBPS, SAVE_SPEED, SCALE_DOWN_MIN)


@dataclass(frozen=True)
class Phase:
    name: str
    hours: dict[str, float]  # wall time by case
    gpu_nodes: float  # GPU nodes billing during the phase
    source: str


@dataclass(frozen=True)
class Timeline:
    phases: tuple[Phase, ...]
    gpu_node_hours: dict[str, float]  # by case
    wall_hours: dict[str, float]  # by case: from `pulumi up` to the last GPU node gone

    def as_dict(self) -> dict[str, object]:
        """For plan.json: the cases as the plan names them (low / expected / high)."""
        return {"phases": [{"name": p.name, "hours": by_range(p.hours, 3), "gpuNodes": p.gpu_nodes,
                            "source": p.source} for p in self.phases]}


RANGE = {"fast": "low", "expected": "expected", "slow": "high"}


def by_range(values: dict[str, float | None], digits: int = 2) -> dict[str, float | None]:
    """fast / expected / slow keyed as the plan shows them: low / expected / high."""
    return {RANGE[c]: (None if v is None else round(v, digits)) for c, v in values.items()}


def timeline(z: RunSizing, spec: ModelSpec, gpu_nodes: int, *, first_step_min: dict[str, float],
             gpu_start_min: float, merge: bool) -> Timeline:
    """The run's phases. first_step_min: the critical path to the first step by case; gpu_start_min: when the
    GPU nodes start to come up on it."""
    weights_gb = 2 * spec.params / GB
    save_s = checkpoints.save_seconds(z.checkpoint_gb, gpu_nodes)
    step = {"fast": z.est_step_seconds_low, "expected": z.est_step_seconds, "slow": z.est_step_seconds_high}
    val = {"fast": z.est_validation_seconds_low, "expected": z.est_validation_seconds,
           "slow": z.est_validation_seconds_high}

    def each(fn) -> dict[str, float]:
        return {c: fn(c) for c in CASES}

    before = each(lambda c: max(0.0, first_step_min[c] - gpu_start_min) / 60)
    phases = [
        Phase("cluster and in-cluster objects, before the GPU nodes", each(lambda c: gpu_start_min / 60), 0,
              "tools/critical_path.py (catalog/phases.py): before the GPU nodes come up"),
        Phase("GPU nodes up, staging", before, gpu_nodes, "tools/critical_path.py at the staging figure's range"),
        Phase("job start-up", each(lambda c: (2 * weights_gb / FUSE_READ_GBPS.at(c) / 60 + VLLM_START_MIN.at(c)) / 60),
              gpu_nodes, "actor + reference read through GCS FUSE, vLLM start (stacks/run_time.py)"),
        Phase("training steps", each(lambda c: z.total_steps * step[c] / 3600), gpu_nodes,
              f"{z.total_steps} steps x recipe/sizing.py's step time"),
        Phase("validation", each(lambda c: z.validations * val[c] / 3600), gpu_nodes,
              f"{z.validations} validations x recipe/sizing.py's pass"),
        Phase("checkpoint saves", each(lambda c: z.checkpoints_saved * save_s / SAVE_SPEED.at(c) / 3600), gpu_nodes,
              f"{z.checkpoints_saved} x {z.checkpoint_gb:.0f} GB (stacks/checkpoints.py)"),
    ]
    if merge:
        phases.append(Phase("merge (one GPU node; the others scale down meanwhile)",
                            each(lambda c: 6 * spec.params / GB / MERGE_GBPS.at(c) / 3600), 1,
                            "4 bytes/param read + 2 written (stacks/run_time.py)"))
    phases.append(Phase("scale-down of the idle GPU nodes", each(lambda c: SCALE_DOWN_MIN.at(c) / 60),
                        1 if merge else gpu_nodes, SCALE_DOWN_MIN.source))
    node_hours = each(lambda c: sum(p.hours[c] * p.gpu_nodes for p in phases)
                      + (gpu_nodes - 1) * SCALE_DOWN_MIN.at(c) / 60 * (1 if merge else 0))
    return Timeline(tuple(phases), node_hours, each(lambda c: sum(p.hours[c] for p in phases)))


def warnings(z: RunSizing, tl: Timeline, lengths_basis: str) -> list[str]:
    """What looks absurd for the data the estimate was given, said before anyone pays for it."""
    out = []
    train_h, val_h = (next(p.hours["expected"] for p in tl.phases if p.name == n) for n in ("training steps",
                                                                                            "validation"))
    if val_h > train_h and val_h > 0.5:
        assumed = "; validation rows assumed as many as the training rows" if "validation rows assumed" in \
            lengths_basis else ""
        out.append(f"run estimate: validation takes {val_h:,.1f} h of the run's {tl.wall_hours['expected']:,.1f} h, "
                   f"more than training ({train_h:,.1f} h){assumed}: raise grpoTestFreq or use a smaller validation "
                   "file")
    if tl.wall_hours["slow"] > 7 * 24:
        out.append(f"run estimate: up to {tl.wall_hours['slow']:,.0f} h ({tl.wall_hours['slow'] / 24:,.1f} days) for "
                   f"{z.total_steps:,} steps and {z.validations:,} validations; check the data's rows and lengths "
                   f"({lengths_basis}) before paying for it")
    return out
