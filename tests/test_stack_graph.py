"""The composed stacks: one source for paths, the dependency edges, the job's inputs, no secrets."""

from __future__ import annotations

import json
import posixpath
import re

import pytest

from catalog.paths import COMPLETE_MARKER
from stacks import config, derived
from stacks.derived import run_paths
from tests.stack_helpers import STACK_FILES, composed, composed_file

TOKEN = "hf_GRAPHtestTOKENvalue0123456789"
JOB = "pulumi-python:dynamic/verl-gke:RayJob"
DATA_JOB = "kubernetes:batch/v1:Job"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"


def _job(run):
    found = [r for r in run.resources if r.type == JOB]
    assert len(found) == 1, [r.type for r in run.resources if "dynamic" in r.type]
    return found[0]


def _flags(argv: list[str]) -> dict[str, str]:
    return {a: b for a, b in zip(argv, argv[1:], strict=False) if a.startswith("--")}


def _container(job_inputs):
    return job_inputs["spec"]["template"]["spec"]["containers"][0]


@pytest.fixture(scope="module", params=STACK_FILES, ids=lambda p: p.name)
def stack(request):
    path = request.param
    run = composed_file(path)
    raw = {**__import__("tools.plan", fromlist=["x"]).read_stack_file(path)[0], "gcp:project": "test-project-1"}
    return run, config.load(raw, path.stem.split(".", 1)[1])


def test_paths_agree_between_staging_recipe_and_raycluster(stack):
    run, cfg = stack
    paths = run_paths(cfg)
    container = _container(run.one(DATA_JOB).inputs)
    flags = _flags(container["command"] + container.get("args", []))
    assert flags["--verl-dir"] == paths.verl_src
    assert flags["--model-dir"] == paths.model_dir
    assert flags["--dataset-dir"] == paths.dataset_dir
    assert flags["--marker-name"] == COMPLETE_MARKER
    assert flags["--model-id"] == cfg.model and flags["--verl-ref"] == cfg.verl_version

    overrides = derived.of(cfg).job.spec.trainer.values()
    assert overrides["actor_rollout_ref.model.path"] == paths.model_dir
    assert overrides["data.train_files"] == paths.train_file
    assert overrides["data.val_files"] == paths.val_file
    assert overrides["trainer.default_local_dir"] == paths.checkpoint_dir
    assert overrides["trainer.nnodes"] == str(cfg.gpu_nodes)

    env = _job(run).inputs["runtime_env"]["env_vars"]
    assert env["PYTHONPATH"] == paths.verl_src and env["HF_HOME"] == paths.hf_home
    ray_spec = run.one(RAYCLUSTER).inputs["spec"]
    for group in [ray_spec["headGroupSpec"], *ray_spec["workerGroupSpecs"]]:
        ray_env = {e["name"]: e.get("value") for e in group["template"]["spec"]["containers"][0]["env"]}
        assert ray_env["PYTHONPATH"] == paths.verl_src
        mounts = group["template"]["spec"]["containers"][0]["volumeMounts"]
        assert any(m["mountPath"] == "/data" for m in mounts)


def test_job_inputs(stack):
    run, cfg = stack
    job = _job(run).inputs
    spec = derived.of(cfg).job.spec
    assert job["entrypoint"] == spec.entrypoint  # what the plan, placement and the rehearsal read is what runs
    assert job["expected_gpus"] == cfg.total_gpus
    # verl's main_ppo through the shipped entry (TensorBoard's events copied to the bucket), in the supervisor's folder
    assert re.fullmatch(r"/data/scripts/supervisor-[0-9a-f]{12}/verl_main\.py", spec.trainer.script)
    assert job["submission_id"].startswith(f"verl-grpo-{cfg.stack}-")
    gke = job["gke"]
    assert gke["service"] == f"{cfg.prefix}-ray-head-svc" and gke["port"] == 8265
    assert gke["namespace"] == cfg.namespace and gke["endpoint"]
    assert job.get("address") is None
    assert job["resubmit_on_failure"] is True and job["ready_timeout_s"] == 90 * 60
    assert "pip" not in job["runtime_env"] and set(job["runtime_env"]) == {"env_vars"}


def test_supervisor_agrees_with_staging_raycluster_and_outputs(stack):
    """The script the job runs is the one the staging Job ships; it releases the group the RayCluster
    has, and the provider scales that same group back to gpuNodes; the merged folder is the output."""
    run, cfg = stack
    paths = run_paths(cfg)
    job = _job(run).inputs
    spec = derived.of(cfg).job.spec
    sup = spec.supervisor
    container = _container(run.one(DATA_JOB).inputs)
    args = container["command"] + container.get("args", [])
    shipped = [args[i + 1].split("=", 1)[1] for i, a in enumerate(args) if a == "--ship"]
    assert sup.script == shipped[0] and shipped[0].startswith(paths.scripts_dir + "/supervisor-")
    # the protocol module it imports, the trainer's entry it runs and the NCCL check ship into the same folder
    assert [posixpath.dirname(s) for s in shipped] == [posixpath.dirname(shipped[0])] * 4
    assert [posixpath.basename(s) for s in shipped[1:]] == ["verl_gke_protocol.py", "verl_main.py", "nccl_check.py"]
    assert spec.trainer.script == shipped[2]
    assert sup.state.startswith(paths.checkpoint_dir + "/") and sup.checkpoint_dir == paths.checkpoint_dir
    assert sup.merge_to == paths.merged_dir and sup.expected_gpus == cfg.total_gpus
    ray_cluster = run.one(RAYCLUSTER).inputs
    group = ray_cluster["spec"]["workerGroupSpecs"][0]
    assert sup.release_raycluster == ray_cluster["metadata"]["name"] == job["scale"]["name"]
    assert sup.release_group == group["groupName"] == job["scale"]["group"]
    assert job["scale"]["index"] == 0 and job["scale"]["replicas"] == group["replicas"] == cfg.gpu_nodes
    assert job["max_recoveries"] == cfg.job.max_recoveries == 3
    assert run.outputs["mergedModel"].endswith("/" + paths.merged_dir.removeprefix("/data/"))
    assert run.outputs["mergedModel"].startswith("gs://")
    assert "gcloud logging read" in job["logs_hint"] and job["logs_hint"] == run.outputs["logsCommand"]


def _ancestors_deps(run, urn):
    by = run.by_urn()
    return set(by[urn].depends_on) | {u for urns in by[urn].property_dependencies.values() for u in urns}


def _reaches(run, start, target_pred):
    """Does `start` depend (transitively, through parents' dependencies too) on a resource matching?"""
    by = run.by_urn()
    seen, todo = set(), [start]
    while todo:
        urn = todo.pop()
        if urn in seen or urn not in by:
            continue
        seen.add(urn)
        if urn != start and target_pred(by[urn]):
            return True
        todo += list(_ancestors_deps(run, urn))
        if by[urn].parent in by:
            todo.append(by[urn].parent)
    return False


def test_dependency_edges():
    run = composed({"clusterMode": "standard"})
    job, data_job, ray = _job(run), run.one(DATA_JOB), run.one(RAYCLUSTER)
    is_gpu_pool = lambda r: r.name == "gke-gpu-pool"  # noqa: E731
    is_cpu_pool = lambda r: r.name == "gke-cpu-pool"  # noqa: E731
    # Staging runs on CPU nodes while the GPU pool scales up: no path from it to the GPU pool. Nor to
    # the CPU pool's operation: the pod selects the pool by name and starts on its first Ready node.
    assert not _reaches(run, data_job.urn, is_cpu_pool)
    assert run.one(DATA_JOB).inputs["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-nodepool": "cpu-pool"}
    assert not _reaches(run, data_job.urn, is_gpu_pool)
    # The GPU workers' scale-up waits for the GPU pool, never for the CPU pool (issue 11, critical path).
    assert _reaches(run, ray.urn, is_gpu_pool)
    assert not _reaches(run, ray.urn, is_cpu_pool)
    assert _reaches(run, ray.urn, lambda r: r.type == "kubernetes:networking.gke.io/v1:Network")
    assert _reaches(run, ray.urn, lambda r: r.type == "kubernetes:core/v1:PersistentVolumeClaim")
    assert _reaches(run, ray.urn, lambda r: r.type == "kubernetes:yaml/v2:ConfigFile")
    # The GRPO job is last: after the RayCluster and the completed staging Job.
    assert ray.urn in job.depends_on and data_job.urn in job.depends_on
    # ...and after the whole cluster component, so destroy stops it before any pool goes.
    assert _reaches(run, job.urn, is_cpu_pool)


def test_no_secret_in_plain_text_anywhere():
    run = composed({"hfToken": TOKEN}, secret_keys=["verl-gke:hfToken"])
    secret = run.one("kubernetes:core/v1:Secret")
    assert TOKEN in json.dumps(secret.raw_inputs), "the token reaches the Kubernetes Secret"
    for r in run.resources:
        assert TOKEN not in json.dumps(r.inputs), f"{r.name} carries the token in plain text"
        if r is not secret:
            assert TOKEN not in json.dumps(r.raw_inputs), f"{r.name} received the token"
    assert TOKEN not in json.dumps(run.outputs, default=str)
    env = _container(run.one(DATA_JOB).inputs)["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "hf_api_token",
                                                               "optional": True}}} in env


def test_submit_job_false_registers_no_job():
    run = composed({"submitJob": "false"})
    assert not run.of_type(JOB)
    assert "jobId" not in run.outputs
