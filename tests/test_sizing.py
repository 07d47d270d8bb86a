"""Run sizing: steps, checkpoints, bucket space, GPU-hours and the step-time estimate."""

from __future__ import annotations

import dataclasses

import pytest

from catalog.accelerators import ACCELERATORS
from catalog.models import model_spec
from recipe import sizing
from stacks import config

BASE = {"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}


def load(**keys: str) -> config.StackConfig:
    return config.load({**BASE, **{f"verl-gke:{k}": v for k, v in keys.items()}}, "s")


def test_steps_follow_verls_dataloader():
    # 7473 GSM8K rows // 256 prompts = 29 full batches (drop_last); 2 epochs.
    z = sizing.run_sizing(load())
    assert (z.steps_per_epoch, z.total_steps, z.updates_per_step) == (29, 58, 4)
    assert z.rollout_sequences_per_step == 256 * 8
    assert z.rollout_tokens_per_step_max == 256 * 8 * (512 + 1024)
    assert z.rollout_tokens_per_step == 256 * 8 * (100 + 270)


def test_the_plan_names_the_cap_that_ends_the_run_before_its_epochs():
    """"116 per epoch x 1 = 20" read as arithmetic gone wrong: the plan names grpoTotalTrainingSteps."""
    from tools import plan

    capped = sizing.run_sizing(load(grpoTrainBatchSize="64", grpoTotalEpochs="1", grpoTotalTrainingSteps="20"))
    assert (capped.steps_per_epoch, capped.total_steps, capped.steps_cap) == (116, 20, 20)
    assert plan._steps(capped.as_dict()) == "116 per epoch x 1 = 116, capped at 20 by verl-gke:grpoTotalTrainingSteps"
    # A cap the epochs never reach changes nothing, and says nothing.
    loose = sizing.run_sizing(load(grpoTotalTrainingSteps="1000"))
    assert (loose.total_steps, loose.steps_cap) == (58, 0)
    assert plan._steps(loose.as_dict()) == "29 per epoch x 2 = 58"


def test_checkpoints_count_the_last_step_and_the_keep_limit():
    cfg = load(grpoSaveFreq="30", grpoSaveContents="full")  # save_freq 30 over 58 steps: 30 and the last (58)
    z = sizing.run_sizing(cfg)
    params = model_spec(cfg.model).params
    assert z.checkpoint_gb == pytest.approx(12 * params / 1e9)  # fp32 model + Adam m, v
    assert (z.checkpoints_saved, z.checkpoints_kept) == (2, 2)  # steps 30 and 58 (every grpoSaveFreq 30, and the last)
    assert z.bucket_gb == pytest.approx(2 * params / 1e9 + 2 * z.checkpoint_gb + sizing.DATA_GB)
    assert sizing.run_sizing(load(grpoMaxCheckpointsToKeep="10", grpoSaveFreq="10")).checkpoints_kept == 6
    assert sizing.run_sizing(load(grpoSaveFreq="-1", jobMergeModel="false")).checkpoints_saved == 0
    # Model-only checkpoints (grpoSaveContents): the fp32 shards alone, a third of the bytes.
    assert sizing.run_sizing(load(grpoSaveContents="model")).checkpoint_gb == pytest.approx(4 * params / 1e9)


def test_gpu_hours_are_gpus_times_the_run():
    z = sizing.run_sizing(load())
    assert z.gpus == 16
    assert z.gpu_hours == pytest.approx(16 * z.est_run_hours)
    assert z.est_run_hours == pytest.approx((58 * z.est_step_seconds + z.validations * z.est_validation_seconds) / 3600)
    assert z.validations == 1 + 6  # before training, every 10 steps and after the last
    assert z.estimate_note.startswith("ESTIMATE")


def test_each_tuned_setting_shortens_the_estimate():
    cfg = load(accelerator="h200")
    g, spec, acc = cfg.grpo, model_spec(cfg.model), cfg.accelerator
    tuned = sizing.step_time(g, spec, acc, 2).total
    for change in ({"use_remove_padding": False}, {"use_dynamic_bsz": False}):
        assert sizing.step_time(dataclasses.replace(g, **change), spec, acc, 2).total > tuned, change
    # More micro-batches mean more FSDP all-gathers across nodes.
    small = dataclasses.replace(g, use_dynamic_bsz=False, ref_log_prob_micro_batch_size_per_gpu=1)
    assert sizing.step_time(small, spec, acc, 2).reference > sizing.step_time(
        dataclasses.replace(small, ref_log_prob_micro_batch_size_per_gpu=16), spec, acc, 2).reference


def test_b200_is_faster_than_h200_and_weights_sync_over_rdma():
    b, h = load(accelerator="b200"), load(accelerator="h200")
    spec = model_spec(b.model)
    assert sizing.step_time(b.grpo, spec, ACCELERATORS["b200"], 2).total < sizing.step_time(
        h.grpo, spec, ACCELERATORS["h200"], 2).total
    st = sizing.step_time(dataclasses.replace(b.grpo, fsdp_size=-1), spec, ACCELERATORS["b200"], 2)
    # verl syncs the fp32 master weights (DTensor.full_tensor of the fp32 shards): 4 bytes a parameter,
    # over 16 GPUs on two nodes at 8 NICs x 45 GB/s (below NVLink's 630 GB/s bus bandwidth), one
    # collective per state_dict entry (771 for 32B), two empty-cache calls, vLLM's wake-up and its release.
    per_tensor = (sizing.SYNC_DISPATCH_S_PER_TENSOR.expected + sizing.SYNC_COLLECTIVE_LATENCY_S.expected
                  + sizing.SYNC_LOAD_S_PER_TENSOR.expected)
    assert sizing.weight_sync_tensors(spec) == 771
    assert st.weight_sync == pytest.approx(4 * spec.params * 15 / 16 / (8 * 45e9) + 771 * per_tensor
                                           + 2 * sizing.SYNC_EMPTY_CACHE_S.expected + sizing.SYNC_WAKE_S.expected
                                           + sizing.SYNC_RELEASE_S.expected)


def test_collectives_count_the_network_from_the_topology():
    spec, b200 = model_spec("Qwen/Qwen2.5-32B-Instruct"), ACCELERATORS["b200"]
    full, hsdp = sizing.layouts(b200, 2)
    assert (full.fsdp_size, full.shard, full.replicas) == (-1, 16, 1)
    assert (hsdp.fsdp_size, hsdp.shard, hsdp.replicas) == (8, 8, 2)
    cf, ch = sizing.collectives(spec, b200, full), sizing.collectives(spec, b200, hsdp)
    assert cf.internode_share == pytest.approx(1 / 8) and ch.internode_share == 0  # HSDP gathers stay in the node
    assert cf.gather_s == pytest.approx(2 * spec.params * 15 / 16 / (8 * 45e9))  # one ring per NIC
    assert ch.gather_s == pytest.approx(2 * spec.params * 7 / 8 / (900 * 0.7e9))  # NVLink
    assert cf.replica_bytes == 0
    assert ch.replica_s == pytest.approx(2 * (4 * spec.params / 8) * 1 / 2 / 45e9)  # one rail per GPU
    # H200: 8 x 45 GB/s of NICs exceed NVLink's 315 GB/s bus bandwidth, so NVLink caps both.
    h200 = ACCELERATORS["h200"]
    assert sizing.bus_gbps(h200, 2) == sizing.bus_gbps(h200, 1) == pytest.approx(450 * 0.7)
    assert sizing.layouts(b200, 1) == [sizing.layout(b200, 1, -1)]


def test_hsdp_checkpoints_hold_a_copy_per_replica():
    cfg = load()
    full = sizing.sizing(dataclasses.replace(cfg.grpo, fsdp_size=-1), model_spec(cfg.model), cfg.accelerator, 2)
    hsdp = sizing.sizing(dataclasses.replace(cfg.grpo, fsdp_size=8), model_spec(cfg.model), cfg.accelerator, 2)
    assert hsdp.checkpoint_gb == pytest.approx(2 * full.checkpoint_gb)
