"""Run sizing: the one place the run's size, storage and cost figures are computed.

`run_sizing(cfg)` gives steps, rollout tokens, checkpoint size and count, bucket space, GPU-hours
and an ESTIMATED step time. The storage and cost work read these fields (keep their names:
total_steps, gpu_hours, est_step_seconds, checkpoint_gb, bucket_gb). GB here are decimal (1e9).

The step time is a model, labelled an estimate everywhere it is shown, given for three cases: `fast`,
`expected` and `slow` (the plan's low / expected / high). Each constant below is a `Figure` holding its
value for each case, its basis (measured here, published, derived, or an estimate) and its source;
`FIGURES` lists them all and the plan prints the table with its ESTIMATE note. Per step, on every GPU:

  generation   vLLM, per replica (world / TP of them): the prefill at the forward pass's measured MFU,
               then one decode iteration per token of the longest response. An iteration costs the
               larger of streaming the replica's bf16 weights from HBM and the compute of the sequences
               still running, plus the TP all-reduce latencies (two per layer), vLLM's per-iteration CPU
               work and the KV-cache reads (without CUDA graphs, older verl's default, the kernel launches
               overlap that GPU work and the iteration takes the longer of the two). Response lengths are
               taken as exponential with the data's mean, capped at max_response_length (ASSUMPTION): the
               step runs until the longest response
               of all its sequences (the trainer's generate_sequences returns when every replica has),
               about mean x ln(sequences) iterations (the cap in the slow case, 2 x mean in the fast one),
               while the sequences still running thin out. A replica runs at most verl's max_num_seqs
               (1024) at once and starts the rest as others finish, which delays its last start.
  weight sync  verl 0.6.1 fsdp_workers.py rollout_mode: aggressive_empty_cache, state_dict(), per tensor
               `full_tensor()` of the fp32 shards (an all-gather of 4 P over the shard group, one NCCL
               collective a tensor) and vLLM's load_weights, resume(weights), aggressive_empty_cache,
               resume(kv_cache); then trainer_mode after the rollout (vLLM sleep, empty cache) and the
               call's return. Every rollout call pays it, validation's too. Per-tensor dispatch and the
               empty-cache calls are measured on one H200 (bench/step_calibration.json); the wake-up and
               the release are published figures; the collectives' latency and vLLM's per-tensor load
               are estimates.
  old log-prob / reference / update
               per micro-batch: the FLOPs (2 P per token forward, 8 P for forward + recomputed forward +
               backward with gradient checkpointing) at the pass's MARGINAL MFU, plus a fixed cost per
               decoder layer (FSDP2's per-unit launches, copies and host syncs), both measured on verl's
               FSDP2 path on one H200 at the recipe's token budgets (bench/step_calibration.py); plus the
               FSDP traffic: a bf16 all-gather of the model per forward, another per backward and an fp32
               reduce-scatter of the gradients over the shard group, and under HSDP an fp32 all-reduce
               of each GPU's gradient shard across the replicas (FSDP2 syncs every micro-batch). The
               reference is always CPU-offloaded (fsdp_workers.py): its pass also copies its fp32 shard
               in over PCIe. The optimizer step once per mini-batch (measured).
  overlap      FSDP2 prefetches the next unit's all-gather during compute and reduce-scatters during the
               backward: fast and expected charge max(compute, collectives) plus one unit's collectives;
               slow charges them after compute (no overlap).
  layouts      full FSDP shards over every GPU; HSDP (fsdp_size = GPUs per node) shards within a node
               and replicates across nodes. A ring collective over a group spanning several nodes
               crosses each node boundary once per ring; NCCL runs one ring per NIC (rail), so a
               node's NICs carry 1/G of its GPUs' collective bytes and the bus bandwidth is
               NICs x per-NIC bandwidth, capped by NVLink's. The HSDP all-reduce runs G rings at once,
               one per rail, each at one NIC's bandwidth. Per-NIC bandwidth is the achieved ~45 GB/s of a
               400 Gb/s RoCE NIC (catalog.accelerators network_gbps, issue #13's figure): no nccl-tests
               bus-bandwidth measurement for A4 / A3 Ultra was found to cite (bench/published_runs.json
               records the search), so 8 x 45 = 360 GB/s is derived, not measured (busbw as nccl-tests
               defines it: NVIDIA/nccl-tests doc/PERFORMANCE.md). One GPU cannot measure NCCL.
  overhead     reward scoring and advantages per sample (GSM8K's rule-based reward runs on the driver), plus
               the Ray dispatch between the phases, both from published verl step logs.

Training MFU is measured on one H200 only; B200's is scaled by the one published FSDP2 figure found
for it (huggingface/transformers#48692), other accelerators take the H200 fractions (assumed).
Rows and mean lengths come from the run's dataset (catalog.datasets.DatasetFacts: GSM8K's, or the user's
data as stacks.dataset read it). Attention FLOPs are left out (under 1 % at GSM8K's lengths).
bench/published_runs.md compares the model with every published verl GRPO run found, phase by phase
where the run logs its phases. The one inside this model's domain (dense Qwen2.5-7B, FSDP + vLLM, GSM8K,
8 x H100) reads 0.88-1.11 on the training passes from the H200 measurements alone; its rollout ran without
CUDA graphs, which EAGER_LAUNCH_S (anchored on another published run) accounts for. vLLM's decode is not
measured here: DECODE_MFU, HBM_EFFICIENCY and ITERATION_OVERHEAD_S remain estimates.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Protocol

from catalog.accelerators import Accelerator
from catalog.datasets import GSM8K, DatasetFacts
from catalog.models import ModelSpec, model_spec
from recipe import memory
from recipe.grpo import GrpoSettings

GB = 1e9
CASES = ("fast", "expected", "slow")
MEASURED, PUBLISHED, DERIVED, ESTIMATE = "measured", "published", "derived", "estimate"
CALIBRATION = "bench/step_calibration.json (one H200, verl's FSDP2 path re-implemented, rows of 370 tokens)"


@dataclass(frozen=True)
class Figure:
    """A constant of the step model: its value in a fast, an expected and a slow run, basis and source."""

    name: str
    fast: float
    expected: float
    slow: float
    unit: str
    basis: str  # measured | published | derived | estimate
    source: str

    def at(self, case: str) -> float:
        if case not in CASES:
            raise ValueError(f"case {case!r}: one of {', '.join(CASES)}")
        return getattr(self, case)


# --- the training passes (measured on one H200: bench/step_calibration.py, `fitted`) ---------------------
# Marginal MFU (the per-token slope of the pass time, against the datasheet's 989 dense bf16 TFLOPS and the
# 8 P / 2 P FLOPs above) by model size; held at the largest measured (7B) above it, at the smallest below.
UPDATE_MFU = {"Qwen/Qwen2.5-1.5B": 0.441, "Qwen/Qwen2.5-3B": 0.494, "Qwen/Qwen2.5-7B": 0.603}
LOGPROB_MFU = {"Qwen/Qwen2.5-1.5B": 0.351, "Qwen/Qwen2.5-3B": 0.43, "Qwen/Qwen2.5-7B": 0.546}
UPDATE_FIXED_S_PER_LAYER = Figure("update fixed cost per layer per micro-batch", 0.00298, 0.00298, 0.0045, "s",
                                  MEASURED, CALIBRATION + ": intercept of 7B at 4070/8140/12210 tokens; slow x1.5 "
                                  "(estimate: verl's unpad/pad and Python per micro-batch)")
LOGPROB_FIXED_S_PER_LAYER = Figure("log-prob fixed cost per layer per micro-batch", 0.00079, 0.00079, 0.0012, "s",
                                   MEASURED, CALIBRATION + ": intercept of 7B's forward-only pass; slow x1.5 "
                                   "(estimate)")
# How much of the H200's measured fraction of peak an accelerator's training passes reach.
MFU_SCALE = {
    "h200": Figure("training MFU scale, h200", 1.0, 0.85, 0.68, "x", DERIVED,
                   "fast: " + CALIBRATION + " (one GPU, no peers); expected: NCCL's kernels share the SMs while "
                   "FSDP2 overlaps its collectives (estimate); slow: the share of this measurement that 8-GPU "
                   "FSDP2 reached on B200 (huggingface/transformers#48692: 0.41 / 0.603)"),
    "b200": Figure("training MFU scale, b200", 0.8, 0.68, 0.55, "x", PUBLISHED,
                   "huggingface/transformers#48692: Qwen3.5-9B FSDP2 on 8x B200, 65,536 tokens in 0.48 s = 0.41 of "
                   "2250 TFLOPS (slow: 0.33, before that PR), over the H200's measured 0.603; fast: estimate"),
}
MFU_SCALE_OTHER = Figure("training MFU scale, other accelerators", 1.0, 0.85, 0.68, "x", ESTIMATE,
                         "no measurement: the H200's fractions assumed")
OPTIMIZER_S_PER_GPARAM = Figure("AdamW step per 1e9 parameters of the shard", 0.0122, 0.0273, 0.033, "s", MEASURED,
                                CALIBRATION + ": fused 7B (fast), foreach 3B (torch's default, verl's), foreach 1.5B")
# --- generation (vLLM: not measurable here; no published Qwen2.5-32B TP 2 decode figure found) ------------
DECODE_MFU = Figure("vLLM decode compute MFU", 0.5, 0.4, 0.3, "x", ESTIMATE,
                    "issue #13's 40 %; the measured forward at 4070-token micro-batches reached 0.47 on 7B "
                    "(bench/step_calibration.json): decode's few hundred rows per GEMM reach less")
HBM_EFFICIENCY = Figure("HBM bandwidth a weight-streaming decode reaches", 0.9, 0.75, 0.6, "x", ESTIMATE,
                        "fast: the device-to-device copy measured on an H200 here, 4.3 of 4.8 TB/s "
                        "(.library/device/KINDS.md); expected / slow: estimates for GEMV-shaped decode kernels")
ITERATION_OVERHEAD_S = Figure("vLLM CPU work per decode iteration", 0.001, 0.002, 0.004, "s", ESTIMATE,
                              "scheduler, sampler and output processing with CUDA graphs; no figure found "
                              "(vLLM's v0.6.0 performance post, blog.vllm.ai 2024-09-05, shows it was a large share)")
EAGER_LAUNCH_S = Figure("vLLM's kernel launches per decode iteration without CUDA graphs (rollout.enforce_eager "
                        "true: verl's default before verl#2956, 2025-08-08; 0.6.1 captures graphs)", 0.015, 0.020,
                        0.024, "s", PUBLISHED,
                        "play-verl's Qwen2.5-0.5B GRPO log (eager, 8 GPUs, TP 1): timing_s/gen 5.0-5.5 s for 192 "
                        "decode iterations, less ~0.9 s of sync and release, = 21-24 ms an iteration whose GPU work is "
                        "under 1 ms; less the CPU work above; fast: estimate (a faster host)")
TP_COLLECTIVE_LATENCY_S = Figure("one small all-reduce inside a node", 5e-6, 10e-6, 20e-6, "s", ESTIMATE,
                                 "vLLM's custom all-reduce for decode-sized messages over NVLink")
RESPONSE_TAIL = Figure("decode iterations per batch: fast 2 x mean, expected mean x ln(sequences), slow the cap",
                       2.0, 1.0, math.inf, "(see name)", ESTIMATE,
                       "exponential response lengths (assumption): the longest of the step's n responses ~mean x "
                       "(ln n + 0.58), n over every replica (the trainer waits for all of them); fast: 2 x mean "
                       "(answers of similar length); slow: max_response_length (one response hits the cap, as "
                       "response_length/max = 1024 in the published GSM8K logs of bench/published_runs.json)")
# --- collectives, host copies, weight sync ----------------------------------------------------------------
NVLINK_EFFICIENCY = Figure("collective bus bandwidth over the NVLink datasheet figure", 0.8, 0.7, 0.6, "x", ESTIMATE,
                           "no nccl-tests figure for A4 / A3 Ultra found (bench/published_runs.json)")
PCIE_GBPS = Figure("host-to-GPU copy of an offloaded shard", 40.0, 25.0, 15.0, "GB/s", ESTIMATE,
                   "PCIe Gen5 x16 shared by 2 GPUs")
SYNC_DISPATCH_S_PER_TENSOR = Figure("weight sync: per-tensor dispatch (state_dict entry, full_tensor, cast, copy)",
                                    5.4e-5, 5.7e-5, 6.0e-5, "s", MEASURED,
                                    CALIBRATION + ": (one tensor at a time - one flat buffer) / tensors, 3B and 7B")
SYNC_COLLECTIVE_LATENCY_S = Figure("weight sync: one NCCL all-gather's latency over the shard group", 20e-6, 50e-6,
                                   100e-6, "s", ESTIMATE, "ring latency across 8-16 ranks; not measurable on one GPU")
SYNC_LOAD_S_PER_TENSOR = Figure("weight sync: vLLM load_weights per tensor", 50e-6, 100e-6, 300e-6, "s", ESTIMATE,
                                "weight_loader per parameter (qkv / gate_up stacking); vLLM not on the calibration GPU")
SYNC_EMPTY_CACHE_S = Figure("weight sync: one aggressive_empty_cache (gc + empty_cache + synchronize)", 0.195, 0.215,
                            0.5, "s", MEASURED, CALIBRATION + ": 0.195 / 0.235 s (7B / 3B); slow: verl's larger "
                            "Python heap (estimate); called twice per sync")
SYNC_WAKE_S = Figure("weight sync: vLLM resume(weights) + resume(kv_cache)", 0.5, 1.0, 3.0, "s", PUBLISHED,
                     "vLLM's sleep-mode post (blog.vllm.ai 2025-10-26): a level-1 wake-up takes 0.1-6 s across "
                     "0.6B-235B models; verl#7203 reports ~3.5 s for a whole 9B weight update; fast / slow: estimates")
SYNC_RELEASE_S = Figure("trainer_mode and the rollout call's return: vLLM sleep (level 2 from vLLM 0.8.5), "
                        "empty cache, outputs to the driver", 0.5, 0.6, 1.5, "s", PUBLISHED,
                        "timing_s/gen less timing_s/generate_sequences less timing_s/reshard in verl step logs: 0.56, "
                        "0.62, 0.63 s (bench/published_runs.json verl-logs-without-setup); slow: estimate for a "
                        "rollout batch of thousands of sequences")
STEP_FIXED_S = Figure("Ray dispatch between the phases", 0.1, 0.2, 0.5, "s", PUBLISHED,
                      "verl's timing_s/step less its phases: 0.1 s in verl#1208 (96.6 vs gen 74.0 + old 3.6 + ref 3.4 "
                      "+ adv 1.2 + update 14.3), 0.11 s in verl-data's qwen2-7b-fsdp2.log step 3, 0.5 s in verl#7203")
REWARD_S_PER_SAMPLE = Figure("reward and advantages per rollout sample (GSM8K's rule-based reward on the driver)",
                             0.16e-3, 0.21e-3, 0.28e-3, "s", PUBLISHED,
                             "timing_s/reward + timing_s/adv over the samples: (0.93 + 0.12) s / 5120 = 0.21 ms and "
                             "(1.29 + 0.12) / 5120 = 0.28 ms in verl-data's qwen2-7b-fsdp2.log, (0.07 + 0.013) / 512 = "
                             "0.16 ms in play-verl's 0.5B log (bench/published_runs.json)")
VLLM_MAX_NUM_SEQS = 1024  # verl v0.6.1 trainer/config/rollout/rollout.yaml max_num_seqs: vLLM's running-batch cap
FIGURES = (UPDATE_FIXED_S_PER_LAYER, LOGPROB_FIXED_S_PER_LAYER, *MFU_SCALE.values(), MFU_SCALE_OTHER,
           OPTIMIZER_S_PER_GPARAM, DECODE_MFU, HBM_EFFICIENCY, ITERATION_OVERHEAD_S, EAGER_LAUNCH_S,
           TP_COLLECTIVE_LATENCY_S,
           RESPONSE_TAIL, NVLINK_EFFICIENCY, PCIE_GBPS, SYNC_DISPATCH_S_PER_TENSOR, SYNC_COLLECTIVE_LATENCY_S,
           SYNC_LOAD_S_PER_TENSOR, SYNC_EMPTY_CACHE_S, SYNC_WAKE_S, SYNC_RELEASE_S, STEP_FIXED_S,
           REWARD_S_PER_SAMPLE)
# Per parameter, by save_contents (recipe.grpo.SAVE_CONTENTS): fp32 model shards, + AdamW exp_avg/exp_avg_sq.
CHECKPOINT_BYTES_PER_PARAM = {"full": 4 + 8, "model": 4}


def checkpoint_gb(g: GrpoSettings, params: float, acc: Accelerator, nnodes: int) -> float:
    """One saved step of a model of `params` parameters. verl's FSDP checkpoint manager writes every rank's
    local shard (model_world_size_*_rank_*.pt): under HSDP each replica holds a whole copy, `replicas` times
    the bytes."""
    replicas = layout(acc, nnodes, g.fsdp_size).replicas
    return CHECKPOINT_BYTES_PER_PARAM[g.save_contents] * params * replicas / GB
HF_BYTES_PER_PARAM = 2  # the staged bf16 safetensors copy of the model
GSM8K_VAL_ROWS = GSM8K.val_rows  # validation generates one response each (val_kwargs.n = 1)
DATA_GB = GSM8K.data_gb


def _by_size(table: dict[str, float], params: int) -> float:
    """A measured-by-model-size figure at `params`: linear in log(params) between the measured models."""
    points = sorted((model_spec(m).params, v) for m, v in table.items())
    if params <= points[0][0]:
        return points[0][1]
    for (p0, v0), (p1, v1) in zip(points, points[1:], strict=False):
        if params <= p1:
            return v0 + (v1 - v0) * math.log(params / p0) / math.log(p1 / p0)
    return points[-1][1]


def mfu_scale(acc: Accelerator) -> Figure:
    return MFU_SCALE.get(acc.key, MFU_SCALE_OTHER)


def train_mfu(spec: ModelSpec, acc: Accelerator, case: str = "expected", forward_only: bool = False) -> float:
    """The marginal MFU of a training pass (update, or forward-only log-prob) for this model on this GPU."""
    return _by_size(LOGPROB_MFU if forward_only else UPDATE_MFU, spec.params) * mfu_scale(acc).at(case)


def weight_sync_tensors(spec: ModelSpec) -> int:
    """Entries of the actor's state_dict, one all-gather each: 12 per Qwen2 layer (q/k/v weights and biases,
    o, gate, up, down, two norms) + embedding, final norm and lm_head (a tied head is still its own entry:
    435 for 3B, 339 for 7B as measured, bench/step_calibration.json)."""
    return 12 * spec.layers + 3


@dataclass(frozen=True)
class StepTime:
    """Seconds per training step, by phase, in one case: an estimate from the model in the module docstring."""

    generation: float
    weight_sync: float
    old_log_prob: float
    reference: float
    update: float
    overhead: float
    micro_batches: dict[str, int] = field(default_factory=dict)  # per GPU per step, by pass
    case: str = "expected"

    @property
    def total(self) -> float:
        return self.generation + self.weight_sync + self.old_log_prob + self.reference + self.update + self.overhead

    def phases(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in asdict(self).items() if isinstance(v, float)}


@dataclass(frozen=True)
class StepRange:
    """The step time in the fast, expected and slow cases (the plan's low / expected / high)."""

    low: StepTime
    expected: StepTime
    high: StepTime


@dataclass(frozen=True)
class RunSizing:
    steps_per_epoch: int
    total_epochs: int
    total_steps: int
    updates_per_step: int
    rollout_sequences_per_step: int
    rollout_tokens_per_step: int  # estimated (the dataset's mean lengths)
    rollout_tokens_per_step_max: int  # every response at max_response_length
    checkpoint_gb: float  # one saved step (actor model + optimizer shards)
    checkpoints_saved: int  # over the whole run (every save_freq steps and the last)
    checkpoints_kept: int  # on the bucket at once (max_checkpoints_to_keep)
    model_gb: float  # the staged Hugging Face copy
    bucket_gb: float  # model + kept checkpoints + data
    est_step_seconds: float  # ESTIMATE, expected case
    est_step_breakdown: dict[str, float]
    validations: int
    est_validation_seconds: float  # ESTIMATE, one validation pass, expected case
    est_run_hours: float  # ESTIMATE, training + validation, expected case
    gpus: int
    gpu_hours: float  # ESTIMATE: gpus x est_run_hours
    # total_training_steps when it ends the run before its epochs do (total_steps < per epoch x epochs), else 0
    steps_cap: int = 0
    # ESTIMATE, the fast and slow cases of the same (training + validation only; the plan's run estimate adds
    # start-up, staging, saves, the merge and the scale-down)
    est_step_seconds_low: float = 0.0
    est_step_seconds_high: float = 0.0
    est_validation_seconds_low: float = 0.0
    est_validation_seconds_high: float = 0.0
    est_run_hours_low: float = 0.0
    est_run_hours_high: float = 0.0
    estimate_note: str = ("ESTIMATE: est_* and gpu_hours come from a throughput model (recipe/sizing.py; every "
                          "constant with its source in the plan's table), not a measurement of this run")

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in out.items()}


@dataclass(frozen=True)
class Layout:
    """How the actor is sharded: verl's actor.fsdp_config.fsdp_size and what it means on this cluster."""

    fsdp_size: int  # the verl value: -1 = all GPUs
    shard: int  # GPUs in one shard group
    replicas: int  # shard groups (HSDP replicas)
    nodes_per_shard: int  # nodes one shard group spans

    @property
    def name(self) -> str:
        return "FSDP" if self.replicas == 1 else f"HSDP {self.replicas}x{self.shard}"


def layout(acc: Accelerator, nnodes: int, fsdp_size: int) -> Layout:
    world = nnodes * acc.gpus_per_node
    shard = world if fsdp_size < 1 or fsdp_size >= world else fsdp_size
    return Layout(fsdp_size=-1 if shard == world else shard, shard=shard, replicas=world // shard,
                  nodes_per_shard=max(1, -(-shard // acc.gpus_per_node)))


def layouts(acc: Accelerator, nnodes: int) -> list[Layout]:
    """The layouts the recipe weighs: full FSDP, and on several nodes HSDP with one node per shard group."""
    out = [layout(acc, nnodes, -1)]
    if nnodes > 1:
        out.append(layout(acc, nnodes, acc.gpus_per_node))
    return out


def bus_gbps(acc: Accelerator, nodes: int, case: str = "expected") -> float:
    """Bus bandwidth (GB/s) of a ring collective over a group spanning `nodes` nodes (module docstring)."""
    nvlink = acc.nvlink_gbps * NVLINK_EFFICIENCY.at(case)
    if nodes <= 1:
        return nvlink
    return min(nvlink, max(1, acc.rdma_nics) * acc.network_gbps)


@dataclass(frozen=True)
class Collectives:
    """Per-GPU traffic of one layout (bytes per GPU per collective) and its seconds."""

    gather_bytes: float  # bf16 all-gather of the model over the shard group
    reduce_bytes: float  # fp32 reduce-scatter of the gradients over the shard group
    replica_bytes: float  # HSDP: fp32 all-reduce of the gradient shard across replicas (bus bytes)
    sync_bytes: float  # fp32 weight sync to vLLM (an all-gather of 4 P over the shard group)
    internode_share: float  # of the shard group's collective bytes, the part a node's NICs carry
    gather_s: float
    reduce_s: float
    replica_s: float
    sync_s: float  # the bytes' time alone (weight_sync_seconds adds the per-tensor and fixed parts)


def collectives(spec: ModelSpec, acc: Accelerator, lay: Layout, case: str = "expected") -> Collectives:
    p, s = spec.params, lay.shard
    share = (s - 1) / s
    gather, reduce, sync = 2 * p * share, 4 * p * share, 4 * p * share
    bw = bus_gbps(acc, lay.nodes_per_shard, case) * GB
    replica = 2 * (4 * p / s) * (lay.replicas - 1) / lay.replicas
    return Collectives(
        gather_bytes=gather, reduce_bytes=reduce, replica_bytes=replica, sync_bytes=sync,
        internode_share=1 / acc.gpus_per_node if lay.nodes_per_shard > 1 else 0.0,
        gather_s=gather / bw, reduce_s=reduce / bw, replica_s=replica / (acc.network_gbps * GB), sync_s=sync / bw)


def weight_sync_seconds(spec: ModelSpec, acc: Accelerator, lay: Layout, case: str = "expected") -> float:
    """rollout_mode and trainer_mode once per rollout call: the fp32 bytes over the shard group's bus, and per
    tensor the dispatch, one collective's latency (when the group has peers) and vLLM's load, plus two empty-cache
    calls, the wake-up and the release back to training."""
    n = weight_sync_tensors(spec)
    latency = SYNC_COLLECTIVE_LATENCY_S.at(case) if lay.shard > 1 else 0.0
    per_tensor = SYNC_DISPATCH_S_PER_TENSOR.at(case) + latency + SYNC_LOAD_S_PER_TENSOR.at(case)
    return (collectives(spec, acc, lay, case).sync_s + n * per_tensor + 2 * SYNC_EMPTY_CACHE_S.at(case)
            + SYNC_WAKE_S.at(case) + SYNC_RELEASE_S.at(case))


def decode_iterations(sequences: float, mean_response: float, max_response: int, case: str = "expected") -> int:
    """Decode iterations of the longest of `sequences` responses (RESPONSE_TAIL's assumption)."""
    if mean_response <= 0 or sequences <= 0:
        return 0
    if case == "slow":
        return max_response
    longest = 2 * mean_response if case == "fast" else mean_response * (math.log(max(sequences, 1.0)) + 0.5772)
    return max(1, min(max_response, math.ceil(longest)))


def queued_iterations(per_replica: float, mean_response: float) -> int:
    """Iterations before a replica's last sequence starts: vLLM runs at most VLLM_MAX_NUM_SEQS at once and admits
    the rest as others finish (mean_response iterations each), so the queue drains after (n - cap) x mean / cap."""
    cap = VLLM_MAX_NUM_SEQS
    return math.ceil(max(0.0, per_replica - cap) * mean_response / cap) if mean_response > 0 else 0


def generation_seconds(spec: ModelSpec, acc: Accelerator, world: int, tp: int, sequences: int,
                       prompt_tokens: float, response_tokens: float, max_response: int,
                       case: str = "expected", eager: bool = False) -> float:
    """vLLM time for `sequences` prompts spread over world / tp replicas (see the module docstring). `eager`:
    vLLM without CUDA graphs, whose kernel launches overlap the GPU's work, so an iteration takes the longer of
    the two (for the published runs of older verl; this project's verl 0.6.1 captures graphs)."""
    p = spec.params
    n = sequences / max(1, world // tp)  # sequences per replica
    running = min(n, VLLM_MAX_NUM_SEQS)
    queued = queued_iterations(n, response_tokens)
    peak = tp * acc.bf16_tflops * 1e12
    prefill = 2 * p * n * prompt_tokens / (peak * train_mfu(spec, acc, case, forward_only=True))
    hbm = acc.hbm_tbps * 1e12 * HBM_EFFICIENCY.at(case)
    weights = 2 * p / tp / hbm  # one pass over the replica's bf16 weights per iteration
    per_sequence = 2 * p / (peak * DECODE_MFU.at(case))
    collectives_n = 2 * spec.layers if tp > 1 else 0
    launch = EAGER_LAUNCH_S.at(case) if eager else 0.0
    nvlink = acc.nvlink_gbps * GB * NVLINK_EFFICIENCY.at(case)
    tp_bytes_per_token = collectives_n * spec.hidden * 2 * 2 * (tp - 1) / tp if tp > 1 else 0.0
    kv_per_token = memory.kv_bytes_per_token(spec, tp)
    total = prefill
    for k in range(queued + decode_iterations(sequences, response_tokens, max_response, case)):
        active = max(1.0, running * math.exp(-max(0, k - queued) / response_tokens))
        context = prompt_tokens + k
        gpu = (max(weights, active * per_sequence) + collectives_n * TP_COLLECTIVE_LATENCY_S.at(case)
               + active * tp_bytes_per_token / nvlink + active * context * kv_per_token / hbm)
        total += ITERATION_OVERHEAD_S.at(case) + max(gpu, launch)
    return total


def _pass(flops_per_token: float, tokens: float, micro_batches: int, fixed_per_layer: float, spec: ModelSpec,
          acc: Accelerator, mfu: float, collective_s: float, case: str) -> float:
    """One pass over `tokens` in `micro_batches`: compute and collectives per micro-batch, overlapped unless slow."""
    mb = max(1, micro_batches)
    compute = flops_per_token * tokens / mb / (acc.bf16_tflops * 1e12 * mfu) + spec.layers * fixed_per_layer
    if case == "slow":
        return mb * (compute + collective_s)
    return mb * (max(compute, collective_s) + collective_s / (spec.layers + 1))  # one unit's collectives exposed


def step_time(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int,
              data: DatasetFacts = GSM8K, case: str = "expected", vllm_eager: bool = False) -> StepTime:
    world = nnodes * acc.gpus_per_node
    p = spec.params
    samples = g.train_batch_size * g.rollout_n
    per_gpu = samples / world
    prompt = min(data.mean_prompt_tokens, g.max_prompt_length)
    response = min(data.mean_response_tokens, g.max_response_length)
    seq = prompt + response if g.use_remove_padding else g.max_prompt_length + g.max_response_length
    tokens = per_gpu * seq  # tokens each GPU computes per pass
    updates = max(1, g.train_batch_size // g.ppo_mini_batch_size)
    if g.use_dynamic_bsz:
        old = ref = math.ceil(tokens / g.log_prob_max_token_len_per_gpu)
        update = updates * math.ceil(tokens / updates / g.ppo_max_token_len_per_gpu)
    else:
        old = math.ceil(per_gpu / g.log_prob_micro_batch_size_per_gpu)
        ref = math.ceil(per_gpu / g.ref_log_prob_micro_batch_size_per_gpu)
        update = updates * math.ceil(per_gpu / updates / g.ppo_micro_batch_size_per_gpu)
    lay = layout(acc, nnodes, g.fsdp_size)
    c = collectives(spec, acc, lay, case)
    fwd_mfu, upd_mfu = train_mfu(spec, acc, case, forward_only=True), train_mfu(spec, acc, case)
    lp_fixed, upd_fixed = LOGPROB_FIXED_S_PER_LAYER.at(case), UPDATE_FIXED_S_PER_LAYER.at(case)
    # verl always offloads the reference: its fp32 shard comes in over PCIe once per micro-batch (not overlapped).
    offload = 4 * p / lay.shard / (PCIE_GBPS.at(case) * GB)
    ref_s = (_pass(2 * p, tokens, ref, lp_fixed, spec, acc, fwd_mfu, c.gather_s, case) + ref * offload
             if g.kl_loss_coef > 0 else 0.0)
    optimizer = updates * OPTIMIZER_S_PER_GPARAM.at(case) * p / lay.shard / 1e9
    return StepTime(
        generation=generation_seconds(spec, acc, world, g.tensor_parallel_size, samples, prompt, response,
                                      g.max_response_length, case, vllm_eager),
        weight_sync=weight_sync_seconds(spec, acc, lay, case),
        old_log_prob=_pass(2 * p, tokens, old, lp_fixed, spec, acc, fwd_mfu, c.gather_s, case),
        reference=ref_s,
        update=_pass(8 * p, tokens, update, upd_fixed, spec, acc, upd_mfu,
                     2 * c.gather_s + c.reduce_s + c.replica_s, case) + optimizer,
        overhead=step_overhead_seconds(samples, case),
        micro_batches={"old_log_prob": old, "reference": ref if g.kl_loss_coef > 0 else 0, "update": update},
        case=case,
    )


def step_overhead_seconds(samples: int, case: str = "expected") -> float:
    """Reward and advantages for every sample, plus the Ray dispatch between the phases."""
    return STEP_FIXED_S.at(case) + samples * REWARD_S_PER_SAMPLE.at(case)


def step_range(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int,
               data: DatasetFacts = GSM8K, vllm_eager: bool = False) -> StepRange:
    low, expected, high = (step_time(g, spec, acc, nnodes, data, case, vllm_eager) for case in CASES)
    return StepRange(low, expected, high)


def validation_seconds(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int, data: DatasetFacts,
                       case: str = "expected") -> float:
    """One validation pass: every validation prompt once (val_kwargs.n = 1) through the same rollout call as
    training's (verl ray_trainer _validate calls generate_sequences: rollout_mode's weight sync, then trainer_mode),
    and the reward of each."""
    prompt = min(data.mean_prompt_tokens, g.max_prompt_length)
    response = min(data.mean_response_tokens, g.max_response_length)
    lay = layout(acc, nnodes, g.fsdp_size)
    return (generation_seconds(spec, acc, nnodes * acc.gpus_per_node, g.tensor_parallel_size, data.val_rows, prompt,
                               response, g.max_response_length, case)
            + weight_sync_seconds(spec, acc, lay, case) + step_overhead_seconds(data.val_rows, case))


def sizing(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int,
           data: DatasetFacts = GSM8K) -> RunSizing:
    world = nnodes * acc.gpus_per_node
    steps_per_epoch = data.train_rows // g.train_batch_size  # verl's train loader drops the last partial batch
    total = steps_per_epoch * g.total_epochs
    capped = 0 < g.total_training_steps < total  # verl stops at total_training_steps when it is set
    total = g.total_training_steps if capped else total
    saved = 0
    if g.save_freq > 0 and total:
        saved = total // g.save_freq + (1 if total % g.save_freq else 0)  # verl also saves the last step
    kept = min(saved, g.max_checkpoints_to_keep)
    ckpt_gb = checkpoint_gb(g, spec.params, acc, nnodes)
    model_gb = HF_BYTES_PER_PARAM * spec.params / GB
    st = step_range(g, spec, acc, nnodes, data)
    prompt = min(data.mean_prompt_tokens, g.max_prompt_length)
    response = min(data.mean_response_tokens, g.max_response_length)
    val = {case: validation_seconds(g, spec, acc, nnodes, data, case) for case in CASES}
    validations = (1 if g.val_before_train else 0)
    if g.test_freq > 0 and total:
        validations += total // g.test_freq + (1 if total % g.test_freq else 0)  # and after the last step
    hours = {case: (total * getattr(st, key).total + validations * val[case]) / 3600
             for case, key in zip(CASES, ("low", "expected", "high"), strict=True)}
    samples = g.train_batch_size * g.rollout_n
    return RunSizing(
        steps_per_epoch=steps_per_epoch, total_epochs=g.total_epochs, total_steps=total,
        updates_per_step=max(1, g.train_batch_size // g.ppo_mini_batch_size),
        rollout_sequences_per_step=samples,
        rollout_tokens_per_step=round(samples * (prompt + response)),
        rollout_tokens_per_step_max=samples * (g.max_prompt_length + g.max_response_length),
        checkpoint_gb=ckpt_gb, checkpoints_saved=saved, checkpoints_kept=kept, model_gb=model_gb,
        bucket_gb=model_gb + kept * ckpt_gb + data.data_gb,
        est_step_seconds=st.expected.total, est_step_breakdown=st.expected.phases(), validations=validations,
        est_validation_seconds=val["expected"], est_run_hours=hours["expected"], gpus=world,
        gpu_hours=world * hours["expected"], steps_cap=g.total_training_steps if capped else 0,
        est_step_seconds_low=st.low.total, est_step_seconds_high=st.high.total,
        est_validation_seconds_low=val["fast"], est_validation_seconds_high=val["slow"],
        est_run_hours_low=hours["fast"], est_run_hours_high=hours["slow"],
    )


def figures_table() -> list[dict[str, object]]:
    """Every constant of the step model with its three values, basis and source (the plan prints it)."""
    rows = [{"name": f.name, "fast": f.fast, "expected": f.expected, "slow": f.slow, "unit": f.unit,
             "basis": f.basis, "source": f.source} for f in FIGURES]
    for name, table in (("update marginal MFU by model", UPDATE_MFU), ("log-prob marginal MFU by model", LOGPROB_MFU)):
        rows.append({"name": name, "fast": None, "expected": None, "slow": None, "unit": "x of 989 TFLOPS",
                     "basis": MEASURED, "values": dict(table), "source": CALIBRATION})
    return rows


class SizedStack(Protocol):
    """What run_sizing reads of a stack's config (stacks.config.StackConfig has it; recipe/ imports nothing
    of stacks/)."""

    model: str
    grpo: GrpoSettings
    accelerator: Accelerator
    gpu_nodes: int
    data: DatasetFacts


def run_sizing(cfg: SizedStack) -> RunSizing:
    """The stack's run sizing (its model must be in catalog/models.py)."""
    spec = model_spec(cfg.model)
    if spec is None:
        raise ValueError(f"{cfg.model} is not in catalog/models.py: no size figures")
    return sizing(cfg.grpo, spec, cfg.accelerator, cfg.gpu_nodes, cfg.data)
