"""The memory model: calibration against measured peaks, cited verl configurations, the refusal and the warning."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from catalog.accelerators import ACCELERATORS, GiB
from catalog.models import MODELS, model_spec
from stacks import config, grpo, memory, tuning

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION = json.loads((ROOT / "bench" / "memory_calibration.json").read_text())
H200_CAPACITY_GIB = 139.80  # torch's "total capacity" in the calibration run's OOM messages
BASE = {"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}
# Optimizer-step transient per parameter, measured (bench/memory_calibration_fit.txt).
STEP_BYTES = {"foreach": 4.0, "fused": 0.0}


def spec_of(size: str):
    return model_spec(f"Qwen/Qwen2.5-{size.removesuffix('B')}B")


def oom_demand_gib(row: dict) -> float:
    """What PyTorch wanted when it failed: allocated + the failed request (torch's OOM message)."""
    tried = float(re.search(r"Tried to allocate ([0-9.]+) GiB", row["error"]).group(1))
    allocated = float(re.search(r"([0-9.]+) GiB is allocated by PyTorch", row["error"]).group(1))
    return tried + allocated


def test_the_calibration_covers_three_token_budgets_per_model_from_half_a_b_to_7b():
    budgets: dict[str, set[int]] = {}
    for row in CALIBRATION["cases"]:
        budgets.setdefault(row["model"], set()).add(row["tokens"])
    assert {m for m, t in budgets.items() if len(t) >= 3} >= {"0.5B", "1.5B", "3B", "7B"}


def test_catalog_figures_are_the_measured_models():
    for row in CALIBRATION["cases"]:
        if "n_params" in row:
            spec = spec_of(row["model"])
            assert (spec.params, spec.hidden, spec.layers, spec.vocab, spec.intermediate, spec.tied) == (
                row["n_params"], row["hidden_size"], row["num_hidden_layers"], row["vocab_size"],
                row["intermediate_size"], row["tie_word_embeddings"]), row["model"]


@pytest.mark.parametrize("row", CALIBRATION["cases"], ids=lambda r: f"{r['model']}-{r['tokens']}-{r['optim']}")
def test_training_terms_land_within_15_percent_of_every_measured_peak(row):
    spec = spec_of(row["model"])
    predicted = memory.update_peak_bytes(spec, row["tokens"], 1, STEP_BYTES[row["optim"]]) / GiB
    if row["status"] == "ok":
        measured = row["peak_allocated"] / GiB
    elif predicted > H200_CAPACITY_GIB:
        return  # out of memory, as predicted
    else:  # out of memory below capacity (fragmentation): the demand at failure bounds the peak from below
        measured = oom_demand_gib(row)
    assert abs(predicted / measured - 1) <= 0.15, (predicted, measured)


def test_the_model_refuses_what_ran_out_of_memory_on_one_h200():
    """Measured (bench/memory_calibration.json): 7B with foreach AdamW, and 7B fused at 16384 tokens,
    died on a 139.8 GiB H200; 7B fused at 2048 and 8192 tokens ran."""
    spec = spec_of("7B")
    budget = H200_CAPACITY_GIB - memory.NON_TORCH_GIB

    def fits(tokens: int, optim: str) -> bool:
        return memory.update_peak_bytes(spec, tokens, 1, STEP_BYTES[optim]) / GiB * (1 + memory.FRAGMENTATION) <= budget
    assert not fits(2048, "foreach") and not fits(16384, "fused")
    assert fits(2048, "fused") and fits(8192, "fused")


# ---------------------------------------------------------------------------------------------
# verl's documented configurations and its out-of-memory reports (verl v0.6.1 examples; issues on
# github.com/volcengine/verl). GPU capacities: 80 GB class = 79.14 GiB (torch's figure quoted in
# verl issue #3366); Ascend 910B = 64 GB. Qwen2-7B shares Qwen2.5-7B's architecture (config.json:
# 28 layers, 3584 hidden, 18944 intermediate, 28/4 heads, vocab 152064).
# ---------------------------------------------------------------------------------------------
GPU_80GB, NPU_64GB = 79.14, 64e9 / GiB
GSM8K_SEQ = grpo.MEAN_PROMPT_TOKENS + grpo.MEAN_RESPONSE_TOKENS  # unpadded sequence (remove padding on)


def inputs(world, gpu, tp, util, train, logprob, sequences, model_len, ref_on_gpu=False):
    return memory.MemoryInputs(world=world, gpu_gib=gpu, tp=tp, gpu_memory_utilization=util, train_tokens=train,
                               logprob_tokens=logprob, ref_on_gpu=ref_on_gpu, rollout_sequences=sequences,
                               max_model_len=model_len)


CITED = {
    # examples/grpo_trainer/run_qwen2-7b.sh: 1 x 8 GPUs, GSM8K, micro 40 with remove padding, TP 2, 0.6,
    # ref offloaded, 1024 prompts x n 5, prompt 512 + response 1024.
    "run_qwen2-7b.sh": ("7B", inputs(8, GPU_80GB, 2, 0.6, 40 * GSM8K_SEQ, 40 * GSM8K_SEQ, 5120, 1536), True),
    # examples/grpo_trainer/run_qwen2-7b_seq_balance.sh: dynamic batch size at 24000 tokens per GPU.
    "run_qwen2-7b_seq_balance.sh": ("7B", inputs(8, GPU_80GB, 2, 0.6, 24000, 24000, 5120, 1536), True),
    # examples/grpo_trainer/run_qwen2_5_7b_grpo_npu.sh: 16 NPUs, micro 2 padded to 1024 + 1024, TP 4, 0.3.
    "run_qwen2_5_7b_grpo_npu.sh": ("7B", inputs(16, NPU_64GB, 4, 0.3, 2 * 2048, 2 * 2048, 5120, 2048), True),
    # examples/grpo_trainer/run_qwen2_5_32b_grpo_npu.sh: 2 x 16 NPUs, micro 2 padded, TP 8, 0.4.
    "run_qwen2_5_32b_grpo_npu.sh": ("32B", inputs(32, NPU_64GB, 8, 0.4, 2 * 2048, 2 * 2048, 5120, 2048), True),
    # verl issue #855: R1-Distill-Qwen-14B (Qwen2.5-14B architecture), 8 x H100 80 GB, dynamic batch size
    # 24000 tokens, no actor offload, TP 8: out of memory (even with the reference offloaded, as here).
    "issue-855-14b-8xh100": ("14B", inputs(8, GPU_80GB, 8, 0.5, 24000, 24000, 1024 * 5, 1024), False),
    # verl issue #249: Qwen2.5-72B on 2 x 8 A800 80 GB, micro batches 1, prompt 512 + response 256, TP 8,
    # gpu_memory_utilization 0.4 as the reporter quotes: out of memory "in the vllm stage".
    "issue-249-72b-16xa800": ("72B", inputs(16, GPU_80GB, 8, 0.4, 768, 768, 64, 768), False),
}


@pytest.mark.parametrize("name", list(CITED))
def test_cited_configurations(name):
    size, m, runs = CITED[name]
    b = memory.breakdown(spec_of(size), m)
    assert b.fits is runs, b.as_dict()


def test_issue_249_fails_in_the_rollout_as_reported():
    # The rollout comes first in a step, so that is where it dies (the update would not fit either).
    size, m, _ = CITED["issue-249-72b-16xa800"]
    assert not memory.breakdown(spec_of(size), m).rollout_fits


def test_issue_855_fails_in_the_update():
    size, m, _ = CITED["issue-855-14b-8xh100"]
    assert not memory.breakdown(spec_of(size), m).update_fits


def test_kv_cache_formula():
    # 2 (K, V) x layers x KV heads per rank x head_dim x 2 bytes: 7B at TP 1 = 56 KiB, 32B = 256 KiB.
    assert memory.kv_bytes_per_token(spec_of("7B"), 1) == 57344
    assert memory.kv_bytes_per_token(spec_of("32B"), 1) == 262144
    assert memory.kv_bytes_per_token(spec_of("32B"), 8) == 262144 // 8
    # 0.5B has 2 KV heads: at TP 4 each rank keeps a replicated head, not half of one.
    assert memory.kv_bytes_per_token(spec_of("0.5B"), 4) == memory.kv_bytes_per_token(spec_of("0.5B"), 2)


def test_sharded_terms_divide_by_the_world_size():
    spec = spec_of("32B")
    one = memory.breakdown(spec, inputs(8, 139.8, 4, 0.6, 8192, 8192, 2048, 1024))
    two = memory.breakdown(spec, inputs(16, 139.8, 4, 0.6, 8192, 8192, 2048, 1024))
    assert two.actor_weights == pytest.approx(one.actor_weights / 2)
    assert two.adam_state == pytest.approx(one.adam_state / 2)
    assert two.train_logits == one.train_logits  # activations are per GPU micro-batch, not sharded
    assert one.extrapolated and not memory.breakdown(spec_of("7B"), inputs(8, 139.8, 2, 0.6, 1, 1, 8, 8)).extrapolated


def test_reference_on_gpu_costs_its_fp32_shard():
    spec = spec_of("7B")
    off = memory.breakdown(spec, inputs(8, 139.8, 2, 0.6, 8192, 8192, 2048, 1024))
    on = memory.breakdown(spec, inputs(8, 139.8, 2, 0.6, 8192, 8192, 2048, 1024, ref_on_gpu=True))
    assert on.ref_weights == pytest.approx(4 * spec.params / 8 / GiB)
    assert on.update_peak - off.update_peak == pytest.approx(on.ref_weights)
    assert on.rollout_resident - off.rollout_resident == pytest.approx(on.ref_weights)


# ---------------------------------------------------------------------------------------------
# The gate: stacks.config.load refuses what does not fit, naming the key and the numbers.
# ---------------------------------------------------------------------------------------------
def raw(**keys: object) -> dict[str, str]:
    return {**BASE, **{f"verl-gke:{k}": (json.dumps(v) if not isinstance(v, str) else v) for k, v in keys.items()}}


def test_the_shipped_defaults_fit_on_both_accelerators():
    # The key defaults are the 32B recipe for the 8-GPU machines; the 2 x L4 dev stack sets its own
    # settings (tests/test_l4_smoke.py checks that they fit).
    for acc in (a for a in ACCELERATORS if ACCELERATORS[a].gpus_per_node == 8):
        cfg = config.load(raw(accelerator=acc), "s")
        spec = model_spec(cfg.model)
        assert grpo.memory_breakdown(cfg.grpo, spec, cfg.accelerator, cfg.total_gpus).fits


def test_a_token_budget_too_large_is_refused_naming_the_key():
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(accelerator="h200", grpoPpoMaxTokenLenPerGpu=65536), "s")
    (problem,) = [p for p in err.value.problems if "grpoPpoMaxTokenLenPerGpu" in p]
    assert problem.startswith("verl-gke:grpoPpoMaxTokenLenPerGpu = 65536: the actor update needs")
    assert "GiB per GPU" in problem and "136.8 GiB per GPU for PyTorch" in problem and "logits" in problem


def test_one_node_of_32b_with_the_reference_on_gpu_and_a_big_pool_is_refused():
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(accelerator="h200", gpuNodes=1, grpoRefParamOffload="false", grpoGpuMemoryUtilization="0.85"),
                    "s")
    text = str(err.value)
    assert "verl-gke:grpoGpuMemoryUtilization = 0.85: the rollout needs" in text
    assert "set verl-gke:grpoRefParamOffload = true" in text


def test_without_dynamic_batching_the_micro_batch_is_named():
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(accelerator="h200", gpuNodes=1, grpoUseDynamicBsz=False, grpoUseRemovePadding=False,
                        grpoPpoMiniBatchSize=256, grpoPpoMicroBatchSizePerGpu=256), "s")
    assert any(p.startswith("verl-gke:grpoPpoMicroBatchSizePerGpu = 256: the actor update needs")
               for p in err.value.problems), err.value.problems


def test_a_kv_cache_smaller_than_a_rollout_batch_warns():
    cfg = config.load(raw(accelerator="h200", gpuNodes=1, grpoGpuMemoryUtilization="0.3", grpoTensorParallelSize=4),
                      "s")
    (warning,) = cfg.warnings
    assert warning.startswith("verl-gke:grpoGpuMemoryUtilization = 0.3: each vLLM replica's KV cache holds")
    assert not config.load(raw(accelerator="h200"), "s").warnings


# ---------------------------------------------------------------------------------------------
# Derived defaults (stacks.tuning)
# ---------------------------------------------------------------------------------------------
def test_token_budgets_follow_the_lengths_and_fit():
    for prompt, response in ((512, 512), (1024, 1024), (256, 768)):
        cfg = config.load(raw(accelerator="h200", grpoMaxPromptLength=prompt, grpoMaxResponseLength=response,
                              grpoRolloutN=4), "s")
        g, seq = cfg.grpo, prompt + response
        assert g.ppo_max_token_len_per_gpu % seq == 0 and g.ppo_max_token_len_per_gpu >= 2 * seq
        assert g.ppo_max_token_len_per_gpu <= max(2 * seq, tuning.TRAIN_TOKEN_CAP)
        assert g.log_prob_max_token_len_per_gpu % seq == 0
        bigger = dataclasses.replace(g, ppo_max_token_len_per_gpu=g.ppo_max_token_len_per_gpu + seq)
        spec = model_spec(cfg.model)
        if bigger.ppo_max_token_len_per_gpu <= tuning.TRAIN_TOKEN_CAP:  # memory stopped it: one more does not fit
            assert not grpo.memory_breakdown(bigger, spec, cfg.accelerator, cfg.total_gpus).update_fits


def test_tp_is_the_smallest_that_fits_and_explicit_values_win():
    assert config.load(raw(accelerator="h200"), "s").grpo.tensor_parallel_size == 2  # 32B: 2 x 32 GB of weights
    assert config.load(raw(model="Qwen/Qwen2.5-7B-Instruct"), "s").grpo.tensor_parallel_size == 1
    # 72B in bf16 is 145 GB: on 140 GiB H200s at 0.6 it needs 4 GPUs (36 GB each) to leave half the pool.
    assert config.load(raw(accelerator="h200", model="Qwen/Qwen2.5-72B-Instruct", gpuNodes=4,
                           grpoTrainBatchSize=64), "s").grpo.tensor_parallel_size == 4
    pinned = config.load(raw(accelerator="h200", grpoTensorParallelSize=8, grpoPpoMiniBatchSize=128,
                             grpoPpoMaxTokenLenPerGpu=8192, grpoRefParamOffload="false"), "s").grpo
    assert (pinned.tensor_parallel_size, pinned.ppo_mini_batch_size, pinned.ppo_max_token_len_per_gpu,
            pinned.ref_param_offload) == (8, 128, 8192, False)


def test_reference_offload_is_derived_from_size():
    assert config.load(raw(), "s").grpo.ref_param_offload is True  # 32B
    assert config.load(raw(model="Qwen/Qwen2.5-1.5B-Instruct"), "s").grpo.ref_param_offload is False


def test_an_uncatalogued_model_needs_explicit_sizes():
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(model="acme/Frobnicator-7B"), "s")
    assert {p.split(" ")[0] for p in err.value.problems} == {
        "verl-gke:grpoTensorParallelSize", "verl-gke:grpoPpoMaxTokenLenPerGpu", "verl-gke:grpoLogProbMaxTokenLenPerGpu"}
    cfg = config.load(raw(model="acme/Frobnicator-7B", grpoTensorParallelSize=4, grpoPpoMaxTokenLenPerGpu=16384,
                          grpoLogProbMaxTokenLenPerGpu=16384), "s")
    assert cfg.grpo.ref_param_offload is True and cfg.warnings == ()


def test_every_catalogued_model_has_its_architecture():
    for name, spec in MODELS.items():
        assert spec.hidden % spec.attention_heads == 0 and spec.attention_heads % spec.kv_heads == 0, name
        assert spec.source.startswith("huggingface.co/"), name
