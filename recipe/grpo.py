"""The GRPO recipe: stack settings -> verl Hydra overrides, the Ray job's command (recipe.job_spec) and runtime env.

It reproduces the `ray job submit` run of Google's tutorial "Tune and scale reinforcement learning with
verl on GKE" (its manifests: GoogleCloudPlatform/kubernetes-engine-samples ai-ml/verl-on-gke/ @f6f7c67)
with its defects fixed: KL applied as a loss term as verl's GRPO examples do
(volcengine/verl examples/grpo_trainer @v0.6.1), weights read from the bucket copy, checkpoints on the
bucket with auto-resume, no pip installs, per-accelerator NCCL tuning.

`settings_problems` repeats the checks verl v0.6.1 (fsdp workers, vLLM rollout) runs only once the Ray
cluster is up, so a bad batch size fails `pulumi preview` instead of a job on 16 idle GPUs.
Its problems (catalog.problems.Problem) name the settings by field (`rollout_n`, `nnodes`);
stacks.config, which calls `settings_problems` as part of its one gate, shows them as config keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from catalog.accelerators import Accelerator, nccl_env
from catalog.datasets import GSM8K, DatasetFacts
from catalog.models import model_spec, tp_choices
from catalog.naming import PROJECT
from catalog.paths import TENSORBOARD_BUCKET_ENV, TENSORBOARD_LOCAL_ENV, BucketPaths
from catalog.problems import Problem, named
from catalog.ray import JOB_STOP_WAIT_ENV, JOB_STOP_WAIT_S
from recipe import memory
from recipe.job_spec import JobSpec, Supervisor, Trainer
from recipe.overrides import judge, render


class TaskFile(Protocol):
    """One file of the stack's own task, as the pods read it (from the bucket mount)."""

    @property
    def in_pod(self) -> str: ...


class Task(Protocol):
    """The stack's own task (stacks.dataset.TaskSpec): its files and the reward function's name."""

    train: TaskFile
    val: TaskFile
    reward: TaskFile | None
    reward_function: str


@dataclass(frozen=True)
class GrpoSettings:
    train_batch_size: int
    rollout_n: int
    max_prompt_length: int
    max_response_length: int
    learning_rate: float
    ppo_mini_batch_size: int
    ppo_micro_batch_size_per_gpu: int
    log_prob_micro_batch_size_per_gpu: int
    ref_log_prob_micro_batch_size_per_gpu: int
    tensor_parallel_size: int
    gpu_memory_utilization: float
    rollout_engine: str
    actor_strategy: str
    kl_loss_coef: float
    kl_loss_type: str
    entropy_coeff: float
    total_epochs: int
    save_freq: int
    test_freq: int
    val_before_train: bool
    logger: tuple[str, ...]
    extra_overrides: tuple[str, ...]
    # verl's throughput settings (docs/perf/perf_tuning.rst); 0 / None = derived by recipe.tuning.
    use_remove_padding: bool = True
    use_dynamic_bsz: bool = True
    ppo_max_token_len_per_gpu: int = 0
    log_prob_max_token_len_per_gpu: int = 0
    # actor.fsdp_config.fsdp_size: 0 = derived by recipe.tuning (the faster layout that fits), -1 =
    # shard over every GPU (full FSDP), n = shard within groups of n GPUs and replicate across them (HSDP).
    fsdp_size: int = 0
    # recipe.tuning's derivation of each layout it weighed (tuning.LayoutOption), for the plan; not a setting.
    layout_options: tuple[Any, ...] = dataclasses.field(default=(), compare=False)
    max_checkpoints_to_keep: int = 2
    total_training_steps: int = 0  # 0: verl's default (null), every epoch runs
    save_contents: str = "full"  # a SAVE_CONTENTS key; "auto" until stacks.checkpoints resolves it
    # save_freq came from stacks.checkpoints.cadence (the stack left it at 0), for the plan; not a setting.
    save_freq_derived: bool = dataclasses.field(default=False, compare=False)


# What a checkpoint holds (actor.checkpoint.save_contents). "model": the fp32 shards, the RNG and the LR
# scheduler ('extra'), not AdamW's moments: a third of the bytes, and a resume restarts the moments (verl
# v0.6.1 utils/checkpoint/fsdp_checkpoint_manager.py loads only what load_contents names). load_contents
# follows save_contents in verl (trainer/config/actor/actor.yaml); the run supervisor sets it to
# [model,extra] for a start whose latest checkpoint has no optimizer shards. The merge needs only the model.
SAVE_CONTENTS = {"full": ("model", "optimizer", "extra"), "model": ("model", "extra")}
SAVE_CONTENTS_KEY = "actor_rollout_ref.actor.checkpoint.save_contents"
# verl/utils/tracking.py Tracking.supported_backend (v0.6.1); the deprecated alias "tracking" is left out.
LOGGERS = ("wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml", "trackio",
           "file")
# GSM8K's figures (catalog.datasets, the default dataset), kept under their old names. A stack with its
# own data passes its DatasetFacts (stacks.dataset) to settings_problems, the memory model and the sizing.
GSM8K_TRAIN_ROWS = GSM8K.train_rows
MEAN_PROMPT_TOKENS = GSM8K.mean_prompt_tokens
MEAN_RESPONSE_TOKENS = GSM8K.mean_response_tokens
# verl rollout defaults (trainer/config/rollout/rollout.yaml) that the length check depends on.
ROLLOUT_MAX_NUM_BATCHED_TOKENS = 8192

# verl key -> GrpoSettings field; the field's config key is "grpo" + CamelCase(field).
_FROM_SETTINGS = {
    "data.train_batch_size": "train_batch_size",
    "data.max_prompt_length": "max_prompt_length",
    "data.max_response_length": "max_response_length",
    "actor_rollout_ref.actor.strategy": "actor_strategy",
    "actor_rollout_ref.actor.optim.lr": "learning_rate",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.kl_loss_coef": "kl_loss_coef",
    "actor_rollout_ref.actor.kl_loss_type": "kl_loss_type",
    "actor_rollout_ref.actor.entropy_coeff": "entropy_coeff",
    "actor_rollout_ref.rollout.name": "rollout_engine",
    "actor_rollout_ref.rollout.n": "rollout_n",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "tensor_parallel_size",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "gpu_memory_utilization",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "ref_log_prob_micro_batch_size_per_gpu",
    "trainer.total_epochs": "total_epochs",
    "trainer.save_freq": "save_freq",
    "trainer.test_freq": "test_freq",
    "trainer.val_before_train": "val_before_train",
    "trainer.logger": "logger",
    # perf_tuning.rst "Remove padding": supported for qwen; GSM8K sequences are ~1/3 padding otherwise.
    "actor_rollout_ref.model.use_remove_padding": "use_remove_padding",
    # perf_tuning.rst "Dynamic bsz": micro-batches by tokens, for the update and both log-prob passes.
    "actor_rollout_ref.actor.use_dynamic_bsz": "use_dynamic_bsz",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": "use_dynamic_bsz",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": "use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "ppo_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": "log_prob_max_token_len_per_gpu",
    # The reference shares the actor's device mesh (fsdp_workers.py: one create_device_mesh from
    # actor.fsdp_config.fsdp_size); its param_offload is never read (it is always CPU-offloaded).
    "actor_rollout_ref.actor.fsdp_config.fsdp_size": "fsdp_size",
    "trainer.max_actor_ckpt_to_keep": "max_checkpoints_to_keep",
}
_FIXED = {
    "algorithm.adv_estimator": "grpo",
    # The tutorial's algorithm.kl_ctrl.kl_coef only acts with in-reward KL; GRPO uses the KL loss.
    "algorithm.use_kl_in_reward": False,
    "trainer.resume_mode": "auto",  # a resubmitted job continues from the last checkpoint
    # truncation=error would kill the run mid-epoch on one over-long prompt; verl's examples filter.
    "data.filter_overlong_prompts": True,
}
# Derived from the stack (paths, cluster shape, names) or from another setting.
_DERIVED = ("data.train_files", "data.val_files", "actor_rollout_ref.model.path", "trainer.default_local_dir",
            "actor_rollout_ref.nccl_timeout",
            "trainer.nnodes", "trainer.n_gpus_per_node", "trainer.project_name", "trainer.experiment_name",
            "actor_rollout_ref.actor.use_kl_loss")
# The stack's own task (Task): set through its own inputs, never as an extra override.
_TASK = {"custom_reward_function.path": "reward_file", "custom_reward_function.name": "reward_function"}
# verl keys whose defaults the offline task checks assume (stacks.dataset): the prompt column and the
# data_source column (data.prompt_key / data.reward_fn_key, trainer/config/data/legacy_data.yaml), the naive
# reward manager's call (reward_model.reward_manager, reward_model/reward_model.yaml) and the reward's
# keywords (custom_reward_function.reward_kwargs, merged into every call: trainer/ppo/reward.py).
# With the stack's own task an extra override of one would make the checks pass data or a reward that
# verl then reads differently; GSM8K stacks keep them (their data is verl's own).
_TASK_ASSUMED = {
    "data.prompt_key": "the checks read the prompt column 'prompt'",
    "data.reward_fn_key": "the checks read the data_source column",
    "reward_model.reward_manager": "the reward smoke test calls it as verl's default naive manager does",
    "custom_reward_function": "the reward smoke test calls it with verl's four keywords only",
}
# Deprecated global micro batches: verl rejects them next to the *_per_gpu keys the recipe sets.
_EXCLUSIVE = ("actor_rollout_ref.actor.ppo_micro_batch_size",
              "actor_rollout_ref.rollout.log_prob_micro_batch_size",
              "actor_rollout_ref.ref.log_prob_micro_batch_size")
# Extra overrides the arithmetic below reads (verl defaults when absent).
_SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
_MAX_TOKENS = "actor_rollout_ref.rollout.max_num_batched_tokens"
_CHUNKED = "actor_rollout_ref.rollout.enable_chunked_prefill"
_MAX_MODEL_LEN = "actor_rollout_ref.rollout.max_model_len"
_MAX_SEQS = "actor_rollout_ref.rollout.max_num_seqs"
_COMPILE = "actor_rollout_ref.actor.use_torch_compile"  # false: the entropy runs eager (recipe.memory)
# dp_actor.py's other entropy paths (off by default): not measured, charged on the safe side (recipe.memory).
_CHUNKED_ENTROPY = "actor_rollout_ref.actor.entropy_from_logits_with_chunking"
_ENTROPY_CKPT = "actor_rollout_ref.actor.entropy_checkpointing"
# verl defaults the calibration ran with whose opposite costs memory the model does not count: without
# gradient checkpointing every layer's activations stay for the backward (fsdp_workers.py enables it only
# when asked; model/hf_model.yaml default true); without reshard_after_forward (engine/fsdp.yaml default
# true) every FSDP unit stays unsharded in bf16 from its forward to its backward (2 P bytes per GPU).
_UNMODELLED_OFF = ("actor_rollout_ref.model.enable_gradient_checkpointing",
                   "actor_rollout_ref.actor.fsdp_config.reshard_after_forward")
ROLLOUT_MAX_NUM_SEQS = 1024  # verl rollout.yaml default

# Keys the recipe leaves at verl's default on purpose, which an extra override would turn against the run.
_KEPT = {
    # verl copies every save there (trainer/ppo/ray_trainer.py _save_checkpoint, v0.6.1).
    "trainer.default_hdfs_dir": "would copy every checkpoint off the bucket: checkpoints have one place, "
                                "trainer.default_local_dir",
    # verl deletes the folder it resumed from (ray_trainer.py _load_checkpoint, del_local_after_load).
    "trainer.del_local_ckpt_after_load": "would delete the run's checkpoints from the bucket once a resume read them",
    # verl/trainer/main_ppo.py run_ppo: ray.init(**ray_kwargs.ray_init), its runtime_env merged over verl's.
    "ray_kwargs.ray_init": "holds ray.init's own arguments: the job joins the stack's Ray cluster with the stack's "
                           "runtime env, and an env var, a package or an address there would bypass both",
    "hydra": "is Hydra's own (the job's output folder, logging, working directory), not verl's",
}
# The recipe's own paths, which a path-valued extra override may be written under ("${key}/<folder>").
PATH_ANCHORS = {"trainer.default_local_dir": ("the run's checkpoint folder on the bucket", True),
                "actor_rollout_ref.model.path": ("the staged weights, read-only", False)}
_MAX_STACK_IN_ID = 64  # keeps the id (plus the provider's "-r<k>" retries) within 128 chars


def settings_problems(g: GrpoSettings, *, nnodes: int, gpus_per_node: int, model: str,
              accelerator: Accelerator | None = None, data: DatasetFacts = GSM8K) -> list[Problem]:
    """What verl rejects only on the running cluster; each names the setting, value and what is allowed.

    The settings are resolved (recipe.tuning: no 0 = derive left) and within their bounds (every count
    >= 1 but fsdp_size, save_freq and test_freq: stacks.keys). With the accelerator, also what would run
    out of GPU memory (recipe.memory).
    """
    problems: list[Problem] = []

    def bad(field: str, value: object, allowed: str) -> None:
        problems.append(Problem(field, allowed, value))

    extras, extra_problems = _parse_extras(g.extra_overrides)
    problems += extra_problems
    world = nnodes * gpus_per_node
    if world < 1:
        return problems + [Problem("nnodes", "the cluster needs at least one GPU", nnodes)]
    shape = f"{nnodes} node(s) x {gpus_per_node} GPUs = {world} GPUs ({named('nnodes')})"

    if g.rollout_n < 2:
        bad("rollout_n", g.rollout_n, "GRPO normalises rewards within a prompt's group: use >= 2 responses")

    # verl/utils/config.py validate_config: real_train_batch_size % n_gpus.
    samples = g.train_batch_size * g.rollout_n
    if samples % world:
        bad("train_batch_size", g.train_batch_size,
            f"x rollout n {g.rollout_n} = {samples} samples must divide evenly over {shape}")
    if g.train_batch_size > data.train_rows:
        kept = (f" (after the {data.dropped_rows} overlong prompts verl's filter drops, an estimate)"
                if data.dropped_rows else "")
        bad("train_batch_size", g.train_batch_size, f"exceeds the {data.train_rows} {data.name} training rows"
            f"{kept}: no full batch, so the train dataloader is empty")
    # verl/workers/config/actor.py ActorConfig.validate.
    if g.ppo_mini_batch_size > g.train_batch_size:
        bad("ppo_mini_batch_size", g.ppo_mini_batch_size, f"must be <= train batch size {g.train_batch_size}")

    # verl/workers/fsdp_workers.py ActorRolloutRefWorker.__init__ "normalize config": the mini batch is
    # scaled by n and split over the data-parallel groups (GPUs / Ulysses sequence-parallel size).
    sp = _extra_int(extras, _SP, 1, problems)
    if world % sp:
        problems.append(Problem("extra_overrides", f"{_SP}={sp} must divide {shape}"))
        sp = 1
    if sp > 1 and not g.use_remove_padding:
        # verl/workers/config/actor.py FSDPActorConfig.validate.
        problems.append(Problem("extra_overrides", f"{_SP}={sp} needs "
                                f"{named('use_remove_padding')} = true"))
    dp = world // sp
    mini = g.ppo_mini_batch_size * g.rollout_n
    if mini % dp:
        # verl floors it; the remainder becomes an extra, smaller optimizer step each iteration.
        bad("ppo_mini_batch_size", g.ppo_mini_batch_size, f"x rollout n {g.rollout_n} = {mini} must divide "
            f"evenly over {dp} data-parallel ranks ({shape})")
    elif mini // dp % g.ppo_micro_batch_size_per_gpu:
        bad("ppo_micro_batch_size_per_gpu", g.ppo_micro_batch_size_per_gpu,
            f"must divide the per-GPU mini batch {mini // dp} "
            f"(ppo_mini_batch_size {g.ppo_mini_batch_size} x n {g.rollout_n} / {dp} ranks)")
    # Log-prob passes split each GPU's share of the rollout batch; a bigger micro batch is a unit mix-up.
    per_gpu = samples // world
    for field in ("log_prob_micro_batch_size_per_gpu", "ref_log_prob_micro_batch_size_per_gpu"):
        if samples % world == 0 and getattr(g, field) > per_gpu:
            bad(field, getattr(g, field), f"is per GPU: must be <= the {per_gpu} samples each GPU holds")

    # fsdp_workers.py _build_rollout (world % infer TP) and vllm_rollout_spmd.py (TP <= world); a TP
    # group spanning nodes would put vLLM's per-token all-reduce on the network.
    tp = g.tensor_parallel_size
    if world % tp or gpus_per_node % tp:
        bad("tensor_parallel_size", tp,
            f"must divide the GPUs per node ({gpus_per_node}) and the total ({world})")
    spec = model_spec(model)
    if spec and tp not in (choices := tp_choices(spec, gpus_per_node)) \
            and not gpus_per_node % tp:
        bad("tensor_parallel_size", tp, f"vLLM cannot shard {model} ({spec.attention_heads} attention / "
            f"{spec.kv_heads} KV heads): use one of {', '.join(str(t) for t in choices)}")

    # fsdp_workers.py create_device_mesh: fsdp_size < 0 or >= world shards over all GPUs, else the
    # (world // fsdp_size, fsdp_size) mesh, which init_device_mesh builds only when it divides.
    fs = g.fsdp_size
    if fs == 0 or fs < -1 or (0 < fs < world and world % fs):
        bad("fsdp_size", fs, f"-1 (shard over all {world} GPUs) or a divisor of {world} "
            f"(HSDP: {gpus_per_node} = one node per shard group); 0 = derive")

    # vllm_rollout_spmd.py: with chunked prefill, max_num_batched_tokens must cover the max model length.
    limit = _extra_int(extras, _MAX_TOKENS, ROLLOUT_MAX_NUM_BATCHED_TOKENS, problems)
    _extra_int(extras, _MAX_SEQS, ROLLOUT_MAX_NUM_SEQS, problems)  # the memory model reads it too: never ignored
    model_len = _extra_int(extras, _MAX_MODEL_LEN, g.max_prompt_length + g.max_response_length, problems)
    chunked = extras.get(_CHUNKED, "true").strip().lower() != "false"
    if chunked and limit < model_len:
        bad("max_response_length", g.max_response_length,
            f"prompt {g.max_prompt_length} + response {g.max_response_length} tokens exceed vLLM's "
            f"max_num_batched_tokens {limit}: shorten them or add {_MAX_TOKENS}=<n> to "
            f"{named('extra_overrides')}")

    # verl/utils/seqlen_balancing.py rearrange_micro_batches: one sequence must fit one micro-batch.
    if g.use_dynamic_bsz:
        for field in ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu"):
            if getattr(g, field) < (seq := g.max_prompt_length + g.max_response_length):
                bad(field, getattr(g, field), f"must hold one whole sequence: >= prompt + response = {seq} "
                    f"tokens (perf_tuning.rst recommends >= {2 * seq}; 0 = derive)")

    if spec is not None and accelerator is not None and not problems:
        problems += _memory_problems(g, spec, accelerator, world, extras, data)
    if not g.logger:
        bad("logger", list(g.logger), "needs at least one of " + ", ".join(LOGGERS))
    for name in g.logger:
        if name not in LOGGERS:
            bad("logger", list(g.logger), f"{name!r} is not a verl logger; allowed: " + ", ".join(LOGGERS))
    return problems


def sequence_tokens(g: GrpoSettings) -> int:
    return g.max_prompt_length + g.max_response_length


def tokens_per_sequence(g: GrpoSettings, data: DatasetFacts = GSM8K) -> int:
    """Tokens a sequence occupies in a training pass: padded, or the dataset mean once unpadded."""
    if g.use_remove_padding:
        return round(min(data.mean_prompt_tokens, g.max_prompt_length)
                     + min(data.mean_response_tokens, g.max_response_length))
    return sequence_tokens(g)


def memory_inputs(g: GrpoSettings, acc: Accelerator, world: int, data: DatasetFacts = GSM8K) -> memory.MemoryInputs:
    """The memory model's view of the settings (every auto value already derived by recipe.tuning)."""
    extras = _parse_extras(g.extra_overrides)[0]
    per_seq = tokens_per_sequence(g, data)
    if g.use_dynamic_bsz:
        train, logprob = g.ppo_max_token_len_per_gpu, g.log_prob_max_token_len_per_gpu
    else:
        train = g.ppo_micro_batch_size_per_gpu * per_seq
        logprob = max(g.log_prob_micro_batch_size_per_gpu, g.ref_log_prob_micro_batch_size_per_gpu) * per_seq
    return memory.MemoryInputs(
        world=world, gpu_gib=acc.gpu_memory_gib, tp=g.tensor_parallel_size,
        gpu_memory_utilization=g.gpu_memory_utilization, train_tokens=train, logprob_tokens=logprob,
        ref_loaded=g.kl_loss_coef > 0,
        rollout_sequences=g.train_batch_size * g.rollout_n, max_model_len=sequence_tokens(g),
        fsdp_size=g.fsdp_size, entropy_in_update=g.entropy_coeff != 0,
        entropy_eager=_extra_flag(extras, _COMPILE, True) is False,
        entropy_chunked=_extra_flag(extras, _CHUNKED_ENTROPY, False) is True,
        entropy_checkpointing=_extra_flag(extras, _ENTROPY_CKPT, False) is True)


def _extra_flag(extras: dict[str, str], key: str, default: bool) -> bool:
    """A boolean extra override as Hydra reads it (true/false in any case), else verl's default."""
    value = extras.get(key, "").strip().lower()
    return {"true": True, "false": False}.get(value, default)


def _entropy_path(extras: dict[str, str]) -> str:
    """The extra overrides that make the memory model charge the entropy as eager, for messages."""
    found = [f"{_COMPILE}=false"] if _extra_flag(extras, _COMPILE, True) is False else []
    found += [f"{k}=true (not measured: charged as eager)" for k in (_CHUNKED_ENTROPY, _ENTROPY_CKPT)
              if _extra_flag(extras, k, False)]
    return ", ".join(found)


def memory_breakdown(g: GrpoSettings, spec, acc: Accelerator, world: int,
                     extras: dict[str, str] | None = None, data: DatasetFacts = GSM8K) -> memory.MemoryBreakdown:
    """The memory model for these settings (extra overrides may change vLLM's batch limits)."""
    extras = extras if extras is not None else _parse_extras(g.extra_overrides)[0]
    m = memory_inputs(g, acc, world, data)
    m = dataclasses.replace(
        m, max_num_batched_tokens=_extra_int(extras, _MAX_TOKENS, ROLLOUT_MAX_NUM_BATCHED_TOKENS, []),
        max_num_seqs=_extra_int(extras, _MAX_SEQS, ROLLOUT_MAX_NUM_SEQS, []))
    return memory.breakdown(spec, m)


def _memory_problems(g: GrpoSettings, spec, acc: Accelerator, world: int, extras: dict[str, str],
                     data: DatasetFacts) -> list[Problem]:
    b = memory_breakdown(g, spec, acc, world, extras, data)
    where = f"{acc.key}: {b.torch_budget:.1f} GiB per GPU for PyTorch"
    extra = " (extrapolated beyond the 7B calibration)" if b.extrapolated else ""
    headroom = f"+{memory.FRAGMENTATION:.0%} allocator headroom"
    problems = [Problem("extra_overrides", f"{k}=false: the memory model was calibrated "
                        "with it on (verl's default) and cannot tell whether the update fits without it; remove "
                        "the override")
                for k in _UNMODELLED_OFF if _extra_flag(extras, k, True) is False]
    layout = f"FSDP over {b.shard} GPUs ({named('fsdp_size')} = {g.fsdp_size})"
    if not b.update_fits:
        field = "ppo_max_token_len_per_gpu" if g.use_dynamic_bsz else "ppo_micro_batch_size_per_gpu"
        entropy = (f" + eager entropy {b.train_entropy:.1f} ({_entropy_path(extras)} with "
                   f"{named('entropy_coeff')} = {g.entropy_coeff!r})" if b.train_entropy else "")
        problems.append(Problem(
            field, f"the actor update needs {b.update_peak:.1f} GiB per GPU"
            f"{extra} ({headroom}: {b.update_peak * (1 + memory.FRAGMENTATION):.1f}) of {where}, {layout}: "
            f"weights {b.actor_weights:.1f} + grads {b.actor_grads:.1f} + Adam {b.adam_state:.1f} + "
            f"activations {b.train_activations:.1f} + logits {b.train_logits:.1f}{entropy}; lower it "
            f"(0 = derive), add {named('nnodes')}, or shard wider ({named('fsdp_size')} = -1)", getattr(g, field)))
    if not b.logprob_fits:
        field = "log_prob_max_token_len_per_gpu" if g.use_dynamic_bsz else "log_prob_micro_batch_size_per_gpu"
        entropy = f" + eager entropy {b.logprob_entropy:.1f} ({_entropy_path(extras)})" if b.logprob_entropy else ""
        problems.append(Problem(
            field, f"the log-prob pass needs {b.logprob_peak:.1f} GiB per GPU"
            f"{extra} ({headroom}: {b.logprob_peak * (1 + memory.FRAGMENTATION):.1f}) of {where}, {layout}: "
            f"logits {b.logprob_logits:.1f}{entropy} + units in flight {b.logprob_units:.1f} on top of the "
            f"shards; lower it (0 = derive)", getattr(g, field)))
    if not b.rollout_fits:
        if b.kv_cache <= 0:
            why = (f"vLLM's pool of {b.vllm_pool:.1f} GiB leaves no KV cache after its weights "
                   f"{b.vllm_weights:.1f} and activations {b.vllm_activations:.1f}: raise it or "
                   f"{named('tensor_parallel_size')}")
        else:
            why = (f"the rollout needs {b.rollout_resident:.1f} GiB of resident actor state (weights + Adam) "
                   f"+ the vLLM pool {b.vllm_pool:.1f} + "
                   f"{memory.NON_TORCH_GIB:.1f} outside PyTorch = "
                   f"{b.rollout_resident + b.vllm_pool + memory.NON_TORCH_GIB:.1f} GiB of {b.gpu_gib:.1f} on "
                   f"{acc.key}: lower it, or add {named('nnodes')}")
        problems.append(Problem("gpu_memory_utilization", why, g.gpu_memory_utilization))
    return problems


def warnings(g: GrpoSettings, *, nnodes: int, gpus_per_node: int, model: str, accelerator: Accelerator,
             data: DatasetFacts = GSM8K) -> list[Problem]:
    """What runs but slower than it should: the KV cache cannot hold one rollout batch."""
    spec = model_spec(model)
    if spec is None:
        return []
    b = memory_breakdown(g, spec, accelerator, nnodes * gpus_per_node, data=data)
    if not b.rollout_fits or b.kv_holds_batch:
        return []
    return [Problem("gpu_memory_utilization",
                    f"each vLLM replica's KV cache holds {b.kv_tokens:,} tokens, less than its share of one rollout "
                    f"batch ({b.kv_tokens_needed:,} tokens): vLLM will preempt and recompute sequences. Raise it, "
                    f"shrink {named('train_batch_size')} or {named('rollout_n')}, or add {named('nnodes')}",
                    g.gpu_memory_utilization, fatal=False)]


def owned_keys() -> dict[str, str]:
    """Every verl key the recipe sets, fixes or keeps, with why an extra override may not set it in any form."""
    return {**{k: f"set {named(f)} instead" for k, f in _FROM_SETTINGS.items()},
            **{k: "is fixed by the recipe" for k in _FIXED},
            SAVE_CONTENTS_KEY: f"comes from {named('save_contents')}",
            "actor_rollout_ref.actor.checkpoint.load_contents": "is chosen by the run supervisor from what the latest "
                                                                "checkpoint holds",
            "trainer.total_training_steps": f"comes from {named('total_training_steps')}",
            **{k: "is derived from the stack (paths, cluster shape, names)" for k in _DERIVED},
            **{k: "is exclusive with the *_per_gpu micro batch the recipe sets" for k in _EXCLUSIVE},
            **{k: f"comes from {named(field)}" for k, field in _TASK.items()},
            **_KEPT}


def parse_extras(extra: tuple[str, ...]) -> tuple[dict[str, str], list[Problem]]:
    return _parse_extras(extra)


def _parse_extras(extra: tuple[str, ...]) -> tuple[dict[str, str], list[Problem]]:
    """The extra overrides that passed (recipe.overrides) as {verl key: value as override text}, and the problems
    of those that did not."""
    kept, problems = judge(tuple(extra), owned=owned_keys(), anchors=PATH_ANCHORS)
    return {leaf.key: leaf.text for leaf in kept}, problems


def extra_override_problems(extra: tuple[str, ...], *, own_task: bool) -> list[Problem]:
    """Every problem of the extra overrides: recipe.overrides' judgement, and with the stack's own task the keys
    its offline checks assume (_TASK_ASSUMED)."""
    kept, problems = judge(tuple(extra), owned=owned_keys(), anchors=PATH_ANCHORS)
    if not own_task:
        return problems
    for leaf in kept:
        for assumed, why in _TASK_ASSUMED.items():
            if leaf.key == assumed or leaf.key.startswith(assumed + ".") or assumed.startswith(leaf.key + "."):
                problems.append(Problem("extra_overrides", f"{leaf.shown} changes "
                                        f"{assumed}, but with {named('train_file')} {why} (verl's default); leave it "
                                        "at the default"))
                break
    return problems


def _extra_int(extras: dict[str, str], key: str, default: int, problems: list[Problem]) -> int:
    if key not in extras:
        return default
    try:
        value = int(extras[key])
    except ValueError:
        value = 0
    if value < 1:
        problems.append(Problem("extra_overrides", f"{key}={extras[key]!r} must be an "
                                "integer >= 1"))
        return default
    return value


NCCL_TIMEOUT_S = 600  # verl v0.6.1 trainer/config/ppo_trainer.yaml actor_rollout_ref.nccl_timeout


def recipe(g: GrpoSettings, *, stack: str, nnodes: int, gpus_per_node: int,
           paths: BucketPaths, task: Task | None = None,
           nccl_timeout: int = NCCL_TIMEOUT_S) -> dict[str, object]:
    """verl config key -> typed value, before Hydra formatting (tests compare it with the composed config).
    `task`: the stack's own files (None: GSM8K as staged), read by every pod from the bucket mount."""
    values: dict[str, object] = {
        **_FIXED,
        "data.train_files": paths.train_file,
        "data.val_files": paths.val_file,
        "actor_rollout_ref.model.path": paths.model_dir,  # the staged copy, not the hub id
        # KL as a loss term needs the reference policy; a zero coefficient skips loading it.
        "actor_rollout_ref.actor.use_kl_loss": g.kl_loss_coef > 0,
        # Absolute, on the bucket: verl's relative default resolves in each pod's own ephemeral disk
        # (shards on every GPU worker), lost with the pods, so a resubmitted job could not resume.
        "trainer.default_local_dir": paths.checkpoint_dir,
        "trainer.nnodes": nnodes,
        "trainer.n_gpus_per_node": gpus_per_node,
        "trainer.project_name": PROJECT,
        "trainer.experiment_name": stack,
        # The barrier after each save runs under it: sized for the save (stacks.checkpoints).
        "actor_rollout_ref.nccl_timeout": nccl_timeout,
        # The ref worker follows actor.strategy (ref.strategy interpolates it); GRPO runs no critic.
        **{k: getattr(g, f) for k, f in _FROM_SETTINGS.items()},
    }
    values["trainer.logger"] = list(g.logger)
    values[SAVE_CONTENTS_KEY] = list(SAVE_CONTENTS[g.save_contents])
    if task is not None:
        # verl reads local paths only (verl/utils/fs.py copies hdfs:// alone): the bucket mount, which the
        # TaskRunner and the reward workers (every Ray pod) see.
        values["data.train_files"] = task.train.in_pod
        values["data.val_files"] = task.val.in_pod
        if task.reward is not None:
            values["custom_reward_function.path"] = task.reward.in_pod
            values["custom_reward_function.name"] = task.reward_function
    if g.total_training_steps > 0:  # verl: trainer.total_training_steps replaces epochs x batches
        values["trainer.total_training_steps"] = g.total_training_steps
    return values


def overrides(g: GrpoSettings, *, stack: str, nnodes: int, gpus_per_node: int,
              paths: BucketPaths, task: Task | None = None, nccl_timeout: int = NCCL_TIMEOUT_S) -> list[str]:
    """verl Hydra overrides for the stack's GRPO run; the extra overrides come last."""
    values = recipe(g, stack=stack, nnodes=nnodes, gpus_per_node=gpus_per_node, paths=paths, task=task,
                    nccl_timeout=nccl_timeout)
    return [f"{k}={render(v)}" for k, v in values.items()] + [o.strip() for o in g.extra_overrides]


MERGE_TIMEOUT_S = 3600  # the merge (~5-10 min for 32B) on one GPU node; past this the GPUs are released


def job_spec(overrides: list[str], *, main_script: str, script: str, state: str, paths: BucketPaths,
             expected_gpus: int, merge: bool, release: tuple[str, str] | None, keep: int = 0,
             nccl_check: str = "") -> JobSpec:
    """The Ray job's command: the run supervisor (components/scripts/supervise.py) around the trainer, verl's
    main_ppo through our entry (components/scripts/verl_main.py, shipped to the bucket: the same Hydra config,
    TensorBoard's events copied to the bucket) with the overrides.

    The supervisor restarts the trainer after a lost GPU node (verl resumes: trainer.resume_mode=auto), merges
    the last checkpoint (verl's `python -m verl.model_merger merge --backend fsdp`, which also reads FSDP2
    checkpoints: model_merger/fsdp_model_merger.py at v0.6.1) and releases the GPUs: `release` is (RayCluster
    name, worker group). `keep`: verl's rotation forgets what an earlier process saved, so the supervisor prunes
    to the limit. The budget's cap and the attempt come from the job provider.
    """
    cluster, group = release or ("", "")
    supervisor = Supervisor(script=script, state=state, expected_gpus=expected_gpus,
                            checkpoint_dir=paths.checkpoint_dir, keep=keep,
                            merge_to=paths.merged_dir if merge else "", merge_timeout_s=MERGE_TIMEOUT_S,
                            release_raycluster=cluster, release_group=group, nccl_check=nccl_check)
    return JobSpec(supervisor=supervisor, trainer=Trainer(script=main_script, overrides=tuple(overrides)))


def runtime_env(acc: Accelerator, paths: BucketPaths) -> dict[str, dict[str, str]]:
    """Ray runtime env: env vars only. The image ships verl's dependencies, so no pip/uv/working_dir
    (the tutorial reinstalls torch), and verl comes from the bucket through PYTHONPATH.

    verl's own ray.init adds TOKENIZERS_PARALLELISM, VLLM_* and NCCL_CUMEM_ENABLE for every worker
    (trainer/constants_ppo.py), dropping only names already set here, so they are not repeated.
    """
    env = {
        **nccl_env(acc),
        **library_path_env(acc),
        "HF_HOME": paths.hf_home,
        # The datasets library's Arrow cache on the pod's disk: the TaskRunner would write it through
        # GCS FUSE under HF_HOME otherwise.
        "HF_DATASETS_CACHE": paths.datasets_cache,
        "PYTHONPATH": paths.verl_src,
        # verl's source is on the bucket: no __pycache__ written there by every process.
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        # verl's tensorboard logger writes to the pod's disk (verl/utils/tracking.py reads TENSORBOARD_DIR),
        # and the trainer's entry copies the event files to the bucket (components/scripts/verl_main.py).
        TENSORBOARD_LOCAL_ENV: paths.tensorboard_local_dir,
        TENSORBOARD_BUCKET_ENV: paths.tensorboard_dir,
        # Read by Ray's job supervisor from this env (catalog.ray): time for the run supervisor's release.
        JOB_STOP_WAIT_ENV: str(JOB_STOP_WAIT_S),
    }
    return {"env_vars": env}


def library_path_env(acc: Accelerator) -> dict[str, str]:
    """LD_LIBRARY_PATH extended, never replaced: the image's own entries (NGC images: cuda/compat,
    torch/lib) stay. Ray expands `${VAR}` in runtime-env variables from the node's environment
    (Ray docs, runtime_env env_vars: "reference existing environment variables using ${ENV_VAR} to
    achieve the appending behavior"); a pod's env could only replace the image's value."""
    dirs = [d.mount_path + "/lib64" for d in acc.host_dirs]
    return {"LD_LIBRARY_PATH": ":".join([*dirs, "${LD_LIBRARY_PATH}"])} if dirs else {}


def submission_id(stack: str, spec: JobSpec, runtime_env: dict[str, Any], expected_gpus: int) -> str:
    """`verl-grpo-<stack>-<hash>`: the same job keeps its id; any change to what runs gets a new one. The hash is
    of the rendered entrypoint: a spec that renders the same command keeps the id of every earlier release."""
    job = {"entrypoint": spec.entrypoint, "runtime_env": runtime_env, "expected_gpus": expected_gpus}
    canonical = json.dumps(job, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
    safe_stack = re.sub(r"[^A-Za-z0-9._-]", "-", stack)[:_MAX_STACK_IN_ID]
    return f"verl-grpo-{safe_stack}-{digest}"
