"""Issue #47: the step model's constants sourced, the whole run's hours and dollars as ranges, checked against
published runs; issue #48's harness and comparison code."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from bench import compare_x8, memory_calibration, published_runs, step_calibration
from catalog import phases
from catalog.accelerators import ACCELERATORS
from catalog.models import model_spec
from recipe import sizing
from stacks import config, run_time
from tests import docs
from tests.stack_helpers import ROOT
from tools import plan

GS_TRAIN, GS_VAL = "gs://their-data/sets/train.parquet", "gs://their-data/sets/val.parquet"


def planned(stack: str, tmp_path, capsys, config_path=None) -> tuple[dict, str, str]:
    args = ["--stack", stack, "--quiet", "--out", str(tmp_path / stack)]
    assert plan.main(args + (["--config", str(config_path)] if config_path else [])) == 0
    out = capsys.readouterr()
    return json.loads((tmp_path / stack / "plan.json").read_text()), out.out, out.err


def test_plan_json_holds_the_whole_run_low_expected_high(tmp_path, capsys):
    p, out, _ = planned("h200", tmp_path, capsys)
    run = p["runEstimate"]
    assert run["usd"]["low"] <= run["usd"]["expected"] <= run["usd"]["high"]
    assert run["wallHours"]["low"] <= run["wallHours"]["expected"] <= run["wallHours"]["high"]
    names = " | ".join(ph["name"] for ph in run["phases"])
    for part in ("before the GPU nodes", "staging", "job start-up", "training steps", "validation",
                 "checkpoint saves", "merge", "scale-down"):
        assert part in names, names
    # More than training alone: start-up, saves, the merge and the scale-down are counted.
    assert run["wallHours"]["expected"] > p["sizing"]["est_run_hours"] + 0.5
    assert "estimated run (ESTIMATE, low / expected / high)" in out
    assert set(run["byClass"]) == {"GPU nodes", "CPU nodes", "cluster fee", "bucket"}


def test_gpu_nodes_bill_the_merge_on_one_node_while_the_others_scale_down():
    cfg = config.load(plan.read_stack_file(ROOT / "Pulumi.h200.yaml")[0], "h200", allow_placeholder_project=True)
    z, spec = sizing.run_sizing(cfg), model_spec(cfg.model)
    first = {c: 20.0 for c in sizing.CASES}
    with_merge = run_time.timeline(z, spec, 2, first_step_min=first, gpu_start_min=8.0, merge=True)
    without = run_time.timeline(z, spec, 2, first_step_min=first, gpu_start_min=8.0, merge=False)
    merge_h = next(ph.hours["expected"] for ph in with_merge.phases if ph.name.startswith("merge"))
    down_h = run_time.SCALE_DOWN_MIN.expected / 60
    # Without a merge both nodes idle through the scale-down; with one, one node merges and then scales
    # down while the other scales down at once.
    assert with_merge.gpu_node_hours["expected"] - without.gpu_node_hours["expected"] == pytest.approx(merge_h)
    assert with_merge.wall_hours["expected"] - without.wall_hours["expected"] == pytest.approx(merge_h)
    assert without.gpu_node_hours["expected"] == pytest.approx(
        sum(ph.hours["expected"] * ph.gpu_nodes for ph in without.phases))
    assert down_h == pytest.approx(11 / 60)


def test_a_gs_validation_file_assumed_as_large_as_the_training_data_warns(tmp_path, capsys):
    text = (ROOT / "Pulumi.dev.yaml").read_text() + (
        f"  verl-gke:dataTrainFile: {GS_TRAIN}\n  verl-gke:dataValFile: {GS_VAL}\n  verl-gke:dataTrainRows: 200000\n"
        f"  verl-gke:rewardFile: {ROOT / 'examples' / 'word_reverse' / 'reward.py'}\n")
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(text.replace("verl-gke:grpoTotalTrainingSteps: 20", "verl-gke:grpoTotalTrainingSteps: 40"))
    p, _, err = planned("dev", tmp_path, capsys, path)
    warned = [w for w in p["warnings"] if w.startswith("run estimate: validation takes")]
    assert warned and "validation rows assumed as many as the training rows" in warned[0], p["warnings"]
    assert "run estimate: validation takes" in err


def test_the_readme_staging_figure_is_the_plans():
    weights = model_spec("Qwen/Qwen2.5-32B-Instruct").weights_gb
    fast, expected, slow = phases.DOWNLOAD_MB_PER_S_RANGE
    minutes = [weights * 1000 / rate / 60 for rate in (expected, fast, slow)]
    readme = docs.text()
    assert (f"~{minutes[0]:.1f} min for 32B ({weights:g} GB at {expected:g} MB/s; {minutes[1]:.1f}–{minutes[2]:.0f} "
            f"min at {fast:g}–{slow:g} MB/s") in readme
    assert phases.staging(weights).source.startswith(f"{weights:g} GB of weights at {expected:g} MB/s")


def test_the_readme_dev_run_cost_is_the_plans(tmp_path, capsys):
    p, _, _ = planned("dev", tmp_path, capsys)
    usd = p["runEstimate"]["usd"]
    assert f"${usd['low']:.2f} / ${usd['expected']:.2f} / ${usd['high']:.2f}" in (ROOT / "README.md").read_text()


def test_every_step_and_run_constant_names_its_basis_and_source():
    for f in (*sizing.FIGURES, *run_time.FIGURES):
        assert f.basis in (sizing.MEASURED, sizing.PUBLISHED, sizing.DERIVED, sizing.ESTIMATE), f
        assert len(f.source) > 20 and f.unit, f
        assert f.fast <= f.slow or f.fast >= f.slow  # numbers, not None
    with pytest.raises(ValueError, match="one of fast, expected, slow"):
        sizing.STEP_FIXED_S.at("typical")


def test_the_plan_prints_every_constant_with_its_source(tmp_path, capsys):
    p, out, _ = planned("b200", tmp_path, capsys)
    table = out.split("ESTIMATE constants (fast / expected / slow; basis: source):", 1)[1]
    for f in (*sizing.FIGURES, *run_time.FIGURES):
        assert f"  {f.name}: " in table and f.source[:40] in table, f.name
    assert {row["name"] for row in p["runEstimate"]["figures"]} >= {f.name for f in sizing.FIGURES}


def test_the_measured_constants_are_the_calibration_tables():
    fitted = step_calibration.fitted(json.loads((ROOT / "bench" / "step_calibration.json").read_text())["cases"])
    assert sizing.UPDATE_FIXED_S_PER_LAYER.expected == fitted["update_fixed_s_per_layer"]
    assert sizing.LOGPROB_FIXED_S_PER_LAYER.expected == fitted["logprob_fixed_s_per_layer"]
    assert {m.rsplit("-", 1)[1]: v for m, v in sizing.UPDATE_MFU.items()} == fitted["update_mfu"]
    assert {m.rsplit("-", 1)[1]: v for m, v in sizing.LOGPROB_MFU.items()} == fitted["logprob_mfu"]
    assert sizing.OPTIMIZER_S_PER_GPARAM.fast == fitted["optim_s_per_gparam"]["7B fused"]
    assert sizing.OPTIMIZER_S_PER_GPARAM.expected == fitted["optim_s_per_gparam"]["3B foreach"]
    assert sizing.SYNC_EMPTY_CACHE_S.fast == pytest.approx(fitted["empty_cache_s"]["7B"], abs=0.001)
    lo, hi = sorted(fitted["dispatch_s_per_tensor"].values())
    assert lo <= sizing.SYNC_DISPATCH_S_PER_TENSOR.expected <= hi


@pytest.mark.parametrize("stack", ["b200", "h200", "dev", "dev-b200"])
def test_the_step_range_orders_fast_expected_slow(stack):
    cfg = config.load(plan.read_stack_file(ROOT / f"Pulumi.{stack}.yaml")[0], stack, allow_placeholder_project=True)
    r = sizing.step_range(cfg.grpo, model_spec(cfg.model), cfg.accelerator, cfg.gpu_nodes, cfg.data)
    assert r.low.total < r.expected.total < r.high.total
    z = sizing.run_sizing(cfg)
    assert z.est_run_hours_low < z.est_run_hours < z.est_run_hours_high


def test_the_batch_decodes_until_its_longest_response():
    assert sizing.decode_iterations(256, 270, 1024, "slow") == 1024
    assert sizing.decode_iterations(256, 270, 1024, "expected") == 1024  # 270 x (ln 256 + 0.58) > the cap
    assert sizing.decode_iterations(16, 100, 4096, "expected") == math.ceil(100 * (math.log(16) + 0.5772))
    assert sizing.decode_iterations(16, 100, 4096, "fast") == 200
    spec, acc = model_spec("Qwen/Qwen2.5-32B-Instruct"), ACCELERATORS["b200"]
    short = sizing.generation_seconds(spec, acc, 16, 2, 2048, 100, 270, 1024)
    longer = sizing.generation_seconds(spec, acc, 16, 2, 2048, 100, 270, 4096)
    assert longer > short  # a longer cap lets the longest response run on


def test_the_step_waits_for_the_longest_response_of_every_replica():
    spec, acc = model_spec("Qwen/Qwen2.5-7B-Instruct"), ACCELERATORS["h200"]
    # 64 sequences on each replica either way: eight replicas hold eight times the responses, so a longer longest
    one_replica = sizing.generation_seconds(spec, acc, 1, 1, 64, 100, 50, 4096)
    eight_replicas = sizing.generation_seconds(spec, acc, 8, 1, 512, 100, 50, 4096)
    assert eight_replicas > one_replica


def test_a_replica_runs_at_most_max_num_seqs_and_queues_the_rest():
    assert sizing.queued_iterations(1024, 232) == 0
    assert sizing.queued_iterations(1280, 232) == math.ceil(256 * 232 / 1024)
    spec, acc = model_spec("Qwen/Qwen2.5-0.5B-Instruct"), ACCELERATORS["h200"]
    # the second 1024 start as the first finish: 200 more iterations at the cap's batch, then the same tail
    capped = sizing.generation_seconds(spec, acc, 1, 1, 1024, 100, 200, 1024, "fast")
    queued = sizing.generation_seconds(spec, acc, 1, 1, 2048, 100, 200, 1024, "fast")
    assert queued > capped


def test_without_cuda_graphs_an_iteration_takes_the_longer_of_its_launches_and_its_gpu_work():
    spec, acc = model_spec("Qwen/Qwen2.5-0.5B-Instruct"), ACCELERATORS["h200"]
    # play-verl's eager 0.5B run: 64 sequences a replica, 192 iterations (the cap), under 1 ms of GPU work each
    graphs = sizing.generation_seconds(spec, acc, 8, 1, 512, 104, 180, 192)
    eager = sizing.generation_seconds(spec, acc, 8, 1, 512, 104, 180, 192, eager=True)
    per_iteration = sizing.ITERATION_OVERHEAD_S.expected + sizing.EAGER_LAUNCH_S.expected
    assert 192 * per_iteration < eager < 192 * per_iteration + 0.2
    assert graphs < eager - 192 * (sizing.EAGER_LAUNCH_S.expected - 0.002)


def test_the_reward_costs_each_sample():
    assert sizing.step_overhead_seconds(5120) == pytest.approx(
        sizing.STEP_FIXED_S.expected + 5120 * sizing.REWARD_S_PER_SAMPLE.expected)
    assert sizing.step_overhead_seconds(5120) > sizing.step_overhead_seconds(512)


def test_validation_pays_the_rollout_calls_weight_sync():
    cfg = config.load(plan.read_stack_file(ROOT / "Pulumi.h200.yaml")[0], "h200", allow_placeholder_project=True)
    spec, g, acc, nodes, data = model_spec(cfg.model), cfg.grpo, cfg.accelerator, cfg.gpu_nodes, cfg.data
    gen = sizing.generation_seconds(spec, acc, nodes * acc.gpus_per_node, g.tensor_parallel_size, data.val_rows,
                                    data.mean_prompt_tokens, data.mean_response_tokens, g.max_response_length)
    sync = sizing.weight_sync_seconds(spec, acc, sizing.layout(acc, nodes, g.fsdp_size))
    assert sizing.validation_seconds(g, spec, acc, nodes, data) == pytest.approx(
        gen + sync + sizing.step_overhead_seconds(data.val_rows))


def test_published_runs_are_recorded_with_sources_and_the_table_is_current():
    table = json.loads(published_runs.JSON.read_text())
    assert table["queries"] and all(q["corpus"] and q["query"] for q in table["queries"])
    compared = [r for r in table["runs"] if r.get("compare")]
    assert compared and all(r["source"] and r["settings"] and "expected" in r["predicted_before"] for r in compared)
    assert all(r.get("why_not") for r in table["runs"] if not r.get("compare"))
    assert published_runs.markdown(table) == published_runs.MD.read_text()


def test_torchrun_cases_run_with_nvlink_multicast_off_and_failures_recorded(tmp_path, monkeypatch):
    seen = []

    def fake_run(cmd, env, **kw):
        seen.append((cmd, env))
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="RuntimeError: CUDA error: out of memory")

    monkeypatch.setattr(memory_calibration.subprocess, "run", fake_run)
    jsonl = tmp_path / "x8.jsonl"
    rows = memory_calibration.driver_torchrun(str(jsonl), 8, memory_calibration.CASES_X8[:2], 600, 60)
    assert [r["status"] for r in rows] == ["OOM", "OOM"]
    assert [json.loads(line)["status"] for line in jsonl.read_text().splitlines()] == ["OOM", "OOM"]
    for cmd, env in seen:
        assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=8"]
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert {c[0] for c in memory_calibration.CASES_X8} == {"14B", "32B"}


def test_the_x8_comparison_reads_the_one_gpu_dry_run():
    rows = compare_x8.compare(compare_x8.load([str(ROOT / "bench" / "x8_dryrun.json")]))
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 2 and all(r["memory_ok"] for r in ok)
    assert [r["status"] for r in rows if r["status"] != "ok"] == ["OOM"]  # eager entropy at world 1
    assert all(r["update_model_s"]["fast"] <= r["update_model_s"]["expected"] <= r["update_model_s"]["slow"]
               for r in ok)
