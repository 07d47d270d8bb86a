"""The suite's Python work under two interpreters, side by side: this venv's and another venv's.

    python3.11 -m venv /tmp/other && /tmp/other/bin/pip install -r requirements-dev.txt
    venv/bin/python bench/interpreter.py /tmp/other/bin/python [--runs 5]

.ci/run builds its venv on the distribution's CPython where the machine has one (Debian's is built with
PGO and LTO and links the interpreter into the executable; pyenv's default build has neither and loads
libpython3.11.so). This measures what that choice is worth on the work the suite's processes do:

- `import ray`: every Ray process here (a node's agents, each job's supervisor, each worker) starts with it,
  a worker twice (Ray's setup_worker.py, then default_worker.py);
- one offline plan of the b200 stack: the Pulumi compositions under mocks that most tests run.

Each sample is a fresh process; the two interpreters run in turn (which goes first alternates) and each
pair gives a ratio, so a machine whose speed drifts skews both sides alike. CPU time (user + sys of the
child) is what the suite, CPU-bound on two cores, pays. It measures and prints; it judges nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# One timed run of a command as plan_speed takes it: from the repository root, its output dropped, in an
# environment that lets the children write bytecode (the first run of each command is not counted).
from bench.plan_speed import timed  # noqa: E402


def workloads(out: Path) -> dict[str, list[str]]:
    return {
        "import ray": ["-c", "import ray"],
        "plan --stack b200": ["-m", "tools.plan", "--stack", "b200", "--out", str(out), "--quiet"],
    }


def cpu_seconds(python: str, args: list[str]) -> float:
    return timed([python, *args])[1]


def describe(python: str) -> str:
    """Version, path, and where the interpreter's code lives (a libpython.so mapped into the process, or not)."""
    probe = ("import platform, sys; maps = open('/proc/self/maps').read(); "
             "print(platform.python_version(), sys.executable, "
             "'libpython.so' if 'libpython' in maps else 'interpreter in the executable')")
    return subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", help="the other venv's python (B)")
    parser.add_argument("--runs", type=int, default=5, help="pairs per workload (at least 1)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    a, b = sys.executable, os.path.abspath(args.other)  # the runs start in the repository root
    print(f"A: {describe(a)}\nB: {describe(b)}")
    scratch = Path(tempfile.mkdtemp())
    try:
        for label, work in workloads(scratch / "plan").items():
            cpu_seconds(a, work), cpu_seconds(b, work)  # untimed: bytecode and the file cache
            pairs = []
            for i in range(args.runs):
                if i % 2:
                    y, x = cpu_seconds(b, work), cpu_seconds(a, work)
                else:
                    x, y = cpu_seconds(a, work), cpu_seconds(b, work)
                pairs.append((x, y))
            ratio = statistics.median(x / y for x, y in pairs)
            print(f"{label:<20} CPU median A {statistics.median(x for x, _ in pairs):5.2f} s, "
                  f"B {statistics.median(y for _, y in pairs):5.2f} s; A/B {ratio:.2f} (median of {len(pairs)} pairs)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
