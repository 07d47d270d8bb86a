"""Stand-in for components/scripts/nccl_check.py in the rehearsal: no GPUs, torch or RDMA NICs here.

Shipped in the real check's place (same name, next to the supervisor), it says what the real one would
say on success with the arguments the stack rendered, so the run shows the supervisor called it before
each trainer start. Exits 0.
"""

import argparse
import sys

p = argparse.ArgumentParser()
p.add_argument("--nodes", type=int, default=2)
p.add_argument("--gpus-per-node", type=int, required=True)
p.add_argument("--nics", type=int, required=True)
p.add_argument("--net", default="")
p.add_argument("--megabytes", type=int, default=256)
p.add_argument("--timeout-s", type=float, default=600.0)
args = p.parse_args(sys.argv[1:])
print(f"[verl-gke] NCCL check (stand-in) passed: {args.nodes} nodes x {args.gpus_per_node} GPUs, "
      f"{args.nics} NICs each", flush=True)
