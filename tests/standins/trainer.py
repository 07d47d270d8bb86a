"""A stand-in for verl's trainer: a Ray driver whose steps run on the GPU nodes and that writes and
resumes from checkpoints in verl's layout (global_step_N/actor/..., latest_checkpointed_iteration.txt).

Every step it runs is appended to <ckpt>/steps.log, so a test can see where a rerun resumed. Resumed at
or past the last step it still trains one step more and saves it, as verl 0.6.1 does (trainer/ppo/
ray_trainer.py fit: global_steps is the checkpoint's N, then N + 1, and is_last_step holds at once).
`--local` runs the steps in this process, without Ray (a test of the supervisor alone).
`--fail-at-step K` fails deterministically at step K, every time. `--resumed-step-s` is the step time
of a run resumed from a checkpoint (a test kills a node during the first run, not after the resume).
Hydra overrides of the actor's checkpoint contents (save_contents, load_contents) are honoured as verl
honours them (tests/standins/verl_checkpoint.py): a resume that names a file the checkpoint lacks fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verl_checkpoint  # noqa: E402


@ray.remote(num_cpus=0)
class Worker:
    """The ranks of one GPU node, holding all its GPUs: a node lost is an actor died, as with verl's worker
    group of one process per GPU, at one interpreter start per node instead of one per GPU."""

    def step(self, step: int, seconds: float) -> int:
        time.sleep(seconds)
        return step


def save(ckpt: str, step: int, contents: tuple[str, ...]) -> None:
    actor = os.path.join(ckpt, f"global_step_{step}", "actor")
    os.makedirs(os.path.join(actor, "huggingface"), exist_ok=True)
    with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": 1}, f)
    verl_checkpoint.save(actor, 1, [0], contents, f"after step {step}")
    with open(os.path.join(actor, "huggingface", "config.json"), "w") as f:
        json.dump({"model_type": "standin"}, f)
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(step))  # last, as verl does


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--step-s", type=float, default=1.0)
    p.add_argument("--resumed-step-s", type=float, default=None)
    p.add_argument("--fail-at-step", type=int, default=0)
    p.add_argument("--gpus", type=int, default=2, help="the GPUs of the node it trains on")
    p.add_argument("--local", action="store_true", help="no Ray: the steps run here")
    args, rest = p.parse_known_args()
    save_contents, load_contents = verl_checkpoint.contents(dict(w.split("=", 1) for w in rest if "=" in w))
    os.makedirs(args.ckpt, exist_ok=True)
    try:
        with open(os.path.join(args.ckpt, "latest_checkpointed_iteration.txt")) as f:
            start = int(f.read()) + 1
    except OSError:
        start = 1
    if start > 1:  # resume_mode=auto: load the tracker's checkpoint, as verl does
        verl_checkpoint.load(os.path.join(args.ckpt, f"global_step_{start - 1}", "actor"), 1, [0], load_contents)
    step_s = args.step_s if start == 1 or args.resumed_step_s is None else args.resumed_step_s
    print(f"standin: starting at step {start}", flush=True)
    if not args.local:
        ray.init()
        workers = [Worker.options(num_gpus=args.gpus).remote()]
    for step in range(start, max(args.steps, start) + 1):
        if step == args.fail_at_step:
            print(f"standin: deterministic failure at step {step}", flush=True)
            return 3
        if args.local:
            time.sleep(step_s)
        else:
            ray.get([w.step.remote(step, step_s) for w in workers])
        with open(os.path.join(args.ckpt, "steps.log"), "a") as f:
            f.write(f"{step}\n")
        save(args.ckpt, step, save_contents)
        print(f"standin: step {step} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
