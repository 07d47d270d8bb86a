"""Issue 22: the supervisor keeps the bucket at the keep limit across restarts; its merge is bounded.

verl rotates only what its current process saved (utils/checkpoint/checkpoint_manager.py at v0.6.1):
after a restart the older steps stay unless the supervisor prunes them.
"""

from __future__ import annotations

import importlib.util
import shlex

from catalog.paths import bucket_paths
from recipe import grpo
from tests.ray_fixtures import REPO

_SPEC = importlib.util.spec_from_file_location("supervise", REPO / "components" / "scripts" / "supervise.py")
supervise = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(supervise)


def _save(ckpt, step):
    (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_prune_keeps_the_newest_steps_left_by_earlier_processes(tmp_path):
    for step in (2, 3, 5, 6):  # the first process kept 2, 3; the restarted one 5, 6
        _save(tmp_path, step)
    (tmp_path / "verl-gke-run.json").write_text("{}")
    assert supervise.prune(str(tmp_path), 2) == ["global_step_2", "global_step_3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "global_step_5", "global_step_6", "latest_checkpointed_iteration.txt", "verl-gke-run.json"]


def test_prune_never_deletes_the_step_the_tracker_names(tmp_path):
    for step in (4, 7, 8):
        _save(tmp_path, step)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")  # an older tracker (rewrite in flight)
    supervise.prune(str(tmp_path), 1)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("global")) == \
        ["global_step_4", "global_step_8"]


def test_prune_without_a_limit_or_a_folder_does_nothing(tmp_path):
    _save(tmp_path, 1)
    assert supervise.prune(str(tmp_path), 0) == []
    assert supervise.prune(str(tmp_path / "missing"), 2) == []


def test_the_entrypoint_prunes_to_the_keep_limit_and_bounds_the_merge():
    paths = bucket_paths("b200", "Qwen/Qwen2.5-32B-Instruct", "v0.6.1", run="run-abc")
    cmd = grpo.supervised("python3 -m verl.trainer.main_ppo", script="/data/scripts/s.py", state="/x.json",
                          paths=paths, expected_gpus=16, merge=True, release=None, keep=2)
    args, _ = supervise.parse(["--run-id", "r", "--max-recoveries", "3", *shlex.split(cmd)[2:]])
    assert args.keep == 2 and args.merge_timeout_s == grpo.MERGE_TIMEOUT_S and args.merge_on_worker
    assert args.checkpoint_dir.endswith("/run-abc") and args.merge_to.endswith("/run-abc")
