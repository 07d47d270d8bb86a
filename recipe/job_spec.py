"""The Ray job's command, typed: the run supervisor's arguments around the trainer's Hydra overrides.

`JobSpec.entrypoint` is the one place the command becomes the shell string Ray runs (the submission id
hashes that string, so its rendering never changes for the same spec). Whatever needs a part of the
command (the offline plan's placement, the rehearsal, the tests) reads the spec, never the string.

The supervisor's options are those of components/scripts/supervise.py (its argparse is their definition);
an option left at its empty value is not passed, so the supervisor's own default applies.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from typing import Any, Self


@dataclass(frozen=True)
class Supervisor:
    """The run supervisor (components/scripts/supervise.py) and the options the job passes it."""

    script: str  # its in-pod path in the bucket (components.run_supervisor.script_path)
    state: str  # the recovery budget's JSON file, next to the checkpoints
    expected_gpus: int
    checkpoint_dir: str  # verl's trainer.default_local_dir: the tracker file, pruning, the merge's input
    keep: int = 0  # prune to this many checkpoints after each trainer run; 0: verl's own rotation only
    merge_to: str = ""  # merge the last checkpoint into this folder, on a GPU worker; "": no merge
    merge_timeout_s: int = 0  # with merge_to: past this the merge is given up and the GPUs released
    release_raycluster: str = ""  # scale this RayCluster's GPU group to 0 when the run ends; "": keep it
    release_group: str = ""  # ... that group (its groupName)
    nccl_check: str = ""  # the NCCL check's own arguments (components.run_supervisor.nccl_check_args)
    # Left to the supervisor's defaults by every stack; a rehearsal on a local head sets them.
    dashboard: str = ""
    settle_s: float | None = None
    backoff_s: float | None = None
    gpu_wait_s: float | None = None
    merge_cmd: str = ""
    k8s_api: str = ""
    k8s_sa_dir: str = ""

    def options(self) -> list[str]:
        """The supervisor's command-line options, in the order the entrypoint has always had them."""
        words = ["--state", self.state, "--expected-gpus", str(self.expected_gpus),
                 "--checkpoint-dir", self.checkpoint_dir]
        if self.keep:
            words += ["--keep", str(self.keep)]
        if self.merge_to:
            words += ["--merge-to", self.merge_to, "--merge-on-worker", "--merge-timeout-s", str(self.merge_timeout_s)]
        if self.release_raycluster:
            words += ["--release-raycluster", self.release_raycluster, "--release-group", self.release_group]
        if self.nccl_check:
            words += ["--nccl-check", self.nccl_check]
        for name in ("dashboard", "settle_s", "backoff_s", "gpu_wait_s", "merge_cmd", "k8s_api", "k8s_sa_dir"):
            value = getattr(self, name)
            if value not in ("", None):
                words += ["--" + name.replace("_", "-"), str(value)]
        return words


@dataclass(frozen=True)
class Trainer:
    """The trainer the supervisor runs: verl's main_ppo through our entry script, one Hydra override an argument."""

    script: str  # components/scripts/verl_main.py's in-pod path (components.run_supervisor.main_path)
    overrides: tuple[str, ...]  # `key=value`, the stack's extra overrides (`+key=value`, `~key`) last

    def values(self) -> dict[str, str]:
        """Each `key=value` override's value by its key, as written (an extra override keeps its `+`)."""
        return dict(o.split("=", 1) for o in self.overrides if "=" in o and not o.startswith("~"))


@dataclass(frozen=True)
class JobSpec:
    """What the Ray job runs: `python supervisor options -- python trainer overrides`."""

    supervisor: Supervisor
    trainer: Trainer
    python: str = "python3"  # the image's interpreter, for both

    @property
    def entrypoint(self) -> str:
        """The shell command Ray runs, each word quoted for the shell."""
        return (shlex.join([self.python, self.supervisor.script, *self.supervisor.options()]) + " -- "
                + shlex.join([self.python, self.trainer.script, *self.trainer.overrides]))

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values (the offline plan's `job`); `from_dict` reads them back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        trainer = data["trainer"]
        return cls(supervisor=Supervisor(**data["supervisor"]),
                   trainer=Trainer(script=trainer["script"], overrides=tuple(trainer["overrides"])),
                   python=data["python"])
