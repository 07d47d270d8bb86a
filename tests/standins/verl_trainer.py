"""A stand-in for `python3 -m verl.trainer.main_ppo <Hydra overrides>` that places its work as verl does.

It takes the very overrides the stack renders and runs the same process layout (verl v0.6.1
trainer/main_ppo.py, trainer/ppo/ray_trainer.py, utils/checkpoint/fsdp_checkpoint_manager.py):
- the driver (where the job's entrypoint runs) only starts a TaskRunner actor asking for one CPU;
- the TaskRunner reads the dataset and the model's config, starts the GPU actors of every rank, and
  on each save writes `global_step_N/data.pt` and, last, `latest_checkpointed_iteration.txt`; it
  resumes from that file (`resume_mode=auto`) and writes the datasets cache to HF_DATASETS_CACHE;
- each rank writes the files of what `actor.checkpoint.save_contents` names (model, optim, extra_state
  `_world_size_W_rank_R.pt`, tests/standins/verl_checkpoint.py), rank 0 also `fsdp_config.json` and
  `huggingface/config.json`; a resume reads what load_contents names and fails, as verl does, on a
  file the checkpoint lacks (a full load of a model-only checkpoint);
- rotation forgets what an earlier process saved: only this process's own saves beyond
  `trainer.max_actor_ckpt_to_keep` are deleted (checkpoint_manager.py).
The driver prints what the GPU actors see as LD_LIBRARY_PATH (the job's runtime env over the node's own value).
Given `+standin.entry=<the job's verl_main.py>`, the TaskRunner is wrapped as that entry wraps verl's
(syncing_task_runner) and appends a record per step to an event file in TENSORBOARD_DIR, as verl's
tensorboard logger does: the copy to the bucket then runs in the TaskRunner's pod, with its mounts.
Each completed step is appended to `<default_local_dir>/steps.log`. `+standin.step_s=S` sets the step time,
`+standin.resumed_step_s=S` the step time of a run resumed from a checkpoint (a test that kills a node
needs time to do so before the first run ends, not after the resume).

verl runs one process per GPU; here one actor per GPU node holds all of that node's GPUs and writes
its ranks' shards. What the rehearsal checks (which node, in whose mounts, writes what) is the same
for both, and a process per GPU costs an interpreter start per rank (16 on b200, twice in the
lost-node run) for nothing it checks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import sys
import time

import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verl_checkpoint  # noqa: E402

ray.cloudpickle.register_pickle_by_value(verl_checkpoint)  # the GPU actors need it, not its folder
TRACKER = "latest_checkpointed_iteration.txt"


@ray.remote(num_cpus=0)
class NodeRanks:
    """The ranks of one GPU node (started with that node's GPUs: Ray places it on a node of its own)."""

    def __init__(self, ranks: list[int], world: int, model: str):
        self.ranks, self.world = ranks, world
        with open(os.path.join(model, "config.json")) as f:  # every rank loads the weights
            self.config = json.load(f)

    def library_path(self) -> str:
        """LD_LIBRARY_PATH as this node's GPU processes see it (NCCL's plugin and CUDA are found through it)."""
        return os.environ.get("LD_LIBRARY_PATH", "")

    def step(self, seconds: float) -> list[int]:
        time.sleep(seconds)
        return self.ranks

    def load(self, ckpt: str, step: int, contents: tuple[str, ...]) -> None:
        verl_checkpoint.load(os.path.join(ckpt, f"global_step_{step}", "actor"), self.world, self.ranks, contents)

    def save(self, ckpt: str, step: int, contents: tuple[str, ...]) -> None:
        actor = os.path.join(ckpt, f"global_step_{step}", "actor")
        verl_checkpoint.save(actor, self.world, self.ranks, contents, f"after step {step}")
        if 0 in self.ranks:
            with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
                json.dump({"FSDP_version": 2, "world_size": self.world}, f)
            os.makedirs(os.path.join(actor, "huggingface"), exist_ok=True)
            with open(os.path.join(actor, "huggingface", "config.json"), "w") as f:
                json.dump(self.config, f)


class TaskRunner:
    def run(self, cfg: dict[str, str]) -> str:
        for key in ("data.train_files", "data.val_files"):
            with open(cfg[key], "rb") as f:
                f.read()
        cache = os.environ.get("HF_DATASETS_CACHE") or os.path.join(os.environ["HF_HOME"], "datasets")
        os.makedirs(cache, exist_ok=True)
        with open(os.path.join(cache, "train.arrow"), "w") as f:
            f.write("arrow cache\n")
        ckpt, model = cfg["trainer.default_local_dir"], cfg["actor_rollout_ref.model.path"]
        nodes, per_node = int(cfg["trainer.nnodes"]), int(cfg["trainer.n_gpus_per_node"])
        world = nodes * per_node
        total, freq = int(cfg["trainer.total_training_steps"]), int(cfg["trainer.save_freq"])
        keep = int(cfg.get("trainer.max_actor_ckpt_to_keep", "0") or 0)
        step_s = float(cfg.get("+standin.step_s", "1"))
        try:
            with open(os.path.join(ckpt, TRACKER)) as f:
                start = int(f.read()) + 1
            step_s = float(cfg.get("+standin.resumed_step_s", step_s))
        except OSError:
            start = 1
        ranks = [NodeRanks.options(num_gpus=per_node).remote(
            list(range(n * per_node, (n + 1) * per_node)), world, model) for n in range(nodes)]
        save_contents, load_contents = verl_checkpoint.contents(cfg)
        if start > 1:
            ray.get([r.load.remote(ckpt, start - 1, load_contents) for r in ranks])
        paths = " | ".join(sorted(set(ray.get([r.library_path.remote() for r in ranks]))))
        saved: list[int] = []
        events = None
        if os.environ.get("TENSORBOARD_DIR"):
            os.makedirs(os.environ["TENSORBOARD_DIR"], exist_ok=True)
            events = os.path.join(os.environ["TENSORBOARD_DIR"], f"events.out.tfevents.{int(time.time())}."
                                  f"{socket.gethostname()}.{os.getpid()}.0")
        for step in range(start, total + 1):
            ray.get([r.step.remote(step_s) for r in ranks])
            if events:
                with open(events, "a") as f:  # one open, append and close per record, as tensorboard's stub does
                    f.write(f"step {step}\n")
            os.makedirs(ckpt, exist_ok=True)
            with open(os.path.join(ckpt, "steps.log"), "a") as f:
                f.write(f"{step}\n")
            if step % freq == 0 or step == total:
                ray.get([r.save.remote(ckpt, step, save_contents) for r in ranks])
                with open(os.path.join(ckpt, f"global_step_{step}", "data.pt"), "w") as f:
                    f.write(f"dataloader after {step}\n")
                with open(os.path.join(ckpt, TRACKER), "w") as f:
                    f.write(str(step))
                saved.append(step)
                while keep and len(saved) > keep:
                    shutil.rmtree(os.path.join(ckpt, f"global_step_{saved.pop(0)}"), ignore_errors=True)
        written = f"; tensorboard events {os.path.basename(events)}" if events else ""
        return f"trained steps {start}..{total} on {world} ranks{written}; LD_LIBRARY_PATH on the GPU nodes: {paths}"


def main(argv: list[str]) -> int:
    cfg = dict(a.lstrip("+").split("=", 1) if not a.startswith("+standin") else a.split("=", 1)
               for a in argv if "=" in a)
    ray.init()
    runner = TaskRunner
    if "+standin.entry" in cfg:  # the job's own entry: its TaskRunner wrapper, pickled by value as in the job
        spec = importlib.util.spec_from_file_location("verl_main", cfg["+standin.entry"])
        entry = importlib.util.module_from_spec(spec)
        sys.modules["verl_main"] = entry
        spec.loader.exec_module(entry)
        ray.cloudpickle.register_pickle_by_value(entry)
        runner = entry.syncing_task_runner(TaskRunner)
    actor = ray.remote(num_cpus=1)(runner).remote()
    print("standin main_ppo:", ray.get(actor.run.remote(cfg)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
