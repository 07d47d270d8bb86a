"""Issue 22: the supervisor keeps the bucket at the keep limit across restarts; its merge is bounded.

verl rotates only what its current process saved (utils/checkpoint/checkpoint_manager.py at v0.6.1):
after a restart the older steps stay unless the supervisor prunes them.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys

from catalog.paths import bucket_paths
from recipe import grpo
from tests.ray_fixtures import REPO

_SPEC = importlib.util.spec_from_file_location("supervise", REPO / "components" / "scripts" / "supervise.py")
supervise = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(supervise)
SUPERVISE = REPO / "components" / "scripts" / "supervise.py"


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
    spec = grpo.job_spec([], main_script="/data/scripts/m.py", script="/data/scripts/s.py", state="/x.json",
                         paths=paths, expected_gpus=16, merge=True, release=None, keep=2)
    args, _ = supervise.parse(["--run-id", "r", "--max-recoveries", "3", *spec.supervisor.options(), "--", "true"])
    assert args.keep == 2 and args.merge_timeout_s == grpo.MERGE_TIMEOUT_S and args.merge_on_worker
    assert args.checkpoint_dir.endswith("/run-abc") and args.merge_to.endswith("/run-abc")


# --- issue 43: a resubmission after training finished goes straight to prune and merge --------------------------

TRAINER = REPO / "tests" / "standins" / "trainer.py"
MERGER = REPO / "tests" / "standins" / "merge.py"


def _attempt(tmp_path, attempt: int, *, merge_fail: bool = False, trainer_extra: tuple[str, ...] = ()):
    py, ckpt = sys.executable, tmp_path / "ckpt"
    merge_cmd = f"{py} {MERGER}{' --fail' if merge_fail else ''} merge --backend fsdp"
    return subprocess.run(
        [py, str(SUPERVISE), "--run-id", "run-f", "--max-recoveries", "3", "--attempt", str(attempt), "--state",
         str(ckpt / "verl-gke-run.json"), "--expected-gpus", "0", "--dashboard", "http://127.0.0.1:9",
         "--checkpoint-dir", str(ckpt), "--keep", "1", "--merge-to", str(tmp_path / "merged"), "--merge-cmd",
         merge_cmd, "--", py, str(TRAINER), "--local", "--ckpt", str(ckpt), "--steps", "2", "--step-s", "0",
         *trainer_extra], capture_output=True, text=True, timeout=300)


def test_a_resubmission_after_training_finished_merges_without_training_again(tmp_path):
    """The first attempt trains to step 2 and its merge fails; the provider's resubmission must merge step 2,
    not resume verl there (which trains and saves step 3, and the merge would take that)."""
    first = _attempt(tmp_path, 1, merge_fail=True)
    assert first.returncode == 1 and "model merge of global_step_2 failed" in first.stdout, first.stdout[-2000:]
    second = _attempt(tmp_path, 2)
    assert second.returncode == 0, second.stdout[-2000:]
    assert "starting the trainer" not in second.stdout and "training already finished at global_step_2" in \
        second.stdout, second.stdout[-2000:]
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "steps.log").read_text().split() == ["1", "2"]
    assert sorted(p.name for p in ckpt.iterdir() if p.name.startswith("global_step_")) == ["global_step_2"]
    assert json.loads((tmp_path / "merged" / supervise.MERGED_MARKER).read_text())["step"] == 2


def test_a_longer_run_on_the_same_checkpoints_trains_on(tmp_path):
    """More epochs or steps (the same checkpoint folder: they do not key it) is not a finished run."""
    ckpt = tmp_path / "ckpt"
    _save(ckpt, 58)
    supervise.mark_trained(str(ckpt), ["python3", "-m", "verl.trainer.main_ppo", "trainer.total_epochs=2"])
    assert supervise.finished_step(str(ckpt), ["x", "trainer.total_epochs=2", "trainer.test_freq=5"]) == 58
    assert supervise.finished_step(str(ckpt), ["x", "trainer.total_epochs=3"]) is None
    assert supervise.finished_step(str(ckpt), ["x", "trainer.total_epochs=2", "trainer.total_training_steps=80"]) \
        is None
    (ckpt / "latest_checkpointed_iteration.txt").write_text("60")  # a later save: the marker is stale
    assert supervise.finished_step(str(ckpt), ["x", "trainer.total_epochs=2"]) is None


def test_a_stop_while_the_trainer_starts_still_reaches_the_trainer(tmp_path, monkeypatch):
    """SIGTERM landing inside Popen (after the fork, before the supervisor holds the child) must not leave a
    trainer nobody signals or waits for: the stop is held until the child is known."""
    import os
    import signal

    started = []
    real_popen = supervise.subprocess.Popen

    def popen_then_stop(*args, **kwargs):
        child = real_popen(*args, **kwargs)
        started.append(child)
        os.kill(os.getpid(), signal.SIGTERM)  # `ray job stop` right now
        return child

    monkeypatch.setattr(supervise.subprocess, "Popen", popen_then_stop)
    args, trainer = supervise.parse(["--run-id", "r", "--max-recoveries", "1", "--state", str(tmp_path / "s.json"),
                                     "--expected-gpus", "0", "--dashboard", "http://127.0.0.1:9", "--stop-grace-s",
                                     "30", "--", sys.executable, "-c", "import time; time.sleep(120)"])
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert supervise.run(args, trainer) == supervise.EXITS["stopped"]
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        for child in started:
            if child.poll() is None:
                child.kill()
    (child,) = started
    assert child.returncode == -signal.SIGTERM  # forwarded, and waited for


# --- what a resume loads: the latest checkpoint's contents, not the run's save_contents ---------------------------

SAVE_MODEL_ONLY = "actor_rollout_ref.actor.checkpoint.save_contents=[model,extra]"


def _standin(ckpt, steps: int, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TRAINER), "--local", "--ckpt", str(ckpt), "--steps", str(steps),
                           "--step-s", "0", *overrides], capture_output=True, text=True, timeout=120)


def test_the_standin_like_verl_fails_a_full_load_of_a_model_only_checkpoint(tmp_path):
    """The premise, as verl 0.6.1 loads (fsdp_checkpoint_manager.py load_checkpoint: torch.load of each file
    load_contents names, which follows save_contents): full contents cannot resume a model-only save."""
    ckpt = tmp_path / "ckpt"
    assert _standin(ckpt, 2, SAVE_MODEL_ONLY).returncode == 0
    full = _standin(ckpt, 4)
    assert full.returncode != 0 and "FileNotFoundError" in full.stderr and "optim_world_size_1_rank_0.pt" in \
        full.stderr, full.stderr[-2000:]


def test_a_model_only_checkpoint_resumed_with_full_contents_loads_model_and_extra(tmp_path):
    """A spot run (model-only saves) moved to a reservation (full saves) resumes in the same folder: the
    supervisor adds load_contents=[model,extra] for that start, and the run trains on from its step."""
    ckpt = tmp_path / "ckpt"
    assert _standin(ckpt, 2, SAVE_MODEL_ONLY).returncode == 0
    py = sys.executable
    done = subprocess.run(
        [py, str(SUPERVISE), "--run-id", "run-m", "--max-recoveries", "1", "--state", str(ckpt / "verl-gke-run.json"),
         "--expected-gpus", "0", "--dashboard", "http://127.0.0.1:9", "--settle-s", "0", "--checkpoint-dir", str(ckpt),
         "--", py, str(TRAINER), "--local", "--ckpt", str(ckpt), "--steps", "4", "--step-s", "0"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "resume: global_step_2 has no optimizer shards" in done.stdout, done.stdout[-2000:]
    assert f"--step-s 0 {shlex.quote(supervise.MODEL_ONLY_LOAD)}\n" in done.stdout  # that start's command
    assert (ckpt / "steps.log").read_text().split() == ["1", "2", "3", "4"]
    assert (ckpt / "global_step_4" / "actor" / "optim_world_size_1_rank_0.pt").is_file()  # saves full again


def test_a_full_checkpoint_gets_no_load_contents_override(tmp_path):
    """Optimizer shards present: verl loads what the run saves (load_contents follows save_contents)."""
    ckpt = tmp_path / "ckpt"
    assert _standin(ckpt, 2).returncode == 0
    extra, why = supervise.load_overrides(str(ckpt))
    assert extra == [] and "global_step_2 holds optimizer shards" in why


def test_no_checkpoint_gets_no_load_contents_override(tmp_path):
    assert supervise.load_overrides(str(tmp_path)) == ([], None)


def test_the_load_contents_override_is_the_recipes_list_form():
    """The same Hydra list form as the save_contents the recipe renders (composed in verl's own config by
    tests/test_verl_config.py)."""
    key, value = supervise.MODEL_ONLY_LOAD.split("=", 1)
    save_key, save_value = SAVE_MODEL_ONLY.split("=", 1)
    assert key == save_key.replace("save_contents", "load_contents") and value == save_value
    assert save_value == "[" + ",".join(grpo.SAVE_CONTENTS["model"]) + "]"
