"""Checkpoints of a GRPO run: which run they belong to, how often to save, how long a save takes, the barrier.

- A checkpoint belongs to a run: verl resumes whatever `trainer.default_local_dir` holds
  (`resume_mode=auto`), so the folder is keyed by what makes a checkpoint resumable (the algorithm's
  settings, the world size, the FSDP layout, the model and the dataset). A changed run starts
  fresh in a folder of its own; only the same run resumes. Settings that change neither the
  math nor the shards' layout (how long to train, how often to save or validate, loggers, vLLM's
  memory and micro-batch sizes) keep the key, so a run can be extended.
- A save: every rank writes its shard through the node's GCS FUSE sidecar, then verl waits in a
  barrier under `actor_rollout_ref.nccl_timeout` (verl v0.6.1 fsdp_workers.py init_process_group,
  default 600 s in trainer/config/ppo_trainer.yaml): a node slower than that kills the trainer.
- The cadence (grpoSaveFreq 0): Young's first-order optimum interval between checkpoints,
  sqrt(2 x save time x mean time between interruptions) (J. W. Young, "A first order approximation to
  the optimum checkpoint interval", Communications of the ACM 17(9):530-531, 1974, doi:10.1145/361147.361115),
  with the capacity type's interruption rate (catalog.capacity.INTERRUPTIONS) over the run's GPU nodes:
  losing any one restarts every rank. What a checkpoint holds is the other lever (grpoSaveContents, auto:
  model-only on spot, a third of the bytes). The plan shows the cadence and the work a preemption loses.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from catalog.capacity import INTERRUPTIONS, SPOT
from recipe.grpo import GrpoSettings, parse_extras

# Settings that make a checkpoint a different run's (GrpoSettings fields). Left out on purpose:
# total_epochs, total_training_steps, save_freq, test_freq, val_before_train, logger,
# max_checkpoints_to_keep and the throughput knobs (micro-batches, token budgets, TP of the
# rollout, gpu_memory_utilization, reference offload): they neither change the update nor the shards.
# save_contents too: grpoSaveContents auto follows the capacity type, and a preempted spot run moved to
# flex-start or a reservation must resume; the run supervisor loads what the latest checkpoint holds
# (components/scripts/supervise.py load_overrides: model-only without optimizer shards).
RUN_FIELDS = ("train_batch_size", "rollout_n", "max_prompt_length", "max_response_length", "learning_rate",
              "ppo_mini_batch_size", "actor_strategy", "kl_loss_coef", "kl_loss_type", "entropy_coeff",
              "rollout_engine", "use_remove_padding")
# Extra overrides are the user's own Hydra keys: any of them may change the run, except these.
NEUTRAL_EXTRA_PREFIXES = ("trainer.", "actor_rollout_ref.rollout.")
SP_KEY = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"

# GCS FUSE write bandwidth one node's sidecar sustains for the shards (GB/s). Assumption, below the
# sequential-write figures of GoogleCloudPlatform/gcsfuse docs/benchmarks.md (2.6-4.4 GiB/s on an
# n2-standard-96 with 112 fio writers): a save is one streamed file per rank.
WRITE_GBPS_PER_NODE = 1.0
BARRIER_MARGIN = 3  # the slowest node may take this many times the estimate before the barrier kills it
VERL_NCCL_TIMEOUT_S = 600  # verl v0.6.1 trainer/config/ppo_trainer.yaml actor_rollout_ref.nccl_timeout
SAVE_SHARE_LIMIT = 0.10  # saves may take at most this share of the run (stacks.config warns above)


def dataset_identity(task, dataset_dir: str) -> object:
    """What the run trains on: GSM8K's staged folder, or the stack's own files, whose bucket paths are
    content-addressed (stacks.dataset), with the reward function that scores them."""
    if task is None:
        return dataset_dir
    return {"train": task.train.in_pod, "val": task.val.in_pod,
            "reward": [task.reward.in_pod, task.reward_function] if task.reward is not None else None}


def run_identity(g: GrpoSettings, *, model: str, nnodes: int, gpus_per_node: int, dataset: object) -> dict:
    """What a resumable checkpoint depends on, as plain data."""
    extras, _ = parse_extras(g.extra_overrides)
    return {
        "settings": {f: getattr(g, f) for f in RUN_FIELDS},
        "model": model,
        "world_size": nnodes * gpus_per_node,  # FSDP shards are per rank: model_world_size_<W>_rank_<r>.pt
        # The shard layout: full FSDP (-1) and HSDP shards differ per rank (recipe.tuning picks it).
        "fsdp": {"strategy": g.actor_strategy, "ulysses_sp": extras.get(SP_KEY, "1"), "fsdp_size": g.fsdp_size},
        "dataset": dataset,
        "extra_overrides": sorted(f"{k}={v}" for k, v in extras.items()
                                  if not k.startswith(NEUTRAL_EXTRA_PREFIXES) or k == SP_KEY),
    }


def run_key(identity: dict) -> str:
    """`run-<12 hex>`: the checkpoint folder's name under <stack>/<model>."""
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return "run-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class SaveTime:
    checkpoint_gb: float
    nnodes: int
    seconds: float  # one save, every node writing its share at once
    saves: int
    run_seconds: float
    nccl_timeout_s: int

    @property
    def share(self) -> float:
        return self.saves * self.seconds / self.run_seconds if self.run_seconds else 0.0


def save_seconds(checkpoint_gb: float, nnodes: int, write_gbps: float = WRITE_GBPS_PER_NODE) -> float:
    return checkpoint_gb / max(1, nnodes) / write_gbps


def nccl_timeout_s(save_s: float) -> int:
    """verl's default unless a save (with margin) could outlast it; whole minutes."""
    return max(VERL_NCCL_TIMEOUT_S, 60 * math.ceil(BARRIER_MARGIN * save_s / 60))


def save_time(checkpoint_gb: float, nnodes: int, saves: int, run_hours: float) -> SaveTime:
    s = save_seconds(checkpoint_gb, nnodes)
    return SaveTime(checkpoint_gb, nnodes, s, saves, run_hours * 3600 + saves * s, nccl_timeout_s(s))


def nccl_timeout_for(cfg) -> int:
    """The stack's `actor_rollout_ref.nccl_timeout` (verl's default for a model not in the catalog)."""
    from catalog.models import model_spec
    from recipe import sizing

    spec = model_spec(cfg.model)
    if spec is None:
        return VERL_NCCL_TIMEOUT_S
    # Under HSDP every node writes a whole copy (recipe.sizing): the save takes as long as its replicas' bytes.
    gb = sizing.checkpoint_gb(cfg.grpo, spec.params, cfg.accelerator, cfg.gpu_nodes)
    return nccl_timeout_s(save_seconds(gb, cfg.gpu_nodes))


def stack_save_time(cfg) -> SaveTime | None:
    """Save time and its share of the run (recipe.sizing's run estimate); None for an uncatalogued model."""
    from catalog.models import model_spec
    from recipe import sizing

    if model_spec(cfg.model) is None:
        return None
    z = sizing.run_sizing(cfg)
    return save_time(z.checkpoint_gb, cfg.gpu_nodes, z.checkpoints_saved, z.est_run_hours)


# ----------------------------------------------------------------------------- the cadence

AUTO_CONTENTS = "auto"
FALLBACK_SAVE_FREQ = 30  # a model not in the catalog: no step time to derive the cadence from


def contents_for(setting: str, capacity_kind: str) -> str:
    """grpoSaveContents: "auto" is model-only on spot, where a resume is the expected case and a third of the
    bytes lets saves come more often, and full elsewhere, where a resume is rare and keeps AdamW's moments."""
    if setting != AUTO_CONTENTS:
        return setting
    return "model" if capacity_kind == SPOT else "full"


@dataclass(frozen=True)
class Cadence:
    """How often the run saves and what an interruption costs it (ESTIMATE: recipe.sizing's step time)."""

    save_freq: int  # trainer.save_freq (verl also saves the last step); <= 0: never
    derived: bool  # from the rule above (grpoSaveFreq 0), else as the stack set it
    contents: str  # recipe.grpo.SAVE_CONTENTS key
    save_seconds: float  # one save
    saves: int
    interval_minutes: float  # training between two saves (the whole run when only the last step saves)
    group_interruption_hours: float  # mean time until any GPU node of the run is taken away
    expected_interruptions: float  # over the run
    lost_minutes: float  # training redone after one interruption, on average (half an interval)
    basis: str  # where the interruption rate comes from

    def as_dict(self) -> dict[str, object]:
        return {k: (float(f"{v:.3g}") if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def cadence(g: GrpoSettings, *, spec, acc, nnodes: int, capacity_kind: str, data) -> Cadence:
    """The cadence for these settings: derived when save_freq is 0, else the one set, with its figures."""
    from recipe import sizing

    z = sizing.sizing(g, spec, acc, nnodes, data)
    step_s, total = z.est_step_seconds, max(1, z.total_steps)
    save_s = save_seconds(z.checkpoint_gb, nnodes)
    rate = INTERRUPTIONS[capacity_kind]
    group_s = rate.node_hours * 3600 / max(1, nnodes)
    derive = g.save_freq == 0
    freq = g.save_freq
    if derive:
        young = max(1.0, math.sqrt(2 * save_s * group_s) / step_s)  # steps
        freq = -(-total // max(1, round(total / young)))  # that many intervals, of equal length
    saves = -(-total // freq) if freq > 0 else 0
    interval_s = step_s * (min(freq, total) if freq > 0 else total)
    run_s = z.est_run_hours * 3600 + saves * save_s
    return Cadence(save_freq=freq, derived=derive or g.save_freq_derived, contents=g.save_contents,
                   save_seconds=save_s, saves=saves, interval_minutes=interval_s / 60,
                   group_interruption_hours=group_s / 3600, expected_interruptions=run_s / group_s,
                   lost_minutes=interval_s / 2 / 60, basis=rate.basis)


def resolve_save_freq(g: GrpoSettings, *, model: str, acc, nnodes: int, capacity_kind: str, data) -> GrpoSettings:
    """save_freq 0 (grpoSaveFreq's default) derived by `cadence`; any other value stays."""
    import dataclasses

    from catalog.models import model_spec

    if g.save_freq != 0:
        return g
    spec = model_spec(model)
    if spec is None or capacity_kind not in INTERRUPTIONS:  # the latter is refused by the gate's own rule
        return dataclasses.replace(g, save_freq=FALLBACK_SAVE_FREQ, save_freq_derived=True)
    c = cadence(g, spec=spec, acc=acc, nnodes=nnodes, capacity_kind=capacity_kind, data=data)
    return dataclasses.replace(g, save_freq=c.save_freq, save_freq_derived=True)


def stack_cadence(cfg) -> Cadence | None:
    """The stack's cadence and its figures, for the plan (None: the model is not in the catalog)."""
    from catalog.models import model_spec

    spec = model_spec(cfg.model)
    if spec is None:
        return None
    return cadence(cfg.grpo, spec=spec, acc=cfg.accelerator, nnodes=cfg.gpu_nodes, capacity_kind=cfg.capacity.kind,
                   data=cfg.data)
