"""Where things run: each process of a run, the pod it lands on, and the mount serving every path it uses.

Derived from the rendered objects of a plan (tools.plan): the pods (the staging Job, the RayCluster's
head and worker group), their volumes, the PVCs and PVs behind them, the Ray job's runtime env and its
command (the plan's `job`: recipe.job_spec, the spec its entrypoint is rendered from). Nothing here lists
a path by hand: each comes from an argument, a Hydra override or an environment variable the stack
registers. Where each process lands, and why:

- the job's driver (our run supervisor, and verl's `main_ppo` as its child) on the head: Ray's job
  manager pins a driver to the head node unless the submission asks for entrypoint resources or the
  head sets RAY_JOB_ALLOW_DRIVER_ON_WORKER_NODES (ray-project/ray python/ray/dashboard/modules/job/
  job_manager.py `_get_scheduling_strategy`, Ray 2.49-2.60);
- verl's TaskRunner on a GPU worker: it is a Ray actor asking for one CPU (verl v0.6.1
  trainer/main_ppo.py `@ray.remote(num_cpus=1)`) and the head offers none (`num-cpus: "0"`);
- verl's FSDP/vLLM workers on the GPU workers (GPU actors);
- the model merge on one GPU worker: a Ray task asking for one GPU (supervise.py ON_WORKER);
- the staging Job's container in its own pod.
These placements are checked against real Ray (2.60 here) by tests/test_rehearsal.py: a head with
num-cpus 0 and a worker node, each in its pod's mount namespace; the driver only finds the head's
mounts, the TaskRunner and the merge only the workers'.

Checks (each fails the plan): a path that must reach the bucket with no bucket mount in its pod; a
path that must stay on the pod's disk served by a bucket mount; a written path on a read-only mount;
two volumes of one pod that the kubelet would take as one (same CSI driver and volume handle:
kubernetes pkg/kubelet/volumemanager/cache/desired_state_of_world.go @00661844, catalog.gcsfuse).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from catalog.paths import TENSORBOARD_BUCKET_ENV
from recipe.job_spec import JobSpec

DRIVER_ON_WORKERS_ENV = "RAY_JOB_ALLOW_DRIVER_ON_WORKER_NODES"
ENTRYPOINT_RESOURCE_KEYS = ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory",
                            "entrypoint_resources")
HEAD, WORKERS, JOB = "head", "workers", "staging"
BUCKET, LOCAL = "bucket", "local"  # where a path must live


@dataclass(frozen=True)
class Mount:
    path: str
    volume: str
    kind: str  # csi | emptyDir | hostPath | configMap | ...
    read_only: bool
    csi: tuple[str, str] | None = None  # (driver, volume handle) of a PV-backed volume
    only_dir: str = ""  # the PV's only-dir mount option: the bucket folder this mount shows


@dataclass
class Pod:
    role: str
    label: str
    mounts: list[Mount]
    env: dict[str, str]
    head_cpus: str | None = None


@dataclass(frozen=True)
class Use:
    path: str
    write: bool
    lives: str  # BUCKET or LOCAL
    what: str


@dataclass
class Process:
    name: str
    pod: str  # HEAD / WORKERS / JOB
    why: str
    uses: list[Use] = field(default_factory=list)


@dataclass(frozen=True)
class Row:
    process: str
    pod: str
    why: str
    path: str
    access: str
    mount: str
    problem: str | None


def _claims(plan: dict[str, Any]) -> dict[str, tuple[str, str, bool, str]]:
    """PVC name -> (CSI driver, volume handle, read-only by mount option, only-dir)."""
    pvs = {}
    for r in plan["resources"]:
        if r["type"] == "kubernetes:core/v1:PersistentVolume":
            spec = r["inputs"]["spec"]
            csi = spec.get("csi") or {}
            options = spec.get("mountOptions") or []
            only = next((o.split("=", 1)[1] for o in options if o.startswith("only-dir=")), "")
            pvs[r["inputs"]["metadata"]["name"]] = (csi.get("driver", ""), str(csi.get("volumeHandle", "")),
                                                   "ro" in options, only)
    claims = {}
    for r in plan["resources"]:
        if r["type"] == "kubernetes:core/v1:PersistentVolumeClaim":
            volume = r["inputs"]["spec"].get("volumeName")
            if volume in pvs:
                claims[r["inputs"]["metadata"]["name"]] = pvs[volume]
    return claims


def _pod(role: str, label: str, template: dict, claims: dict) -> Pod:
    spec = template.get("spec") or {}
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    (container, *_) = spec.get("containers") or [{}]
    mounts = []
    for m in container.get("volumeMounts") or []:
        v = volumes.get(m["name"], {})
        kind = next((k for k in v if k != "name"), "missing")
        csi, ro, only = None, bool(m.get("readOnly")), ""
        if kind == "persistentVolumeClaim":
            claim = v["persistentVolumeClaim"]
            ro = ro or bool(claim.get("readOnly"))
            if claim.get("claimName") in claims:
                driver, handle, ro_option, only = claims[claim["claimName"]]
                csi, ro, kind = (driver, handle), ro or ro_option, "csi"
        mounts.append(Mount(m["mountPath"], m["name"], kind, ro, csi, only))
    env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
    return Pod(role, label, mounts, env)


def pods(plan: dict[str, Any]) -> dict[str, Pod]:
    claims = _claims(plan)
    out: dict[str, Pod] = {}
    for r in plan["resources"]:
        inputs = r["inputs"]
        if r["type"] == "kubernetes:batch/v1:Job":
            out[JOB] = _pod(JOB, f"Job {inputs['metadata'].get('name', r['name'])}", inputs["spec"]["template"], claims)
        elif r["type"].startswith("kubernetes:") and inputs.get("kind") == "RayCluster":
            name = inputs["metadata"]["name"]
            head = inputs["spec"]["headGroupSpec"]
            out[HEAD] = _pod(HEAD, f"{name} head", head["template"], claims)
            out[HEAD].head_cpus = (head.get("rayStartParams") or {}).get("num-cpus")
            (group, *_) = inputs["spec"]["workerGroupSpecs"]
            out[WORKERS] = _pod(WORKERS, f"{name} {group['groupName']}", group["template"], claims)
    return out


def _job(plan: dict[str, Any]) -> dict[str, Any] | None:
    return next((r["inputs"] for r in plan["resources"] if r["type"].endswith(":RayJob")), None)


def _options(words: list[str]) -> dict[str, str]:
    """`--key value` pairs of a command line (flags without a value map to "")."""
    out, i = {}, 0
    while i < len(words):
        if words[i].startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            out[words[i][2:]] = "" if nxt.startswith("--") else nxt
            i += 1 if nxt.startswith("--") else 2
        else:
            i += 1
    return out


def processes(plan: dict[str, Any], all_pods: dict[str, Pod]) -> list[Process]:
    procs: list[Process] = []
    if JOB in all_pods:
        job = next(r["inputs"] for r in plan["resources"] if r["type"] == "kubernetes:batch/v1:Job")
        (container, *_) = job["spec"]["template"]["spec"]["containers"]
        a = _options(container.get("args") or [])
        p = Process("staging Job (stage_data.py)", JOB, "its own pod (Job template)")
        p.uses += [Use(a[k], True, BUCKET, k) for k in ("verl-dir", "model-dir", "dataset-dir") if k in a]
        p.uses += [Use(dst, True, BUCKET, "--ship") for s in [a.get("ship", "")] if "=" in s
                   for dst in [s.split("=", 1)[1]]]
        p.uses += [Use(a["work-dir"], True, LOCAL, "work-dir")] if "work-dir" in a else []
        procs.append(p)
    job = _job(plan)
    if job is None or plan.get("job") is None or HEAD not in all_pods:
        return procs
    spec = JobSpec.from_dict(plan["job"])
    sup, hydra = spec.supervisor, spec.trainer.values()
    env = (job.get("runtime_env") or {}).get("env_vars") or {}
    on_workers = any(job.get(k) for k in ENTRYPOINT_RESOURCE_KEYS) or \
        all_pods[HEAD].env.get(DRIVER_ON_WORKERS_ENV) == "1"
    driver_pod = WORKERS if on_workers else HEAD
    driver_why = ("entrypoint resources or " + DRIVER_ON_WORKERS_ENV) if on_workers else \
        "Ray's job manager pins the driver to the head (job_manager.py _get_scheduling_strategy)"
    imports = [Use(env["PYTHONPATH"], False, BUCKET, "PYTHONPATH")] if "PYTHONPATH" in env else []
    ckpt = sup.checkpoint_dir
    p = Process("job driver: run supervisor", driver_pod, driver_why)
    p.uses.append(Use(sup.script, False, BUCKET, "script"))
    p.uses.append(Use(sup.state, True, BUCKET, "--state (recovery budget)"))
    p.uses.append(Use(ckpt, bool(sup.keep), BUCKET, "--checkpoint-dir (tracker; pruning)"))
    procs.append(p)
    procs.append(Process("verl main_ppo (driver's child)", driver_pod, "child process of the driver",
                         [*imports, Use(spec.trainer.script, False, BUCKET, "trainer script (verl_main.py)")]))
    head_cpus = all_pods[HEAD].head_cpus
    runner = Process("verl TaskRunner", WORKERS if head_cpus == "0" else HEAD,
                     "a 1-CPU actor (verl main_ppo.py); the head has num-cpus "
                     f"{head_cpus!r}" + (": only the workers have CPUs for it" if head_cpus == "0" else ""),
                     list(imports))
    for key in ("data.train_files", "data.val_files", "actor_rollout_ref.model.path"):
        if key in hydra:
            runner.uses.append(Use(hydra[key], False, BUCKET, key))
    runner.uses.append(Use(ckpt, True, BUCKET, "trainer.default_local_dir (tracker, dataloader state)"))
    if "TENSORBOARD_DIR" in env:  # the event files, one append per record: the pod's own disk
        runner.uses.append(Use(env["TENSORBOARD_DIR"], True, LOCAL, "TENSORBOARD_DIR"))
    if TENSORBOARD_BUCKET_ENV in env:  # their copies (components/scripts/verl_main.py): the bucket
        runner.uses.append(Use(env[TENSORBOARD_BUCKET_ENV], True, BUCKET, TENSORBOARD_BUCKET_ENV))
    if "HF_HOME" in env:
        runner.uses.append(Use(env["HF_HOME"], False, BUCKET, "HF_HOME"))
    datasets = env.get("HF_DATASETS_CACHE") or all_pods[WORKERS].env.get("HF_DATASETS_CACHE") or \
        posixpath.join(env.get("HF_HOME", "~/.cache/huggingface"), "datasets")
    runner.uses.append(Use(datasets, True, LOCAL, "HF_DATASETS_CACHE (Arrow cache)"))
    procs.append(runner)
    workers = Process("verl FSDP/vLLM workers", WORKERS, "GPU actors: only the worker group has GPUs",
                      list(imports))
    if "actor_rollout_ref.model.path" in hydra:
        workers.uses.append(Use(hydra["actor_rollout_ref.model.path"], False, BUCKET, "model weights"))
    workers.uses.append(Use(ckpt, True, BUCKET, "checkpoint shards"))
    procs.append(workers)
    if sup.merge_to:  # always with --merge-on-worker (recipe.job_spec)
        merge = Process("model merge", WORKERS, "a 1-GPU Ray task (supervise.py ON_WORKER)", list(imports))
        merge.uses.append(Use(ckpt, False, BUCKET, "last checkpoint"))
        merge.uses.append(Use(sup.merge_to, True, BUCKET, "--merge-to (and its marker)"))
        procs.append(merge)
    return procs


def serving(pod: Pod, path: str) -> Mount | None:
    """The mount that serves a path in a pod: the deepest mount point above it."""
    best = None
    for m in pod.mounts:
        if path == m.path or path.startswith(m.path.rstrip("/") + "/"):
            if best is None or len(m.path) > len(best.path):
                best = m
    return best


def merged_volumes(pod: Pod) -> list[str]:
    """Problems: volumes of one pod that the kubelet names alike (`<driver>^<handle>`)."""
    seen: dict[tuple[str, str], str] = {}
    problems = []
    for m in pod.mounts:
        if m.csi is None:
            continue
        if m.csi in seen and seen[m.csi] != m.volume:
            problems.append(f"{pod.label}: volumes {seen[m.csi]!r} and {m.volume!r} have the same CSI driver and "
                            f"volume handle {m.csi[1]!r}: the kubelet mounts only one of them (give each PV a "
                            "distinct handle, catalog.gcsfuse.volume_handle)")
        seen.setdefault(m.csi, m.volume)
    return problems


def table(plan: dict[str, Any]) -> tuple[list[Row], list[str]]:
    """The rows and every problem (the plan fails on any)."""
    all_pods = pods(plan)
    rows: list[Row] = []
    problems: list[str] = []
    for pod in all_pods.values():
        problems += merged_volumes(pod)
    for proc in processes(plan, all_pods):
        pod = all_pods.get(proc.pod)
        for use in proc.uses:
            problem = None
            m = serving(pod, use.path) if pod else None
            shown = "-" if m is None else f"{m.path} <- {m.volume} ({m.kind}" + \
                (f" {m.csi[1]}" if m.csi else "") + (", read-only" if m.read_only else "") + ")"
            if pod is None:
                problem = f"no {proc.pod} pod"
            elif use.lives == BUCKET and (m is None or m.kind != "csi"):
                problem = "no bucket mount serves it in this pod: written to the container's disk and lost " \
                    "with the pod" if use.write else "no bucket mount serves it in this pod"
            elif use.lives == LOCAL and m is not None and m.kind == "csi":
                problem = "must stay on the pod's disk but goes through GCS FUSE"
            elif use.write and m is not None and m.read_only:
                problem = "written, but the mount is read-only"
            if problem:
                where = pod.label if pod else proc.pod
                problems.append(f"{proc.name} on the {where}: {use.path} ({use.what}): {problem}")
            rows.append(Row(proc.name, pod.label if pod else proc.pod, proc.why, use.path,
                            "write" if use.write else "read", shown, problem))
    return rows, problems


def text(rows: list[Row], problems: list[str]) -> str:
    lines = ["where things run (process -> pod -> path -> mount):"]
    last = None
    for r in rows:
        if (r.process, r.pod) != last:
            lines.append(f"  {r.process}  on {r.pod}  [{r.why}]")
            last = (r.process, r.pod)
        lines.append(f"    {r.access:<5} {r.path:<72} {r.mount}" + (f"  PROBLEM: {r.problem}" if r.problem else ""))
    lines += [f"  PROBLEM: {p}" for p in problems if not any(p.endswith(r.problem or "\0") for r in rows)]
    return "\n".join(lines)


def as_json(rows: list[Row], problems: list[str]) -> dict[str, Any]:
    return {"rows": [r.__dict__ for r in rows], "problems": problems}
