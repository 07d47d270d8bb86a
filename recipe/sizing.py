"""Run sizing: the one place the run's size, storage and cost figures are computed.

`run_sizing(cfg)` gives steps, rollout tokens, checkpoint size and count, bucket space, GPU-hours
and an ESTIMATED step time. The storage and cost work read these fields (keep their names:
total_steps, gpu_hours, est_step_seconds, checkpoint_gb, bucket_gb). GB here are decimal (1e9).

The step time is a simple model, labelled an estimate everywhere it is shown. Per step, on every GPU:

  generation   vLLM, per replica (world / TP of them): the larger of the compute (2 P FLOPs per
               prompt and generated token at MFU of the bf16 peak over TP GPUs) and the decode
               floor (every decode iteration streams the replica's bf16 weights from HBM, plus one
               all-reduce latency per TP collective; the batch waits for its longest response, so
               there are max_response_length iterations), plus the TP all-reduce traffic (two per
               layer per token) over NVLink and the KV-cache reads.
  weight sync  the actor's fp32 parameters gathered one tensor at a time into vLLM once per step
               (fsdp_workers.py rollout_mode: state_dict() then DTensor.full_tensor(), fp32 because the
               actor's master weights are fp32): an all-gather of 4 P over the shard group.
  old log-prob / reference / update
               compute at MFU (2 P per token forward, 8 P for forward + recomputed forward + backward
               with gradient checkpointing), on the padded length unless use_remove_padding; plus
               FSDP traffic per micro-batch: a bf16 all-gather of the model per forward, another per
               backward plus an fp32 reduce-scatter of the gradients, over the shard group; under HSDP
               also an fp32 all-reduce of each GPU's gradient shard across the replicas (FSDP2 syncs
               every micro-batch: verl does not turn gradient sync off while accumulating). The
               reference is always CPU-offloaded (fsdp_workers.py), so its pass also copies its fp32
               shard in over PCIe.
  layouts      full FSDP shards over every GPU; HSDP (fsdp_size = GPUs per node) shards within a node
               and replicates across nodes. A ring collective over a group spanning several nodes
               crosses each node boundary once per ring; NCCL runs one ring per NIC (rail), so a
               node's NICs carry 1/G of its GPUs' collective bytes and the bus bandwidth is
               NICs x per-NIC bandwidth, capped by NVLink's. The HSDP all-reduce runs G rings at once,
               one per rail, each at one NIC's bandwidth. Per-NIC bandwidth is the achieved ~45 GB/s of a
               400 Gb/s RoCE NIC (catalog.accelerators network_gbps, issue #13's figure): no nccl-tests
               bus-bandwidth measurement for A4 / A3 Ultra was found to cite, so 8 x 45 = 360 GB/s is
               derived, not measured (busbw as nccl-tests defines it: NVIDIA/nccl-tests doc/PERFORMANCE.md).
  overlap      ASSUMPTION: none. Collectives are charged after compute (an upper bound: FSDP2 does
               prefetch the next unit's all-gather during compute); both layouts are compared under
               the same assumption.
  overhead     reward scoring, Ray dispatch and data movement: a fixed estimate.

Rows and mean lengths come from the run's dataset (catalog.datasets.DatasetFacts: GSM8K's, or the user's
data as stacks.dataset read it). Attention FLOPs are left out (short sequences).
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
MFU = 0.40  # issue #13: "about 40 % of bf16 peak" for the training passes and vLLM's compute
HBM_EFFICIENCY = 0.7  # fraction of the HBM datasheet bandwidth a weight-streaming decode reaches (estimate)
NVLINK_EFFICIENCY = 0.7  # collective bus bandwidth over the NVLink datasheet figure (estimate)
TP_COLLECTIVE_LATENCY_S = 10e-6  # one small all-reduce inside a node (estimate)
PCIE_GBPS = 25.0  # host-to-GPU copy of an offloaded shard (PCIe Gen5 x16 shared by 2 GPUs: estimate)
STEP_OVERHEAD_S = 10.0  # reward, Ray dispatch, data movement (estimate)
# Per parameter, by save_contents (recipe.grpo.SAVE_CONTENTS): fp32 model shards, + AdamW exp_avg/exp_avg_sq.
CHECKPOINT_BYTES_PER_PARAM = {"full": 4 + 8, "model": 4}


def checkpoint_gb(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int) -> float:
    """One saved step. verl's FSDP checkpoint manager writes every rank's local shard
    (model_world_size_*_rank_*.pt): under HSDP each replica holds a whole copy, `replicas` times the bytes."""
    replicas = layout(acc, nnodes, g.fsdp_size).replicas
    return CHECKPOINT_BYTES_PER_PARAM[g.save_contents] * spec.params * replicas / GB
HF_BYTES_PER_PARAM = 2  # the staged bf16 safetensors copy of the model
GSM8K_VAL_ROWS = GSM8K.val_rows  # validation generates one response each (val_kwargs.n = 1)
DATA_GB = GSM8K.data_gb


@dataclass(frozen=True)
class StepTime:
    """Seconds per training step, by phase: an estimate from the model in the module docstring."""

    generation: float
    weight_sync: float
    old_log_prob: float
    reference: float
    update: float
    overhead: float
    micro_batches: dict[str, int] = field(default_factory=dict)  # per GPU per step, by pass

    @property
    def total(self) -> float:
        return self.generation + self.weight_sync + self.old_log_prob + self.reference + self.update + self.overhead


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
    est_step_seconds: float  # ESTIMATE
    est_step_breakdown: dict[str, float]
    validations: int
    est_validation_seconds: float  # ESTIMATE, one validation pass
    est_run_hours: float  # ESTIMATE, training + validation
    gpus: int
    gpu_hours: float  # ESTIMATE: gpus x est_run_hours
    # total_training_steps when it ends the run before its epochs do (total_steps < per epoch x epochs), else 0
    steps_cap: int = 0
    estimate_note: str = ("ESTIMATE: est_* and gpu_hours come from a throughput model (recipe/sizing.py), "
                          "not a measurement")

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in out.items()}


def _pass_seconds(flops: float, acc: Accelerator) -> float:
    return flops / (acc.bf16_tflops * 1e12 * MFU)


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


def bus_gbps(acc: Accelerator, nodes: int) -> float:
    """Bus bandwidth (GB/s) of a ring collective over a group spanning `nodes` nodes (module docstring)."""
    nvlink = acc.nvlink_gbps * NVLINK_EFFICIENCY
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
    sync_s: float


def collectives(spec: ModelSpec, acc: Accelerator, lay: Layout) -> Collectives:
    p, s = spec.params, lay.shard
    share = (s - 1) / s
    gather, reduce, sync = 2 * p * share, 4 * p * share, 4 * p * share
    bw = bus_gbps(acc, lay.nodes_per_shard) * GB
    replica = 2 * (4 * p / s) * (lay.replicas - 1) / lay.replicas
    return Collectives(
        gather_bytes=gather, reduce_bytes=reduce, replica_bytes=replica, sync_bytes=sync,
        internode_share=1 / acc.gpus_per_node if lay.nodes_per_shard > 1 else 0.0,
        gather_s=gather / bw, reduce_s=reduce / bw, replica_s=replica / (acc.network_gbps * GB), sync_s=sync / bw)


def generation_seconds(spec: ModelSpec, acc: Accelerator, world: int, tp: int, sequences: int,
                       prompt_tokens: float, response_tokens: float, max_response: int) -> float:
    """vLLM time for `sequences` prompts spread over world / tp replicas (see the module docstring)."""
    p = spec.params
    per_replica = sequences / max(1, world // tp)
    tokens = per_replica * (prompt_tokens + response_tokens)
    compute = 2 * p * tokens / (tp * acc.bf16_tflops * 1e12 * MFU)
    hbm = acc.hbm_tbps * 1e12 * HBM_EFFICIENCY
    collectives = 2 * spec.layers if tp > 1 else 0
    decode_floor = max_response * (2 * p / tp / hbm + collectives * TP_COLLECTIVE_LATENCY_S)
    nvlink = acc.nvlink_gbps * GB * NVLINK_EFFICIENCY
    tp_traffic = collectives * tokens * spec.hidden * 2 * 2 * (tp - 1) / tp / nvlink if tp > 1 else 0.0
    context = prompt_tokens + response_tokens / 2
    kv_reads = per_replica * response_tokens * context * memory.kv_bytes_per_token(spec, tp) / hbm
    return max(compute, decode_floor) + tp_traffic + kv_reads


def step_time(g: GrpoSettings, spec: ModelSpec, acc: Accelerator, nnodes: int,
              data: DatasetFacts = GSM8K) -> StepTime:
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
    c = collectives(spec, acc, lay)
    # verl always offloads the reference: its fp32 shard comes in over PCIe once per micro-batch.
    offload = 4 * p / lay.shard / (PCIE_GBPS * GB)
    ref_s = ref * (c.gather_s + offload) + _pass_seconds(2 * p * tokens, acc) if g.kl_loss_coef > 0 else 0.0
    return StepTime(
        generation=generation_seconds(spec, acc, world, g.tensor_parallel_size, samples, prompt, response,
                                      g.max_response_length),
        weight_sync=c.sync_s,
        old_log_prob=_pass_seconds(2 * p * tokens, acc) + old * c.gather_s,
        reference=ref_s,
        update=_pass_seconds(8 * p * tokens, acc) + update * (2 * c.gather_s + c.reduce_s + c.replica_s),
        overhead=STEP_OVERHEAD_S,
        micro_batches={"old_log_prob": old, "reference": ref if g.kl_loss_coef > 0 else 0, "update": update},
    )


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
    ckpt_gb = checkpoint_gb(g, spec, acc, nnodes)
    model_gb = HF_BYTES_PER_PARAM * spec.params / GB
    st = step_time(g, spec, acc, nnodes, data)
    prompt = min(data.mean_prompt_tokens, g.max_prompt_length)
    response = min(data.mean_response_tokens, g.max_response_length)
    val_s = generation_seconds(spec, acc, world, g.tensor_parallel_size, data.val_rows, prompt, response,
                               g.max_response_length) + STEP_OVERHEAD_S
    validations = (1 if g.val_before_train else 0)
    if g.test_freq > 0 and total:
        validations += total // g.test_freq + (1 if total % g.test_freq else 0)  # and after the last step
    run_hours = (total * st.total + validations * val_s) / 3600
    samples = g.train_batch_size * g.rollout_n
    breakdown = {k: round(v, 2) for k, v in asdict(st).items() if isinstance(v, float)}
    return RunSizing(
        steps_per_epoch=steps_per_epoch, total_epochs=g.total_epochs, total_steps=total,
        updates_per_step=max(1, g.train_batch_size // g.ppo_mini_batch_size),
        rollout_sequences_per_step=samples,
        rollout_tokens_per_step=round(samples * (prompt + response)),
        rollout_tokens_per_step_max=samples * (g.max_prompt_length + g.max_response_length),
        checkpoint_gb=ckpt_gb, checkpoints_saved=saved, checkpoints_kept=kept, model_gb=model_gb,
        bucket_gb=model_gb + kept * ckpt_gb + data.data_gb,
        est_step_seconds=st.total, est_step_breakdown=breakdown, validations=validations,
        est_validation_seconds=val_s, est_run_hours=run_hours, gpus=world, gpu_hours=world * run_hours,
        steps_cap=g.total_training_steps if capped else 0,
    )


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
