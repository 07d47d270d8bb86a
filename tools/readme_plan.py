"""The README's figures, written from the offline plan of every shipped stack so they cannot go stale.

The text between `<!-- BEGIN plan:NAME ... -->` and `<!-- END plan:NAME -->` in README.md and docs/*.md is
rendered here from what `python -m tools.plan --stack <stack>` computes (its plan.json, the same run that
prints the figures): prices, run estimates, memory peaks, step times, the checkpoint and merged-model paths.

    python -m tools.readme_plan --write   # rewrite every block
    python -m tools.readme_plan --check   # exit 1 when a block is not what the plan computes now
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import posixpath
import re
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STACKS = ("dev", "dev-b200", "b200", "h200")  # the shipped stack files, in the order a newcomer meets them
BLOCK = re.compile(r"(<!-- BEGIN plan:(?P<name>[a-z-]+)[^>]*-->\n)(?P<body>.*?)(<!-- END plan:(?P=name) -->)", re.S)
COMMAND = "venv/bin/python -m tools.readme_plan --write"


@dataclass(frozen=True)
class Planned:
    """One stack's plan: plan.json, what the command printed, and the config it read."""

    stack: str
    plan: dict[str, Any]
    printed: str
    cfg: Any  # stacks.config.StackConfig


def run_plan(stack: str) -> Planned:
    """`python -m tools.plan --stack <stack> --quiet`, in this process, into a scratch folder."""
    from stacks import config as stack_config
    from tools import plan as tool

    with tempfile.TemporaryDirectory() as tmp:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = tool.main(["--stack", stack, "--quiet", "--out", f"{tmp}/plan"])
        if code != 0:
            raise RuntimeError(f"tools.plan --stack {stack} exited {code}:\n{err.getvalue()}")
        plan = json.loads(Path(tmp, "plan", "plan.json").read_text())
    raw, secret_keys = tool.read_stack_file(tool.stack_path(stack), stack)
    cfg = stack_config.load(raw, stack, allow_placeholder_project=True, secret_keys=secret_keys)
    return Planned(stack, plan, out.getvalue(), cfg)


@cache
def plans() -> dict[str, Planned]:
    return {stack: run_plan(stack) for stack in STACKS}


# --- what each figure looks like (the plan's own rounding) ---------------------------------------------------

def usd(value: float, lower_bound: bool = False) -> str:
    return f"{'≥ ' if lower_bound else ''}${value:,.2f}"


def span(values: dict[str, float], fmt=lambda v: f"{v:g}") -> str:
    return " / ".join(fmt(values[c]) for c in ("low", "expected", "high"))


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def gpu_name(p: Planned) -> str:
    """nvidia-h200-141gb -> H200."""
    return p.cfg.accelerator.accelerator_type.removeprefix("nvidia-").split("-")[0].upper()


def what_runs(p: Planned) -> str:
    cfg, acc = p.cfg, p.cfg.accelerator
    mode = "Autopilot" if cfg.cluster.mode == "autopilot" else "Standard" + (" zonal" if cfg.cluster.zonal else "")
    return (f"{mode}, {cfg.gpu_nodes} × {acc.machine_type} ({cfg.total_gpus} × {gpu_name(p)}), {cfg.capacity.kind}, "
            f"{cfg.region}; {cfg.model.split('/')[-1]}, {p.plan['sizing']['total_steps']} steps")


def checkpoint_url(p: Planned) -> str:
    """The bucket folder of the run's last checkpoint: the checkpoint mount is the bucket's checkpoints/."""
    from catalog.paths import CHECKPOINT_MOUNT

    folder = posixpath.relpath(p.plan["checkpoints"]["folder"], CHECKPOINT_MOUNT)
    return f"gs://<bucket>/checkpoints/{folder}/global_step_{p.plan['sizing']['total_steps']}/"


def merged_url(p: Planned) -> str:
    return p.plan["outputs"]["mergedModel"].replace(f"gs://{p.plan['outputs']['bucket']}/", "gs://<bucket>/")


# --- the blocks -----------------------------------------------------------------------------------------------

def block_stacks(ps: dict[str, Planned]) -> str:
    date = ps["dev"].plan["outputs"]["hourlyPrice"]["tableDate"]
    rows = ["| stack | what runs | per hour | one run: low / expected / high (ESTIMATE) |", "|---|---|---|---|"]
    unpriced: dict[str, list[str]] = {}
    for stack, p in ps.items():
        hourly, run = p.plan["outputs"]["hourlyPrice"], p.plan["runEstimate"]
        bound = not hourly["complete"]
        if bound:
            unpriced[stack] = hourly["unpriced"]
        rows.append(f"| `{stack}` | {what_runs(p)} | {usd(hourly['totalKnownUsdPerHour'], bound)}/h | "
                    f"{span(run['usd'], lambda v, b=run['lowerBound']: usd(v, b))} "
                    f"({span(run['wallHours'], lambda v: f'{v:.2f}')} h) |")
    rate = ps["dev"].plan["outputs"]["hourlyPrice"]["bucketUsdPerGbMonth"]
    notes = [f"USD list prices read on {date} (`catalog/prices.py`, each row with its source); the bucket "
             f"${rate:g}/GB-month. A run is `pulumi up` to the last GPU node gone: cluster, staging, start-up, "
             "training, validation, checkpoints, merge, scale-down."]
    notes += [f"`{stack}` is a lower bound: no price source for {', '.join(parts)}."
              for stack, parts in unpriced.items()]
    return "\n".join(rows) + "\n\n" + " ".join(notes) + "\n"


def step_seconds(z: dict[str, Any]) -> dict[str, float]:
    return {"low": z["est_step_seconds_low"], "expected": z["est_step_seconds"], "high": z["est_step_seconds_high"]}


def block_dev(ps: dict[str, Planned]) -> str:
    p = ps["dev"]
    m, z, run, hourly = p.plan["memory"], p.plan["sizing"], p.plan["runEstimate"], p.plan["outputs"]["hourlyPrice"]
    parts = ", ".join(f"{name} {usd(v)}" for name, v in hourly["usdPerHour"].items())
    hours = span(run["wallHours"], lambda v: f"{v:.2f}")
    tokens = (m["settings"]["ppo_max_token_len_per_gpu"], m["settings"]["log_prob_max_token_len_per_gpu"])
    return "\n".join([
        f"- **Price**: {usd(hourly['totalKnownUsdPerHour'])}/h ({parts}).",
        # The critical path ends with every GPU in Ray, when the job is submitted (tools/critical_path.py).
        f"- **The whole run**: {hours} h, {span(run['usd'], usd)} (low / expected / high); every GPU in Ray and "
        f"the job submitted {p.plan['criticalPath']['minutes']:g} min after `pulumi up` starts, the job's "
        "start-up (model read, vLLM) after that.",
        f"- **Training**: {z['total_steps']} steps of {span(step_seconds(z))} s, "
        f"{plural(z['validations'], 'validation')}, {plural(z['checkpoints_saved'], 'checkpoint')} of "
        f"{z['checkpoint_gb']:g} GB.",
        f"- **Memory per {gpu_name(p)}**: PyTorch gets {m['torch_budget']:g} of {m['gpu_gib']:g} GiB; the actor "
        f"update peaks at {m['update_peak']:g} GiB ({tokens[0]} tokens per GPU), the log-prob pass at "
        f"{m['logprob_peak']:g} GiB ({tokens[1]} tokens); vLLM takes {m['settings']['gpu_memory_utilization']:g} "
        f"of the GPU, a KV cache of {m['kv_tokens']:,} tokens for the {m['kv_tokens_needed']:,} a batch needs.",
        f"- **Checkpoint**: `{checkpoint_url(p)}`",
        f"- **Merged model** (output `mergedModel`): `{merged_url(p)}`",
        f"- **Left in the bucket**: {z['bucket_gb']:g} GB (model {z['model_gb']:g} GB, GSM8K, the checkpoint).",
    ]) + "\n"


def block_sizing(ps: dict[str, Planned]) -> str:
    rows = ["| stack | GPUs | update / log-prob peak, of PyTorch's GiB | step, s | steps | training GPU-hours "
            "| checkpoints |", "|---|---|---|---|---|---|---|"]
    for stack, p in ps.items():
        m, z = p.plan["memory"], p.plan["sizing"]
        extrapolated = " (extrapolated)" if m["extrapolated"] else ""
        rows.append(f"| `{stack}` | {z['gpus']} | {m['update_peak']:g} / {m['logprob_peak']:g} of "
                    f"{m['torch_budget']:g}{extrapolated} | {span(step_seconds(z))} | {z['total_steps']} | "
                    f"{z['gpu_hours']:g} | {z['checkpoint_gb']:g} GB, {z['checkpoints_kept']} kept |")
    return "\n".join(rows) + "\n"


def block_quotas(ps: dict[str, Planned]) -> str:
    """What `pulumi up` checks before anything bills: stacks.quotas.needs, the program's own list."""
    from stacks import quotas

    needed: dict[str, dict[str, str]] = {}
    for stack, p in ps.items():
        for need in quotas.needs(p.cfg):
            dims = ", ".join(f"{k}={v}" for k, v in sorted(need.ref.dimensions.items()))
            name = f"`{need.ref.quota_id}`" + (f" ({dims})" if dims else "")
            needed.setdefault(name, {})[stack] = f"{need.needed:,}" + ("" if need.fatal else " (warns)")
    rows = ["| quota | " + " | ".join(f"`{s}`" for s in ps) + " |", "|---|" + "---|" * len(ps)]
    gpus_first = sorted(needed, key=lambda name: "GPUS" not in name)  # stable: otherwise the program's order
    rows += [f"| {name} | " + " | ".join(needed[name].get(s, "–") for s in ps) + " |" for name in gpus_first]
    return "\n".join(rows) + "\n"


BLOCKS = {"stacks": block_stacks, "dev": block_dev, "sizing": block_sizing, "quotas": block_quotas}


def files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def rendered(text: str, ps: dict[str, Planned] | None = None) -> str:
    """The text with every block rewritten from the plans; an unknown block name is an error."""
    def body(m: re.Match) -> str:
        if m.group("name") not in BLOCKS:
            raise KeyError(f"unknown block plan:{m.group('name')} (known: {', '.join(BLOCKS)})")
        return m.group(1) + BLOCKS[m.group("name")](ps if ps is not None else plans()) + m.group(4)
    return BLOCK.sub(body, text)


def blocks(text: str) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}


def stale() -> list[Path]:
    return [path for path in files() if BLOCK.search(text := path.read_text()) and rendered(text) != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.readme_plan", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the blocks")
    parser.add_argument("--check", action="store_true", help="exit 1 when a block is stale (the default)")
    args = parser.parse_args(argv)
    if args.write:
        for path in files():
            if BLOCK.search(text := path.read_text()):
                path.write_text(rendered(text))
        return 0
    if old := stale():
        print(f"stale plan figures in {', '.join(str(p.relative_to(ROOT)) for p in old)}: run `{COMMAND}`",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
