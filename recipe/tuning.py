"""verl's throughput settings, derived per model and accelerator where the stack leaves them at "auto".

A key left at 0 (or "auto") is derived here; any value the stack sets wins. Each rule cites the
verl v0.6.1 document or example it comes from (volcengine/verl @v0.6.1, paths below):

* token budgets (use_dynamic_bsz): `ppo_max_token_len_per_gpu` is a multiple of prompt + response,
  at least 2x (docs/perf/perf_tuning.rst, "Dynamic bsz" tip 1; the seq_balance example runs 24000
  tokens for 1536-token sequences, ~16x) and at most TRAIN_TOKEN_CAP, trimmed until the calibrated
  memory model fits. The forward-only log-prob budget may be larger (tip 2): up to 2x the training
  budget, trimmed the same way.
* rollout TP: the smallest size vLLM can shard the heads into (catalog.models.tp_choices) at which
  the bf16 weights take at most half the vLLM pool (docs/perf/best_practices.rst: memory x
  gpu_memory_utilization x TP > 2 x model size), the KV cache holds a replica's share of one rollout
  batch and the rollout phase fits; perf_tuning.rst: "prefer a smaller tensor_parallel_size".
* layout (actor.fsdp_config.fsdp_size): on one node -1 (every GPU in one shard group). On several
  nodes each layout of recipe.sizing.layouts (full FSDP, HSDP one node per shard group) is derived
  in full (TP, token budgets) and the modelled step time picks the faster one whose memory fits;
  HSDP needs more memory per GPU (shards over 8 GPUs, not all) and writes larger checkpoints.
  Both are kept in `layout_options` for the plan and the benchmark.
* the reference model: always on the host (verl 0.6.1 CPU-offloads it whatever
  ref.fsdp_config.param_offload says, fsdp_workers.py), so nothing to decide.
* ppo_mini_batch_size: a quarter of the train batch (run_qwen2-7b.sh: 1024 prompts, mini 256: four
  updates per step), else a half, else one update, whichever verl's batch arithmetic accepts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from catalog.accelerators import Accelerator
from catalog.datasets import GSM8K, DatasetFacts
from catalog.models import ModelSpec, model_spec, tp_choices
from catalog.problems import AsText, Problem, named
from recipe import memory, sizing
from recipe.grpo import GrpoSettings, memory_inputs, sequence_tokens

AUTO = 0  # integer keys: 0 = derive
TRAIN_TOKEN_CAP = 32768  # issue #13 / perf_tuning.rst: 16-32K tokens per GPU for the update
MIN_SEQUENCES_PER_MICRO_BATCH = 2  # perf_tuning.rst: "at least 2 x (max_prompt_length + max_response_length)"


@dataclass(frozen=True)
class LayoutOption:
    """One layout, derived in full: what the plan shows side by side."""

    name: str
    fsdp_size: int
    fits: bool
    update_peak_gib: float
    logprob_peak_gib: float
    step_seconds: float  # ESTIMATE (recipe.sizing)
    checkpoint_gb: float
    internode_share: float  # of each FSDP collective and of the fp32 weight sync, what the NICs carry
    collective_s: float  # one update micro-batch's gathers, reduce-scatter and HSDP all-reduce (ESTIMATE)
    ppo_max_token_len_per_gpu: int
    log_prob_max_token_len_per_gpu: int
    tensor_parallel_size: int
    chosen: bool = False


# How much faster (modelled) another layout must be before it replaces full FSDP.
LAYOUT_MARGIN = 0.10


def pick_layout(fitting: list[tuple[Any, Any]]) -> Any:
    """The first (full FSDP) of (settings, summary) pairs, unless another's step is LAYOUT_MARGIN faster."""
    fastest = min(fitting, key=lambda o: o[1].step_seconds)
    clearly_faster = fastest[1].step_seconds < fitting[0][1].step_seconds * (1 - LAYOUT_MARGIN)
    return fastest[0] if clearly_faster else fitting[0][0]


def resolve(g: GrpoSettings, *, model: str, acc: Accelerator, nnodes: int,
            data: DatasetFacts = GSM8K) -> tuple[GrpoSettings, list[Problem]]:
    """Fill the auto settings; problems name the setting to change when nothing can be derived: the one
    to set by hand for an uncatalogued model, `nnodes` when even the smallest derived token budget leaves
    the model without room on these GPUs (lowering a budget the user never set fixes nothing).
    `data`: the run's dataset (its mean lengths size the unpadded micro-batches)."""
    resolved, problems = _resolve(g, model=model, acc=acc, nnodes=nnodes, data=data)
    spec = model_spec(model)
    if spec is not None and not problems and (short := _short_at_the_floor(g, resolved, spec, acc, nnodes, data)):
        if found := _more_nodes(g, resolved, short, spec, model=model, acc=acc, nnodes=nnodes, data=data):
            problems.append(found)
    return resolved, problems


MAX_NODES_TRIED = 64  # how far the "how many nodes fit" search looks


def _short_at_the_floor(asked: GrpoSettings, g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int,
                        data: DatasetFacts) -> str:
    """The derived token budget (field) whose pass does not fit although it was derived at its smallest."""
    if not g.use_dynamic_bsz:
        return ""
    b = memory.breakdown(spec, memory_inputs(g, acc, nnodes * acc.gpus_per_node, data))
    if not b.update_fits and asked.ppo_max_token_len_per_gpu == AUTO:
        return "ppo_max_token_len_per_gpu"
    if not b.logprob_fits and asked.log_prob_max_token_len_per_gpu == AUTO:
        return "log_prob_max_token_len_per_gpu"
    return ""


# verl v0.6.1's GSM8K example lengths (examples/grpo_trainer): what "a shorter sequence" is tried at.
SHORT_PROMPT, SHORT_RESPONSE = 512, 1024


def _more_nodes(asked: GrpoSettings, g: GrpoSettings, field: str, spec: ModelSpec, *, model: str,
                acc: Accelerator, nnodes: int, data: DatasetFacts) -> Problem | None:
    """The setting to change when a derived budget fits at no size: `nnodes` with the fewest nodes at which
    every derived setting fits; else the sequence lengths when shorter ones fit; else `nnodes` with "a
    smaller model". None when the stack narrowed the shard group (fsdp_size n): preflight names that."""
    world = nnodes * acc.gpus_per_node
    b = memory.breakdown(spec, memory_inputs(g, acc, world, data))
    need, what = ((b.update_peak, "the actor update") if field == "ppo_max_token_len_per_gpu"
                  else (b.logprob_peak, "the log-prob pass"))
    fewest = _fewest_nodes(asked, spec, model=model, acc=acc, start=nnodes + 1, data=data)
    shorter = dataclasses.replace(asked, max_prompt_length=min(asked.max_prompt_length, SHORT_PROMPT),
                                  max_response_length=min(asked.max_response_length, SHORT_RESPONSE))
    if fewest is None and asked.fsdp_size not in (AUTO, -1):
        return None  # more nodes leave the stack's shard group as small: preflight says shard wider
    per_token = (f"activations {b.train_activations:.1f} + logits {b.train_logits:.1f}"
                 if field == "ppo_max_token_len_per_gpu" else f"logits {b.logprob_logits:.1f}")
    if fewest is None and shorter != asked and (
            short_nodes := _fewest_nodes(shorter, spec, model=model, acc=acc, start=nnodes, data=data)):
        longer = ("max_prompt_length" if asked.max_prompt_length - SHORT_PROMPT
                  > asked.max_response_length - SHORT_RESPONSE else "max_response_length")
        return Problem(longer, (
            f"{what} needs {need:.1f} GiB per GPU "
            f"({need * (1 + memory.FRAGMENTATION):.1f} with {memory.FRAGMENTATION:.0%} allocator headroom) of "
            f"{b.torch_budget:.1f} for PyTorch even at the smallest token budget ({named(field)} = "
            f"{getattr(g, field)}, derived from {named('max_prompt_length')} {asked.max_prompt_length} + "
            f"{named('max_response_length')} {asked.max_response_length}; {per_token} grow with the sequence, not "
            f"with the model's shards), and no count up to "
            f"{MAX_NODES_TRIED} nodes fits: shorten the prompt or response ({shorter.max_prompt_length} + "
            f"{shorter.max_response_length} tokens fit on {short_nodes} node{'s' if short_nodes > 1 else ''})"),
            getattr(asked, longer))
    fix = (f"{fewest} nodes ({fewest * acc.gpus_per_node} GPUs) fit: set it to {fewest}" if fewest
           else f"no count up to {MAX_NODES_TRIED} nodes fits: choose a smaller model")
    return Problem("nnodes", f"{model} does not fit on {world} {acc.key} GPUs: {what} "
                   f"needs {need:.1f} GiB per GPU ({need * (1 + memory.FRAGMENTATION):.1f} with "
                   f"{memory.FRAGMENTATION:.0%} allocator headroom) of {b.torch_budget:.1f} for PyTorch even at the "
                   f"smallest token budget ({named(field)} = "
                   f"{getattr(g, field)}, derived; weights {b.actor_weights:.1f} + grads {b.actor_grads:.1f} + Adam "
                   f"{b.adam_state:.1f} sharded over {b.shard} GPUs); {fix}", nnodes)


def _fewest_nodes(g: GrpoSettings, spec: ModelSpec, *, model: str, acc: Accelerator, start: int,
                  data: DatasetFacts) -> int | None:
    """The fewest nodes from `start` at which the settings, derived there, fit (None up to MAX_NODES_TRIED)."""
    return next((n for n in range(start, MAX_NODES_TRIED + 1)
                 if _fits(_resolve(g, model=model, acc=acc, nnodes=n, data=data)[0], spec, acc, n, data)), None)


def _fits(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int, data: DatasetFacts) -> bool:
    return memory.breakdown(spec, memory_inputs(g, acc, nnodes * acc.gpus_per_node, data)).fits


def _resolve(g: GrpoSettings, *, model: str, acc: Accelerator, nnodes: int,
             data: DatasetFacts) -> tuple[GrpoSettings, list[Problem]]:
    problems: list[Problem] = []
    world = nnodes * acc.gpus_per_node
    spec = model_spec(model)
    if g.ppo_mini_batch_size == AUTO:
        g = dataclasses.replace(g, ppo_mini_batch_size=_mini_batch(g, world))
    if spec is None:
        for field in ("tensor_parallel_size", "ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu"):
            if getattr(g, field) == AUTO:
                problems.append(Problem(field, f"{model} is not in catalog/models.py, so nothing can be derived; "
                                        "set it explicitly", AsText("0 (auto)")))
        if g.fsdp_size == AUTO:
            g = dataclasses.replace(g, fsdp_size=-1)
        return g, problems
    candidates = [lay.fsdp_size for lay in sizing.layouts(acc, nnodes)] if g.fsdp_size == AUTO else [g.fsdp_size]
    options = [_derive(dataclasses.replace(g, fsdp_size=f), spec, acc, nnodes, data) for f in candidates]
    fitting = [o for o in options if o[1].fits] or options[:1]  # none fits: full FSDP, preflight says why
    # Full FSDP (the first option) unless another layout is clearly faster: the step times are estimates,
    # and a layout flip changes the job command and the checkpoints' layout (a running job is replaced).
    chosen = pick_layout(fitting)
    summaries = tuple(dataclasses.replace(o[1], chosen=o[0] is chosen) for o in options)
    return dataclasses.replace(chosen, layout_options=summaries), problems


def _derive(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int,
            data: DatasetFacts) -> tuple[GrpoSettings, LayoutOption]:
    world = nnodes * acc.gpus_per_node
    if g.tensor_parallel_size == AUTO:
        g = dataclasses.replace(g, tensor_parallel_size=_tensor_parallel(g, spec, acc, world, data))
    g = _token_budgets(g, spec, acc, world, data)
    b = memory.breakdown(spec, memory_inputs(g, acc, world, data))
    lay = sizing.layout(acc, nnodes, g.fsdp_size)
    c = sizing.collectives(spec, acc, lay)
    option = LayoutOption(
        name=lay.name, fsdp_size=g.fsdp_size, fits=b.fits, update_peak_gib=round(b.update_peak, 1),
        logprob_peak_gib=round(b.logprob_peak, 1),
        step_seconds=round(sizing.step_time(g, spec, acc, nnodes, data).total, 1),
        checkpoint_gb=round(sizing.checkpoint_gb(g, spec.params, acc, nnodes), 1),
        internode_share=round(c.internode_share, 3), collective_s=round(2 * c.gather_s + c.reduce_s + c.replica_s, 2),
        ppo_max_token_len_per_gpu=g.ppo_max_token_len_per_gpu,
        log_prob_max_token_len_per_gpu=g.log_prob_max_token_len_per_gpu, tensor_parallel_size=g.tensor_parallel_size)
    return g, option


def _with_budgets(g: GrpoSettings, tokens: int, **changes: object) -> GrpoSettings:
    fill = {f: tokens for f in ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu") if getattr(g, f) == AUTO}
    return dataclasses.replace(g, **fill, **changes)


def _token_budgets(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, world: int,
                   data: DatasetFacts) -> GrpoSettings:
    unit = sequence_tokens(g)
    low = unit * MIN_SEQUENCES_PER_MICRO_BATCH
    if g.ppo_max_token_len_per_gpu == AUTO:
        top = max(MIN_SEQUENCES_PER_MICRO_BATCH, TRAIN_TOKEN_CAP // unit)
        chosen = low
        for k in range(top, MIN_SEQUENCES_PER_MICRO_BATCH - 1, -1):
            trial = dataclasses.replace(g, ppo_max_token_len_per_gpu=unit * k, log_prob_max_token_len_per_gpu=low)
            if memory.breakdown(spec, memory_inputs(trial, acc, world, data)).update_fits:
                chosen = unit * k
                break
        g = dataclasses.replace(g, ppo_max_token_len_per_gpu=chosen)
    if g.log_prob_max_token_len_per_gpu == AUTO:
        top = max(MIN_SEQUENCES_PER_MICRO_BATCH, 2 * g.ppo_max_token_len_per_gpu // unit)
        chosen = low
        for k in range(top, MIN_SEQUENCES_PER_MICRO_BATCH - 1, -1):
            trial = dataclasses.replace(g, log_prob_max_token_len_per_gpu=unit * k)
            if memory.breakdown(spec, memory_inputs(trial, acc, world, data)).logprob_fits:
                chosen = unit * k
                break
        g = dataclasses.replace(g, log_prob_max_token_len_per_gpu=chosen)
    return g


def _tensor_parallel(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, world: int, data: DatasetFacts) -> int:
    choices = [t for t in tp_choices(spec, acc.gpus_per_node) if not world % t]
    for tp in choices:
        trial = _with_budgets(g, sequence_tokens(g) * MIN_SEQUENCES_PER_MICRO_BATCH, tensor_parallel_size=tp)
        b = memory.breakdown(spec, memory_inputs(trial, acc, world, data))
        if b.vllm_weights <= b.vllm_pool / 2 and b.kv_holds_batch and b.rollout_fits:
            return tp
    return choices[-1] if choices else 1


def _mini_batch(g: GrpoSettings, world: int) -> int:
    for parts in (4, 2, 1):
        mini = g.train_batch_size // parts
        per_gpu, rest = divmod(mini * g.rollout_n, world)
        if mini >= 1 and not g.train_batch_size % parts and not rest and per_gpu \
                and not per_gpu % g.ppo_micro_batch_size_per_gpu:
            return mini
    return g.train_batch_size  # preflight explains why it does not divide
