"""The step-time model against every published verl GRPO run found (issue #47): predicted / published.

    venv/bin/python -m bench.published_runs            print the table
    venv/bin/python -m bench.published_runs --write    rewrite bench/published_runs.md from the JSON
    venv/bin/python -m bench.published_runs --record-before   store today's predictions in the JSON as
                                                       `predicted_before` (done once, before the constants changed)
    venv/bin/python -m bench.published_runs --record-search   store today's predictions as `predicted_at_search`
                                                       (the model when the second search was recorded)

bench/published_runs.json holds the search (queries, every run found, why a run is not compared) and each
compared run's own settings; the prediction is recipe/sizing.py's for exactly those settings, hardware and
model, never fitted to these runs. A model outside catalog/models.py (Qwen3.5-9B) is described by the
figures its source publishes; an accelerator outside catalog/accelerators.py (H800) by its datasheet.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from catalog.accelerators import ACCELERATORS, Accelerator
from catalog.datasets import GSM8K, DatasetFacts
from catalog.models import ModelSpec, model_spec
from recipe import sizing
from recipe.grpo import GrpoSettings

HERE = Path(__file__).resolve().parent
JSON, MD = HERE / "published_runs.json", HERE / "published_runs.md"


@dataclass(frozen=True)
class PublishedModel(ModelSpec):
    """A model known only from its published figures: the parameter count as published, not the Qwen2 formula."""

    total_params: int = 0

    @property
    def params(self) -> int:
        return self.total_params or super().params


# huggingface/transformers#48692 (Qwen/Qwen3.5-9B-Base as AutoModelForCausalLM loads it): 32 decoder layers,
# 16 query / 4 key-value heads of 256, hidden 4096, SwiGLU 4096 -> 12288, vocab 248,320 untied,
# 8,953,803,264 parameters.
EXTRA_MODELS = {"Qwen/Qwen3.5-9B": PublishedModel(
    "qwen3.5", "9", attention_heads=16, kv_heads=4, layers=32, hidden=4096, intermediate=12288, vocab=248320,
    tied=False, source="huggingface/transformers#48692", total_params=8_953_803_264)}
# NVIDIA H100 SXM datasheet: 989 TFLOPS dense bf16, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s (450 GB/s each way).
# The H800 SXM is that die with NVLink at 400 GB/s (200 GB/s each way). The network figure is unused on one node.
_H100 = dataclasses.replace(ACCELERATORS["h200"], key="h100", series="(H100 host)", gpu_memory_gib=79.6,
                            bf16_tflops=989.0, hbm_tbps=3.35, nvlink_gbps=450.0)
EXTRA_ACCELERATORS = {"h100": _H100, "h800": dataclasses.replace(_H100, key="h800", series="(H800 host)",
                                                                 nvlink_gbps=200.0)}
# The GrpoSettings fields a run's own settings do not name: verl's defaults as this project passes them.
BASE = GrpoSettings(
    train_batch_size=256, rollout_n=8, max_prompt_length=1024, max_response_length=1024, learning_rate=1e-6,
    ppo_mini_batch_size=64, ppo_micro_batch_size_per_gpu=4, log_prob_micro_batch_size_per_gpu=8,
    ref_log_prob_micro_batch_size_per_gpu=8, tensor_parallel_size=2, gpu_memory_utilization=0.6,
    rollout_engine="vllm", actor_strategy="fsdp2", kl_loss_coef=0.001, kl_loss_type="low_var_kl", entropy_coeff=0.0,
    total_epochs=1, save_freq=-1, test_freq=-1, val_before_train=False, logger=("console",), extra_overrides=())


def run_inputs(run: dict) -> tuple[GrpoSettings, ModelSpec, Accelerator, int, DatasetFacts]:
    g = dataclasses.replace(BASE, **run["settings"])
    spec = model_spec(run["model"]) or EXTRA_MODELS[run["model"]]
    acc = ACCELERATORS.get(run["accelerator"]) or EXTRA_ACCELERATORS[run["accelerator"]]
    d = run.get("dataset")
    data = GSM8K if not d else dataclasses.replace(GSM8K, name=d["name"], mean_prompt_tokens=d["mean_prompt_tokens"],
                                                   mean_response_tokens=d["mean_response_tokens"],
                                                   lengths_basis="assumed (bench/published_runs.json)")
    return g, spec, acc, run["nnodes"], data


# verl's timing_s/<key> -> the model's phases it spans. timing_s/gen holds rollout_mode's weight sync unless the run
# logs it apart (timing_s/update_weights, verl >= 0.7); reward and advantages are the model's overhead.
VERL_PHASES = {"gen": ("generation", "weight_sync"), "update_weights": ("weight_sync",),
               "old_log_prob": ("old_log_prob",), "ref": ("reference",), "update_actor": ("update",),
               "reward": ("overhead",), "adv": ("overhead",)}


def phase_rows(run: dict) -> list[tuple[str, float, float]]:
    """(verl phases, published seconds, the model's expected seconds) for a run that publishes its breakdown."""
    published = (run.get("published") or {}).get("phases") or {}
    if not published:
        return []
    g, spec, acc, nnodes, data = run_inputs(run)
    model = sizing.step_time(g, spec, acc, nnodes, data, vllm_eager=run.get("vllm_eager", False)).phases()
    spans = {k: VERL_PHASES[k] for k in published if k in VERL_PHASES}
    if "update_weights" in spans:
        spans["gen"] = ("generation",)
    groups: dict[tuple[str, ...], list[str]] = {}
    for key, phases in spans.items():
        groups.setdefault(phases, []).append(key)
    return [(" + ".join(keys), round(sum(published[k] for k in keys), 2), round(sum(model[ph] for ph in phases), 2))
            for phases, keys in groups.items()]


def predict(run: dict) -> dict[str, float]:
    """The model's step seconds for the run: expected, and low / high where the model gives a range."""
    g, spec, acc, nnodes, data = run_inputs(run)
    est = getattr(sizing, "step_range", None)
    if est is None:  # the model before issue #47: one point
        total = sizing.step_time(g, spec, acc, nnodes, data).total
        return {"expected": round(total, 1)}
    r = est(g, spec, acc, nnodes, data, vllm_eager=run.get("vllm_eager", False))
    return {"low": round(r.low.total, 1), "expected": round(r.expected.total, 1), "high": round(r.high.total, 1)}


def rows(table: dict) -> list[dict]:
    out = []
    for run in table["runs"]:
        pub = (run.get("published") or {}).get("step_seconds")
        row = {"id": run["id"], "hardware": run.get("hardware", ""), "model": run.get("model", ""), "published": pub,
               "compare": run.get("compare", False), "why_not": run.get("why_not", "")}
        if row["compare"]:
            p = predict(run)
            row.update(predicted=p, ratio=round(p["expected"] / pub, 2),
                       inside=("low" in p and p["low"] <= pub <= p["high"]))
            for key, label in (("predicted_before", "before"), ("predicted_at_search", "at_search")):
                if key in run:
                    row[label] = run[key]
                    row["ratio_" + label] = round(run[key]["expected"] / pub, 2)
        out.append(row)
    return out


def markdown(table: dict) -> str:
    lines = ["# Published verl GRPO runs against the step-time model",
             "",
             "Generated by `venv/bin/python -m bench.published_runs --write` from `bench/published_runs.json` (the "
             "search, every run found, sources, settings, caveats). Ratio = the model's expected step time / the "
             "published one, for the run's own settings, hardware and model; `before` is the model before issue "
             "#47 changed its constants (recorded first, same settings); `at the second search` is the model when the "
             "second search's runs were recorded, before its changes.",
             "",
             "| run | hardware | model | published s/step | model before #47 (ratio) | model at the second search"
             " (ratio) | model now: low / expected / high | ratio | published inside the range |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows(table):
        if not r["compare"]:
            continue
        p = r["predicted"]
        before, at_search = (f"{r[k]['expected']} ({r['ratio_' + k]})" if k in r else "-"
                             for k in ("before", "at_search"))
        now = f"{p['low']} / {p['expected']} / {p['high']}" if "low" in p else f"{p['expected']}"
        inside = ("yes" if r["inside"] else "no") if "low" in p else "-"
        lines.append(f"| {r['id']} | {r['hardware']} | {r['model']} | {r['published']} | {before} | {at_search} | "
                     f"{now} | {r['ratio']} | {inside} |")
    lines += ["", "Phase by phase, for the compared runs that publish their breakdown (verl's timing_s/*; the model's "
              "expected case):", "", "| run | verl phases | published s | model s | ratio |", "|---|---|---|---|---|"]
    for run in table["runs"]:
        if run.get("compare"):
            lines += [f"| {run['id']} | {keys} | {pub} | {mod} | {round(mod / pub, 2) if pub else '-'} |"
                      for keys, pub, mod in phase_rows(run)]
    lines += ["", "Found and not compared (why):", ""]
    lines += [f"- {r['id']} ({r['model'] or 'model not stated'}; {r['hardware'] or 'hardware not stated'}"
              f"{'; ' + str(r['published']) + ' s/step' if r['published'] else ''}): {r['why_not']}"
              for r in rows(table) if not r["compare"]]
    caveats = [(run["id"], c) for run in table["runs"] if run.get("compare") for c in run.get("caveats", [])]
    lines += ["", "Caveats of the compared runs:", ""] + [f"- {i}: {c}" for i, c in caveats]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.published_runs", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite {MD.name}")
    ap.add_argument("--record-before", action="store_true", help="store the current predictions as predicted_before")
    ap.add_argument("--record-search", action="store_true", help="store the current predictions as predicted_at_search")
    a = ap.parse_args(argv)
    table = json.loads(JSON.read_text())
    for flag, key in ((a.record_before, "predicted_before"), (a.record_search, "predicted_at_search")):
        if flag:
            for run in table["runs"]:
                if run.get("compare") and key not in run:
                    run[key] = predict(run)
            JSON.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
    if a.write:
        MD.write_text(markdown(table))
    for r in rows(table):
        if r["compare"]:
            print(f"{r['id']:<22} published {r['published']:>7} s  model {r['predicted']}  ratio {r['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
