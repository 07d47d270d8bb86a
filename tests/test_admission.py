"""Issue 11: every pod of every stack, in both cluster modes, as the GCS FUSE webhook and Autopilot see it.

The webhook's request/limit rule is modelled from gcs-fuse-csi-driver pkg/webhook/config.go
(populateResource, prepareResourceList @5fcdc04a); the class limits are catalog data with sources.
"""

from __future__ import annotations

import functools
import json

import pytest

from catalog import autopilot, gcsfuse
from catalog.accelerators import ACCELERATORS
from catalog.models import largest_file_gib
from catalog.nodes import IMAGE_GIB, SYSTEM_GIB, cpu_boot_disk_gb
from tests.stack_helpers import STACK_FILES, plan_in_process, shipped_plan
from tools import plan

GiB = 1024**3
STACKS = [p.stem.split(".", 1)[1] for p in STACK_FILES]


# --- the webhook rule (config.go), case by case ---------------------------------------------------


@pytest.mark.parametrize("annotations,expected", [
    ({}, (5 * GiB, None)),  # neither: GKE's default request, no limit
    ({"gke-gcsfuse/ephemeral-storage-limit": "50Gi"}, (50 * GiB, 50 * GiB)),  # only limit: request = limit
    ({"gke-gcsfuse/ephemeral-storage-limit": "0"}, (5 * GiB, None)),  # "0": default request, no limit
    ({"gke-gcsfuse/ephemeral-storage-request": "2Gi"}, (2 * GiB, 2 * GiB)),  # only request: limit = request
    ({"gke-gcsfuse/ephemeral-storage-request": "2Gi", "gke-gcsfuse/ephemeral-storage-limit": "0"},
     (2 * GiB, None)),  # both: as given, "0" omitted
])
def test_webhook_rule(annotations, expected):
    assert gcsfuse.sidecar_resources(annotations)["ephemeral-storage"] == expected


def test_the_issue_s_pods_are_refused_by_the_model():
    """Finding 1, the model's teeth: today's head (9Gi + a 5Gi sidecar limit, general-purpose) and
    staging pod (4Gi + 50Gi) are over Autopilot's general-purpose 10 GiB; a 16Gi GPU sidecar too."""
    head = {"metadata": {"annotations": {"gke-gcsfuse/volumes": "true", "gke-gcsfuse/cpu-limit": "1",
                                         "gke-gcsfuse/memory-limit": "4Gi",
                                         "gke-gcsfuse/ephemeral-storage-limit": "5Gi"}},
            "spec": {"containers": [{"resources": {"requests": {"ephemeral-storage": "9Gi"}}}]}}
    v = autopilot.verdict(head, autopilot=True)
    assert not v.admitted and v.ephemeral_request_gib == 14 and "general-purpose" in v.problems[0]
    perf = {**head, "spec": {**head["spec"], "nodeSelector": {"cloud.google.com/compute-class": "Performance"}}}
    assert autopilot.verdict(perf, autopilot=True).admitted
    worker = {"metadata": {"annotations": {"gke-gcsfuse/volumes": "true", "gke-gcsfuse/cpu-limit": "2",
                                           "gke-gcsfuse/memory-limit": "16Gi",
                                           "gke-gcsfuse/ephemeral-storage-limit": "10Gi"}},
              "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}
    assert any("14 GiB" in p for p in autopilot.verdict(worker, autopilot=True).problems)
    standard_zero = {"metadata": {"annotations": {"gke-gcsfuse/volumes": "true",
                                                  "gke-gcsfuse/ephemeral-storage-limit": "0"}},
                     "spec": {"containers": [{"resources": {"limits": {"ephemeral-storage": "8Gi"}}}]}}
    assert autopilot.verdict(standard_zero, autopilot=False).ephemeral_limit_gib is None  # unbounded
    assert not autopilot.verdict(standard_zero, autopilot=True).admitted  # "0" refused on Autopilot


# --- every pod x stack x cluster mode -------------------------------------------------------------


@functools.cache
def plans(stack: str) -> dict[str, dict]:
    own = shipped_plan(stack)
    mode = own["outputs"]["clusterMode"]
    if not ACCELERATORS[own["outputs"]["accelerator"]].autopilot:  # config refuses Autopilot for it
        return {mode: own}
    other = shipped_plan(stack, other_mode=True)
    return {mode: own, other["outputs"]["clusterMode"]: other}


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("mode", ["autopilot", "standard"])
def test_every_pod_is_admitted_with_a_bounded_disk(stack, mode):
    if mode not in plans(stack):
        pytest.skip(f"{stack}: its accelerator has no Autopilot worker size (config refuses {mode})")
    p = plans(stack)[mode]
    rows = plan.admission_rows(p, mode)
    assert {r["pod"].split()[0] for r in rows} == {"Job", "RayCluster"} and len(rows) == 3
    for r in rows:
        assert r["admitted"], f"{stack}/{mode} {r['pod']}: {r['problems']}"
        assert r["diskBudgetGiB"] is not None, f"{stack}/{mode} {r['pod']}: unbounded disk"
    if mode == "autopilot":
        classes = {r["pod"].split()[-1]: r["class"] for r in rows}
        assert classes["head"] == "Performance"
        assert classes["data-prep-job"] == "Performance"


@pytest.mark.parametrize("stack", STACKS)
def test_the_plan_s_table_is_the_stack_s_own_mode_and_the_other_is_not_applicable(stack):
    """Issue 25: the dev plan (Standard, L4) showed "REFUSED: invalid stack configuration" for Autopilot, a
    verdict on a stack that is not Autopilot. The other mode is named not applicable, with why."""
    own = next(iter(plans(stack).values()))  # plans() holds the stack's own mode first
    mode = own["outputs"]["clusterMode"]
    rows = plan.admission(own)
    assert rows and {r["mode"] for r in rows} == {mode} and all(r["admitted"] for r in rows)
    line = plan.other_mode_line(own)
    other = "standard" if mode == "autopilot" else "autopilot"
    assert line.split()[:3] == [other, "not", "applicable:"] and "REFUSED" not in line
    if not ACCELERATORS[own["outputs"]["accelerator"]].autopilot:
        assert f"accelerator {own['outputs']['accelerator']} has no Autopilot worker size" in line
    else:
        assert f"verl-gke:clusterMode: {other}" in line


@pytest.mark.parametrize("stack", STACKS)
def test_staging_budget_comes_from_the_largest_file_and_the_parallelism(stack):
    p = plans(stack)["standard"]
    (job,) = [t for label, t in plan.pod_templates(p) if label.startswith("Job")]
    model = next(r for r in p["resources"] if r["type"] == "kubernetes:batch/v1:Job")
    args = model["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    model_id = args[args.index("--model-id") + 1]
    workers = int(args[args.index("--max-workers") + 1])
    buffer = gcsfuse.sidecar_resources(job["metadata"]["annotations"])["ephemeral-storage"][1] / GiB
    assert buffer >= workers * largest_file_gib(model_id)  # every file in flight may be staged whole
    # Finding 3: the CPU node's boot disk holds the image, the system, two staging pods and the head.
    pods = {label.split()[-1]: autopilot.verdict(t, False).ephemeral_limit_gib for label, t in plan.pod_templates(p)}
    (pool,) = [r for r in p["resources"] if r["type"] == "gcp:container/nodePool:NodePool"
               and r["inputs"]["name"] == "cpu-pool"]
    disk_gb = pool["inputs"]["nodeConfig"]["diskSizeGb"]
    usable_gib = disk_gb * 1e9 / GiB * 0.9
    assert usable_gib >= IMAGE_GIB + SYSTEM_GIB + 2 * pods["data-prep-job"] + pods["head"]
    assert disk_gb == cpu_boot_disk_gb(pods["data-prep-job"], pods["head"])


def test_plan_prints_the_admission_table(tmp_path):
    out = tmp_path / "b200"
    proc = plan_in_process("--stack", "b200", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "plan.json").read_text())
    rows = data["admission"]
    assert {(r["mode"], r["pod"].split()[-1]) for r in rows} == {
        ("autopilot", pod) for pod in ("data-prep-job", "head", "gpu-group")}
    assert all(r["admitted"] for r in rows)
    assert "  standard  not applicable: this stack is autopilot" in proc.stdout
    assert "staging disk budget (Qwen/Qwen2.5-32B-Instruct): 4 files at once" in proc.stdout
    for r in rows:
        assert f"{r['mode']:<9} {r['pod']:<34}" in proc.stdout
    assert data["storage"]["sidecarBufferGiB"] == 16
    # The critical path (tools.critical_path), printed with each phase's source.
    assert "critical path to the first training step" in proc.stdout
    assert data["criticalPath"]["ratio"] <= 1.10
    assert any("data-prep-job" in s["name"] or "raycluster" in s["name"] for s in data["criticalPath"]["steps"])
