"""Checkpoints of a GRPO run: which run they belong to, how long a save takes, the barrier after it.

- A checkpoint belongs to a run: verl resumes whatever `trainer.default_local_dir` holds
  (`resume_mode=auto`), so the folder is keyed by what makes a checkpoint resumable (the algorithm's
  settings, the world size, the FSDP layout, the model and the dataset). A changed run starts
  fresh in a folder of its own; only the same run resumes. Settings that change neither the
  math nor the shards' layout (how long to train, how often to save or validate, loggers, vLLM's
  memory and micro-batch sizes) keep the key, so a run can be extended.
- A save: every rank writes its shard through the node's GCS FUSE sidecar, then verl waits in a
  barrier under `actor_rollout_ref.nccl_timeout` (verl v0.6.1 fsdp_workers.py init_process_group,
  default 600 s in trainer/config/ppo_trainer.yaml): a node slower than that kills the trainer.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from recipe.grpo import GrpoSettings, parse_extras

# Settings that make a checkpoint a different run's (GrpoSettings fields). Left out on purpose:
# total_epochs, total_training_steps, save_freq, test_freq, val_before_train, logger,
# max_checkpoints_to_keep and the throughput knobs (micro-batches, token budgets, TP of the
# rollout, gpu_memory_utilization, reference offload): they neither change the update nor the shards.
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
    from recipe.sizing import CHECKPOINT_BYTES_PER_PARAM, GB

    spec = model_spec(cfg.model)
    if spec is None:
        return VERL_NCCL_TIMEOUT_S
    # Under HSDP every node writes a whole copy (recipe.sizing): the save takes as long as its replicas' bytes.
    from recipe.sizing import layout

    replicas = layout(cfg.accelerator, cfg.gpu_nodes, cfg.grpo.fsdp_size).replicas
    return nccl_timeout_s(save_seconds(CHECKPOINT_BYTES_PER_PARAM * spec.params * replicas / GB, cfg.gpu_nodes))


def stack_save_time(cfg) -> SaveTime | None:
    """Save time and its share of the run (recipe.sizing's run estimate); None for an uncatalogued model."""
    from catalog.models import model_spec
    from recipe import sizing

    if model_spec(cfg.model) is None:
        return None
    z = sizing.run_sizing(cfg)
    return save_time(z.checkpoint_gb, cfg.gpu_nodes, z.checkpoints_saved, z.est_run_hours)
