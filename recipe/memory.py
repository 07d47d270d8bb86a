"""Per-GPU memory of a verl 0.6.1 GRPO run (FSDP actor + reference, colocated vLLM rollout): a pure model.

A step passes through three phases on every GPU; each must fit on its own (verl frees vLLM's
weights and KV cache before training and wakes them for the rollout: sleep level 2,
verl/third_party/vllm/__init__.py, verl/workers/fsdp_workers.py rollout_mode/trainer_mode):

  rollout   actor fp32 weights + Adam state stay resident (dp_actor.py update_policy ends with
            zero_grad, so no gradients; the reference lives on the host), and the vLLM pool of
            gpu_memory_utilization x GPU memory (vLLM >= 0.7 reads it as a fraction of the TOTAL:
            docs/perf/perf_tuning.rst) holding its bf16 weights under TP, its activation peak and
            the KV cache; CUDA graphs sit outside the pool (docs/perf/best_practices.rst).
  log-prob  forward only (old log-prob with entropy, reference): the static shards, the units in
            flight, the logits of the forward token budget.
  update    forward + backward + AdamW on the training token budget.

verl paths below are read at v0.6.1 = volcengine/verl@d62da4950573d7a4b7ef2362337952e7ab59e78d
(VERL_COMMIT): workers/fsdp_workers.py, workers/actor/dp_actor.py, utils/fsdp_utils.py,
utils/torch_functional.py, trainer/config/actor/actor.yaml.

Training terms are CALIBRATED on verl's own FSDP2 training path re-implemented on one H200
(bench/memory_calibration.py run_case_fsdp2; table bench/memory_calibration_fsdp2.json; 0.5B-7B,
three or four token budgets each, entropy on and off). flash-attn was not on that GPU: sdpa stood in
for its attention and a torch twin of its cross_entropy_loss (same saved tensors, same in-place
gradient) for the log-prob (the table's logprob_impl). The fit check uses the RESERVED peak: it is
what the caching allocator holds from the GPU, so it is what runs out (allocated sits 1-4 % below it
with expandable segments, which verl turns on for training). Every measured case is predicted
between 1.4 % under and 7.6 % over (bench/memory_calibration_fit.txt). With S the FSDP shard group
(all GPUs, or fsdp_size under HSDP), P the parameters, U the largest FSDP unit (a decoder layer or
the embedding / lm_head), T the micro-batch tokens on this GPU, h hidden, L layers, V vocab:

  update    max of   (16 + t) P / S                  AdamW's step: fp32 weights 4 + grads 4 + m, v 8,
                                                     foreach's transient t = 4 (fused: 0)
                     16 P / S + 12 U                  end of backward: a unit's bf16 params and grads,
                                                     their fp32 copy and the reduce-scatter output
                     16 P / S + 2 U + a T h L + c T V  the second micro-batch's lm_head backward, with
                                                     the first one's gradients live (a = 2: bf16
                                                     checkpointed layer inputs; c = 8: the bf16 logits,
                                                     their gradient and the two copies autograd's
                                                     CopySlices makes for verl's in-place logits.div_
                                                     on a view, dp_actor.py _forward_micro_batch)
                     + e_u T V with eager entropy     (actor.use_torch_compile=false: fp32 softmax kept)
  log-prob  12 P / S + 4 U + 2 T V (+ e_l T V eager)  forward only; the old-log-prob pass always
                                                     computes the entropy (fsdp_workers.py compute_log_prob)
  then x 1.02 + 0.5 GiB (reserved over allocated, fitted).

Entropy through torch.compile (verl's default, actor.yaml use_torch_compile: true) was measured to add
nothing to either peak: the fused kernel keeps no fp32 copy and the CopySlices peak comes later.
Eager entropy (use_torch_compile=false) adds 20.5 bytes per token x vocab to the update and 12 to the
log-prob pass (measured). verl's two other entropy paths (dp_actor.py, both off by default in
dp_actor.yaml) were not measured and are charged on the safe side: entropy_from_logits_with_chunking
(a Python loop over 2048-row fp32 chunks, compiled or not) keeps every chunk's fp32 copy and softmax
for the backward, at most what eager keeps, so the update is charged as eager; the forward-only pass
holds one chunk at a time, charged as eager over min(T, 2048) rows. entropy_checkpointing recomputes
the entropy's forward inside the backward (at most eager's peak there): the update is charged as
eager; under no_grad it is a plain call, so the log-prob pass is unchanged.

The reference model is always CPU-offloaded by verl 0.6.1 under FSDP and FSDP2 (fsdp_workers.py
_build_model_optimizer: `cpu_offload = None if role == "actor" else CPUOffloadPolicy(pin_memory=True)`;
compute_ref_log_prob never reads ref.fsdp_config.param_offload): it costs no resident GPU memory, only
its units copied in during its own pass. Units are per verl's apply_fsdp2 (utils/fsdp_utils.py).
vLLM terms are ANALYTICAL (formulas cited where used). Models above the calibrated 7.6 B parameters
are extrapolations of the same formula: `extrapolated` says so. actor.strategy=fsdp (FSDP1, verl's
FullyShardedDataParallel with MixedPrecision bf16 / fp32 reduce on the same units) is charged with the
FSDP2 numbers: not measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from catalog.models import ModelSpec

GiB = 1024**3
# verl v0.6.1, the code the formulas above were read from.
VERL_COMMIT = "d62da4950573d7a4b7ef2362337952e7ab59e78d"
# Fitted on bench/memory_calibration_fsdp2.json by `python -m bench.memory_calibration --fit`.
OPTIMIZER_STEP_BYTES = 4.0  # t: torch AdamW foreach (verl's build_optimizer keeps torch's default)
UNIT_BWD_BYTES = 12.0  # end of backward, per parameter of the largest unit
UNIT_LOGITS_BYTES = 2.0  # the root unit (lm_head) unsharded in bf16 during its backward
ACT_BYTES = 2.0  # a: bytes per token x hidden x layer (bf16 checkpointed layer inputs)
LOGIT_BYTES = 8.0  # c: bytes per token x vocab in the update (see the docstring)
ENTROPY_EAGER_UPDATE_BYTES = 20.5  # e_u, measured with actor.use_torch_compile=false
UNIT_FORWARD_BYTES = 4.0  # forward only: two bf16 units in flight (the current one and the prefetched)
LOGPROB_LOGIT_BYTES = 2.0  # bf16 logits of the forward-only pass
ENTROPY_EAGER_LOGPROB_BYTES = 12.0  # e_l
ENTROPY_CHUNK_ROWS = 2048  # torch_functional.py entropy_from_logits_with_chunking's chunk_size default
RESERVED_RATIO = 1.02  # reserved over allocated (fitted, expandable segments)
RESERVED_BASE_GIB = 0.5
CALIBRATED_MAX_PARAMS = 7_615_616_512  # Qwen2.5-7B, the largest model measured
# Run-to-run headroom on the torch phases. The fit is on the reserved peak, so fragmentation is in the
# model already; this covers multi-rank effects one rank cannot show (NCCL streams' allocations).
FRAGMENTATION = 0.10
# Outside PyTorch's allocator on every GPU: CUDA context, NCCL buffers, cuBLAS workspaces (~1.5 GiB,
# an estimate) and vLLM's CUDA graphs, which stay through training (best_practices.rst: "not
# bounded by gpu_memory_utilization"; vLLM logs ~1-2 GiB for its default capture sizes): an estimate.
NON_TORCH_GIB = 1.5 + 1.5
# vLLM's own non-torch memory inside its budget (NCCL for TP, allocator pools): an estimate.
VLLM_NON_TORCH_GIB = 0.5


@dataclass(frozen=True)
class MemoryInputs:
    """What the memory depends on; the recipe fills it from the stack (recipe.grpo.memory_inputs)."""

    world: int  # GPUs in the run
    gpu_gib: float  # PyTorch-visible capacity of one GPU
    tp: int  # vLLM tensor-parallel size
    gpu_memory_utilization: float
    train_tokens: int  # tokens in one update micro-batch on one GPU
    logprob_tokens: int  # tokens in one forward-only micro-batch on one GPU
    ref_loaded: bool  # a reference model exists (KL loss); always CPU-offloaded by verl
    rollout_sequences: int  # train batch x n: sequences vLLM generates per step
    max_model_len: int  # prompt + response
    max_num_batched_tokens: int = 8192  # verl rollout.yaml default
    max_num_seqs: int = 1024  # verl rollout.yaml default
    fsdp_size: int = -1  # actor.fsdp_config.fsdp_size: -1 (or >= world) shards over all GPUs, else HSDP
    entropy_in_update: bool = False  # actor.entropy_coeff != 0
    entropy_eager: bool = False  # actor.use_torch_compile=false: entropy_from_logits runs uncompiled
    entropy_chunked: bool = False  # actor.entropy_from_logits_with_chunking=true (not measured: see the docstring)
    entropy_checkpointing: bool = False  # actor.entropy_checkpointing=true (not measured: see the docstring)

    @property
    def update_entropy_eager(self) -> bool:
        """The update's entropy is charged as eager: measured so, or an unmeasured path it bounds."""
        return self.entropy_in_update and (self.entropy_eager or self.entropy_chunked or self.entropy_checkpointing)

    @property
    def logprob_entropy_rows(self) -> int:
        """Token rows the old-log-prob pass's entropy is charged as eager over (0: compiled, free)."""
        if self.entropy_chunked:
            return min(self.logprob_tokens, ENTROPY_CHUNK_ROWS)
        return self.logprob_tokens if self.entropy_eager else 0

    @property
    def shard(self) -> int:
        """GPUs one FSDP shard group spans (verl fsdp_workers.py create_device_mesh)."""
        return self.world if self.fsdp_size < 1 or self.fsdp_size >= self.world else self.fsdp_size


@dataclass(frozen=True)
class MemoryBreakdown:
    """GiB per GPU unless named otherwise; the phase peaks are reserved-memory predictions."""

    gpu_gib: float
    shard: int  # GPUs the static terms are divided by
    # static FSDP shards (divided by the shard group)
    actor_weights: float  # fp32 master weights (fsdp_config.model_dtype fp32)
    actor_grads: float  # fp32, only during the update
    adam_state: float  # fp32 exp_avg + exp_avg_sq
    optimizer_step: float  # foreach AdamW's transient buffer
    fsdp_gather: float  # largest unit's unsharded buffers at the end of its backward
    # token-budget terms
    train_activations: float  # a T h L, T = train_tokens
    train_logits: float  # c T V
    train_entropy: float  # eager entropy in the update (0 when compiled or entropy_coeff = 0)
    logprob_logits: float  # bf16 logits at the forward budget
    logprob_entropy: float  # eager entropy in the old-log-prob pass
    logprob_units: float  # units in flight in a forward-only pass (the reference's copied-in shards too)
    # phase peaks (reserved, before the run-to-run headroom)
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


def largest_unit(spec: ModelSpec) -> int:
    """Parameters of the largest FSDP unit: a decoder layer, or the embedding / lm_head (verl's
    apply_fsdp2 wraps each layer, the embedding when untied, and the root holding lm_head)."""
    return max(spec.layer_params, spec.vocab * spec.hidden)


def _reserved(allocated: float) -> float:
    return allocated * RESERVED_RATIO + RESERVED_BASE_GIB * GiB


def update_peak_bytes(spec: ModelSpec, tokens: int, shard: int = 1, *, optimizer_step: float = OPTIMIZER_STEP_BYTES,
                      entropy_eager: bool = False) -> float:
    """The calibrated update peak (reserved bytes) of one GPU: the module docstring's formula."""
    p, u = spec.params, largest_unit(spec)
    static = 16 * p / shard
    logits = (LOGIT_BYTES + (ENTROPY_EAGER_UPDATE_BYTES if entropy_eager else 0.0)) * tokens * spec.vocab
    return _reserved(max(static + optimizer_step * p / shard, static + UNIT_BWD_BYTES * u,
                         static + UNIT_LOGITS_BYTES * u + ACT_BYTES * tokens * spec.hidden * spec.layers + logits))


def logprob_peak_bytes(spec: ModelSpec, tokens: int, shard: int = 1, *, entropy_eager: bool = False,
                       reference: bool = False, entropy_rows: int | None = None) -> float:
    """The calibrated forward-only peak (reserved bytes): the actor's old-log-prob pass (entropy always),
    or with `reference` the reference's pass (no entropy; its fp32 shard of each unit in flight is
    copied in from the host: 2 units x 4 bytes / shard, analytical). An eager entropy covers `entropy_rows`
    token rows (default: all of them; fewer when chunked)."""
    p, u = spec.params, largest_unit(spec)
    units = UNIT_FORWARD_BYTES * u + (2 * 4 * u / shard if reference else 0.0)
    rows = tokens if entropy_rows is None else entropy_rows
    entropy = ENTROPY_EAGER_LOGPROB_BYTES * rows * spec.vocab if entropy_eager and not reference else 0.0
    return _reserved(12 * p / shard + units + LOGPROB_LOGIT_BYTES * tokens * spec.vocab + entropy)


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
    p, s, g = spec.params, m.shard, GiB
    u = largest_unit(spec)
    weights, grads, adam = 4 * p / s / g, 4 * p / s / g, 8 * p / s / g
    step = OPTIMIZER_STEP_BYTES * p / s / g
    eager_update = m.update_entropy_eager
    act = ACT_BYTES * m.train_tokens * spec.hidden * spec.layers / g
    logits = LOGIT_BYTES * m.train_tokens * spec.vocab / g
    train_entropy = ENTROPY_EAGER_UPDATE_BYTES * m.train_tokens * spec.vocab / g if eager_update else 0.0
    update = update_peak_bytes(spec, m.train_tokens, s, entropy_eager=eager_update) / g
    lp_logits = LOGPROB_LOGIT_BYTES * m.logprob_tokens * spec.vocab / g
    rows = m.logprob_entropy_rows
    lp_entropy = ENTROPY_EAGER_LOGPROB_BYTES * rows * spec.vocab / g
    logprob = logprob_peak_bytes(spec, m.logprob_tokens, s, entropy_eager=rows > 0, entropy_rows=rows) / g
    units = UNIT_FORWARD_BYTES * u / g
    if m.ref_loaded:
        ref_pass = logprob_peak_bytes(spec, m.logprob_tokens, s, reference=True) / g
        if ref_pass > logprob:
            logprob, units = ref_pass, units + 2 * 4 * u / s / g
    torch_budget = m.gpu_gib - NON_TORCH_GIB

    resident = weights + adam
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
        gpu_gib=m.gpu_gib, shard=s, actor_weights=weights, actor_grads=grads, adam_state=adam, optimizer_step=step,
        fsdp_gather=UNIT_BWD_BYTES * u / g, train_activations=act, train_logits=logits,
        train_entropy=train_entropy, logprob_logits=lp_logits, logprob_entropy=lp_entropy, logprob_units=units,
        update_peak=update, logprob_peak=logprob,
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
