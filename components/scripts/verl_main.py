"""verl's PPO entry (verl.trainer.main_ppo, v0.6.1) with TensorBoard's event files written to local disk
and copied to the bucket in the background and at the end.

Without TensorFlow in the image, tensorboard's stub GFile opens, appends and closes the event file for
every record (tensorboard 2.21.0 tensorboard/compat/tensorflow_stub/io/gfile.py GFile.write, LocalFileSystem
.append; tensorflow/tensorboard@7b57f56c), and verl logs each metric as one record (verl/utils/tracking.py
_TensorboardAdapter.log: add_scalar per key). On GCS FUSE every close of a changed file uploads the whole
object again, and Cloud Storage takes about one write per second to one object: written there, each step's
~80 records would hold the trainer for a minute. So TENSORBOARD_DIR is the pod's own disk, and the process
that writes it (verl's TaskRunner, a Ray actor on a GPU worker) copies each changed event file to the
bucket folder every COPY_S seconds and once more when training ends, one upload per file each time.
TensorBoard (`tensorboardCommand`) reads the bucket folder as before.

The TaskRunner is verl's own, extended through the hook verl gives recipes (main_ppo.run_ppo's
`task_runner_class`); the Hydra config is verl's trainer/config/ppo_trainer.yaml, as `python -m
verl.trainer.main_ppo` composes it, so every override keeps its meaning. Standard library at import time
(the copy is tested without verl); verl, Ray and Hydra are imported by main only.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import sys
import threading
from collections.abc import Iterator

LOCAL_ENV = "TENSORBOARD_DIR"  # verl's adapter writes here (verl/utils/tracking.py)
BUCKET_ENV = "VERL_GKE_TENSORBOARD_BUCKET_DIR"  # where the copies go (the bucket mount)
COPY_ENV = "VERL_GKE_TENSORBOARD_COPY_S"
COPY_S = 30.0  # one upload per changed file per interval: far below Cloud Storage's ~1 write/s per object


def say(message: str) -> None:
    print(f"[verl-gke] tensorboard: {message}", flush=True)


class EventCopy:
    """Copies the files under `local` that changed since their last copy to the same place under `bucket`."""

    def __init__(self, local: str, bucket: str, interval_s: float = COPY_S):
        self.local, self.bucket, self.interval_s = local, bucket, interval_s
        self._seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tensorboard-copy", daemon=True)

    def copy_changed(self) -> int:
        """Copy each changed file once (a whole-file write: one object upload); the number copied."""
        copied = 0
        for folder, _dirs, files in os.walk(self.local):
            for name in files:
                source = os.path.join(folder, name)
                try:
                    stat = os.stat(source)
                except OSError:
                    continue  # gone between the listing and now
                mark = (stat.st_size, stat.st_mtime_ns)
                if self._seen.get(source) == mark:
                    continue
                target = os.path.join(self.bucket, os.path.relpath(source, self.local))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(source, target)
                self._seen[source] = mark
                copied += 1
        return copied

    def _copy_logged(self) -> None:
        try:
            self.copy_changed()
        except OSError as err:  # the bucket mount hiccuped: the next round copies it
            say(f"copy to {self.bucket} failed, retried in {self.interval_s:g}s: {err}")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._copy_logged()

    def start(self) -> EventCopy:
        self._thread.start()
        return self

    def stop(self) -> None:
        """The last copy, after the writers have closed their files."""
        self._stop.set()
        self._thread.join()
        gc.collect()  # verl's Tracking closes its SummaryWriter when collected (tracking.py __del__)
        self._copy_logged()


@contextlib.contextmanager
def copying(env: dict[str, str] | None = None) -> Iterator[EventCopy | None]:
    """Copy TensorBoard's events while the block runs and once at its end (also when it raises);
    nothing when the job names no bucket folder. `env` defaults to the environment of the process that
    runs the block (the TaskRunner actor's), read then: a default bound at definition would be pickled
    with the TaskRunner class and carry the driver's environment to the actor."""
    env = os.environ if env is None else env
    local, bucket = env.get(LOCAL_ENV), env.get(BUCKET_ENV)
    if not local or not bucket:
        yield None
        return
    copy = EventCopy(local, bucket, float(env.get(COPY_ENV) or COPY_S)).start()
    say(f"events in {local}, copied to {bucket} every {copy.interval_s:g}s and at the end")
    try:
        yield copy
    finally:
        copy.stop()


def syncing_task_runner(base: type) -> type:
    """verl's TaskRunner, whose run copies the event files it writes (defined here, not at import: Ray
    pickles the class by value, so the GPU worker needs no module of ours on its path)."""

    class TaskRunner(base):
        def run(self, config):
            with copying():
                return super().run(config)

    return TaskRunner


def main() -> None:
    import hydra
    import ray
    from verl.trainer import main_ppo

    runner = ray.remote(num_cpus=1)(syncing_task_runner(main_ppo.TaskRunner))  # as run_ppo's own default
    config_dir = os.path.join(os.path.dirname(os.path.abspath(main_ppo.__file__)), "config")

    def run(config) -> None:
        main_ppo.run_ppo(config, task_runner_class=runner)

    hydra.main(config_path=config_dir, config_name="ppo_trainer", version_base=None)(run)()


if __name__ == "__main__":
    sys.exit(main())
