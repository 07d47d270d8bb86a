"""Offline plan time vs merely importing the SDK modules the plan loads, side by side, with a verdict.

    venv/bin/python bench/plan_speed.py [--runs 5] [--stack b200]

The SDKs load their submodules lazily, so "importing the SDKs" means importing exactly the SDK modules
(pulumi*, yaml) that one plan of the stack loaded: the baseline is what no plan can avoid, and the
ratio is what our code adds on top. Each sample is a fresh interpreter (what a user pays), after one
untimed run of each command that also caches the bytecode of our modules, as any second run finds it
(PYTHONDONTWRITEBYTECODE is dropped for the children: the SDKs ship compiled, our source would
otherwise be compiled again in every sample). The two commands run in turn and each pair gives a
ratio, so a machine whose speed drifts skews both sides alike. The verdict reads the median ratio of
CPU time (user + sys of the child): on an idle machine it is the wall time, and on a shared one it
does not count the time spent waiting for a core. Exit status 1 when over the budget.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 1.30  # the offline plan may cost at most this much more than importing the SDK modules it loads
SDK_PACKAGES = ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "pulumi_random", "yaml")
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def plan_command(stack: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "tools.plan", "--stack", stack, "--out", str(out), "--quiet"]


def sdk_modules(stack: str, out: Path) -> list[str]:
    """The SDK modules one plan of `stack` loads, in the order it loaded them."""
    probe = "\n".join([
        "import runpy, sys",
        f"sys.argv = {plan_command(stack, out)[2:]!r}",
        "try:",
        "    runpy.run_module('tools.plan', run_name='__main__', alter_sys=True)",
        "except SystemExit as e:",
        "    assert not e.code, e.code",
        f"names = [m for m in sys.modules if m.split('.')[0] in {SDK_PACKAGES!r}]",
        "print('SDK-MODULES', *names)",
    ])
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=ENV, check=True, capture_output=True,
                          text=True)
    return proc.stdout.splitlines()[-1].split()[1:]


def import_command(modules: list[str]) -> list[str]:
    """The SDK modules imported with the cyclic collector off, as `python -m tools.plan` runs once its own module is
    loaded (its `__main__`): the ratio is what our code adds, not what the collector costs. The plan's module
    loads about a third of them before it turns the collector off, which tilts the ratio 1-3 % against our code."""
    return [sys.executable, "-c",
            "import gc, importlib\ngc.disable()\nfor m in " + repr(modules) + ":\n    importlib.import_module(m)"]


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def verdict(ratio: float, budget: float = BUDGET) -> str:
    return f"within the {budget:.2f}x budget" if ratio <= budget else f"OVER the {budget:.2f}x budget"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--stack", default="b200")
    args = parser.parse_args(argv)
    out = Path(tempfile.mkdtemp()) / "plan"
    modules = sdk_modules(args.stack, out)
    plan, imports = plan_command(args.stack, out), import_command(modules)
    timed(plan), timed(imports)  # untimed: bytecode and the file cache, as a second run finds them
    samples: dict[str, list[tuple[float, float]]] = {"plan": [], "import": []}
    for _ in range(args.runs):  # in turn, so machine noise hits both alike
        samples["import"].append(timed(imports))
        samples["plan"].append(timed(plan))
    labels = {"import": f"import {len(modules)} SDK modules",
              "plan": f"plan --stack {args.stack}"}
    for key in ("import", "plan"):
        walls, cpus = [w for w, _ in samples[key]], [c for _, c in samples[key]]
        print(f"{labels[key]:<30} median wall {statistics.median(walls):5.2f} s, CPU {statistics.median(cpus):5.2f} s "
              f"(wall {', '.join(f'{t:.2f}' for t in walls)})")
    pairs = list(zip(samples["plan"], samples["import"], strict=True))
    wall_ratio = statistics.median(p[0] / i[0] for p, i in pairs)
    cpu_ratio = statistics.median(p[1] / i[1] for p, i in pairs)
    print(f"ratio plan/import (median of {len(pairs)} pairs): CPU {cpu_ratio:.2f}x, wall {wall_ratio:.2f}x")
    print(f"verdict: {verdict(cpu_ratio)} (CPU time; wall {verdict(wall_ratio)})")
    return 0 if cpu_ratio <= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())
