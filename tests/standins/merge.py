"""A stand-in for `python -m verl.model_merger merge --backend fsdp --local_dir D --target_dir T`.

Same command line (the test checks it against verl's own parser); it checks the checkpoint folder
the way verl's FSDP merger reads it (fsdp_config.json, every rank's shard, huggingface/) and writes
a config and a "weights" file. `--fail` makes it fail like a merger that runs out of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--fail", action="store_true")
    sub = p.add_subparsers(dest="operation", required=True)
    merge = sub.add_parser("merge")
    merge.add_argument("--backend", required=True, choices=["fsdp", "megatron"])
    merge.add_argument("--local_dir", required=True)
    merge.add_argument("--target_dir", default="tmp")
    args = p.parse_args()
    if args.fail:
        print("standin merge: CUDA out of memory while loading shards", file=sys.stderr)
        return 1
    with open(os.path.join(args.local_dir, "fsdp_config.json")) as f:
        world = json.load(f)["world_size"]
    shards = [os.path.join(args.local_dir, f"model_world_size_{world}_rank_{r}.pt") for r in range(world)]
    os.makedirs(args.target_dir, exist_ok=True)
    shutil.copy(os.path.join(args.local_dir, "huggingface", "config.json"), args.target_dir)
    with open(os.path.join(args.target_dir, "model.safetensors"), "w") as out:
        for shard in shards:
            with open(shard) as f:
                out.write(f.read())
    print(f"standin merge: {len(shards)} shard(s) of {args.local_dir} -> {args.target_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
