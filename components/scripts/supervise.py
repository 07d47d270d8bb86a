"""Supervise one training run inside its Ray job: recover from lost GPU nodes, merge, release the GPUs.

The Ray job's entrypoint is this script; the trainer (verl) is its child process. When the child
fails, the script asks Ray's state API whether a GPU worker node was lost while it ran. If so
(a spot preemption, a node repair), it waits with back-off until Ray reports every GPU again and
runs the trainer once more: verl continues from the last checkpoint (`trainer.resume_mode=auto`).
Any other failure fails the job at once: it would fail the same way again.

One budget covers both kinds of recovery: these in-run restarts and the job provider's
resubmissions (`-r<k>` attempts). It is kept in a small JSON file next to the checkpoints (on the
bucket, so it outlives the head), keyed by the run's submission id: a changed run starts afresh.
Each recovery and the final tally are printed as `[verl-gke]` lines, which the job provider reads.

After a successful run the last checkpoint is merged into a Hugging Face folder (verl's model
merger); a failed merge fails the job. At the end, whatever the outcome, the GPU worker group of
the RayCluster is scaled to zero through the Kubernetes API (the pod's service account), so idle
GPUs stop billing; the next submission scales it back.

Standard library only: it runs in the training image before anything else is known to work. What it
shares with the job provider (the attempt's env vars, its `[verl-gke]` lines, the worker group's patch)
is verl_gke_protocol, shipped into the same folder.
Every way it ends is named in EXITS (with its exit code: the trainer's on a deterministic failure, 0
success, 1 budget spent / GPUs never returned / merge failed / refused / crashed, 2 bad arguments, 143
stopped), each one releases the GPUs, and the last `[verl-gke] exit "<name>"` line says whether it did.
docs/gpu-release.md lists them with the job provider's failure paths.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # verl_gke_protocol ships next to this script
import nccl_check  # noqa: E402
import verl_gke_protocol as protocol  # noqa: E402

LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's trainer/ray_trainer.py writes it last
MERGED_MARKER = ".verl-gke-merged.json"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # the pod's projected service account token
K8S_API = "https://kubernetes.default.svc"
EXIT_GIVE_UP, EXIT_STOPPED = 1, 143


def log(message: str) -> None:
    print(protocol.line(message), flush=True)


# ----------------------------------------------------------------------------- the shared budget


class Budget:
    """Recoveries used by one run (base submission id), across its attempts, in a JSON file.

    used = (highest attempt - 1) resubmissions + every in-run restart of every attempt.
    """

    def __init__(self, path: str, run: str, attempt: int, floor: int, limit: int):
        self.path, self.run, self.attempt, self.limit = path, run, attempt, limit
        self.data = self._load()
        # An attempt recorded without "restarts" (state_problem lets it through) still gets a list.
        self.data.setdefault("attempts", {}).setdefault(str(attempt), {}).setdefault("restarts", [])
        self.data["max_recoveries"] = limit
        self.floor = floor  # what the provider counted: never report less

    def _load(self) -> dict:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError, RecursionError):
            return {"run": self.run}
        return data if isinstance(data, dict) and data.get("run") == self.run else {"run": self.run}

    @property
    def restarts(self) -> list[dict]:
        return self.data["attempts"][str(self.attempt)]["restarts"]

    @property
    def used(self) -> int:
        attempts = [int(k) for k in self.data["attempts"]]
        counted = max(attempts) - 1 + sum(len(a.get("restarts", [])) for a in self.data["attempts"].values())
        return max(counted, self.floor)

    def record(self, **fields) -> None:
        self.data["attempts"][str(self.attempt)].update(fields)
        self.data["used"] = self.used
        self.save()

    def save(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = f"{self.path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

    def tally(self) -> str:
        return protocol.tally(self.used, self.limit)


def state_problem(path: str, run: str) -> str | None:
    """What is wrong with the budget's state file or folder, before anything runs (None: usable).

    Budget reads a file of another run as a fresh start; a file of this run must have the shape Budget
    writes ({"run", "attempts": {"<n>": {"restarts": [{...}], ...}}}), and the folder must take a new file.
    """
    folder = os.path.dirname(path) or "."
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path)):
        return f"the state file {path} is not a regular file: remove it or pass another --state"
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".state-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return f"the state folder {folder} is not writable ({err.strerror or err}): check the bucket mount"
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: arrays nested thousands deep
        return (f"the state file {path} cannot be read as JSON ({str(err)[:200]}): delete it to start this run's "
                "budget afresh")
    if not isinstance(data, dict) or data.get("run") != run:
        return None  # another run's (or no) budget: Budget starts afresh
    attempts = data.get("attempts", {})
    shape_ok = isinstance(attempts, dict) and all(
        # ASCII digits, at most 9 (int() of thousands of digits raises; isdecimal() takes other scripts' digits)
        isinstance(k, str) and re.fullmatch(r"[0-9]{1,9}", k) is not None and int(k) >= 1 and isinstance(v, dict)
        and isinstance(v.get("restarts", []), list) and all(isinstance(r, dict) for r in v.get("restarts", []))
        for k, v in attempts.items())
    if not shape_ok:
        return (f"the state file {path} has an unexpected shape (attempts must map attempt numbers to "
                "{\"restarts\": [...]}): delete it to start this run's budget afresh")
    return None


# ----------------------------------------------------------------------------- Ray's state API


def alive_gpu_nodes(dashboard: str) -> dict[str, float] | None:
    """node id -> GPUs of every ALIVE node with GPUs; None when the dashboard does not answer."""
    try:
        with urllib.request.urlopen(f"{dashboard}/api/v0/nodes?limit=10000&detail=false", timeout=30) as resp:
            answer = json.load(resp)
    except (OSError, ValueError):
        return None
    result = answer.get("data", {}).get("result", {})
    nodes = result.get("result", []) if isinstance(result, dict) else result
    return {
        n["node_id"]: float(n.get("resources_total", {}).get("GPU", 0))
        for n in nodes
        if n.get("state") == "ALIVE" and float(n.get("resources_total", {}).get("GPU", 0)) > 0
    }


def lost_nodes(dashboard: str, before: dict[str, float], expected_gpus: int, settle_s: float) -> str | None:
    """Why the run lost GPUs (a node it started with is gone, or GPUs are missing), or None.

    Ray marks a node dead only after its health checks fail, possibly after the trainer has already
    died of it: look again for up to `settle_s` before calling the failure deterministic.
    """
    deadline = time.monotonic() + settle_s
    while True:
        now = alive_gpu_nodes(dashboard)
        if now is not None:
            gone = sorted(set(before) - set(now))
            if gone:
                return f"{len(gone)} GPU worker node(s) left the Ray cluster ({', '.join(g[:12] for g in gone)})"
            if sum(now.values()) < expected_gpus:
                return f"only {sum(now.values()):g} of {expected_gpus} GPUs are in the Ray cluster"
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))


def wait_for_gpus(dashboard: str, expected: int, timeout_s: float) -> dict[str, float] | None:
    """The GPU nodes once `expected` GPUs are back; None at the deadline."""
    deadline, step = time.monotonic() + timeout_s, 0
    while True:
        nodes = alive_gpu_nodes(dashboard)
        if nodes is not None and sum(nodes.values()) >= expected:
            return nodes
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(30.0, 1.0 * 2**step, max(0.0, deadline - time.monotonic())))
        step += 1


# ----------------------------------------------------------------------------- checkpoints, merge


def latest_step(checkpoint_dir: str) -> int | None:
    try:
        with open(os.path.join(checkpoint_dir, LATEST_FILE)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


# What a start loads. verl 0.6.1 loads what actor.checkpoint.load_contents names (utils/checkpoint/
# fsdp_checkpoint_manager.py load_checkpoint), and that follows save_contents (trainer/config/actor/actor.yaml)
# whatever the checkpoint holds: a full load of a model-only checkpoint dies on the missing
# optim_world_size_<W>_rank_<r>.pt. What the contents are is no part of the run's key (grpoSaveContents
# auto changes with the capacity type), so the latest checkpoint decides: without optimizer shards the
# trainer loads 'model' and 'extra' (the weights, the LR scheduler, the RNG; AdamW's moments start afresh).
LOAD_CONTENTS_KEY = "actor_rollout_ref.actor.checkpoint.load_contents"
MODEL_ONLY_LOAD = f"{LOAD_CONTENTS_KEY}=[model,extra]"  # Hydra's list form, as recipe/grpo.py renders save_contents
OPTIM_SHARD = re.compile(r"^optim_world_size_\d+_rank_\d+\.pt$")


def load_overrides(checkpoint_dir: str) -> tuple[list[str], str | None]:
    """Overrides for the next trainer start that make it load what the latest checkpoint holds, and why
    (None: no checkpoint, verl trains from the start)."""
    step = latest_step(checkpoint_dir) if checkpoint_dir else None
    if step is None:
        return [], None
    actor = os.path.join(checkpoint_dir, f"global_step_{step}", "actor")
    try:
        names = os.listdir(actor)
    except OSError as err:
        return [], f"{actor} cannot be listed ({err.strerror or err}): no load_contents override, verl reports it"
    if any(OPTIM_SHARD.match(n) for n in names):
        return [], f"global_step_{step} holds optimizer shards: loading what the run saves (no load_contents override)"
    return [MODEL_ONLY_LOAD], (f"global_step_{step} has no optimizer shards (saved model-only): {MODEL_ONLY_LOAD}, "
                               "the optimizer's moments start afresh")


# The merger loads every shard into CPU memory (verl model_merger/fsdp_model_merger.py): about twice
# the parameter count in bytes, more than the head pod has for a 32B model, so it runs where the GPUs
# were, in a Ray task that holds one GPU (nothing else needs it once training has ended). The task
# writes the merged marker itself: the merged folder is on the workers' writable bucket mount, the
# head mounts the data read-only. A node lost under it (the group scaled down) is retried.
ON_WORKER = """
import json, os, subprocess, sys
import ray
ray.init()
cmd, target, marker, timeout = json.loads(sys.argv[1])
def run():
    try:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        return 124, (err.stdout or "") + f"\\nmerge timed out after {timeout}s"
    if done.returncode == 0:
        with open(os.path.join(target, marker["name"]), "w") as f:
            json.dump(marker["content"], f)
    return done.returncode, done.stdout
task = ray.remote(num_gpus=1, max_retries=2)(run)
code, out = ray.get(task.remote())
sys.stdout.write(out)
sys.exit(code)
"""


def merge(args: argparse.Namespace) -> str | None:
    """Merge the last checkpoint into args.merge_to; the reason on failure, None on success."""
    step = latest_step(args.checkpoint_dir)
    if step is None:
        return f"no checkpoint to merge: {os.path.join(args.checkpoint_dir, LATEST_FILE)} is missing"
    actor = os.path.join(args.checkpoint_dir, f"global_step_{step}", "actor")
    cmd = [*shlex.split(args.merge_cmd), "--local_dir", actor, "--target_dir", args.merge_to]
    where = "on a GPU node" if args.merge_on_worker else "here"
    log(f"merging {actor} into {args.merge_to} {where} (at most {args.merge_timeout_s:g}s): {shlex.join(cmd)}")
    marker = {"run": args.run_id, "step": step, "source": actor}
    if args.merge_on_worker:
        payload = [cmd, args.merge_to, {"name": MERGED_MARKER, "content": marker}, args.merge_timeout_s]
        cmd = [sys.executable, "-c", ON_WORKER, json.dumps(payload)]
    try:
        # The outer bound also covers scheduling the task: a stalled merge never holds the GPUs for good.
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=args.merge_timeout_s + 300)
    except subprocess.TimeoutExpired:
        return f"model merge of global_step_{step} did not finish within {args.merge_timeout_s:g}s"
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        last = "\n".join(done.stdout.strip().splitlines()[-10:])
        return f"model merge of global_step_{step} failed with exit code {done.returncode}:\n{last}"
    if not args.merge_on_worker:
        with open(os.path.join(args.merge_to, MERGED_MARKER), "w") as f:
            json.dump(marker, f)
    log(f"merged global_step_{step} into {args.merge_to}")
    return None


STEP_DIR = re.compile(r"^global_step_(\d+)$")


def prune(checkpoint_dir: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` global_step_N folders (never the one the tracker names).

    verl rotates only what its current process saved (utils/checkpoint/checkpoint_manager.py,
    max_ckpt_to_keep), so every restart strands the older steps; this keeps the bucket at the sized count.
    """
    if keep < 1 or not checkpoint_dir:
        return []
    try:
        steps = sorted((int(m.group(1)), name) for name in os.listdir(checkpoint_dir)
                       if (m := STEP_DIR.match(name)) and os.path.isdir(os.path.join(checkpoint_dir, name)))
    except OSError:
        return []
    latest = latest_step(checkpoint_dir)
    doomed = [name for step, name in steps[:-keep] if step != latest]
    removed = []
    for name in doomed:
        try:
            shutil.rmtree(os.path.join(checkpoint_dir, name))
            removed.append(name)
        except OSError as err:
            log(f"could not prune {name}: {err}")
    if removed:
        log(f"pruned {', '.join(removed)} (keeping the newest {keep})")
    return removed


def wait_for_one_node(dashboard: str, timeout_s: float) -> None:
    """Until Ray reports at most one GPU node (or the deadline): the merge then lands on the one kept."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = alive_gpu_nodes(dashboard)
        if nodes is not None and len(nodes) <= 1:
            return
        time.sleep(5.0)


# ----------------------------------------------------------------------------- a run that already finished

TRAINED_MARKER = ".verl-gke-trained.json"
# What fixes a run's last step besides what keys its checkpoint folder (batch size, data, world size:
# stacks.checkpoints.run_identity): the trainer's length, as its Hydra overrides set it (the last one wins).
LENGTH_KEYS = ("trainer.total_epochs", "trainer.total_training_steps")


def run_length(trainer: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = dict.fromkeys(LENGTH_KEYS)
    for word in trainer:
        key, sep, value = word.lstrip("+").partition("=")
        if sep and key in found:
            found[key] = value
    return found


def finished_step(checkpoint_dir: str, trainer: list[str]) -> int | None:
    """The step this run's training finished at, while the tracker still names it (a trainer of the same
    length exited 0 there: mark_trained); None otherwise. Resumed there, verl 0.6.1 would train one step
    more and save it (trainer/ppo/ray_trainer.py fit: global_steps is the checkpoint's N, then N + 1, and
    is_last_step = N + 1 >= total holds at once), and the merge would take step N + 1."""
    if not checkpoint_dir:
        return None
    try:
        with open(os.path.join(checkpoint_dir, TRAINED_MARKER)) as f:
            marker = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    step = latest_step(checkpoint_dir)
    if isinstance(marker, dict) and step is not None and marker.get("step") == step \
            and marker.get("length") == run_length(trainer):
        return step
    return None


def mark_trained(checkpoint_dir: str, trainer: list[str]) -> None:
    """Record that the trainer exited 0 at the tracker's step (nothing when it saved nothing)."""
    step = latest_step(checkpoint_dir) if checkpoint_dir else None
    if step is None:
        return
    path = os.path.join(checkpoint_dir, TRAINED_MARKER)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"step": step, "length": run_length(trainer)}, f)
    os.replace(tmp, path)


def merged_already(args: argparse.Namespace) -> int | None:
    """The step whose merge is already in args.merge_to (its marker names the tracker's checkpoint)."""
    step = latest_step(args.checkpoint_dir)
    try:
        with open(os.path.join(args.merge_to, MERGED_MARKER)) as f:
            marker = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    source = os.path.join(args.checkpoint_dir, f"global_step_{step}", "actor")
    if step is not None and isinstance(marker, dict) and marker.get("step") == step and marker.get("source") == source:
        return step
    return None


# ----------------------------------------------------------------------------- releasing the GPUs

RELEASE_ATTEMPTS, RELEASE_TIMEOUT_S = 3, 30.0
# Ray's job supervisor SIGKILLs the entrypoint's whole process tree this many seconds after its SIGTERM
# (ray/dashboard/modules/job/job_supervisor.py, ray 2.60: int(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S",
# DEFAULT_RAY_JOB_STOP_WAIT_TIME_S = 3)), read from the env the job's runtime env gives it, as this
# process gets it too. catalog.ray.JOB_STOP_WAIT_S sets it; of that wait, STOP_RECORD_S stays for the
# stop record and the trainer's exit, the rest bounds the release.
STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
RAY_DEFAULT_STOP_WAIT_S = 3
STOP_RECORD_S = 15.0


def stop_release_s() -> float:
    """Seconds the release may take once the job is stopped."""
    try:
        wait = int(os.environ.get(STOP_WAIT_ENV, RAY_DEFAULT_STOP_WAIT_S))
    except ValueError:
        wait = RAY_DEFAULT_STOP_WAIT_S  # Ray's int() raises too, and SIGKILLs nothing: the default is the bound
    return max(1.0, wait - STOP_RECORD_S)


def add_release_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--release-raycluster", default="", help="scale this RayCluster's GPU group to 0 at the end")
    p.add_argument("--release-group", default="gpu-group")
    p.add_argument("--release-group-index", type=int, default=0)
    p.add_argument("--k8s-api", default=K8S_API)
    p.add_argument("--k8s-sa-dir", default=SA_DIR)


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str):  # no usage printed, no exit: the caller decides
        raise ValueError(message)


def release_options(argv: list[str]) -> argparse.Namespace | None:
    """The release options alone, from a command line the full parser refused (None: those too are unreadable)."""
    p = _QuietParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    add_release_options(p)
    cut = argv.index("--") if "--" in argv else len(argv)
    try:
        args, _ = p.parse_known_args(argv[:cut])
    except (argparse.ArgumentError, ValueError):
        return None
    return args


def release_gpus(args: argparse.Namespace, replicas: int = 0, deadline: float | None = None) -> bool:
    """Scale the RayCluster's GPU worker group to `replicas` (and minReplicas: KubeRay clamps to min).

    A JSON patch with a `test` on the group's name: it never scales another group by position.
    Best effort: a failure is printed, never turns a good run into a failed job. `deadline` (monotonic)
    bounds all attempts together.
    """
    if not args.release_raycluster:
        return False
    sa_dir = args.k8s_sa_dir
    try:
        with open(os.path.join(sa_dir, "token")) as f:
            token = f.read().strip()
        with open(os.path.join(sa_dir, "namespace")) as f:
            namespace = f.read().strip()
    except OSError as err:
        log(f"GPU release skipped: no service account token ({err})")
        return False
    # A field manager of our own: server-side apply then records who set the replicas (not Pulumi).
    path = protocol.raycluster_path(namespace, args.release_raycluster) + "?fieldManager=verl-gke-supervisor"
    patch = protocol.worker_group_patch(args.release_group_index, args.release_group, replicas)
    request = urllib.request.Request(
        args.k8s_api.rstrip("/") + path, data=json.dumps(patch).encode(), method="PATCH",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json-patch+json"})
    ca = os.path.join(sa_dir, "ca.crt")
    context = ssl.create_default_context(cafile=ca) if os.path.exists(ca) else None
    for attempt in range(RELEASE_ATTEMPTS):
        left = RELEASE_TIMEOUT_S if deadline is None else deadline - time.monotonic()
        if left <= 0:
            log("GPU release failed: out of time")
            return False
        try:
            with urllib.request.urlopen(request, timeout=min(RELEASE_TIMEOUT_S, left), context=context):
                log(f"released the GPUs: {args.release_raycluster}/{args.release_group} scaled to {replicas} "
                    "(the node pool drains the idle nodes; the next submission scales it back)")
                return True
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:500]
            log(f"GPU release failed: HTTP {err.code} {detail}")
            if err.code < 500:
                return False
        except OSError as err:
            log(f"GPU release failed: {err}")
        pause = 2.0 * (attempt + 1)
        time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
    return False


def release_note(args: argparse.Namespace | None, released: bool) -> str:
    """Who releases the GPUs now, for the supervisor's last line (docs/gpu-release.md)."""
    if released:
        return "the GPUs are released"
    if args is None:
        return ("the release options cannot be read either: the GPU group stays up until the next `pulumi up` "
                "replaces the job, or you scale it to 0 (docs/gpu-release.md has the command)")
    if not args.release_raycluster:
        return "no GPU release asked for (--release-raycluster): the GPU group stays as it is"
    patch = json.dumps(protocol.worker_group_patch(args.release_group_index, args.release_group, 0))
    return (f"the GPU release FAILED: the GPU nodes keep billing until the next `pulumi up` replaces the job "
            f"or you run: kubectl patch raycluster {args.release_raycluster} --type json -p '{patch}' "
            "(in the RayCluster's namespace)")


# ----------------------------------------------------------------------------- the loop

# Every way the supervisor ends, by name -> exit code (None: the trainer's own). Each has a row in
# docs/gpu-release.md, and each releases the GPU group: Supervisor.run's `finally`, main for bad arguments.
EXITS: dict[str, int | None] = {
    "bad arguments": 2,
    "refused before training": EXIT_GIVE_UP,  # before_training: the state file or folder, the checks
    "budget spent before this attempt": EXIT_GIVE_UP,
    "NCCL check failed": EXIT_GIVE_UP,  # before each trainer start on RDMA stacks: components/scripts/nccl_check.py
    "trainer failed, no node lost": None,
    "node lost, budget spent": EXIT_GIVE_UP,
    "GPUs did not return": EXIT_GIVE_UP,
    "merge failed": EXIT_GIVE_UP,
    "succeeded": 0,
    "stopped": EXIT_STOPPED,
    "crashed": EXIT_GIVE_UP,  # an error of the supervisor itself (a bug, the bucket mount gone)
}


class Ending(NamedTuple):  # not a dataclass: the tests load this file without registering it as a module
    exit: str  # a key of EXITS
    code: int
    summary: str  # the outcome, as the run's last line says it (the job provider's message)


def ending(name: str, summary: str, code: int | None = None) -> Ending:
    fixed = EXITS[name]
    return Ending(name, fixed if fixed is not None else int(code or 0), summary)


def announce(end: Ending, args: argparse.Namespace | None, released: bool) -> None:
    """The run's last line, after the release: the outcome, the exit's name and who releases the GPUs."""
    log(f'{end.summary}; exit "{end.exit}" (code {end.code}): {release_note(args, released)}')


def before_training(args: argparse.Namespace) -> str | None:
    """Why this attempt must not start (None: it may). Runs inside the release guard, before the budget:
    a check added here ends the run as "refused before training", with the GPUs released."""
    return state_problem(args.state, args.run_id)


class StoppedError(Exception):
    pass


class Supervisor:
    """One attempt of a run. `run` is the guard around everything else: whatever ends it, the GPUs are
    released exactly once (first thing on a stop, where Ray's SIGKILL is near)."""

    def __init__(self, args: argparse.Namespace, trainer: list[str]):
        self.args, self.trainer = args, trainer
        self.budget: Budget | None = None
        self.child: subprocess.Popen | None = None
        self.released = False
        self.release_tried = False
        self._starting = False  # inside Popen: a stop is held (_stop_pending) until the child is known
        self._stop_pending: int | None = None

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        end: Ending | None = None
        try:
            try:
                end = self._supervise()
            except StoppedError:
                end = self._stopped()
        except Exception:  # noqa: BLE001 - a bug or a lost mount: the traceback is printed, the GPUs still go
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            end = ending("crashed", f"{self._who()}: FAILED, the supervisor crashed ({sys.exc_info()[1]!r}, "
                                    "traceback above)")
            self._record(outcome="FAILED", reason="the supervisor crashed")
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the release below must not be cut short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if not self.release_tried:
                self.released = release_gpus(self.args)
            if end is not None:
                announce(end, self.args, self.released)
        return end.code

    def _on_stop(self, signum, _frame):
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)
        if self._starting:
            self._stop_pending = signum
            return
        raise StoppedError()

    def _start_trainer(self, extra: list[str]) -> None:
        """Popen, where a stop raised after the fork would lose the trainer (never signalled, never waited
        for): the stop is held until self.child is set, then passed on. A blocked signal mask would not do:
        the trainer would inherit it and ignore Ray's SIGTERM."""
        self._starting = True
        try:
            self.child = subprocess.Popen([*self.trainer, *extra])
        finally:
            self._starting = False
        if self._stop_pending is not None:
            self.child.send_signal(self._stop_pending)
            raise StoppedError()

    def _record(self, **fields) -> None:
        """A record that must not end the run: a failure to write it is printed."""
        if self.budget is None:
            return
        try:
            self.budget.record(**fields)
        except OSError as err:
            log(f"could not write the run's state {self.args.state}: {err}")

    def _stopped(self) -> Ending:
        # `ray job stop` (or a replacement by `pulumi up`): Ray SIGKILLs the process group
        # RAY_JOB_STOP_WAIT_TIME_S after its SIGTERM, so release first, then record, then wait for the trainer.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.release_tried = True  # once: a second try would run past Ray's SIGKILL
        self.released = release_gpus(self.args, deadline=time.monotonic() + stop_release_s())
        self._record(outcome="STOPPED")
        if self.child is not None:
            try:
                self.child.wait(timeout=self.args.stop_grace_s)
            except subprocess.TimeoutExpired:
                self.child.kill()
        return ending("stopped", f"{self._who()}: STOPPED{f' ({self.budget.tally()})' if self.budget else ''}")

    def _who(self) -> str:
        return f"run {self.args.run_id} attempt {self.args.attempt}"

    def _supervise(self) -> Ending:
        args = self.args
        if problem := before_training(args):
            return ending("refused before training", f"{self._who()}: FAILED before training, {problem}")
        self.budget = budget = Budget(args.state, args.run_id, args.attempt, args.used, args.max_recoveries)
        if budget.used > budget.limit:
            budget.record(outcome="FAILED", reason="recovery budget spent before this attempt")
            return ending("budget spent before this attempt",
                          f"{self._who()}: FAILED, recovery budget spent ({budget.tally()})")
        budget.record(outcome="RUNNING")
        done = finished_step(args.checkpoint_dir, self.trainer)
        if done is not None:
            log(f"training already finished at global_step_{done} ({TRAINED_MARKER}): the trainer is not started "
                "again (verl would train one step more); pruning and merging only")
            prune(args.checkpoint_dir, args.keep)
        elif (failed := self._train(budget)) is not None:
            return failed
        if args.merge_to:
            if (step := merged_already(args)) is not None:
                log(f"global_step_{step} is already merged into {args.merge_to}")
            else:
                nodes = alive_gpu_nodes(args.dashboard) or {}
                if len(nodes) > 1 and release_gpus(args, replicas=1):
                    # The merge needs one GPU node: the others stop billing now, not after the merge.
                    wait_for_one_node(args.dashboard, args.settle_s)
                if problem := merge(args):
                    budget.record(outcome="FAILED", reason=problem.splitlines()[0])
                    return ending("merge failed", f"{self._who()}: FAILED, {problem} ({budget.tally()})")
            budget.record(merged=args.merge_to, merged_step=latest_step(args.checkpoint_dir))
        budget.record(outcome="SUCCEEDED")
        where = f", merged model at {args.merge_to}" if args.merge_to else ""
        return ending("succeeded", f"{self._who()}: SUCCEEDED, {budget.tally()}{where}")

    def _train(self, budget: Budget) -> Ending | None:
        """The trainer until it succeeds (None), restarted after each lost GPU node while the budget lasts."""
        args = self.args
        while True:
            if args.nccl_check and (code := nccl_check.in_subprocess(args.nccl_check)):
                budget.record(outcome="FAILED", reason=f"the NCCL check failed (exit code {code})")
                return ending("NCCL check failed", f"{self._who()}: FAILED before training, the NCCL check failed "
                              f"with exit code {code} (its log above) ({budget.tally()})")
            before = alive_gpu_nodes(args.dashboard) or {}
            step = latest_step(args.checkpoint_dir) if args.checkpoint_dir else None
            extra, why_load = load_overrides(args.checkpoint_dir)
            if why_load:
                log(f"resume: {why_load}")
            log(f"starting the trainer (attempt {args.attempt}, {budget.tally()}, "
                f"resuming from {f'global_step_{step}' if step else 'the start'}): "
                f"{shlex.join([*self.trainer, *extra])}")
            self._start_trainer(extra)
            code = self.child.wait()
            self.child = None
            prune(args.checkpoint_dir, args.keep)
            if code == 0:
                mark_trained(args.checkpoint_dir, self.trainer)
                return None
            why = lost_nodes(args.dashboard, before, args.expected_gpus, args.settle_s)
            if why is None:
                budget.record(outcome="FAILED", reason=f"trainer exit code {code}, no node lost: not retried")
                return ending("trainer failed, no node lost",
                              f"{self._who()}: FAILED, the trainer exited with code {code} and no GPU node was "
                              f"lost, so it would fail the same way again: not retried ({budget.tally()})", code)
            if budget.used >= budget.limit:
                budget.record(outcome="FAILED", reason=f"{why}; recovery budget spent")
                return ending("node lost, budget spent", f"{self._who()}: FAILED, {why}; no recovery left "
                                                         f"({budget.tally()})")
            budget.restarts.append({"reason": why, "exit_code": code, "from_step": latest_step(args.checkpoint_dir),
                                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            budget.record(outcome="RECOVERING")
            n = len(budget.restarts)
            pause = min(args.backoff_cap_s, args.backoff_s * 2 ** (n - 1))
            log(f"{protocol.recovery(budget.used, budget.limit, why)}; waiting {pause:g}s, then up to "
                f"{args.gpu_wait_s:g}s for {args.expected_gpus} GPUs")
            time.sleep(pause)
            if wait_for_gpus(args.dashboard, args.expected_gpus, args.gpu_wait_s) is None:
                budget.record(outcome="FAILED", reason=f"{why}; the GPUs did not return in {args.gpu_wait_s:g}s")
                return ending("GPUs did not return", f"{self._who()}: FAILED, the GPUs did not return within "
                                                     f"{args.gpu_wait_s:g}s ({budget.tally()})")


def run(args: argparse.Namespace, trainer: list[str]) -> int:
    return Supervisor(args, trainer).run()


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        print("usage: supervise.py [options] -- <trainer command>", file=sys.stderr)
        sys.exit(2)
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The job provider sets these per attempt in the runtime env (protocol.attempt_env).
    env = os.environ.get
    p.add_argument("--run-id", default=env(protocol.RUN_ENV), help="the run's base submission id (the budget's key)")
    p.add_argument("--max-recoveries", type=int, default=env(protocol.MAX_ENV))
    p.add_argument("--attempt", type=int, default=int(env(protocol.ATTEMPT_ENV, "1")))
    p.add_argument("--used", type=int, default=int(env(protocol.USED_ENV, "0")))
    p.add_argument("--state", required=True, help="the budget's JSON file (on the bucket)")
    p.add_argument("--expected-gpus", type=int, required=True)
    p.add_argument("--dashboard", default="http://127.0.0.1:8265", help="this Ray cluster's dashboard")
    p.add_argument("--settle-s", type=float, default=90.0, help="how long a lost node may take to show")
    p.add_argument("--backoff-s", type=float, default=30.0)
    p.add_argument("--backoff-cap-s", type=float, default=600.0)
    p.add_argument("--gpu-wait-s", type=float, default=3600.0)
    p.add_argument("--stop-grace-s", type=float, default=2.0)
    p.add_argument("--checkpoint-dir", default="", help="verl's trainer.default_local_dir")
    p.add_argument("--merge-to", default="", help="merge the last checkpoint into this folder on success")
    p.add_argument("--merge-cmd", default="python3 -m verl.model_merger merge --backend fsdp")
    p.add_argument("--merge-timeout-s", type=float, default=3600.0,
                   help="give up on the merge after this long (the GPUs are released either way)")
    p.add_argument("--keep", type=int, default=0,
                   help="keep the newest N checkpoints after each trainer run (verl's max_actor_ckpt_to_keep)")
    p.add_argument("--merge-on-worker", action="store_true",
                   help="run the merge as a Ray task on a GPU node: it holds the whole model in memory")
    add_release_options(p)
    p.add_argument("--nccl-check", default="",
                   help="arguments of nccl_check.py (next to this script), run before each trainer start: "
                        "a failed check fails the job before training")
    args = p.parse_args(argv[:cut])
    trainer = argv[cut + 1:]
    if not trainer:
        p.error("no trainer command after --")
    if args.run_id is None or args.max_recoveries is None:
        p.error(f"--run-id and --max-recoveries (or {protocol.RUN_ENV} and {protocol.MAX_ENV}) are required")
    if args.merge_to and not args.checkpoint_dir:
        p.error("--merge-to needs --checkpoint-dir")
    if args.max_recoveries < 0 or args.expected_gpus < 0 or args.attempt < 1:
        p.error("--max-recoveries and --expected-gpus must be >= 0, --attempt >= 1")
    return args, trainer


def main(argv: list[str]) -> int:
    """Bad arguments release too: what of the release options can be read is used."""
    try:
        args, trainer = parse(argv)
    except SystemExit as err:
        if not err.code:
            raise  # --help
        release = release_options(argv)
        released = release is not None and release_gpus(release)
        announce(ending("bad arguments", "FAILED before training, bad arguments (the usage error above)"),
                 release, released)
        return EXITS["bad arguments"]
    return run(args, trainer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
