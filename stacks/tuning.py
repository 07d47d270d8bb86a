"""verl's throughput settings, derived per model and accelerator where the stack leaves them at "auto".

A key left at 0 (or "auto") is derived here; any value the stack sets wins. Each rule cites the
verl v0.6.1 document or example it comes from (/work/notes/verl_reference.md has the excerpts):

* token budgets (use_dynamic_bsz): `ppo_max_token_len_per_gpu` is a multiple of prompt + response,
  at least 2x (docs/perf/perf_tuning.rst, "Dynamic bsz" tip 1; the seq_balance example runs 24000
  tokens for 1536-token sequences, ~16x) and at most TRAIN_TOKEN_CAP, trimmed until the calibrated
  memory model fits. The forward-only log-prob budget may be larger (tip 2): up to 2x the training
  budget, trimmed the same way.
* rollout TP: the smallest size vLLM can shard the heads into (catalog.models.tp_choices) at which
  the bf16 weights take at most half the vLLM pool (docs/perf/best_practices.rst: memory x
  gpu_memory_utilization x TP > 2 x model size), the KV cache holds a replica's share of one rollout
  batch and the rollout phase fits; perf_tuning.rst: "prefer a smaller tensor_parallel_size".
* reference offload: on above 7B parameters (every GRPO example above that size offloads, and
  examples/grpo_trainer/*.sh all set it), or whenever keeping the fp32 reference on the GPU would
  not fit at the smallest token budget; smaller references stay on the GPU (no host copy per pass).
* ppo_mini_batch_size: a quarter of the train batch (run_qwen2-7b.sh: 1024 prompts, mini 256: four
  updates per step), else a half, else one update, whichever verl's batch arithmetic accepts.
"""

from __future__ import annotations

import dataclasses

from catalog.accelerators import Accelerator
from catalog.datasets import GSM8K, DatasetFacts
from catalog.models import ModelSpec, model_spec, tp_choices
from stacks import memory
from stacks.grpo import GrpoSettings, field_key, memory_inputs, sequence_tokens

AUTO = 0  # integer keys: 0 = derive
TRAIN_TOKEN_CAP = 32768  # issue #13 / perf_tuning.rst: 16-32K tokens per GPU for the update
MIN_SEQUENCES_PER_MICRO_BATCH = 2  # perf_tuning.rst: "at least 2 x (max_prompt_length + max_response_length)"
REF_OFFLOAD_ABOVE_PARAMS = 8_000_000_000  # "above 7B" (issue #13 table; Qwen2.5-7B has 7.6 B)


def resolve(g: GrpoSettings, *, model: str, acc: Accelerator, nnodes: int,
            data: DatasetFacts = GSM8K) -> tuple[GrpoSettings, list[str]]:
    """Fill the auto settings; problems name the key to set by hand when nothing can be derived.
    `data`: the run's dataset (its mean lengths size the unpadded micro-batches)."""
    problems: list[str] = []
    world = nnodes * acc.gpus_per_node
    spec = model_spec(model)
    if g.ppo_mini_batch_size == AUTO:
        g = dataclasses.replace(g, ppo_mini_batch_size=_mini_batch(g, world))
    if spec is None:
        for field in ("tensor_parallel_size", "ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu"):
            if getattr(g, field) == AUTO:
                problems.append(f"{field_key(field)} = 0 (auto): {model} is not in catalog/models.py, so "
                                "nothing can be derived; set it explicitly")
        if g.ref_param_offload is None:
            g = dataclasses.replace(g, ref_param_offload=True)
        return g, problems
    if g.tensor_parallel_size == AUTO:
        g = dataclasses.replace(g, tensor_parallel_size=_tensor_parallel(g, spec, acc, world, data))
    if g.ref_param_offload is None:
        on_gpu = spec.params <= REF_OFFLOAD_ABOVE_PARAMS and _fits(
            _with_budgets(g, sequence_tokens(g) * MIN_SEQUENCES_PER_MICRO_BATCH, ref_param_offload=False),
            spec, acc, world, data)
        g = dataclasses.replace(g, ref_param_offload=not on_gpu)
    return _token_budgets(g, spec, acc, world, data), problems


def _with_budgets(g: GrpoSettings, tokens: int, **changes: object) -> GrpoSettings:
    fill = {f: tokens for f in ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu") if getattr(g, f) == AUTO}
    return dataclasses.replace(g, **fill, **changes)


def _fits(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, world: int, data: DatasetFacts) -> bool:
    return memory.breakdown(spec, memory_inputs(g, acc, world, data)).fits


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
        trial = _with_budgets(g, sequence_tokens(g) * MIN_SEQUENCES_PER_MICRO_BATCH, tensor_parallel_size=tp,
                              ref_param_offload=True if g.ref_param_offload is None else g.ref_param_offload)
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
