"""Modelled step time per shipped stack: the recipe before issue #13 against the tuned one.

    venv/bin/python -m bench.step_time

"old" is each stack with the recipe's previous defaults (no remove-padding, no dynamic batch size,
micro-batches 16 / 8 / 4, TP 8, one update per step) applied where the stack file does not set a
value itself; "new" is the stack as shipped. Under each stack, every layout the recipe weighed (full
FSDP, and on several nodes HSDP), with its modelled step time and memory peaks side by side. Times
come from the throughput model in recipe/sizing.py: ESTIMATES, not measurements.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import yaml

from catalog.models import model_spec
from recipe import sizing
from stacks import config

ROOT = Path(__file__).resolve().parent.parent
# The recipe's defaults before issue #13 (stacks/keys.py at commit 21f2aac) for the keys it changed.
OLD_DEFAULTS = {"grpoPpoMiniBatchSize": "256", "grpoTensorParallelSize": "8", "grpoValBeforeTrain": "false",
                "grpoUseRemovePadding": "false", "grpoUseDynamicBsz": "false"}
PHASES = ("generation", "weight_sync", "old_log_prob", "reference", "update", "overhead")


def read_stack_file(path: Path) -> dict[str, str]:
    """The stack file's config as the Pulumi CLI hands it over (strings); no secret is needed here."""
    values = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items() if not isinstance(v, dict)}


def old_settings(raw: dict[str, str], stack: str) -> config.StackConfig:
    """The stack as the old recipe ran it: old defaults under whatever the stack file sets.

    The dev stack file (now dev-b200; dev is its 2 x L4 successor with the same train batch) used to
    pin TP 2 and mini batch 64 (= its train batch); they are restored here.
    """
    old = {f"{config.PROJECT}:{k}": v for k, v in OLD_DEFAULTS.items()}
    if stack in ("dev", "dev-b200"):
        old.update({f"{config.PROJECT}:grpoTensorParallelSize": "2", f"{config.PROJECT}:grpoPpoMiniBatchSize": "64"})
    # The old recipe had no token budgets; with dynamic batching off they are unused.
    return config.load({**old, **raw}, stack, allow_placeholder_project=True)


def main() -> int:
    rows, refused = [], []
    for path in sorted(ROOT.glob("Pulumi.*.yaml")):
        stack = path.stem.split(".", 1)[1]
        raw = read_stack_file(path)
        new = config.load(raw, stack, allow_placeholder_project=True)
        try:
            old = old_settings(raw, stack)
        except config.ConfigError as err:  # e.g. on 2 x L4 the old fixed micro-batches do not fit
            refused.append((stack, new, err))
            continue
        spec = model_spec(new.model)
        times = {}
        for label, cfg in (("old", old), ("new", new)):
            times[label] = sizing.step_time(cfg.grpo, spec, cfg.accelerator, cfg.gpu_nodes)
        rows.append((stack, new, old, times))
    print("Modelled GRPO step time per shipped stack (ESTIMATE, recipe/sizing.py), old recipe vs tuned\n")
    for stack, new, old, times in rows:
        g_old, g_new = old.grpo, new.grpo
        print(f"{stack}: {new.model} on {new.gpu_nodes} x {new.accelerator.gpus_per_node} {new.accelerator.key}")
        print(f"  {'phase':<14}{'old s':>9}{'new s':>9}")
        for phase in PHASES:
            print(f"  {phase:<14}{getattr(times['old'], phase):9.1f}{getattr(times['new'], phase):9.1f}")
        o, n = times["old"].total, times["new"].total
        print(f"  {'total':<14}{o:9.1f}{n:9.1f}   ({o / 60:.1f} -> {n / 60:.1f} min, x{o / n:.1f})")
        print(f"  micro-batches per GPU old {times['old'].micro_batches} new {times['new'].micro_batches}")
        unused = () if g_old.use_dynamic_bsz else ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu")
        changed = {f.name: (getattr(g_old, f.name), getattr(g_new, f.name)) for f in dataclasses.fields(g_new)
                   if getattr(g_old, f.name) != getattr(g_new, f.name) and f.name not in unused}
        print("  settings old -> new: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()
                                                   if k != "layout_options"))
        for o in g_new.layout_options:  # every layout recipe.tuning weighed, derived in full
            print(f"  layout {o.name:<9} fsdp_size {o.fsdp_size:>3}: step {o.step_seconds:6.1f} s, peak update "
                  f"{o.update_peak_gib:6.1f} GiB / log-prob {o.logprob_peak_gib:6.1f} GiB, checkpoint "
                  f"{o.checkpoint_gb:6.1f} GB, {'fits' if o.fits else 'does not fit'}"
                  f"{'  <- chosen' if o.chosen else ''}")
        print()
    for stack, new, err in refused:
        print(f"{stack}: {new.model} on {new.gpu_nodes} x {new.accelerator.gpus_per_node} {new.accelerator.key}")
        print(f"  the old recipe is refused on this stack, no comparison: {err.problems[0]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
