"""Per-GPU memory of a verl 0.6.1 GRPO run (FSDP actor + reference, colocated vLLM rollout): a pure model.

A step passes through three phases on every GPU; each must fit on its own (verl frees vLLM's
weights and KV cache before training and wakes them for the rollout: sleep level 2,
verl/third_party/vllm/__init__.py, verl/workers/fsdp_workers.py rollout_mode/trainer_mode):

  rollout   actor fp32 weights + Adam state stay resident (dp_actor.py update_policy ends with
            zero_grad, so no gradients), the reference if not offloaded, and the vLLM pool of
            gpu_memory_utilization x GPU memory (vLLM >= 0.7 reads it as a fraction of the TOTAL:
            docs/perf/perf_tuning.rst) holding its bf16 weights under TP, its activation peak and
            the KV cache; CUDA graphs sit outside the pool (docs/perf/best_practices.rst).
  log-prob  forward only (old log-prob, reference): the static shards, one layer gathered, the
            logits of the forward token budget.
  update    forward + backward + AdamW on the training token budget.

Training terms are CALIBRATED (bench/memory_calibration.py on an H200, Qwen2.5 0.5B-7B, table in
bench/memory_calibration.json, worst residual 2.8 %): the update peak is max(A, B) with
    A = P (16 + t) / W               fp32 weights 4 + grads 4 + Adam m, v 8, + t for the optimizer
                                     step (torch foreach AdamW: one fp32 buffer, t = 4)
    B = 12 P / W + a T h L + c T V   before the grads exist: checkpointed residual stream (a) and
                                     the logits with their fp32 log-softmax and gradient (c)
vLLM terms are ANALYTICAL (formulas cited where used). Models above the calibrated 7.6 B
parameters are extrapolations of the same formula: `extrapolated` says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from catalog.models import ModelSpec

GiB = 1024**3
# bench/memory_calibration.json, fitted by `python bench/memory_calibration.py --fit`.
ACT_BYTES = 4.63  # a: bytes per token x hidden x layer (checkpointed layer inputs, fp32)
LOGIT_BYTES = 12.18  # c: bytes per token x vocab (bf16 logits, fp32 log-softmax, its gradient)
OPTIMIZER_STEP_BYTES = 4.0  # t: torch AdamW foreach (verl's build_optimizer uses torch's default)
CALIBRATED_MAX_PARAMS = 7_615_616_512  # Qwen2.5-7B, the largest model measured
# The allocator's slack: without expandable segments the measured reserved/allocated ratio was
# 1.02-1.37 and 7B at 16384 tokens died with 21 GiB reserved but free at 121 GiB demanded
# (bench/memory_calibration_fit.txt). verl turns expandable segments on for training
# (workers/sharding_manager/fsdp_vllm.py), so 15 % headroom on the torch phases is what we keep.
FRAGMENTATION = 0.15
# Outside PyTorch's allocator on every GPU: CUDA context, NCCL buffers, cuBLAS workspaces (~1.5 GiB,
# an estimate) and vLLM's CUDA graphs, which stay through training (best_practices.rst: "not
# bounded by gpu_memory_utilization"; vLLM logs ~1-2 GiB for its default capture sizes): an estimate.
NON_TORCH_GIB = 1.5 + 1.5
# vLLM's own non-torch memory inside its budget (NCCL for TP, allocator pools): an estimate.
VLLM_NON_TORCH_GIB = 0.5


@dataclass(frozen=True)
class MemoryInputs:
    """What the memory depends on; the recipe fills it from the stack (stacks.grpo.memory_inputs)."""

    world: int  # GPUs in the run (FSDP shards over all of them)
    gpu_gib: float  # PyTorch-visible capacity of one GPU
    tp: int  # vLLM tensor-parallel size
    gpu_memory_utilization: float
    train_tokens: int  # tokens in one update micro-batch on one GPU
    logprob_tokens: int  # tokens in one forward-only micro-batch on one GPU
    ref_on_gpu: bool  # the reference model is loaded (KL loss) and not offloaded
    rollout_sequences: int  # train batch x n: sequences vLLM generates per step
    max_model_len: int  # prompt + response
    max_num_batched_tokens: int = 8192  # verl rollout.yaml default
    max_num_seqs: int = 1024  # verl rollout.yaml default


@dataclass(frozen=True)
class MemoryBreakdown:
    """GiB per GPU unless named otherwise."""

    gpu_gib: float
    # static FSDP shards (divided by the world size)
    actor_weights: float  # fp32 master weights (fsdp_config.model_dtype fp32)
    actor_grads: float  # fp32, only during the update
    adam_state: float  # fp32 exp_avg + exp_avg_sq
    optimizer_step: float  # foreach AdamW's transient buffer
    ref_weights: float  # fp32 (engine/fsdp.yaml model_dtype) when on the GPU, else 0
    fsdp_gather: float  # unsharded units in flight (bf16 params of 2 units, fp32 grads of 1)
    # token-budget terms
    train_activations: float  # a T h L (checkpointed), T = train_tokens
    train_logits: float  # c T V
    logprob_logits: float  # c T V at the forward budget (upper bound: c includes the gradient)
    logprob_mlp: float  # one layer's bf16 MLP intermediates at the forward budget
    # phase peaks (torch phases before the fragmentation headroom)
    update_peak: float
    logprob_peak: float
    rollout_resident: float  # what training leaves on the GPU while vLLM runs
    # vLLM
    vllm_pool: float  # gpu_memory_utilization x GPU memory
    vllm_weights: float  # bf16 weights / TP
    vllm_activations: float  # profile-run peak (estimate)
    kv_cache: float
    kv_bytes_per_token: int  # per rank
    kv_tokens: int  # KV capacity of one replica, in tokens
    kv_tokens_needed: int  # one rollout batch's share per replica (bounded by max_num_seqs)
    # verdicts
    torch_budget: float  # GPU memory minus what lives outside PyTorch
    update_fits: bool
    logprob_fits: bool
    rollout_fits: bool
    kv_holds_batch: bool
    extrapolated: bool  # the model is larger than the largest one calibrated

    @property
    def fits(self) -> bool:
        return self.update_fits and self.logprob_fits and self.rollout_fits

    def as_dict(self) -> dict[str, object]:
        out = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        out["fits"] = self.fits
        return out


def update_peak_bytes(spec: ModelSpec, tokens: int, world: int = 1, optimizer_step: float = OPTIMIZER_STEP_BYTES,
                      act: float = ACT_BYTES, logit: float = LOGIT_BYTES) -> float:
    """The calibrated training-step peak (bytes) of one GPU, FSDP buffers and reference excluded."""
    p = spec.params
    a_phase = p * (16 + optimizer_step) / world
    b_phase = 12 * p / world + act * tokens * spec.hidden * spec.layers + logit * tokens * spec.vocab
    return max(a_phase, b_phase)


def kv_bytes_per_token(spec: ModelSpec, tp: int) -> int:
    """bf16 K and V of every layer for one token on one TP rank.

    vLLM AttentionSpec.page_size_bytes = 2 x block_size x num_kv_heads x head_size x dtype bytes
    (vllm/v1/kv_cache_interface.py), with num_kv_heads per rank = max(1, kv_heads // tp): KV heads
    are replicated when TP exceeds them (vllm/config/model.py ModelConfig.get_num_kv_heads).
    """
    return 2 * spec.layers * max(1, spec.kv_heads // tp) * spec.head_dim * 2


def vllm_activation_bytes(spec: ModelSpec, tp: int, batched_tokens: int, max_num_seqs: int) -> float:
    """vLLM's profile-run peak (an estimate): one layer's bf16 hidden states and TP-split MLP for
    max_num_batched_tokens tokens, plus fp32 logits and probabilities of the sampled rows."""
    per_token = 2 * (4 * spec.hidden + 3 * spec.intermediate // tp)
    sampled = min(max_num_seqs, batched_tokens) * spec.vocab * 4 * 2
    return batched_tokens * per_token + sampled


def breakdown(spec: ModelSpec, m: MemoryInputs) -> MemoryBreakdown:
    p, w, g = spec.params, m.world, GiB
    weights, grads, adam = 4 * p / w / g, 4 * p / w / g, 8 * p / w / g
    step = OPTIMIZER_STEP_BYTES * p / w / g
    ref = 4 * p / w / g if m.ref_on_gpu else 0.0
    # FSDP unshards one unit at a time and prefetches the next: two units of bf16 params; the
    # backward adds one unit's fp32 gradients before the reduce-scatter. The embedding / lm_head
    # unit is the largest for the smaller models. Nothing to gather on one GPU.
    unit = max(spec.layer_params, spec.vocab * spec.hidden)
    gather = (2 * 2 * unit + 4 * spec.layer_params) / g if w > 1 else 0.0

    act = ACT_BYTES * m.train_tokens * spec.hidden * spec.layers / g
    logits = LOGIT_BYTES * m.train_tokens * spec.vocab / g
    update = update_peak_bytes(spec, m.train_tokens, w) / g + ref + gather
    lp_logits = LOGIT_BYTES * m.logprob_tokens * spec.vocab / g
    lp_mlp = 3 * 2 * m.logprob_tokens * spec.intermediate / g
    logprob = weights + adam + ref + gather + lp_logits + lp_mlp
    torch_budget = m.gpu_gib - NON_TORCH_GIB

    resident = weights + adam + ref
    pool = m.gpu_memory_utilization * m.gpu_gib
    vweights = 2 * p / m.tp / g  # embedding and lm_head are vocab-parallel: everything splits by TP
    vact = vllm_activation_bytes(spec, m.tp, m.max_num_batched_tokens, m.max_num_seqs) / g
    # vLLM: KV cache = requested memory - weights - activation peak - non-torch (gpu_worker.py
    # determine_available_memory); it refuses to start when that is <= 0.
    kv = pool - vweights - vact - VLLM_NON_TORCH_GIB
    per_token = kv_bytes_per_token(spec, m.tp)
    kv_tokens = max(0, int(kv * g // per_token))
    replicas = max(1, m.world // m.tp)
    per_replica = -(-m.rollout_sequences // replicas)
    needed = min(per_replica, m.max_num_seqs) * m.max_model_len
    return MemoryBreakdown(
        gpu_gib=m.gpu_gib, actor_weights=weights, actor_grads=grads, adam_state=adam, optimizer_step=step,
        ref_weights=ref, fsdp_gather=gather, train_activations=act, train_logits=logits,
        logprob_logits=lp_logits, logprob_mlp=lp_mlp, update_peak=update, logprob_peak=logprob,
        rollout_resident=resident, vllm_pool=pool, vllm_weights=vweights, vllm_activations=vact,
        kv_cache=kv, kv_bytes_per_token=per_token, kv_tokens=kv_tokens, kv_tokens_needed=needed,
        torch_budget=torch_budget,
        update_fits=update * (1 + FRAGMENTATION) <= torch_budget,
        logprob_fits=logprob * (1 + FRAGMENTATION) <= torch_budget,
        # vLLM checks at start-up that the free memory covers its whole budget (gpu_worker.py).
        rollout_fits=kv > 0 and resident + pool + NON_TORCH_GIB <= m.gpu_gib,
        kv_holds_batch=kv_tokens >= needed,
        extrapolated=p > CALIBRATED_MAX_PARAMS,
    )
