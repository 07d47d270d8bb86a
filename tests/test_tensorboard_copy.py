"""Issue 43 item 1: verl's TensorBoard events go to the pod's disk and are copied to the bucket in the
background and at the end (components/scripts/verl_main.py), so TensorBoard on the bucket still sees them.

The writer is tensorboard's own (2.21.0, requirements-verl-test.txt) without TensorFlow: the EventFileWriter
torch's SummaryWriter wraps (pytorch torch/utils/tensorboard/writer.py FileWriter), one event per scalar as
verl's adapter logs them (verl/utils/tracking.py _TensorboardAdapter.log). What reaches the bucket path is
counted with an audit hook on `open` (PEP 578): every open for writing of a file under that folder.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from catalog.accelerators import ACCELERATORS
from catalog.paths import CHECKPOINT_MOUNT, MOUNT, bucket_paths
from components.scripts import verl_main
from recipe import grpo

SCALARS_PER_STEP = 80  # verl logs ~70-90 metrics per step (timing, actor, critic/score, response length, ...)
STEPS = 12
STEP_S = 0.25
COPY_S = 0.5

_watched: list[str] = []  # folders whose opens for writing are counted
_opens: list[tuple[str, str]] = []  # (path, thread name)
_lock = threading.Lock()


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not _watched:
        return
    path, mode, flags = (list(args) + [None, None])[:3]
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
    if not writing or not isinstance(path, str | bytes):
        return
    path = os.fsdecode(path)
    if any(path.startswith(w) for w in _watched):
        with _lock:
            _opens.append((path, threading.current_thread().name))


sys.addaudithook(_hook)  # for the process (hooks cannot be removed): it counts only while a test watches


@pytest.fixture
def counted():
    """Start counting the opens for writing under a folder; the list of them."""
    def watch(folder: Path) -> list[tuple[str, str]]:
        _watched.append(str(folder))
        return _opens
    _opens.clear()
    yield watch
    _watched.clear()
    _opens.clear()


def event_writer():
    why = "tensorboard is not installed: pip install --no-deps -r requirements-verl-test.txt"
    writer = pytest.importorskip("tensorboard.summary.writer.event_file_writer", reason=why)
    from tensorboard.compat.proto import event_pb2, summary_pb2
    return writer.EventFileWriter, event_pb2, summary_pb2


def log_steps(logdir: Path) -> int:
    """verl's tensorboard logger over STEPS steps: one scalar event each; the records written."""
    writer_cls, event_pb2, summary_pb2 = event_writer()
    writer = writer_cls(str(logdir))  # SummaryWriter's defaults: max_queue 10, flush_secs 120
    for step in range(1, STEPS + 1):
        for k in range(SCALARS_PER_STEP):
            value = summary_pb2.Summary.Value(tag=f"actor/metric_{k}", simple_value=float(step * k))
            writer.add_event(event_pb2.Event(wall_time=time.time(), step=step,
                                             summary=summary_pb2.Summary(value=[value])))
        time.sleep(STEP_S)
    writer.close()
    return STEPS * SCALARS_PER_STEP


def in_pod(root: Path, path: str) -> Path:
    """An in-pod path under a test's folder standing in for the pod's filesystem."""
    return root / path.lstrip("/")


def rendered_env() -> dict[str, str]:
    return grpo.runtime_env(ACCELERATORS["b200"], bucket_paths("b200", "Qwen/Qwen2.5-32B-Instruct", "v0.6.1"))[
        "env_vars"]


def test_the_event_writer_opens_its_file_once_per_record(tmp_path, counted):
    """What the bucket took before (TENSORBOARD_DIR on the GCS FUSE mount): an open, append and close (an
    upload) per record."""
    opens = counted(tmp_path)
    records = log_steps(tmp_path)
    assert len(opens) == records + 1  # and one for the file's header record


def test_the_logger_writes_to_the_pods_disk_and_the_bucket_gets_a_copy_per_interval(tmp_path, counted):
    env = rendered_env()
    assert not env["TENSORBOARD_DIR"].startswith((MOUNT + "/", CHECKPOINT_MOUNT + "/"))  # the pod's own disk
    local, bucket = in_pod(tmp_path, env["TENSORBOARD_DIR"]), in_pod(tmp_path, env[verl_main.BUCKET_ENV])
    opens = counted(bucket)
    started = time.monotonic()
    with verl_main.copying({**env, "TENSORBOARD_DIR": str(local), verl_main.BUCKET_ENV: str(bucket),
                            verl_main.COPY_ENV: str(COPY_S)}):
        records = log_steps(local)
    elapsed = time.monotonic() - started
    (event_file,) = [p for p in local.iterdir()]
    copy = bucket / event_file.name
    assert copy.read_bytes() == event_file.read_bytes()  # what TensorBoard reads from the bucket: all of it
    # The logger itself (the writer's thread) never writes there; the copy writes each file at most once per
    # interval, plus the last copy: a handful of uploads where there were `records` of them.
    assert not [o for o in opens if not o[1].startswith(("tensorboard-copy", "MainThread"))], opens
    assert 1 <= len(opens) <= elapsed / COPY_S + 2, (len(opens), elapsed)
    assert len(opens) < records / 50


def test_events_of_a_run_that_fails_still_reach_the_bucket(tmp_path):
    local, bucket = tmp_path / "pod", tmp_path / "bucket"
    with pytest.raises(RuntimeError), verl_main.copying({"TENSORBOARD_DIR": str(local),
                                                        verl_main.BUCKET_ENV: str(bucket),
                                                        verl_main.COPY_ENV: "3600"}):
        local.mkdir()
        (local / "events.out.tfevents.1.host.1.0").write_bytes(b"records")
        raise RuntimeError("the trainer died")
    assert (bucket / "events.out.tfevents.1.host.1.0").read_bytes() == b"records"


def test_the_task_runner_copies_what_its_run_wrote(tmp_path, monkeypatch):
    """syncing_task_runner wraps the run of verl's TaskRunner (here a class standing in for it)."""
    local, bucket = tmp_path / "pod", tmp_path / "bucket"
    monkeypatch.setenv("TENSORBOARD_DIR", str(local))
    monkeypatch.setenv(verl_main.BUCKET_ENV, str(bucket))

    class VerlTaskRunner:
        def run(self, config):
            local.mkdir()
            (local / "events.out.tfevents.2.host.2.0").write_bytes(config)
            return "trained"

    runner = verl_main.syncing_task_runner(VerlTaskRunner)()
    assert runner.run(b"steps") == "trained"
    assert (bucket / "events.out.tfevents.2.host.2.0").read_bytes() == b"steps"


def test_the_entry_is_verls_main_ppo_with_its_own_config():
    """verl 0.6.1's main is run_ppo(config) under Hydra's ppo_trainer config, and run_ppo takes the TaskRunner
    class recipes substitute (main_ppo.py: `task_runner_class: For recipe to change TaskRunner`); our entry
    passes the same config through that hook, so only the TaskRunner's run is ours."""
    spec = importlib.util.find_spec("verl")  # the package without running its __init__ (which imports torch)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed: pip install --no-deps -r requirements-verl-test.txt")
    trainer_dir = Path(spec.submodule_search_locations[0]) / "trainer"
    tree = ast.parse((trainer_dir / "main_ppo.py").read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    main = functions["main"]
    (decorator,) = main.decorator_list
    assert {k.arg: ast.literal_eval(k.value) for k in decorator.keywords} == {
        "config_path": "config", "config_name": "ppo_trainer", "version_base": None}
    assert [ast.unparse(s) for s in main.body if not isinstance(s, ast.Expr) or
            not isinstance(s.value, ast.Constant)] == ["run_ppo(config)"]
    assert [a.arg for a in functions["run_ppo"].args.args] == ["config", "task_runner_class"]
    runner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TaskRunner")
    run = next(n for n in runner.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    assert [a.arg for a in run.args.args] == ["self", "config"]
    assert (trainer_dir / "config" / "ppo_trainer.yaml").is_file()
    entry = ast.parse(Path(verl_main.__file__).read_text())
    called = {ast.unparse(n) for n in ast.walk(entry) if isinstance(n, ast.Call)}
    assert "main_ppo.run_ppo(config, task_runner_class=runner)" in called
    assert "hydra.main(config_path=config_dir, config_name='ppo_trainer', version_base=None)" in called
