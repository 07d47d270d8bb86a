"""Seeing what happens: the RayCluster await, TensorBoard and W&B wiring, outputs that paste, unknowns."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from catalog.paths import MOUNT, bucket_paths
from stacks import config, derived
from tests import docs
from tests.stack_helpers import BASE, ROOT, STACK_FILES, composed, composed_file
from tools import mocking, plan

AWAIT = json.loads((Path(__file__).parent / "data" / "pulumi_k8s_await.json").read_text())
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
DATA_JOB = "kubernetes:batch/v1:Job"
SECRET = "kubernetes:core/v1:Secret"
WANDB_KEY = "wandbKEYtestVALUE0123456789abcdef0123456"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def _waits(value: str) -> list[tuple[str, str, str]]:
    """Parse a waitFor value by pulumi-kubernetes' rules (tests/data/pulumi_k8s_await.json):
    (kind, path or condition type, value or status)."""
    try:
        exprs = json.loads(value)
        assert isinstance(exprs, list), "a JSON value that is not an array is one expression"
    except json.JSONDecodeError:
        exprs = [value]
    assert exprs, "at least one condition must be specified"
    parsed = []
    for expr in exprs:
        assert expr.startswith(tuple(AWAIT["value_forms"]["prefixes"])), AWAIT["value_forms"]["other_prefix_error"]
        if expr.startswith("condition="):
            ctype, _, status = expr.removeprefix("condition=").partition("=")
            parsed.append(("condition", ctype, status or "True"))
            continue
        parts = expr.removeprefix("jsonpath=").replace("==", "\0").split("=")
        assert len(parts) <= 2, AWAIT["jsonpath_form"]
        path = parts[0].replace("\0", "==")
        assert re.fullmatch(r"\{\s*\S.*\}", path), AWAIT["jsonpath_form"]
        assert len(parts) == 1 or parts[1], AWAIT["jsonpath_form"]
        parsed.append(("jsonpath", path, parts[1] if len(parts) == 2 else ""))
    return parsed


@pytest.fixture(scope="module")
def b200():
    return composed_file(ROOT / "Pulumi.b200.yaml")


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_raycluster_awaits_the_head_in_pulumi_kubernetes_syntax(path):
    run = composed_file(path)
    annotations = run.one(RAYCLUSTER).inputs["metadata"]["annotations"]
    # What every KubeRay v1 sets once the head Pod has an address, and keeps with the GPU workers at
    # zero; a wait on a field (no value) holds once the field is present.
    ((kind, where, value),) = _waits(annotations[AWAIT["wait_for_annotation"]])
    assert (kind, where, value) == ("jsonpath", "{.status.head.podIP}", "")
    field = where.strip("{}").rsplit(".", 1)[1]
    assert all(field in fields for fields in AWAIT["kuberay_head_info_fields"].values())
    raw, _ = plan.read_stack_file(path)
    cfg = config.load({**raw, "gcp:project": BASE["gcp:project"]}, path.stem.split(".", 1)[1])
    timeout = annotations[AWAIT["timeout_annotation"]]
    assert re.fullmatch(r"\d+", timeout), AWAIT["timeout_parse"]
    assert int(timeout) == cfg.job.ready_timeout_s  # the job's wait: one config key for both


def test_readme_names_the_status_line_pulumi_kubernetes_prints_for_the_wait(b200):
    """Both JSONPath engines (client-go up to 4.23, RFC9535 from 4.24) print their own line while the field is
    absent and "Found" after; neither prints "Waiting for {path}" for a path without a value."""
    wait_for = b200.one(RAYCLUSTER).inputs["metadata"]["annotations"][AWAIT["wait_for_annotation"]]
    ((_, path, _),) = _waits(wait_for)
    readme = docs.text()
    messages = AWAIT["jsonpath_status_messages"]
    for line in messages["missing"].values():
        assert line.format(path=path) in readme
    assert messages["never_shown_without_value"].format(path=path) not in readme


def test_in_place_updates_leave_the_generation_the_wait_is_gated_on(b200):
    """pulumi-kubernetes awaits updates too, but checks the path only once status.observedGeneration has caught
    up, and KubeRay writes status for a new generation only when another status field moves
    (AWAIT["kuberay_status_write"]). Only metadata changes keep the generation (AWAIT["custom_resource_generation"]),
    so every spec change must replace the cluster: an in-place spec update would wait out the whole timeout."""
    cr = b200.one(RAYCLUSTER)
    assert "spec" in cr.replace_on_changes
    # What is not replaced: the run-time replica counts, which move desired/min worker replicas in status.
    assert cr.ignore_changes == ["spec.workerGroupSpecs"]
    assert "replica" in AWAIT["kuberay_status_write"]


def test_await_timeout_follows_job_ready_timeout_minutes():
    run = composed({"jobReadyTimeoutMinutes": 25})
    assert run.one(RAYCLUSTER).inputs["metadata"]["annotations"][AWAIT["timeout_annotation"]] == "1500"
    assert run.one("pulumi-python:dynamic/verl-gke:RayJob").inputs["ready_timeout_s"] == 1500


def test_requirements_allow_only_pulumi_kubernetes_that_honours_wait_for():
    line = next(ln for ln in (ROOT / "requirements.txt").read_text().splitlines()
                if ln.startswith("pulumi-kubernetes"))
    floor = re.search(r">=([\d.]+)", line).group(1)
    assert _version(floor) >= _version(AWAIT["min_version_wait_for_precedence_fix"])


def test_staging_runs_in_parallel_with_the_ray_cluster(b200):
    """The DataPrep Job must not wait for the RayCluster (which now waits for its head)."""
    by_urn = b200.by_urn()
    ray = b200.one(RAYCLUSTER)
    ray_urns = {ray.urn, ray.parent}

    def ancestors(reg) -> set[str]:
        seen, todo = set(), [reg]
        while todo:
            r = todo.pop()
            for urn in {*r.depends_on, *(u for us in r.property_dependencies.values() for u in us), r.parent}:
                if urn and urn not in seen:
                    seen.add(urn)
                    if urn in by_urn:
                        todo.append(by_urn[urn])
        return seen

    assert not ancestors(b200.one(DATA_JOB)) & ray_urns
    job = [r for r in b200.resources if r.type == "pulumi-python:dynamic/verl-gke:RayJob"][0]
    assert ray.urn in job.depends_on  # the GRPO job still follows the cluster (and its head)


def test_tensorboard_dir_on_the_bucket_per_stack_and_model(b200):
    cfg = config.load({**plan.read_stack_file(ROOT / "Pulumi.b200.yaml")[0], "gcp:project": "p-123456"}, "b200")
    paths = bucket_paths("b200", cfg.model, cfg.verl_version)
    assert paths.tensorboard_dir == f"{MOUNT}/tensorboard/b200/{cfg.model}"
    assert bucket_paths("h200", cfg.model, "x").tensorboard_dir != paths.tensorboard_dir
    assert bucket_paths("b200", "Qwen/Other", "x").tensorboard_dir != paths.tensorboard_dir
    job = [r for r in b200.resources if r.type == "pulumi-python:dynamic/verl-gke:RayJob"][0].inputs
    # verl writes its events to the pod's disk; the trainer's entry copies them to the bucket folder that
    # tensorboardCommand reads (tests/test_tensorboard_copy.py).
    assert job["runtime_env"]["env_vars"]["VERL_GKE_TENSORBOARD_BUCKET_DIR"] == paths.tensorboard_dir
    assert derived.of(cfg).job.spec.trainer.values()["trainer.logger"] == "[console,tensorboard]"
    bucket = b200.outputs["bucket"]
    assert b200.outputs["tensorboardCommand"] == (
        f"tensorboard --logdir gs://{bucket}/tensorboard/b200/{cfg.model}")


def test_wandb_needs_its_key():
    with pytest.raises(config.ConfigError) as err:
        config.load({**BASE, "verl-gke:grpoLogger": '["console","wandb"]'}, "test")
    assert "verl-gke:wandbApiKey" in str(err.value) and "--secret" in str(err.value)
    assert config.load({**BASE, "verl-gke:grpoLogger": '["console","wandb"]', "verl-gke:wandbApiKey": WANDB_KEY},
                       "test", secret_keys=["verl-gke:wandbApiKey"]).has_wandb_key


def test_wandb_key_reaches_the_workers_only_through_a_secret():
    run = composed({"grpoLogger": ["console", "wandb"], "wandbApiKey": WANDB_KEY},
                     secret_keys=["verl-gke:wandbApiKey"])
    secrets = {r.name: r for r in run.of_type(SECRET)}
    assert set(secrets) == {"storage-wandb-key"}
    secret = secrets["storage-wandb-key"]
    assert secret.raw_inputs["stringData"] == {"api_key": WANDB_KEY}
    assert secret.inputs["stringData"] == mocking.SECRET  # never in the recorded plan
    spec = run.one(RAYCLUSTER).inputs["spec"]
    (worker,) = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"] for e in worker["env"] if "valueFrom" in e}
    assert refs == {"WANDB_API_KEY": {"secretKeyRef": {"name": "wandb-secret", "key": "api_key"}}}
    head_env = spec["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    assert all(e["name"] != "WANDB_API_KEY" for e in head_env)
    everything = json.dumps([r.raw_inputs for r in run.resources if r.type != SECRET], default=str)
    assert WANDB_KEY not in everything and WANDB_KEY not in json.dumps(run.outputs, default=str)
    # Without the key nothing W&B is created.
    assert not composed().of_type(SECRET)


PASTE_ONLY = {"logsCommand"}


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_command_outputs_paste_into_a_shell(path):
    outputs = composed_file(path).outputs
    commands = {k: v for k, v in outputs.items() if k.endswith("Command") or k == "getCredentials"}
    assert {"dashboardCommand", "tensorboardCommand", "watchCommand", "jobLogsCommand"} <= set(commands)
    for name, command in commands.items():
        assert subprocess.run(["bash", "-n", "-c", command], check=False).returncode == 0, name
        if name in PASTE_ONLY:
            continue
        # `$(pulumi stack output X)` word-splits and runs: no comments, operators or expansions.
        assert not re.search(r"[#;&|<>`$()\\'\"]", command), f"{name}: {command}"
    # A Cloud Logging filter is one argument with spaces: quoted, so it is pasted, not run as $(...).
    argv = shlex.split(commands["logsCommand"])
    assert argv[:3] == ["gcloud", "logging", "read"] and argv[3].startswith('resource.type="k8s_container"')
    assert shlex.split(commands["dashboardCommand"])[:2] == ["kubectl", "-n"]
    # one word, so a stack named `-x` never reads as an option
    assert shlex.split(commands["watchCommand"])[-1] == "--stack=" + path.stem.split(".", 1)[1]


def test_plan_shows_what_only_the_provider_knows_as_unknown(b200):
    for key in ("jobId", "jobStatus", "jobMessage", "jobDashboardUrl"):
        assert b200.outputs[key] == mocking.UNKNOWN, key
    snapshot = json.loads((ROOT / "tests" / "snapshots" / "b200.json").read_text())
    assert "PENDING" not in json.dumps(snapshot)


def test_default_loggers_need_nothing_the_image_lacks():
    """The image ships verl's dependencies ("If you use the images provided, you only need to install verl itself
    without dependencies", volcengine/verl @d62da495 (v0.6.1) docker/README.md): verl itself requires tensorboard
    and wandb."""
    from importlib import metadata

    try:
        requires = metadata.requires("verl") or []
    except metadata.PackageNotFoundError:
        pytest.skip("verl is not installed: pip install --no-deps -r requirements-verl-test.txt")
    names = {re.split(r"[\s<>=!;\[]", r, maxsplit=1)[0].lower() for r in requires}
    default = config.KEYS_BY_NAME["grpoLogger"].default
    assert {"tensorboard", "wandb"} <= names
    assert set(default) - {"console"} <= names
