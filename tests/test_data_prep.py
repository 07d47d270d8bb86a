"""DataPrep under Pulumi mocks: the Job and ConfigMap it registers, and, end to end, the exact
command that Job would run, executed locally against the stand-in sources of test_stage_data."""

from __future__ import annotations

import dataclasses
import json
import posixpath
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest

from catalog.gcsfuse import staging_disk_budget
from catalog.paths import COMPLETE_MARKER, MOUNT, bucket_paths
from catalog.versions import VERL_IMAGE, VERL_REPO, VERL_VERSION
from components import data_prep
from components.data_prep import DataPrep, DataPrepArgs
from components.problems import ArgsError
from tests.test_stage_data import MODEL_ID as STUB_MODEL_ID
from tests.test_stage_data import base_env, env, gsm8k_runs, marker, stub_log  # noqa: F401 - env: fixture
from tools import mocking

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "components" / "scripts" / "stage_data.py"
TOKEN = "hf_NeverInAnyRegistration7c1e5b"
SECRET_NAME, SECRET_KEY = "hf-secret", "hf_api_token"
JOB, CONFIG_MAP = "kubernetes:batch/v1:Job", "kubernetes:core/v1:ConfigMap"
FUSE = {"gke-gcsfuse/volumes": "true"}
CPU_POOL = {"cloud.google.com/gke-nodepool": "cpu-pool"}
# stack -> (model, node selector the caller passes: Autopilot none, Standard the CPU pool)
STACKS = {
    "b200": ("Qwen/Qwen2.5-32B-Instruct", {}),
    "dev": ("Qwen/Qwen2.5-1.5B-Instruct", CPU_POOL),
}
K8S_VERSION = "1.32.0"  # schemas shipped by kubernetes-validate; GKE >= 1.31 here


def make_args(stack: str = "dev", **overrides) -> DataPrepArgs:
    model, selector = STACKS[stack]
    model = overrides.pop("model_id", model)
    verl = overrides.pop("verl_version", VERL_VERSION)
    fields = dict(
        namespace="verl", service_account="verl-ksa", pvc_name="verl-bucket-pvc",
        paths=bucket_paths(stack, model, verl), model_id=model, verl_version=verl,
        pod_annotations=dict(FUSE), image=VERL_IMAGE, verl_repo=VERL_REPO,
        hf_secret_name=SECRET_NAME, hf_secret_key=SECRET_KEY, node_selector=dict(selector),
    )
    fields.update(overrides)
    return DataPrepArgs(**fields)


def run_data_prep(stack: str = "dev", with_token_secret: bool = True, **overrides) -> mocking.Run:
    """One DataPrep the way compose wires it: a provider, the storage's Secret (holding the token)
    as a dependency, and the outputs exported."""

    def program():
        provider = k8s.Provider("k8s", kubeconfig="{}")
        deps = []
        if with_token_secret:
            deps.append(k8s.core.v1.Secret(
                "hf-token", metadata={"name": SECRET_NAME, "namespace": "verl"},
                string_data={SECRET_KEY: pulumi.Output.secret(TOKEN)},
                opts=pulumi.ResourceOptions(provider=provider)))
        prep = DataPrep("data-prep", make_args(stack, **overrides),
                        opts=pulumi.ResourceOptions(provider=provider, depends_on=deps))
        for name in ("job_name", "staged", "verl_src", "model_dir", "dataset_dir", "train_file", "val_file"):
            pulumi.export(name, getattr(prep, name))

    return mocking.run(program, {}, stack)


def container(run: mocking.Run) -> dict:
    (c,) = run.one(JOB).inputs["spec"]["template"]["spec"]["containers"]
    return c


def flags(c: dict) -> dict[str, str]:
    args = c["args"]
    assert len(args) % 2 == 0 and all(a.startswith("--") for a in args[::2])
    return dict(zip(args[::2], args[1::2], strict=True))


# --- the Job ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_job_runs_the_script_with_the_shared_paths(stack):
    model, selector = STACKS[stack]
    paths = bucket_paths(stack, model, VERL_VERSION)
    run = run_data_prep(stack)
    job = run.one(JOB).inputs
    c = container(run)

    assert c["image"] == VERL_IMAGE
    assert c["command"] == ["python3", "/scripts/stage_data.py"]
    assert flags(c) == {
        "--verl-repo": VERL_REPO, "--verl-ref": VERL_VERSION, "--verl-dir": paths.verl_src,
        "--model-id": model, "--model-revision": "main", "--model-dir": paths.model_dir,
        "--dataset-dir": paths.dataset_dir, "--marker-name": ".verl-gke-complete", "--work-dir": "/scratch",
        "--max-workers": "4", "--termination-log": "/dev/termination-log",
    }
    assert COMPLETE_MARKER == ".verl-gke-complete"

    pod = job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert volumes[mounts[MOUNT]["name"]]["persistentVolumeClaim"] == {"claimName": "verl-bucket-pvc"}
    assert MOUNT == "/data"
    script = volumes[mounts["/scripts"]["name"]]["configMap"]
    assert mounts["/scripts"]["readOnly"] is True
    assert script["name"] == run.one(CONFIG_MAP).name + "-mock"  # the ConfigMap's (auto) name
    scratch = volumes[mounts["/scratch"]["name"]]["emptyDir"]
    assert scratch == {"sizeLimit": "4Gi"}

    env_vars = {e["name"]: e for e in c["env"]}
    assert env_vars["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": SECRET_NAME, "key": SECRET_KEY, "optional": True}}}
    assert env_vars["HF_HOME"]["value"].startswith("/scratch/")  # GSM8K cache: local, not the bucket

    assert c["resources"] == {
        "requests": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "8Gi"},
        "limits": {"memory": "8Gi", "ephemeral-storage": "8Gi"},
    }
    # Finding 2: sequential weight writes, the only order GCS FUSE streams.
    assert env_vars["HF_HUB_DISABLE_XET"]["value"] == "1"
    assert env_vars["HF_HUB_ENABLE_HF_TRANSFER"]["value"] == "0"
    # Finding 8: the failure reason reaches the pod status (and Pulumi's error).
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "verl-ksa"
    assert pod.get("nodeSelector", {}) == selector
    # The default budget: 4 files x 5 GiB + 1 GiB for the sidecar itself.
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        "gke-gcsfuse/volumes": "true", "gke-gcsfuse/ephemeral-storage-limit": "21Gi"}
    assert job["spec"]["backoffLimit"] == 3
    assert job["spec"]["activeDeadlineSeconds"] == 3 * 3600
    assert "ttlSecondsAfterFinished" not in job["spec"]
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "FailJob", "onExitCodes": {
        "containerName": c["name"], "operator": "In", "values": [2, 3, 4, 5]}}


def test_job_is_auto_named_and_awaited():
    job = run_data_prep().one(JOB).inputs
    assert "name" not in job["metadata"]  # auto-named: a spec change replaces (re-runs) it
    assert job["metadata"]["namespace"] == "verl"
    assert job["metadata"]["annotations"] == {"pulumi.com/replaceUnready": "true"}
    text = json.dumps(job)
    assert "skipAwait" not in text and "ttlSecondsAfterFinished" not in text


def test_await_timeout_outlasts_the_deadline(monkeypatch):
    timeouts = {}
    register = mocking.RecordingMonitor.RegisterResource

    def record(self, request):
        timeouts[request.name] = request.customTimeouts
        return register(self, request)

    monkeypatch.setattr(mocking.RecordingMonitor, "RegisterResource", record)
    job = run_data_prep(active_deadline_seconds=7200).one(JOB)
    seconds = lambda s: int(s.removesuffix("s"))  # noqa: E731
    t = timeouts[job.name]
    assert seconds(t.create) == seconds(t.update) == 7200 + 15 * 60


def test_configmap_holds_the_script():
    cm = run_data_prep().one(CONFIG_MAP).inputs
    assert cm["data"] == {"stage_data.py": SCRIPT.read_text()}
    assert cm["immutable"] is True and "name" not in cm["metadata"]


def test_every_kubernetes_resource_uses_the_explicit_provider_and_waits_for_its_dependencies():
    run = run_data_prep()
    provider = run.one("pulumi:providers:kubernetes")
    secret = run.one("kubernetes:core/v1:Secret")
    component = run.one("verl-gke:data_prep:DataPrep")
    children = [r for r in run.resources if r.parent == component.urn]
    assert sorted(r.type for r in children) == [JOB, CONFIG_MAP]
    for r in run.resources:
        if r.type.startswith("kubernetes:"):
            assert r.provider.startswith(provider.urn + "::"), r.name
    # depends_on names the component; its children wait for it (they await the parent's registration).
    assert secret.urn in component.depends_on


def test_outputs_resolve_to_the_paths_it_wrote():
    run = run_data_prep("b200")
    paths = bucket_paths("b200", STACKS["b200"][0], VERL_VERSION)
    assert run.outputs == {
        "job_name": "data-prep-job-mock", "staged": True, "verl_src": paths.verl_src,
        "model_dir": paths.model_dir, "dataset_dir": paths.dataset_dir,
        "train_file": paths.train_file, "val_file": paths.val_file,
    }


# --- secrets ---------------------------------------------------------------------------------


def test_token_is_referenced_never_included():
    run = run_data_prep()
    assert mocking.SECRET in json.dumps(run.one("kubernetes:core/v1:Secret").inputs["stringData"])
    for r in run.resources:  # the token exists in the program, yet no registration shows it
        assert TOKEN not in json.dumps(r.inputs), r.name
    component = run.one("verl-gke:data_prep:DataPrep")
    for r in run.resources:
        if r.parent == component.urn:
            assert TOKEN not in repr(r.raw_inputs), r.name
    c = container(run)
    assert [e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e] == [
        {"name": SECRET_NAME, "key": SECRET_KEY, "optional": True}]
    assert "HF_TOKEN" not in json.dumps([c["command"], c["args"]])


def test_no_secret_name_means_no_token_env():
    c = container(run_data_prep(with_token_secret=False, hf_secret_name=None))
    assert "HF_TOKEN" not in json.dumps(c)


# --- replacement -----------------------------------------------------------------------------


def job_spec(**overrides) -> dict:
    return run_data_prep(**overrides).one(JOB).inputs["spec"]


def test_a_changed_input_changes_the_pod_template():
    base = job_spec()
    assert job_spec() == base  # deterministic: no spurious replacement
    for change in ({"model_id": "Qwen/Qwen2.5-3B-Instruct"}, {"verl_version": "v0.6.0"},
                   {"image": "verlai/verl:vllm011.dev"}):
        changed = job_spec(**change)
        # spec.template is immutable: the provider replaces the (auto-named) Job, i.e. reruns it.
        assert changed["template"] != base["template"], change


# --- Kubernetes schemas ----------------------------------------------------------------------


def test_job_and_configmap_match_kubernetes_schemas():
    run = run_data_prep("b200")
    for r in (run.one(JOB), run.one(CONFIG_MAP)):
        obj = json.loads(json.dumps(r.inputs))
        obj["metadata"]["name"] = r.name + "-1a2b3c4"  # what auto-naming adds
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_schema_check_has_teeth():
    obj = json.loads(json.dumps(run_data_prep().one(JOB).inputs))
    obj["metadata"]["name"] = "x"
    obj["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


# --- validation ------------------------------------------------------------------------------

B200_PATHS = bucket_paths("b200", "Qwen/Qwen2.5-32B-Instruct", VERL_VERSION)
DEV_PATHS = bucket_paths("dev", "Qwen/Qwen2.5-1.5B-Instruct", VERL_VERSION)


@pytest.mark.parametrize("arg,overrides", [
    ("model_id", {"model_id": ""}),
    ("model_id", {"model_id": "not a model"}),
    ("verl_version", {"verl_version": "--upload-pack=evil"}),
    ("verl_version", {"verl_version": "v0.6.1 "}),
    ("verl_repo", {"verl_repo": "github.com/volcengine/verl"}),
    ("image", {"image": "verlai/verl"}),
    ("namespace", {"namespace": "Verl"}),
    ("hf_secret_name", {"hf_secret_name": ""}),
    ("hf_secret_key", {"hf_secret_key": "hf token"}),
    ("paths.verl_src", {"paths": dataclasses.replace(DEV_PATHS, verl_src="/tmp/verl/v0.6.1")}),
    ("paths.model_dir", {"paths": dataclasses.replace(DEV_PATHS, model_dir="/data/../etc")}),
    ("paths.model_dir", {"paths": dataclasses.replace(DEV_PATHS, model_dir=DEV_PATHS.verl_src + "/m")}),
    ("paths.model_dir", {"paths": B200_PATHS}),  # paths of another model
    ("paths.verl_src", {"verl_version": "v0.7.0", "paths": DEV_PATHS}),
    ("paths.train_file", {"paths": dataclasses.replace(DEV_PATHS, train_file="/data/train.parquet")}),
    ("paths", {"paths": "/data"}),
    ("pod_annotations", {"pod_annotations": {}}),
    ("node_selector", {"node_selector": {"cloud.google.com/gke-accelerator-count": 8}}),
    ("memory_request", {"memory_request": "16Gi"}),
    ("disk_budget", {"disk_budget": "50Gi"}),
    ("active_deadline_seconds", {"active_deadline_seconds": 0}),
    ("backoff_limit", {"backoff_limit": -1}),
    ("task_check", {"task_check": {"files": [{"source": "s3://b/o", "path": "/data/tasks/gs-x/train.parquet"}]}}),
    ("task_check", {"task_check": {"files": [{"source": "gs://b/o", "path": "/data/models/train.parquet"}]}}),
    ("task_check", {"task_check": {"files": []}}),
    ("task_check", {"task_check": {"files": [], "reward": {"path": "/tmp/reward.py", "data": []}}}),
    ("task_check", {"task_check": {"files": [], "reward": {"path": "/data/tasks/a/reward.py",
                                                           "data": [{"path": "/home/me/train.parquet"}]}}}),
])
def test_bad_args_are_named_and_create_nothing(arg, overrides):
    errors = []

    def program():
        provider = k8s.Provider("k8s", kubeconfig="{}")
        try:
            DataPrep("data-prep", make_args(**overrides), opts=pulumi.ResourceOptions(provider=provider))
        except ArgsError as e:  # every problem at once, each naming its arg
            errors.append(e)

    run = mocking.run(program, {}, "dev")
    assert len(errors) == 1 and str(errors[0]).startswith("invalid DataPrep arguments:"), errors
    assert any(p.startswith(f"DataPrepArgs.{arg}: ") or p.startswith(f"DataPrepArgs.{arg} = ")
               for p in errors[0].problems), errors[0].problems
    assert [r.type for r in run.resources] == ["pulumi:providers:kubernetes"]


LIMIT = "gke-gcsfuse/ephemeral-storage-limit"


@pytest.mark.parametrize("theirs", [None, "0", "10Gi", "100Gi"])
def test_sidecar_storage_limit_is_the_disk_budget(theirs):
    # Whatever the caller's annotations say ("0" on Standard added nothing to the pod's limit), the
    # sidecar's ephemeral limit is the budget's buffer: the largest file x the files in flight.
    budget = staging_disk_budget(3.7, parallel_files=4)
    caller = {**FUSE, "gke-gcsfuse/memory-limit": "2Gi", **({LIMIT: theirs} if theirs else {})}
    pod = run_data_prep(pod_annotations=caller, disk_budget=budget).one(JOB).inputs["spec"]["template"]
    assert pod["metadata"]["annotations"] == {**caller, LIMIT: "16Gi"}
    assert budget.buffer_gib == 16 and budget.pod_gib == 24
    assert pod["spec"]["containers"][0]["args"][-3] == "4"  # --max-workers: the budget's parallelism


# --- end to end: the Job's own command, run locally ------------------------------------------


def job_invocation(run: mocking.Run, data: Path, work: Path, secrets: dict) -> tuple[list[str], dict]:
    """The registered command/args/env as the kubelet would start them, with the pod's mounts
    (/data the bucket, /scripts the ConfigMap, /scratch the emptyDir) mapped to local folders."""
    mounts = {MOUNT: data, data_prep.SCRIPTS_DIR: SCRIPT.parent, data_prep.SCRATCH_DIR: work,
              data_prep.TERMINATION_LOG: work / "termination-log"}

    def local(value: str) -> str:
        for pod_path, folder in mounts.items():
            if value == pod_path or value.startswith(pod_path + "/"):
                return str(folder) + value[len(pod_path):]
        return value

    c = container(run)
    assert c["command"][0] == "python3"
    argv = [sys.executable] + [local(a) for a in c["command"][1:] + c["args"]]
    env_vars = {}
    for e in c["env"]:
        if "value" in e:
            env_vars[e["name"]] = local(e["value"])
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            value = secrets.get(ref["name"], {}).get(ref["key"])
            assert value is not None or ref["optional"], f"pod would not start: {ref}"
            if value is not None:
                env_vars[e["name"]] = value
    return argv, env_vars


def run_job(staging, secrets: dict, **overrides) -> tuple[subprocess.CompletedProcess, Path, object]:
    paths = bucket_paths("dev", STUB_MODEL_ID, "v0.6.1")
    run = run_data_prep("dev", with_token_secret=False, model_id=STUB_MODEL_ID, verl_version="v0.6.1",
                        paths=paths, verl_repo=f"file://{staging.repo}", **overrides)
    data, work = staging.tmp / "data", staging.tmp / "work"
    argv, job_env = job_invocation(run, data, work, secrets)
    run_env = base_env(staging.tmp)
    # The image's site-packages: here the stub huggingface_hub of test_stage_data.
    run_env.update(job_env, PYTHONPATH=str(staging.tmp / "stubs"))
    result = subprocess.run(argv, check=False, env=run_env, capture_output=True, text=True, timeout=60)
    return result, data, paths


def in_data(data: Path, pod_path: str) -> Path:
    return data / posixpath.relpath(pod_path, MOUNT)


def test_the_jobs_command_stages_everything_then_skips(env):  # noqa: F811 - pytest fixture
    result, data, paths = run_job(env, {SECRET_NAME: {SECRET_KEY: TOKEN}})
    assert result.returncode == 0, result.stderr
    for step in ("verl", "model", "dataset"):
        assert f"[{step}] staged" in result.stdout
    for folder in (paths.verl_src, paths.model_dir, paths.dataset_dir):
        assert (in_data(data, folder) / COMPLETE_MARKER).is_file(), folder
    assert in_data(data, paths.train_file).read_bytes() == b"PAR1-train-0.6.1"
    assert in_data(data, paths.val_file).is_file()
    assert marker(in_data(data, paths.model_dir)) | {"model_id": STUB_MODEL_ID, "source": "huggingface"} \
        == marker(in_data(data, paths.model_dir))
    (hub,) = [e for e in stub_log(env) if "hub" in e]
    # The token came from the Secret through the env, under the key the Job names.
    assert hub["token"] == TOKEN and hub["local_dir"] == str(in_data(data, paths.model_dir))
    assert hub["revision"] == "main"
    assert TOKEN not in result.stdout + result.stderr
    # Nothing else on the bucket: the GSM8K download cache (HF_HOME) stays in the pod's scratch.
    assert sorted(p.name for p in data.iterdir()) == ["datasets", "models", "verl"]

    # A replaced Job reruns the same command: everything is skipped.
    again, _, _ = run_job(env, {SECRET_NAME: {SECRET_KEY: TOKEN}})
    assert again.returncode == 0, again.stderr
    assert all(f"[{s}] skipped" in again.stdout for s in ("verl", "model", "dataset"))
    assert len(gsm8k_runs(env)) == 1


def test_the_jobs_command_without_a_secret(env):  # noqa: F811 - pytest fixture
    result, data, paths = run_job(env, {}, hf_secret_name=None)
    assert result.returncode == 0, result.stderr
    (hub,) = [e for e in stub_log(env) if "hub" in e]
    assert hub["token"] is None
    assert (in_data(data, paths.dataset_dir) / COMPLETE_MARKER).is_file()


def test_gs_task_files_add_the_task_step_and_ship_the_checker():
    """Issue 27: a stack with gs:// task files runs step "task" with the spec, the checker next to the script."""
    spec = {"files": [{"key": "verl-gke:dataTrainFile", "split": "train", "source": "gs://b/t.parquet",
                       "path": "/data/tasks/gs-x/train.parquet", "rows": 10}], "train_batch_size": 2,
            "max_prompt_length": 512, "scored_sources": None, "scored_prefixes": [], "rows_key": "k", "reward_key": "r"}
    run = run_data_prep(stage_gsm8k=False, task_check=spec)
    args = container(run)["args"]
    assert args[args.index("--steps") + 1] == "verl,model,task"
    assert json.loads(args[args.index("--task") + 1]) == spec
    (cm,) = [r for r in run.resources if r.type == "kubernetes:core/v1:ConfigMap"]
    assert cm.inputs["data"]["task_check.py"] == (SCRIPT.parent / "task_check.py").read_text()
    plain = container(run_data_prep())["args"]
    assert "--task" not in plain and "--steps" not in plain  # GSM8K stacks: unchanged flags
    (cm,) = [r for r in run_data_prep().resources if r.type == "kubernetes:core/v1:ConfigMap"]
    assert "task_check.py" not in cm.inputs["data"]
    assert "reward_jail.py" not in cm.inputs["data"]  # no reward: no jail shipped


def test_a_reward_ships_its_jail_next_to_the_script():
    """Issue 45: the staging Job smoke-tests the uploaded reward, contained, before the GRPO job."""
    spec = {"files": [], "train_batch_size": 2, "max_prompt_length": 512, "scored_sources": None,
            "scored_prefixes": [], "rows_key": "k", "reward_key": "r",
            "reward": {"path": "/data/tasks/a/reward.py", "function": "compute_score", "packages": [], "key": "r",
                       "label": "reward.py", "function_key": "f",
                       "data": [{"split": "train", "key": "t", "label": "t", "path": "/data/tasks/b/train.parquet"},
                                {"split": "val", "key": "v", "label": "v", "path": "/data/tasks/c/val.parquet"}]}}
    run = run_data_prep(stage_gsm8k=False, task_check=spec)
    args = container(run)["args"]
    assert args[args.index("--steps") + 1] == "verl,model,task"
    (cm,) = [r for r in run.resources if r.type == "kubernetes:core/v1:ConfigMap"]
    for name in ("task_check.py", "reward_check.py", "reward_jail.py", "reward_run.py"):
        assert cm.inputs["data"][name] == (SCRIPT.parent / name).read_text()
