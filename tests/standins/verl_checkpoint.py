"""An actor checkpoint's files by contents, as verl v0.6.1 (d62da4950573) writes and reads them, for the stand-ins.

utils/checkpoint/fsdp_checkpoint_manager.py: save_checkpoint writes `model_world_size_W_rank_R.pt` for
'model', `optim_world_size_W_rank_R.pt` for 'optimizer', `extra_state_world_size_W_rank_R.pt` (LR
scheduler, RNG) for 'extra'; load_checkpoint torch.loads each file load_contents names, so a missing one
raises FileNotFoundError. checkpoint_manager.py: both lists default to all three;
trainer/config/actor/actor.yaml: `load_contents: ${.save_contents}`.
"""

from __future__ import annotations

import os

SAVE_KEY = "actor_rollout_ref.actor.checkpoint.save_contents"
LOAD_KEY = "actor_rollout_ref.actor.checkpoint.load_contents"
ALL = ("model", "optimizer", "extra")
FILES = {"model": "model", "optimizer": "optim", "extra": "extra_state"}


def _listed(value: str | None) -> tuple[str, ...] | None:
    """A Hydra list override's value (`[model,extra]`, quotes allowed) as names."""
    if value is None:
        return None
    return tuple(v.strip().strip("'\"") for v in value.strip().strip("[]").split(",") if v.strip())


def contents(overrides: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(save_contents, load_contents) as verl composes them from these overrides."""
    save = _listed(overrides.get(SAVE_KEY)) or ALL
    return save, _listed(overrides.get(LOAD_KEY)) or save


def save(actor: str, world: int, ranks: list[int], what: tuple[str, ...], note: str) -> None:
    os.makedirs(actor, exist_ok=True)
    for rank in ranks:
        for part in what:
            with open(os.path.join(actor, f"{FILES[part]}_world_size_{world}_rank_{rank}.pt"), "w") as f:
                f.write(f"{part} of rank {rank} {note}\n")


def load(actor: str, world: int, ranks: list[int], what: tuple[str, ...]) -> None:
    """Open every file `what` names, in verl's order: FileNotFoundError (as torch.load raises it) if one is missing."""
    for rank in ranks:
        for part in ALL:
            if part in what:
                with open(os.path.join(actor, f"{FILES[part]}_world_size_{world}_rank_{rank}.pt")) as f:
                    f.read()
