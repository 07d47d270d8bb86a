"""Stand-in for components/scripts/nccl_check.py in the rehearsal: no GPUs, torch or RDMA NICs here.

Shipped in the real check's place (same name, next to the supervisor, which imports it), it offers the
real module's `in_subprocess` and, run with the arguments the stack rendered, says what the real one
says on success, so the run shows the supervisor called it before each trainer start. Exits 0.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys


def in_subprocess(arguments: str) -> int:
    return subprocess.run([sys.executable, os.path.abspath(__file__), *shlex.split(arguments)]).returncode


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus-per-node", type=int, required=True)
    p.add_argument("--nics", type=int, required=True)
    p.add_argument("--net", default="")
    p.add_argument("--megabytes", type=int, default=256)
    p.add_argument("--timeout-s", type=float, default=600.0)
    args = p.parse_args(argv)
    print(f"[verl-gke] NCCL check (stand-in) passed: {args.nodes} nodes x {args.gpus_per_node} GPUs, "
          f"{args.nics} NICs each", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
