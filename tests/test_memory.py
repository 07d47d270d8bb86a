"""The memory model: calibration against measured peaks, cited verl configurations, the refusal and the warning."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from catalog.accelerators import ACCELERATORS, GiB
from catalog.models import MODELS, model_spec
from recipe import grpo, memory, tuning
from stacks import config

ROOT = Path(__file__).resolve().parent.parent
# verl's FSDP2 path on one H200 (bench/memory_calibration.py run_case_fsdp2).
CALIBRATION = json.loads((ROOT / "bench" / "memory_calibration_fsdp2.json").read_text())
OK = [r for r in CALIBRATION["cases"] if r["status"] == "ok"]
H200_CAPACITY_GIB = 139.80  # torch total_memory in the calibration run (gpu_total_bytes)
BASE = {"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}
STEP_BYTES = {"foreach": memory.OPTIMIZER_STEP_BYTES, "fused": 0.0}


def spec_of(size: str):
    return model_spec(f"Qwen/Qwen2.5-{size.removesuffix('B')}B")


def case_id(r: dict) -> str:
    return f"{r['model']}-{r['tokens']}-entropy{int(r['entropy'])}{'' if r['entropy_compiled'] else '-eager'}"


def test_the_calibration_covers_three_token_budgets_per_model_entropy_on_and_off():
    budgets: dict[tuple[str, bool], set[int]] = {}
    for row in OK:
        if row["entropy_compiled"]:
            budgets.setdefault((row["model"], row["entropy"]), set()).add(row["tokens"])
    for model in ("0.5B", "1.5B", "3B", "7B"):
        assert len(budgets[(model, False)]) >= 3 and len(budgets[(model, True)]) >= 3, model
    assert CALIBRATION["gpu"] == "NVIDIA H200" and CALIBRATION["torch"] and CALIBRATION["date"]
    assert CALIBRATION["gpu_total_bytes"] / GiB == pytest.approx(H200_CAPACITY_GIB, abs=0.01)
    assert ACCELERATORS["h200"].gpu_memory_gib == pytest.approx(H200_CAPACITY_GIB, abs=0.01)


def test_catalog_figures_are_the_measured_models():
    for row in OK:
        spec = spec_of(row["model"])
        assert (spec.params, spec.hidden, spec.layers, spec.vocab, spec.intermediate, spec.tied) == (
            row["n_params"], row["hidden_size"], row["num_hidden_layers"], row["vocab_size"],
            row["intermediate_size"], row["tie_word_embeddings"]), row["model"]


@pytest.mark.parametrize("row", OK, ids=case_id)
def test_every_measured_peak_is_predicted_between_5_under_and_15_over(row):
    """The check is on the reserved peak: what the caching allocator holds, so what runs out."""
    spec, eager = spec_of(row["model"]), not row["entropy_compiled"]
    update = memory.update_peak_bytes(spec, row["tokens"], 1, optimizer_step=STEP_BYTES[row["optim"]],
                                      entropy_eager=eager and row["entropy"])
    logprob = memory.logprob_peak_bytes(spec, row["tokens"], 1, entropy_eager=eager)
    assert -0.05 <= update / row["update2_peak_reserved"] - 1 <= 0.15
    assert -0.05 <= logprob / row["logprob_peak_reserved"] - 1 <= 0.15
    assert row["update2_peak_reserved"] >= row["update2_peak_allocated"]


def test_the_calibration_scripts_fit_check_passes_on_the_committed_table():
    from bench import memory_calibration

    result = memory_calibration.fit_fsdp2(str(ROOT / "bench" / "memory_calibration_fsdp2.json"))
    assert result["ok"] and result["under"] >= -0.05 and result["over"] <= 0.15


def test_compiled_entropy_costs_nothing_and_eager_entropy_costs_what_was_measured():
    """verl compiles entropy_from_logits by default: measured peaks are the same with entropy on and off.
    Uncompiled (actor.use_torch_compile=false) it adds ~20 bytes per token x vocab to the update."""
    by = {(r["model"], r["tokens"], r["entropy"], r["entropy_compiled"]): r for r in OK}
    for (model, tokens, entropy, compiled), r in by.items():
        if entropy and compiled and (model, tokens, False, True) in by:
            off = by[(model, tokens, False, True)]
            assert r["update2_peak_allocated"] == pytest.approx(off["update2_peak_allocated"], rel=1e-3)
    eager = by[("1.5B", 16384, True, False)]
    assert eager["update2_peak_allocated"] > 2 * by[("1.5B", 16384, True, True)]["update2_peak_allocated"]
    spec = spec_of("1.5B")
    assert memory.update_peak_bytes(spec, 16384, entropy_eager=True) > 2 * memory.update_peak_bytes(spec, 16384)


def test_the_model_refuses_on_one_h200_what_would_not_fit():
    """7B with foreach AdamW cannot hold its 20 bytes per parameter on 139.8 GiB; fused it ran (to 12288 tokens)."""
    spec = spec_of("7B")
    budget = H200_CAPACITY_GIB - memory.NON_TORCH_GIB

    def fits(tokens: int, optim: str) -> bool:
        peak = memory.update_peak_bytes(spec, tokens, 1, optimizer_step=STEP_BYTES[optim])
        return peak / GiB * (1 + memory.FRAGMENTATION) <= budget
    assert not fits(2048, "foreach")
    assert fits(2048, "fused") and fits(4096, "fused")


# ---------------------------------------------------------------------------------------------
# verl's documented configurations and its out-of-memory reports (verl v0.6.1 examples; issues on
# github.com/volcengine/verl). GPU capacities: 80 GB class = 79.14 GiB (torch's figure quoted in
# verl issue #3366); Ascend 910B = 64 GB. Qwen2-7B shares Qwen2.5-7B's architecture (config.json:
# 28 layers, 3584 hidden, 18944 intermediate, 28/4 heads, vocab 152064).
# ---------------------------------------------------------------------------------------------
GPU_80GB, NPU_64GB = 79.14, 64e9 / GiB
GSM8K_SEQ = grpo.MEAN_PROMPT_TOKENS + grpo.MEAN_RESPONSE_TOKENS  # unpadded sequence (remove padding on)


def inputs(world, gpu, tp, util, train, logprob, sequences, model_len, **extra):
    return memory.MemoryInputs(world=world, gpu_gib=gpu, tp=tp, gpu_memory_utilization=util, train_tokens=train,
                               logprob_tokens=logprob, ref_loaded=True, rollout_sequences=sequences,
                               max_model_len=model_len, **extra)


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
    # verl issue #855 (14B on 8 x H100 at 24000 tokens, out of memory) is left out: it ran verl <= 0.3,
    # whose update always computed the entropy (entropy_coeff 0.001 default), compiled or eager by path
    # (dp_actor.py@v0.2.0.post2), and the report does not say which; the model follows v0.6.1's path.
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


def test_the_reference_is_never_resident_on_the_gpu():
    """verl 0.6.1 always CPU-offloads the reference (fsdp_workers.py): only its units in flight count."""
    spec = spec_of("7B")
    with_ref = memory.breakdown(spec, inputs(8, 139.8, 2, 0.6, 8192, 8192, 2048, 1024))
    without = memory.breakdown(spec, dataclasses.replace(inputs(8, 139.8, 2, 0.6, 8192, 8192, 2048, 1024),
                                                         ref_loaded=False))
    assert with_ref.rollout_resident == without.rollout_resident == pytest.approx(12 * spec.params / 8 / GiB)
    assert with_ref.update_peak == without.update_peak
    assert 0 < with_ref.logprob_peak - without.logprob_peak < 1.0  # its fp32 units copied in, not its model


def test_hsdp_shards_over_one_node_and_costs_more_memory_per_gpu():
    spec = spec_of("32B")
    full = memory.breakdown(spec, inputs(16, 139.8, 2, 0.6, 8192, 8192, 2048, 1024))
    hsdp = memory.breakdown(spec, inputs(16, 139.8, 2, 0.6, 8192, 8192, 2048, 1024, fsdp_size=8))
    assert (full.shard, hsdp.shard) == (16, 8)
    assert hsdp.adam_state == pytest.approx(2 * full.adam_state)
    assert hsdp.update_peak > full.update_peak and hsdp.rollout_resident > full.rollout_resident
    # fsdp_size >= world shards over everything, as verl's create_device_mesh reads it.
    assert memory.breakdown(spec, inputs(16, 139.8, 2, 0.6, 8192, 8192, 2048, 1024, fsdp_size=16)).shard == 16


def test_b200_capacity_is_what_cuda_reports():
    assert ACCELERATORS["b200"].gpu_memory_gib == pytest.approx(178.35)


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


def test_one_node_of_32b_with_a_big_pool_is_refused():
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(accelerator="h200", gpuNodes=1, grpoGpuMemoryUtilization="0.9"), "s")
    assert "verl-gke:grpoGpuMemoryUtilization = 0.9: the rollout needs" in str(err.value)


def test_eager_entropy_that_does_not_fit_is_refused_and_compiled_entropy_is_not():
    keys = dict(accelerator="h200", model="Qwen/Qwen2.5-7B-Instruct", gpuNodes=1, grpoEntropyCoeff="0.001",
                grpoPpoMaxTokenLenPerGpu=32768, grpoLogProbMaxTokenLenPerGpu=16384)
    config.load(raw(**keys), "s")  # compiled (verl's default): the entropy adds nothing measurable
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(**keys, grpoExtraOverrides=["actor_rollout_ref.actor.use_torch_compile=false"]), "s")
    (problem,) = [p for p in err.value.problems if p.startswith("verl-gke:grpoPpoMaxTokenLenPerGpu = 32768")]
    assert "eager entropy" in problem and "use_torch_compile=false" in problem


def _paths():
    from catalog.paths import bucket_paths
    return bucket_paths("s", "Qwen/Qwen2.5-32B-Instruct", "v0.6.1")


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
# Derived defaults (recipe.tuning)
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
                             grpoPpoMaxTokenLenPerGpu=8192, grpoFsdpSize=8), "s").grpo
    assert (pinned.tensor_parallel_size, pinned.ppo_mini_batch_size, pinned.ppo_max_token_len_per_gpu,
            pinned.fsdp_size) == (8, 128, 8192, 8)


def test_the_layout_is_the_faster_one_that_fits_and_goes_into_the_command():
    for acc in ("b200", "h200"):
        g = config.load(raw(accelerator=acc), "s").grpo
        options = {o.fsdp_size: o for o in g.layout_options}
        assert set(options) == {-1, 8}
        (chosen,) = [o for o in g.layout_options if o.chosen]
        assert chosen.fsdp_size == g.fsdp_size and chosen.fits
        fitting = [o for o in g.layout_options if o.fits]
        fastest = min(fitting, key=lambda o: o.step_seconds)
        # Full FSDP unless another layout is clearly (tuning.LAYOUT_MARGIN) faster: a flip replaces the run.
        clearly = fastest.step_seconds < fitting[0].step_seconds * (1 - tuning.LAYOUT_MARGIN)
        assert chosen == (fastest if clearly else fitting[0])
        assert options[8].checkpoint_gb == pytest.approx(2 * options[-1].checkpoint_gb, abs=0.2)  # a copy per replica
        cmd = grpo.overrides(g, stack="s", nnodes=2, gpus_per_node=8, paths=_paths())
        assert f"actor_rollout_ref.actor.fsdp_config.fsdp_size={g.fsdp_size}" in cmd
    # One node: nothing to weigh.
    one = config.load(raw(accelerator="h200", gpuNodes=1, model="Qwen/Qwen2.5-7B-Instruct"), "s").grpo
    assert one.fsdp_size == -1 and len(one.layout_options) == 1


def test_a_layout_flips_from_full_fsdp_only_when_clearly_faster():
    """A layout flip replaces the running job and changes the checkpoints' layout: an estimate a few per cent
    faster is not worth it (tuning.LAYOUT_MARGIN)."""
    from types import SimpleNamespace as Step

    full, hsdp = "full", "hsdp"
    assert tuning.pick_layout([(full, Step(step_seconds=40.0)), (hsdp, Step(step_seconds=39.0))]) == full
    assert tuning.pick_layout([(full, Step(step_seconds=40.0)), (hsdp, Step(step_seconds=30.0))]) == hsdp
    assert tuning.pick_layout([(full, Step(step_seconds=40.0)), (hsdp, Step(step_seconds=41.0))]) == full
    assert tuning.pick_layout([(hsdp, Step(step_seconds=41.0))]) == hsdp  # only one fits


def test_an_fsdp_size_that_does_not_divide_the_gpus_is_refused():
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(accelerator="h200", grpoFsdpSize=6), "s")
    assert any(p.startswith("verl-gke:grpoFsdpSize = 6: -1 (shard over all 16 GPUs) or a divisor of 16")
               for p in err.value.problems), err.value.problems


def test_an_uncatalogued_model_needs_explicit_sizes():
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(model="acme/Frobnicator-7B"), "s")
    assert {p.split(" ")[0] for p in err.value.problems} == {
        "verl-gke:grpoTensorParallelSize", "verl-gke:grpoPpoMaxTokenLenPerGpu", "verl-gke:grpoLogProbMaxTokenLenPerGpu"}
    cfg = config.load(raw(model="acme/Frobnicator-7B", grpoTensorParallelSize=4, grpoPpoMaxTokenLenPerGpu=16384,
                          grpoLogProbMaxTokenLenPerGpu=16384), "s")
    assert cfg.grpo.fsdp_size == -1 and cfg.warnings == ()


def test_every_catalogued_model_has_its_architecture():
    for name, spec in MODELS.items():
        assert spec.hidden % spec.attention_heads == 0 and spec.attention_heads % spec.kv_heads == 0, name
        assert spec.source.startswith("huggingface.co/"), name


@pytest.mark.parametrize("extra", ["actor_rollout_ref.actor.entropy_from_logits_with_chunking=true",
                                   "++actor_rollout_ref.actor.entropy_checkpointing=True"])
def test_unmeasured_entropy_paths_are_charged_as_eager_in_the_update(extra):
    """dp_actor.py's chunked and checkpointed entropy paths were not measured: the update charges them as
    the eager entropy (an upper bound), so a budget that fits only with the compiled entropy is refused."""
    keys = dict(accelerator="h200", model="Qwen/Qwen2.5-7B-Instruct", gpuNodes=1, grpoEntropyCoeff="0.001",
                grpoPpoMaxTokenLenPerGpu=32768, grpoLogProbMaxTokenLenPerGpu=16384)
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(**keys, grpoExtraOverrides=[extra]), "s")
    (problem,) = [p for p in err.value.problems if p.startswith("verl-gke:grpoPpoMaxTokenLenPerGpu = 32768")]
    assert "eager entropy" in problem and extra.lstrip("+").split("=")[0] in problem
    # Without an entropy term in the loss the update computes no entropy: nothing to charge.
    config.load(raw(**{**keys, "grpoEntropyCoeff": "0"}, grpoExtraOverrides=[extra]), "s")


def test_chunked_entropy_charges_one_chunk_in_the_log_prob_pass_and_checkpointing_none():
    spec = model_spec("Qwen/Qwen2.5-7B-Instruct")
    base = memory.MemoryInputs(world=8, gpu_gib=139.8, tp=1, gpu_memory_utilization=0.5, train_tokens=8192,
                               logprob_tokens=16384, ref_loaded=True, rollout_sequences=1024, max_model_len=1536,
                               entropy_in_update=True)
    compiled = memory.breakdown(spec, base)
    chunked = memory.breakdown(spec, dataclasses.replace(base, entropy_chunked=True))
    ckpt = memory.breakdown(spec, dataclasses.replace(base, entropy_checkpointing=True))
    eager = memory.breakdown(spec, dataclasses.replace(base, entropy_eager=True))
    row = memory.ENTROPY_EAGER_LOGPROB_BYTES * spec.vocab / GiB
    assert compiled.logprob_entropy == ckpt.logprob_entropy == 0.0  # under no_grad checkpointing is a plain call
    assert chunked.logprob_entropy == pytest.approx(memory.ENTROPY_CHUNK_ROWS * row)
    assert eager.logprob_entropy == pytest.approx(16384 * row)
    for b in (chunked, ckpt, eager):
        assert b.train_entropy == eager.train_entropy > 0 and b.update_peak > compiled.update_peak


@pytest.mark.parametrize("key", ["actor_rollout_ref.model.enable_gradient_checkpointing",
                                 "actor_rollout_ref.actor.fsdp_config.reshard_after_forward"])
def test_turning_off_what_the_calibration_ran_with_is_refused(key):
    """Both cost memory the model does not count (every layer's activations kept; every unit unsharded
    from forward to backward): refused, naming the override, rather than passed as a fit."""
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(accelerator="h200", grpoExtraOverrides=[f"{key}=False"]), "s")
    assert any(p.startswith(f"verl-gke:grpoExtraOverrides: {key}=false: the memory model") for p in err.value.problems)
    config.load(raw(accelerator="h200", grpoExtraOverrides=[f"{key}=true"]), "s")  # verl's default: fine


def test_a_model_too_big_for_its_nodes_names_gpu_nodes_not_a_derived_key():
    """72B on one B200 node: no token budget fits, and the user set none; the one problem names gpuNodes and
    the count that fits, not grpoPpoMaxTokenLenPerGpu (which they never set: lowering it fixes nothing)."""
    raw = {**BASE, "verl-gke:model": "Qwen/Qwen2.5-72B-Instruct", "verl-gke:gpuNodes": "1"}
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "b200")
    problems = err.value.problems
    assert problems[0].startswith("verl-gke:gpuNodes = 1: Qwen/Qwen2.5-72B-Instruct does not fit on 8 b200 GPUs: "
                                  "the actor update needs "), problems
    assert problems[0].endswith("2 nodes (16 GPUs) fit: set it to 2"), problems[0]
    assert not any(p.startswith(("verl-gke:grpoPpoMaxTokenLenPerGpu", "verl-gke:grpoGpuMemoryUtilization"))
                   for p in problems), problems
    config.load({**raw, "verl-gke:gpuNodes": "2"}, "b200")  # the count it names does fit


def test_a_sequence_too_long_for_any_node_count_names_the_length_not_the_model():
    """0.5B on L4 with a 7,473-token response: the logits of one sequence fill the GPU at any node count, so the
    fix is a shorter response, never gpuNodes or "a smaller model" (issue 25 review)."""
    dev = raw(accelerator="l4", model="Qwen/Qwen2.5-0.5B-Instruct", gpuNodes=1, grpoGpuMemoryUtilization="0.4")
    for key, value in (("grpoMaxResponseLength", "7473"), ("grpoMaxPromptLength", "131072")):
        with pytest.raises(config.ConfigError) as err:
            config.load({**dev, f"verl-gke:{key}": value}, "dev")
        first = err.value.problems[0]
        assert first.startswith(f"verl-gke:{key} = {value}: the actor update needs"), first
        assert "shorten the prompt or response" in first and "smaller model" not in first, first
        assert not any(p.startswith("verl-gke:gpuNodes") for p in err.value.problems), err.value.problems


def test_a_shard_group_the_stack_set_is_named_not_gpu_nodes():
    """grpoFsdpSize = 2 keeps the 32B actor's state on 2 GPUs at any node count: the message says shard wider
    (grpoFsdpSize), not "no count of gpuNodes fits: choose a smaller model"."""
    with pytest.raises(config.ConfigError) as err:
        config.load(raw(gpuNodes=2, grpoFsdpSize=2), "b200")
    assert not any(p.startswith("verl-gke:gpuNodes") for p in err.value.problems), err.value.problems
    assert any("shard wider (verl-gke:grpoFsdpSize = -1)" in p for p in err.value.problems), err.value.problems


def test_a_budget_the_user_set_is_still_the_key_named():
    raw = {**BASE, "verl-gke:model": "Qwen/Qwen2.5-72B-Instruct", "verl-gke:gpuNodes": "1",
           "verl-gke:grpoPpoMaxTokenLenPerGpu": "3072"}
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "b200")
    assert err.value.problems[0].startswith("verl-gke:grpoPpoMaxTokenLenPerGpu = 3072: the actor update needs")


def test_the_plan_prints_the_kv_cache_warning_once(tmp_path, capsys):
    """The KV-cache warning was printed by the program under the plan's mocks, again for the other cluster
    mode's admission plan, in the report and at the end: four times. Now once, and the program's own
    pulumi.log.warn (what `pulumi up` shows) is recorded by the mocks."""
    from tools import mocking, plan
    from tools.plan import ROOT as REPO

    text = (REPO / "Pulumi.b200.yaml").read_text()
    stack = tmp_path / "Pulumi.b200.yaml"
    stack.write_text(text + "  verl-gke:grpoGpuMemoryUtilization: '0.2'\n  verl-gke:grpoRolloutN: 16\n")
    assert plan.main(["--stack", "b200", "--config", str(stack), "--out", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    assert (out + err).count("KV cache holds") == 1, out + err
    assert "warning: verl-gke:grpoGpuMemoryUtilization = 0.2: each vLLM replica's KV cache holds" in err

    raw, secrets = plan.read_stack_file(stack)
    run = mocking.run(lambda: __import__("stacks.compose", fromlist=["program"]).program(True), raw, "b200", secrets)
    assert [m for level, m in run.logs if level == "warning" and "KV cache holds" in m], run.logs


def test_the_plan_still_prints_what_else_the_program_logs(tmp_path, capsys):
    """The mocks record pulumi.log instead of printing it (the KV-cache warning above): a warning the config
    does not hold (a quota lookup's non-fatal finding, stacks.preflight.verdict) or an error must still reach
    the reader, once. A region outside the sample project's quotas leaves them without a value."""
    from tools import plan
    from tools.plan import ROOT as REPO

    text = (REPO / "Pulumi.dev.yaml").read_text()
    stack = tmp_path / "Pulumi.dev.yaml"
    lines = [("  gcp:region: asia-east1" if line.startswith("  gcp:region:") else
              "  gcp:zone: asia-east1-a" if line.startswith("  gcp:zone:") else line) for line in text.splitlines()]
    stack.write_text("\n".join(lines) + "\n")
    assert plan.main(["--stack", "dev", "--config", str(stack), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    _, err = capsys.readouterr()
    line = ("warning: preflight: gcp:project: quota STATIC-ADDRESSES-per-project-region (region=asia-east1) has no "
            "value for this project; not checked")
    assert err.count(line) == 1, err


def test_program_messages_keep_errors_and_drop_what_the_plan_prints():
    from tools.plan import program_messages

    logs = [("info", "GKE version x"), ("warning", "config said"), ("warning", "preflight: a"),
            ("warning", "preflight: a"), ("error", "boom")]
    assert program_messages(logs, ("config said",)) == ["preflight: a", "error: boom"]


def test_the_benchmark_builds_its_models_from_the_catalog_s_one_table():
    """Issue 25: bench/memory_calibration.py held a second copy of the Qwen2.5 table. It reads catalog/models.py,
    and what it builds is what both measured tables recorded (the calibration stays the catalog's)."""
    from bench import memory_calibration as bench

    assert "hidden_size=896" not in (ROOT / "bench" / "memory_calibration.py").read_text()  # no second table
    for name in ("memory_calibration.json", "memory_calibration_fsdp2.json"):
        recorded = json.loads((ROOT / "bench" / name).read_text())["configs"]
        assert set(recorded) == set(bench.CALIBRATED)
        for size, cfg in recorded.items():
            built = bench.QWEN25_CONFIGS[size]
            assert {k: built[k] for k in bench.ARCH_KEYS} == {k: cfg[k] for k in bench.ARCH_KEYS}, (name, size)
            assert bench.param_count(built) == model_spec(f"Qwen/Qwen2.5-{size}-Instruct").params
