"""Issue 22: a rehearsal of a whole run on local Ray nodes, each in the mount namespace of its pod.

The stack's rendered objects decide everything: the pods' volumes (tools.placement reads them from
the plan), which bucket folder each PV shows (`only-dir`), which mounts are read-only, the Ray job's
entrypoint and runtime env. Each simulated pod is a Ray node started in a mount namespace of its own
(`unshare --mount`, CI runs as root) where only its pod's bucket mounts exist: bind mounts of a local
"bucket" folder, read-only where the pod mounts read-only; a path another pod mounts but this one
does not is the container's own disk (a private tmpfs), and the bucket folder itself is hidden. The
job runs the real supervisor (components/scripts/supervise.py, shipped to the bucket as staging
would) around a stand-in trainer with verl's process layout and checkpoint files
(tests/standins/verl_trainer.py) and the stand-in merger (tests/standins/merge.py).

Each run is submitted by the job provider with the rendered job's inputs, as `pulumi up` does, once per module
(the `rehearsed` fixture); each test reads one behaviour of what a run left. On b200 (two GPU nodes) a GPU node
is lost mid-run: the recovery, the resume from the last checkpoint, pruning after the restart, the merge on a GPU
node, the refresh. Every shipped stack's run trains, saves, keeps its state on the bucket and merges in its own
layout.
Stacks whose pods mount alike share one Ray head (the slowest thing to start), and a run takes the worker pods
of its shape the run before it left, as KubeRay keeps a cluster's pods across its jobs.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from catalog.paths import TENSORBOARD_BUCKET_ENV, TENSORBOARD_LOCAL_ENV
from components.ray_client import TERMINAL
from components.ray_job_provider import RayJobProvider
from recipe.job_spec import JobSpec, Trainer
from tests.ray_fixtures import (
    IMAGE_LIBRARY_PATH,
    REPO,
    VENV_BIN,
    RayNode,
    file_json,
    file_text,
    image_env,
    job_logs,
    no_mount_namespace,
    wait_for_line,
)
from tests.stack_helpers import shipped_plan
from tools import placement

NO_NAMESPACE = no_mount_namespace()
needs_namespaces = pytest.mark.skipif(NO_NAMESPACE is not None, reason=NO_NAMESPACE or "")

STANDIN_TRAINER = REPO / "tests" / "standins" / "verl_trainer.py"
STANDIN_MERGE = REPO / "tests" / "standins" / "merge.py"
# Shipped in the real NCCL check's place: it needs GPUs, torch and RDMA NICs (tests/test_nccl_check.py tests it).
STANDIN_NCCL_CHECK = REPO / "tests" / "standins" / "nccl_check.py"
LOCAL_ONLY = ("/tmp", "/dev/shm")  # emptyDirs on the pod's disk: the host's own /tmp stands in for them
# The head pod's library path differs from the workers' only so that what the GPU actors report tells
# expansion on their own node from a value the driver on the head passed along.
HEAD_LIBRARY_PATH = f"{IMAGE_LIBRARY_PATH}:/only/in/the/head/pod"


class PodNode(RayNode):
    """A Ray node whose processes see only the mounts of one pod, started with the image's environment."""

    def __init__(self, script: str, gpus: int, cpus: int, join: RayNode | None = None):
        super().__init__(gpus, cpus, join, env=image_env(IMAGE_LIBRARY_PATH if join else HEAD_LIBRARY_PATH))
        self.script = script

    def command(self) -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", self.script + '\nexec "$@"',
                "pod", *super().command()]


def in_bucket(bucket: Path, mount: placement.Mount, path: str) -> Path:
    """Where an in-pod path under a bucket mount lives in the local bucket folder."""
    rel = os.path.relpath(path, mount.path)
    return bucket / mount.only_dir / rel if mount.only_dir else bucket / rel


def mount_script(pod: placement.Pod, bucket: Path, bucket_mounts: set[str]) -> str:
    lines = []
    for m in pod.mounts:
        if m.kind != "csi":
            continue
        source = bucket / m.only_dir if m.only_dir else bucket
        lines.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(m.path)}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {shlex.quote(m.path)}")
    for path in sorted(bucket_mounts - {m.path for m in pod.mounts if m.kind == "csi"}):
        lines.append(f"mount -t tmpfs -o size=64m tmpfs {shlex.quote(path)}")  # the container's own disk
    lines.append(f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(bucket))}")  # no way around the mounts
    return "\n".join(lines)


def raycluster(p: dict) -> dict:
    """The RayCluster's spec as the stack renders it."""
    return next(r["inputs"] for r in p["resources"] if r["inputs"].get("kind") == "RayCluster")["spec"]


def staging_args(p: dict) -> list[str]:
    """The staging Job's container arguments as the stack renders them."""
    job = next(r["inputs"] for r in p["resources"] if r["type"] == "kubernetes:batch/v1:Job")
    return job["spec"]["template"]["spec"]["containers"][0]["args"]


def shipped_files(p: dict) -> dict[str, str]:
    """The files of the ConfigMap the staging Job ships from (stage_data.py, the supervisor and what it imports)."""
    return next(r["inputs"]["data"] for r in p["resources"] if r["type"] == "kubernetes:core/v1:ConfigMap"
                and "stage_data.py" in (r["inputs"].get("data") or {}))


def stage(p: dict, bucket: Path, pods: dict[str, placement.Pod]) -> None:
    """What the staging Job leaves in the bucket, at the paths its rendered arguments name (stacks of
    one verl tag share the source and dataset folders, as they would in one bucket)."""
    words = staging_args(p)
    args = placement._options(words)
    writer = pods[placement.JOB]

    def local(path: str) -> Path:
        return in_bucket(bucket, placement.serving(writer, path), path)

    local(args["verl-dir"]).mkdir(parents=True, exist_ok=True)
    model = local(args["model-dir"])
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    data = local(args["dataset-dir"])
    data.mkdir(parents=True, exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_bytes(b"PAR1")
    # Each --ship SRC=DEST: the staging Job copies its ConfigMap's file (the supervisor and what it imports).
    scripts = shipped_files(p)
    for src, dest in (words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--ship"):
        shipped = local(dest)
        shipped.parent.mkdir(parents=True, exist_ok=True)
        name = os.path.basename(src)
        shipped.write_text(STANDIN_NCCL_CHECK.read_text() if name == "nccl_check.py" else scripts[name])


def rendered_job(p: dict) -> dict:
    """The RayJob's inputs as the stack renders them."""
    return next(r["inputs"] for r in p["resources"] if r["type"].endswith(":RayJob"))


def job_inputs(p: dict, head: RayNode, steps: int, step_s: float) -> tuple[str, dict]:
    """The stack's job (the plan's spec) with the stand-ins for verl, a short run and this head's dashboard. A run
    resumed from a checkpoint steps at 0.2 s: only the first run must last long enough to lose a node in."""
    job = rendered_job(p)
    spec = JobSpec.from_dict(p["job"])
    assert spec.trainer.script.endswith("/verl_main.py")  # verl's main_ppo through our entry
    py = str(VENV_BIN / "python3")
    # No service account where the head pod's token would be: the GPU release is skipped, whatever this machine
    # holds at the default path (a CI runner that is itself a pod has a token there, and a real API server).
    supervisor = dataclasses.replace(
        spec.supervisor, dashboard=head.address, settle_s=30, backoff_s=1, gpu_wait_s=300,
        merge_cmd=f"{py} {STANDIN_MERGE} merge --backend fsdp",
        k8s_sa_dir=os.path.join(head.temp_dir, "no-service-account"))
    overrides = [o for o in spec.trainer.overrides
                 if not o.startswith(("trainer.total_training_steps=", "trainer.save_freq="))]
    trainer = Trainer(script=str(STANDIN_TRAINER), overrides=(
        *overrides, f"trainer.total_training_steps={steps}", "trainer.save_freq=1", f"+standin.step_s={step_s}",
        "+standin.resumed_step_s=0.2", f"+standin.entry={spec.trainer.script}"))
    rehearsed = JobSpec(supervisor=supervisor, trainer=trainer, python=py)
    return rehearsed.entrypoint, {"env_vars": dict(job["runtime_env"]["env_vars"])}


def mounted_somewhere(path: Path) -> bool:
    """Whether any process on the machine has a mount at `path` (in whatever mount namespace)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            text = (proc / "mountinfo").read_text()
        except OSError:
            continue
        if any(len(f := line.split()) > 4 and f[4] == str(path) for line in text.splitlines()):
            return True
    return False


def remove_mount_points(made: list[Path]) -> None:
    """Remove the host mount points this run created, unless another run's pod namespace still mounts
    there (a second rehearsal on the machine, or a test run of another checkout): removing a directory
    that is a mount point in another namespace silently detaches those mounts (Linux >= 3.18, "vfs:
    Lazily remove mounts on unlinked files and directories", torvalds/linux@8ed936b5; mount_namespaces(7)),
    and that run's pods would lose /data under their feet."""
    for d in reversed(made):
        if mounted_somewhere(d):
            continue
        try:
            d.rmdir()
        except OSError:
            pass


def layout(pods: dict[str, placement.Pod]) -> tuple:
    """What a simulated pod's mount namespace is made of: every pod's bucket mounts (path, bucket
    folder, read-only). Stacks with the same layout can share a Ray head; any difference gets its own."""
    return tuple(sorted((role, m.path, m.only_dir, m.read_only) for role, pod in pods.items()
                        for m in pod.mounts if m.kind == "csi"))


class HostMountPoints:
    """The host's empty mount points (/data, /checkpoints) every simulated pod's namespace mounts over,
    shared by every rehearsal on the machine at once (pytest-xdist workers run its tests in parallel).

    A point missing on the host is created and recorded in `state`/made.json; each user holds a shared
    flock on `state`/users while its pods may mount there, and the last one out (the exclusive lock is
    free) removes what the rehearsals created. Both happen under `state`/lock, so a point is never
    removed between another user's check and its `mount`. A killed process drops its flock with it."""

    STATE = Path(tempfile.gettempdir()) / "verl-gke-rehearsal-mounts"

    def __init__(self, paths: set[str], state: Path | None = None):
        self.paths, self.state = sorted(paths), state or self.STATE
        self._users = None

    def _registry(self):
        self.state.mkdir(exist_ok=True)
        lock = open(self.state / "lock", "a")  # noqa: SIM115 - closed by _Registry
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _Registry(lock, self.state / "made.json")

    def claim(self) -> None:
        with self._registry() as made:
            self._users = open(self.state / "users", "a")  # noqa: SIM115 - held until release()
            fcntl.flock(self._users, fcntl.LOCK_SH)  # never waits: exclusive only under the registry lock
            for m in self.paths:
                if not Path(m).exists():
                    Path(m).mkdir()
                    made.add(m)

    def release(self) -> None:
        with self._registry() as made:
            if self._users is not None:
                self._users.close()
                self._users = None
            with open(self.state / "users", "a") as probe:
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return  # another rehearsal's pods may still mount there: the last one removes them
                remove_mount_points([Path(m) for m in sorted(made)])
                made.intersection_update(m for m in list(made) if Path(m).exists())


class _Registry:
    """The set of mount points the rehearsals created, read and written under the held `lock`."""

    def __init__(self, lock, path: Path):
        self.lock, self.path = lock, path

    def __enter__(self) -> set[str]:
        self.made = set(json.loads(self.path.read_text())) if self.path.exists() else set()
        return self.made

    def __exit__(self, *_exc) -> None:
        try:
            self.path.write_text(json.dumps(sorted(self.made)))
        finally:
            self.lock.close()


class Cluster:
    """A local bucket folder and a Ray head in the head pod's mount namespace; workers join per run.

    The host's mount points (/data, /checkpoints) are created only if missing and removed again by
    close() (also when the head fails to start) unless another rehearsal still uses them."""

    def __init__(self, pods: dict[str, placement.Pod], tmp: Path, state: Path | None = None):
        self.pods, self.bucket = pods, tmp / "bucket"
        self.bucket_mounts = {m.path for pod in pods.values() for m in pod.mounts if m.kind == "csi"}
        self.nodes: list[RayNode] = []
        self.idle: list[PodNode] = []  # pods no run holds
        self.mount_points = HostMountPoints(self.bucket_mounts, state)
        self.head: RayNode | None = None
        try:
            self.bucket.mkdir()
            for folder in {m.only_dir for pod in pods.values() for m in pod.mounts if m.only_dir}:
                (self.bucket / folder).mkdir(parents=True)  # a PV's only-dir folder exists before it mounts
            self.mount_points.claim()
            self.head = self.start(placement.HEAD, gpus=0, cpus=0)
        except BaseException:
            self.close()
            raise

    def start(self, role: str, gpus: int, cpus: int) -> PodNode:
        node = PodNode(self.script(role), gpus, cpus, join=self.head)
        self.nodes.append(node)
        return node.start()

    def script(self, role: str) -> str:
        return mount_script(self.pods[role], self.bucket, self.bucket_mounts)

    def take(self, role: str, gpus: int, cpus: int, count: int) -> list[PodNode]:
        """`count` pods of this role and shape: those an earlier run left (as KubeRay keeps a cluster's worker
        pods across its jobs) whose raylet still runs, the rest started side by side as KubeRay starts them (a
        node start is mostly waiting). Every other idle pod is stopped: Ray places by resources, so a pod left
        joined would serve this run too."""
        taken: list[PodNode] = []
        script = self.script(role)
        for node in self.idle:
            if len(taken) < count and (node.script, node.gpus, node.cpus) == (script, gpus, cpus) and node.running():
                taken.append(node)
            else:
                self.stop(node)
        self.idle.clear()
        with ThreadPoolExecutor(max_workers=max(1, count - len(taken))) as pool:
            started = list(pool.map(lambda _: self.start(role, gpus, cpus), range(count - len(taken))))
        return taken + started

    def stop(self, node: RayNode) -> None:
        node.stop()
        self.nodes.remove(node)

    def close(self) -> None:
        # Side by side: a node's stop is mostly waiting out its processes' SIGTERM grace (~1 s each).
        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
            list(pool.map(RayNode.stop, self.nodes))
        self.nodes.clear()
        self.idle.clear()
        self.mount_points.release()


class Run:
    """One stack's run on a cluster of its layout: its staged files and its own GPU worker nodes."""

    def __init__(self, p: dict, cluster: Cluster, stack: str):
        self.plan, self.cluster, self.stack = p, cluster, stack
        self.pods = placement.pods(p)
        assert layout(self.pods) == layout(cluster.pods)
        self.bucket = cluster.bucket
        self.head = cluster.head
        self.workers: list[PodNode] = []
        self.jobs: list[str] = []
        self.provider = RayJobProvider()
        self.outs: dict[str, dict] = {}  # each job's outputs as its create returned them
        stage(p, self.bucket, self.pods)

    def start(self, role: str, gpus: int, cpus: int) -> RayNode:
        """A new pod (a replacement KubeRay starts after a loss, never one already in the cluster)."""
        node = self.cluster.start(role, gpus, cpus)
        self.workers.append(node)
        return node

    def start_workers(self, pods: int, gpus: int) -> list[RayNode]:
        """The GPU worker pods (Cluster.take): the cluster then holds this run's pods and no others."""
        nodes = self.cluster.take(placement.WORKERS, gpus=gpus, cpus=2, count=pods)
        self.workers.extend(nodes)
        return nodes

    def stop(self, node: RayNode) -> None:
        self.cluster.stop(node)
        self.workers.remove(node)

    def host(self, role: str, path: str) -> Path:
        return in_bucket(self.bucket, placement.serving(self.pods[role], path), path)

    def ended(self) -> bool:
        """Whether every job of this run has ended (its actors gone or going, their GPUs coming back); a job
        the head never took (404) has nothing running."""
        try:
            for job in self.jobs:
                answer = requests.get(f"{self.head.address}/api/jobs/{job}", timeout=30)
                if answer.status_code != 404 and answer.json()["status"] not in TERMINAL:
                    return False
            return True
        except (requests.RequestException, ValueError, KeyError):
            return False

    def close(self) -> None:
        """The pods go back to the cluster for the next run once every job has ended; after a job that is
        still running (a failed test) they are stopped, so nothing of it holds the next run's GPUs."""
        if self.ended():
            self.cluster.idle.extend(self.workers)
            self.workers.clear()
            return
        for job in self.jobs:
            try:
                requests.post(f"{self.head.address}/api/jobs/{job}/stop", timeout=30)
            except requests.RequestException:
                pass
        for node in reversed(self.workers):
            self.cluster.stop(node)
        self.workers.clear()


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """One Ray head per mount layout, shared by the tests of this module (a head takes the longest to
    start). PATH leads to the venv: the head's raylet passes its environment to the job's driver."""
    made: dict[tuple, Cluster] = {}

    def get(pods: dict[str, placement.Pod]) -> Cluster:
        key = layout(pods)
        if key not in made:
            made[key] = Cluster(pods, tmp_path_factory.mktemp("rehearsal"))
        return made[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        try:
            yield get
        finally:
            for c in made.values():
                c.close()


# The rendered job's inputs the rehearsal does not take: the API server's address and the GPU group's scale (no
# Kubernetes here: the head's own address instead), the RayCluster's uid (asked of that API server), the readiness
# deadline of a real cluster's start.
NOT_HERE = ("gke", "scale", "cluster_uid", "ready_timeout_s", "__provider")


def submit(run: Run, steps: int, step_s: float = 0.5) -> str:
    """The run submitted by the job provider, as `pulumi up` does (the run id, the attempt and the recovery budget
    reach the supervisor in the attempt's env vars), with the rendered job's inputs (NOT_HERE aside), the stand-ins'
    entrypoint and this head's address."""
    entrypoint, runtime_env = job_inputs(run.plan, run.head, steps, step_s)
    job = {k: v for k, v in rendered_job(run.plan).items() if k not in NOT_HERE}
    run.jobs.append(f"rehearsal-{run.stack}")  # before the create: a head may take a job whose answer is lost
    created = run.provider.create({**job, "submission_id": run.jobs[-1], "entrypoint": entrypoint,
                                   "runtime_env": runtime_env, "address": run.head.address, "ready_timeout_s": 300})
    run.outs[created.id] = created.outs
    return created.id


def wait_done(run: Run, job_id: str, timeout: float = 900) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = requests.get(f"{run.head.address}/api/jobs/{job_id}", timeout=30).json()["status"]
        if status in TERMINAL:
            return status, job_logs(run.head.address, job_id)
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish in {timeout}s")


def worker_shape(p: dict) -> tuple[int, int]:
    """(GPU worker pods, GPUs each) as the stack renders them."""
    group = raycluster(p)["workerGroupSpecs"][0]
    per_pod = int(group["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
    return int(group["replicas"]), per_pod


# The costly case (a lost node, the restart, pruning) on the multi-node production stack; every other
# stack runs the same path through a shorter run of its own layout (train, save, merge, state).
FULL_STACK = "b200"
# Largest stacks first: a run takes the pods of its shape the one before it left and stops the rest, so each
# later, smaller run finds its pods among them. Any order is correct.
STACKS = [FULL_STACK, *sorted((f.stem.split(".", 1)[1] for f in REPO.glob("Pulumi.*.yaml")
                               if f.stem != f"Pulumi.{FULL_STACK}"), reverse=True)]


def stack_plan(stack: str) -> dict:
    return shipped_plan(stack)


def output_paths(run: Run) -> tuple[Path, Path]:
    """(checkpoint folder, merged folder) on the local bucket, as the where-things-run model maps them."""
    paths = placement.processes(run.plan, run.pods)
    ckpt = next(u.path for proc in paths for u in proc.uses if u.what.startswith("checkpoint shards"))
    merged = next(u.path for proc in paths for u in proc.uses if u.what.startswith("--merge-to"))
    return run.host(placement.WORKERS, ckpt), run.host(placement.WORKERS, merged)


@dataclasses.dataclass
class Finished:
    """What a rehearsal's run left, read as soon as its job ended (a later run may reuse its bucket folders)."""

    stack: str
    job: str
    status: str
    logs: str
    steps: int  # the run's total_training_steps
    world: int  # GPU worker processes: pods x GPUs each
    refreshed: dict  # the job's outputs after a `pulumi refresh` (the provider's read)
    steps_run: list[int]  # steps.log: every step the trainer ran, in order (again after a resume)
    tracker: str  # latest_checkpointed_iteration.txt
    saved: list[str]  # the global_step_* folders left
    shards: int  # the last step's model shards
    state: dict | None  # the supervisor's recovery state on the bucket
    merged_model: str
    merged_marker: dict | None
    datasets_cache: list[str]  # train.arrow files on the bucket (the datasets cache belongs on the pod's disk)
    library_path: str  # the job's LD_LIBRARY_PATH as the stack renders it
    tensorboard_local_dir: str  # where verl writes its events: the TaskRunner pod's own disk
    tensorboard: dict[str, str]  # event file -> what its copy in the bucket folder TensorBoard reads holds


def finished(run: Run, job: str, steps: int, world: int, timeout: float = 900) -> Finished:
    status, logs = wait_done(run, job, timeout)
    ckpt, merged = output_paths(run)
    env = rendered_job(run.plan)["runtime_env"]["env_vars"]
    last = ckpt / f"global_step_{steps}" / "actor"
    return Finished(
        stack=run.stack, job=job, status=status, logs=logs, steps=steps, world=world,
        refreshed=run.provider.read(job, run.outs[job]).outs,
        steps_run=[int(s) for s in file_text(ckpt / "steps.log").split()],
        tracker=file_text(ckpt / "latest_checkpointed_iteration.txt"),
        saved=sorted(d.name for d in ckpt.iterdir() if d.name.startswith("global_step_")) if ckpt.exists() else [],
        shards=len(list(last.glob("model_world_size_*_rank_*.pt"))),
        state=file_json(ckpt / "verl-gke-run.json"),
        merged_model=file_text(merged / "model.safetensors"), merged_marker=file_json(merged / ".verl-gke-merged.json"),
        datasets_cache=[str(p) for p in run.bucket.rglob("train.arrow")],
        library_path=env.get("LD_LIBRARY_PATH", "${LD_LIBRARY_PATH}"),
        tensorboard_local_dir=env[TENSORBOARD_LOCAL_ENV],
        tensorboard={name: file_text(run.host(placement.WORKERS, env[TENSORBOARD_BUCKET_ENV]) / name)
                     for name in re.findall(r"tensorboard events (events\.out\.tfevents\.\S+);", logs)})


def clear_outputs(run: Run) -> None:
    """No earlier run's checkpoints or merged model in this run's folders (stacks of one layout share a bucket)."""
    for folder in output_paths(run):
        shutil.rmtree(folder, ignore_errors=True)


def test_the_host_mount_points_are_removed_when_the_head_fails_to_start(tmp_path, monkeypatch):
    """A failed start never leaves the mount points it created behind on the machine running the tests.
    The dev stack's pods with their bucket mounts moved under tmp_path (and a registry of its own): the
    host's /data and /checkpoints may be in use by a rehearsal running in parallel."""
    pods = placement.pods(stack_plan("dev"))
    host = tmp_path / "host"
    host.mkdir()
    moved = {role: dataclasses.replace(pod, mounts=[
        dataclasses.replace(m, path=str(host / m.path.strip("/"))) if m.kind == "csi" else m for m in pod.mounts])
        for role, pod in pods.items()}
    mount_points = sorted({m.path for pod in moved.values() for m in pod.mounts if m.kind == "csi"})
    assert mount_points and not any(os.path.exists(m) for m in mount_points)
    (tmp_path / "state").mkdir()

    def refuse(self, timeout: float = 240):
        assert all(os.path.isdir(m) for m in mount_points)  # the mount points were there for the namespace
        raise RuntimeError("ray start failed")

    monkeypatch.setattr(PodNode, "start", refuse)
    with pytest.raises(RuntimeError, match="ray start failed"):
        Cluster(moved, tmp_path, state=tmp_path / "state")
    assert [m for m in mount_points if os.path.exists(m)] == []


def test_a_mount_point_is_removed_by_its_last_user_only(tmp_path):
    """Rehearsals in parallel (xdist workers) share the host's mount points: the first one out keeps them
    for the other, the last one removes what either created, and a point that was there before stays."""
    state, before = tmp_path / "state", tmp_path / "before"
    before.mkdir()
    points = {str(tmp_path / "data"), str(tmp_path / "checkpoints"), str(before)}
    first, second = HostMountPoints(points, state), HostMountPoints(points, state)
    first.claim()
    second.claim()
    first.release()
    assert all(os.path.isdir(m) for m in points)
    second.release()
    assert sorted(os.listdir(tmp_path)) == ["before", "state"]


def saved_step(ckpt: Path) -> int:
    """The step verl's tracker file names (0 before the first save or while it is rewritten)."""
    try:
        return int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    except (OSError, ValueError):
        return 0


@needs_namespaces
def test_a_mount_point_another_run_still_uses_is_kept(tmp_path):
    """Cleanup never pulls a bucket mount out from under another run's pods (shared machines, CI hosts)."""
    point, source = tmp_path / "data", tmp_path / "bucket"
    point.mkdir()
    source.mkdir()
    (source / "staged").write_text("verl")
    other = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-ec",
                              f"mount --bind {source} {point}; echo up; exec sleep 600"],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert other.stdout.readline().strip() == "up"
        remove_mount_points([point])
        assert point.is_dir()
        seen = subprocess.run(["nsenter", f"--mount=/proc/{other.pid}/ns/mnt", "cat", str(point / "staged")],
                              capture_output=True, text=True, timeout=60)
        assert seen.stdout == "verl", seen.stderr
    finally:
        other.kill()
        other.wait(timeout=60)
    remove_mount_points([point])  # nobody mounts it now: removed
    assert not point.exists()




def rehearsal(test):
    """A test of a rehearsal's run: real Ray nodes, each in its pod's mount namespace."""
    return pytest.mark.ray(needs_namespaces(test))


FULL_STEPS, SHORT_STEPS = 6, 2


def lose_a_node_and_finish(run: Run) -> Finished:
    """b200's run: a GPU node lost once step 3's checkpoint is complete (the tracker names it; steps.log grows
    before the save, and a kill between the two would resume from step 2 on a slow machine), its replacement
    pod started once the supervisor has seen the loss."""
    pods, gpus = worker_shape(run.plan)
    workers = run.start_workers(pods, gpus)
    job = submit(run, steps=FULL_STEPS, step_s=2)
    ckpt, _ = output_paths(run)
    deadline = time.monotonic() + 900
    while saved_step(ckpt) < 3:
        assert time.monotonic() < deadline, "the trainer never saved step 3"
        status = requests.get(f"{run.head.address}/api/jobs/{job}", timeout=30).json()["status"]
        assert status in ("PENDING", "RUNNING"), wait_done(run, job)[1][-4000:]
        time.sleep(1)
    run.stop(workers[0])  # a spot preemption: the node and everything on it are gone
    recovery = f"recovery 1 of {rendered_job(run.plan)['max_recoveries']}"
    wait_for_line(run.head.address, job, recovery, timeout=max(0, deadline - time.monotonic()))
    run.start(placement.WORKERS, gpus=gpus, cpus=2)
    return finished(run, job, FULL_STEPS, pods * gpus, timeout=1500)


def train_and_finish(run: Run) -> Finished:
    pods, gpus = worker_shape(run.plan)
    run.start_workers(pods, gpus)
    return finished(run, submit(run, steps=SHORT_STEPS), SHORT_STEPS, pods * gpus)


@pytest.fixture(scope="module")
def rehearsed(clusters):
    """stack -> its finished run, each run once per module: b200's loses a node, every other stack's is a short
    run of its own layout."""
    done: dict[str, Finished] = {}

    def get(stack: str) -> Finished:
        if stack not in done:
            p = stack_plan(stack)
            run = Run(p, clusters(placement.pods(p)), stack)
            try:
                clear_outputs(run)
                done[stack] = (lose_a_node_and_finish if stack == FULL_STACK else train_and_finish)(run)
            finally:
                run.close()
        return done[stack]

    return get


@rehearsal
@pytest.mark.parametrize("stack", STACKS)
def test_each_stacks_run_succeeds(stack, rehearsed):
    run = rehearsed(stack)
    assert run.status == "SUCCEEDED", run.logs[-4000:]


@rehearsal
@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_saves_every_step_with_a_shard_per_gpu(stack, rehearsed):
    run = rehearsed(stack)
    assert sorted(set(run.steps_run)) == list(range(1, run.steps + 1)) and run.steps_run[-1] == run.steps
    assert run.tracker == str(run.steps) and run.shards == run.world


@rehearsal
@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_keeps_the_recovery_state_on_the_bucket(stack, rehearsed):
    """The driver on the head writes it through the head's checkpoint mount, not to the head's own disk."""
    state = rehearsed(stack).state
    assert state is not None and state["attempts"]["1"]["outcome"] == "SUCCEEDED", state


@rehearsal
@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_merges_the_last_checkpoint_into_the_bucket(stack, rehearsed):
    run = rehearsed(stack)
    assert f"rank 0 after step {run.steps}" in run.merged_model
    assert run.merged_marker is not None and run.merged_marker["step"] == run.steps


@rehearsal
@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_keeps_the_datasets_cache_on_the_pods_disk(stack, rehearsed):
    assert rehearsed(stack).datasets_cache == []


@rehearsal
@pytest.mark.parametrize("stack", STACKS)
def test_each_stacks_gpu_actors_extend_the_library_path_of_their_node(stack, rehearsed):
    """`${LD_LIBRARY_PATH}` in the job's env is expanded from the GPU node's own value (the image's entries kept
    after GKE's driver and gIB folders), not replaced and not left literal."""
    run = rehearsed(stack)
    assert run.library_path.endswith(":${LD_LIBRARY_PATH}") or run.library_path == "${LD_LIBRARY_PATH}"
    seen = run.library_path.replace("${LD_LIBRARY_PATH}", image_env()["LD_LIBRARY_PATH"])
    assert f"LD_LIBRARY_PATH on the GPU nodes: {seen}\n" in run.logs, run.logs[-4000:]


@rehearsal
@pytest.mark.parametrize("stack", STACKS)
def test_each_stacks_tensorboard_events_are_written_on_the_pod_and_copied_to_the_bucket(stack, rehearsed):
    """verl writes its events on the TaskRunner pod's disk (one upload per record through GCS FUSE otherwise);
    the job's entry (components/scripts/verl_main.py) copies them to the bucket folder TensorBoard reads."""
    run = rehearsed(stack)
    assert not run.tensorboard_local_dir.startswith(("/data/", "/checkpoints/")), run.tensorboard_local_dir
    assert run.tensorboard and all(text.startswith("step ") for text in run.tensorboard.values()), run.logs[-4000:]


@rehearsal
def test_the_nccl_check_runs_before_each_trainer_start(rehearsed):
    """b200 spans two GPU nodes over RDMA: the supervisor runs the two-node check (its stand-in here) before
    the first trainer start and again before the restart after the lost node."""
    run = rehearsed(FULL_STACK)
    checks = re.findall(r"NCCL check \(stand-in\) passed: 2 nodes x 8 GPUs, 8 NICs each", run.logs)
    assert len(checks) == run.logs.count("starting the trainer") == 2, run.logs[-4000:]


@rehearsal
def test_the_run_id_and_attempt_reach_the_supervisor_through_the_attempts_env(rehearsed):
    run = rehearsed(FULL_STACK)
    assert f"run {run.job} attempt 1: SUCCEEDED" in run.logs, run.logs[-4000:]


@rehearsal
def test_a_lost_gpu_node_is_recovered_within_the_recovery_budget(rehearsed):
    run = rehearsed(FULL_STACK)
    budget = rendered_job(stack_plan(FULL_STACK))["max_recoveries"]
    assert f"recovery 1 of {budget}" in run.logs and f"recoveries used 1 of {budget}" in run.logs, run.logs[-4000:]
    restarts = run.state["attempts"]["1"]["restarts"]
    assert len(restarts) == 1 and "left the Ray cluster" in restarts[0]["reason"] and run.state["used"] == 1


@rehearsal
def test_refresh_reports_the_recovery(rehearsed):
    """`pulumi refresh`: the recovery shows in the outputs (jobRecoveries)."""
    refreshed = rehearsed(FULL_STACK).refreshed
    assert refreshed["status"] == "SUCCEEDED" and refreshed["recoveries"] == 1, refreshed


@rehearsal
def test_refresh_reports_the_supervisors_last_note_then_rays(rehearsed):
    """jobMessage: the supervisor's last note (the run's outcome, its exit and who releases the GPUs: here the
    release failed, as the head pod has no service account token; tests/test_gpu_release.py has one), then
    Ray's."""
    run = rehearsed(FULL_STACK)
    note, ray_says = run.refreshed["message"].rsplit(" | ", 1)
    assert note.startswith(f"run {run.job} attempt 1: SUCCEEDED, recoveries used 1 of ") and \
        'exit "succeeded" (code 0): the GPU release FAILED' in note, note
    assert ray_says == "Job finished successfully."


@rehearsal
def test_the_restarted_trainer_resumes_from_the_step_the_restart_recorded(rehearsed):
    """Read through the head's mount: a checkpoint the first trainer saved, not a start from the model."""
    run = rehearsed(FULL_STACK)
    resumed = re.findall(r"resuming from global_step_(\d+)", run.logs)
    assert resumed and int(resumed[-1]) >= 3, run.logs[-4000:]
    assert int(resumed[-1]) == run.state["attempts"]["1"]["restarts"][0]["from_step"]


@rehearsal
def test_the_supervisor_prunes_the_steps_verls_rotation_forgot_after_the_restart(rehearsed):
    """verl's rotation in the second trainer process knows only its own saves; the supervisor keeps the limit."""
    assert rehearsed(FULL_STACK).saved == [f"global_step_{FULL_STEPS - 1}", f"global_step_{FULL_STEPS}"]


@rehearsal
def test_the_merge_runs_on_a_gpu_node(rehearsed):
    """The head has no GPUs: the supervisor runs the merge on a worker."""
    logs = rehearsed(FULL_STACK).logs
    assert "merging" in logs and "on a GPU node" in logs, logs[-4000:]
