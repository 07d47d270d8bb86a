"""Each shipped stack's Kubernetes layer on a real control plane: API server, controllers, scheduler, KubeRay.

Per stack (a control plane of its own, module-scoped): kwok nodes shaped like the stack's GKE nodes
(tests/k8s_nodes.py), then the objects the stack's components render (tests/k8s_layer.py) deployed by
`pulumi up` through the real CLI, engine and pulumi-kubernetes provider (tests/k8s_deploy.py,
tests/k8s_program.py). What is asserted is what the real components did with them: the provider's await
logic, the API server's validation, the PV controller's binding, the Job controller and kwok's completion
of the staging pod, the KubeRay operator's pods, the scheduler's placement, and the supervisor's GPU
release sent as supervise.py sends it. tools.placement and tools.node_fit (the offline plan's models) are
checked against that.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import time
from pathlib import Path

import pytest

from catalog.accelerators import GPU_RESOURCE
from components import ray_recovery
from components.ray_client import TOKEN_ENV, Dashboard
from recipe.job_spec import JobSpec
from tests import k8s_layer, k8s_nodes
from tests.k8s_cluster import wait_for
from tests.k8s_deploy import SETTLE_S, Deployed, deployed_stack
from tools import placement

pytestmark = pytest.mark.k8s  # it deploys with the real Pulumi CLI too (tests/conftest.py lets it)

SUPERVISE = Path(__file__).resolve().parents[1] / "components" / "scripts" / "supervise.py"
KEPT_GONE_S = 5  # after the operator has reconciled the release: no later pass brings a worker back


@pytest.fixture(scope="module", params=k8s_layer.STACKS)
def deployed(request, tmp_path_factory):
    with deployed_stack(request.param, tmp_path_factory.mktemp(f"k8s-{request.param}"), engine=True) as d:
        yield d


def _phase_running(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _settled_ray_pods(d: Deployed) -> tuple[list[dict], list[dict]]:
    replicas = int(d.ray["spec"]["workerGroupSpecs"][0]["replicas"])

    def ready():
        head, workers = d.ray_pods("head"), d.ray_pods("worker")
        if len(head) == 1 and len(workers) == replicas and all(map(_phase_running, head + workers)):
            return head, workers
        return None

    return wait_for(f"the operator's head and {replicas} workers Running and Ready", ready, SETTLE_S)


# ----------------------------------------------------------------------------- the API server


def test_pulumi_up_succeeds_on_the_providers_await_logic(deployed):
    """The Job's await (completion) and the RayCluster's pulumi.com/waitFor (the head's IP) both ended."""
    assert deployed.rejected == []
    assert f"+ {len(deployed.objects) + 2} created" in deployed.up.out  # the stack, the provider, the objects
    for obj in deployed.objects:  # and each is there, as the API server accepted it
        live = deployed.api.get(deployed.api.path(obj, obj["metadata"]["name"]))
        assert live["metadata"]["name"] == obj["metadata"]["name"]
    live = deployed.api.get(deployed.api.path(deployed.ray, deployed.ray["metadata"]["name"]))
    assert live["status"]["head"]["podIP"]


def test_a_second_preview_shows_no_change(deployed):
    """What the provider reads back equals what it applied (no diff from defaults the API server adds)."""
    result = deployed.pulumi("preview", "--diff", "--expect-no-changes")
    assert result.code == 0, result


def test_each_claim_binds_to_the_volume_made_for_it(deployed):
    for pvc in k8s_layer.of_kind(deployed.objects, "PersistentVolumeClaim"):
        path = deployed.api.path(pvc, pvc["metadata"]["name"])
        live = wait_for(f"claim {pvc['metadata']['name']} Bound",
                        lambda p=path: (c := deployed.api.get(p))["status"].get("phase") == "Bound" and c, SETTLE_S)
        assert live["spec"]["volumeName"] == pvc["spec"]["volumeName"]
        pv = deployed.api.get(f"/api/v1/persistentvolumes/{live['spec']['volumeName']}")
        assert pv["status"]["phase"] == "Bound"
        assert pv["spec"]["claimRef"]["uid"] == live["metadata"]["uid"]


# ----------------------------------------------------------------------------- the staging Job


def test_the_staging_job_completes_on_a_node_without_gpus(deployed):
    (job,) = k8s_layer.of_kind(deployed.objects, "Job")
    path = deployed.api.path(job, job["metadata"]["name"])
    wait_for("the staging Job Complete", lambda: any(
        c["type"] == "Complete" and c["status"] == "True"
        for c in (deployed.api.get(path).get("status") or {}).get("conditions") or []), SETTLE_S)
    (pod,) = deployed.pods(f"job-name={job['metadata']['name']}")
    node = deployed.node(pod["spec"]["nodeName"])
    assert GPU_RESOURCE not in node["status"]["allocatable"]


# ----------------------------------------------------------------------------- the operator and the scheduler


def test_the_operator_runs_one_head_and_a_worker_on_each_gpu_node(deployed):
    (head,), workers = _settled_ray_pods(deployed)
    assert GPU_RESOURCE not in deployed.node(head["spec"]["nodeName"])["status"]["allocatable"]
    gpu_nodes = [w["spec"]["nodeName"] for w in workers]
    assert len(set(gpu_nodes)) == len(workers)
    assert all(GPU_RESOURCE in deployed.node(n)["status"]["allocatable"] for n in gpu_nodes)


def test_each_pod_lands_in_the_node_pool_its_selector_names(deployed):
    _settled_ray_pods(deployed)
    for pod in deployed.pods():
        if pod["status"].get("phase") == "Succeeded" and not pod["spec"].get("nodeName"):
            continue
        assert pod["spec"].get("nodeName"), f"{pod['metadata']['name']} is not scheduled: {pod['status']}"
        labels = deployed.node(pod["spec"]["nodeName"])["metadata"]["labels"]
        for key, value in (pod["spec"].get("nodeSelector") or {}).items():
            assert labels.get(key) == value, (pod["metadata"]["name"], key)


def test_node_fit_agrees_with_the_scheduler(deployed):
    """The plan's verdict per pod (tools.node_fit: Standard pools) is the scheduler's: every pod it says
    fits was scheduled, on the pool it names."""
    (head,), workers = _settled_ray_pods(deployed)
    (job,) = k8s_layer.of_kind(deployed.objects, "Job")
    staging = deployed.pods(f"job-name={job['metadata']['name']}")
    for fit in deployed.plan.get("nodeFit") or []:
        label = fit["pod"]  # "Job <name>", "RayCluster <name> head", "RayCluster <name> <group>"
        pods = staging if label.startswith("Job ") else [head] if label.endswith(" head") else workers
        pool = fit["node"].split()[0].removeprefix("gke-")
        assert fit["fits"], fit
        for pod in pods:
            assert deployed.node(pod["spec"]["nodeName"])["metadata"]["labels"][k8s_nodes.POOL_LABEL] == pool


def test_the_pods_the_operator_made_are_what_placement_reads_from_the_plan(deployed):
    """tools.placement's table over the live pods, claims and volumes is its table over the rendered plan:
    the operator keeps every mount, volume and env var the templates declare."""
    (head,), workers = _settled_ray_pods(deployed)
    (job,) = k8s_layer.of_kind(deployed.objects, "Job")
    (staging,) = deployed.pods(f"job-name={job['metadata']['name']}")
    live = k8s_layer.live_plan(deployed.plan, {"head": head, "workers": workers[0], "staging": staging},
                               deployed.api.list("v1", "PersistentVolume"),
                               deployed.api.list("v1", "PersistentVolumeClaim", deployed.namespace))
    assert placement.table(live) == placement.table(deployed.plan)


def test_the_operator_keeps_each_containers_resources_and_annotations(deployed):
    (head,), workers = _settled_ray_pods(deployed)
    for pod, template in ((head, deployed.ray["spec"]["headGroupSpec"]["template"]),
                          *((w, deployed.ray["spec"]["workerGroupSpecs"][0]["template"]) for w in workers)):
        (want,) = template["spec"]["containers"]
        got = next(c for c in pod["spec"]["containers"] if c["name"] == want["name"])
        assert _quantities(got["resources"]) == _quantities(want["resources"])
        annotations = pod["metadata"].get("annotations") or {}
        assert {k: annotations.get(k) for k in template["metadata"]["annotations"]} == \
            template["metadata"]["annotations"]
        tolerations = pod["spec"].get("tolerations") or []
        assert [t for t in template["spec"].get("tolerations") or [] if t not in tolerations] == []


def _quantities(resources: dict) -> dict:
    from catalog.naming import quantity

    return {k: {r: quantity(str(v)) for r, v in (resources.get(k) or {}).items()} for k in ("requests", "limits")}


def test_the_head_offers_ray_no_cpus(deployed):
    """placement puts verl's TaskRunner on the GPU workers because the head starts with num-cpus 0: the
    operator's `ray start` line for the head must say so."""
    (head,), _ = _settled_ray_pods(deployed)
    (container,) = [c for c in head["spec"]["containers"] if c["name"] == "ray-head"]
    line = " ".join(container.get("command", []) + container.get("args", []))
    assert "--num-cpus=0" in line or "--num-cpus 0" in line, line


# ----------------------------------------------------------------------------- releasing the GPUs


def _supervise():
    spec = importlib.util.spec_from_file_location("verl_gke_supervise_k8s_tier", SUPERVISE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _job(plan: dict) -> dict:
    return next(r["inputs"] for r in plan["resources"] if r["type"].endswith(":RayJob"))


def _service_account_dir(d: Deployed, folder: Path) -> Path:
    """What the kubelet projects into the head pod: a bound token of the stack's service account, the
    namespace and the cluster CA."""
    ksa = d.ray["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(d.api.service_account_token(d.namespace, ksa))
    (folder / "namespace").write_text(d.namespace)
    (folder / "ca.crt").write_bytes((d.cp.folder / "ca.crt").read_bytes())
    return folder


def _release(d: Deployed, sa_dir: Path) -> bool:
    """supervise.py's release, with the options the stack's job gives it and the head pod's token."""
    supervise = _supervise()
    options = dataclasses.replace(JobSpec.from_dict(d.plan["job"]).supervisor, k8s_api=d.api.url,
                                  k8s_sa_dir=str(sa_dir)).options()
    args, _ = supervise.parse([*options, "--run-id", "k8s-tier", "--max-recoveries", "0", "--", "true"])
    return supervise.release_gpus(args)


def _reconciled(d: Deployed, workers: int) -> bool:
    """KubeRay has written its status for the RayCluster's current spec, and wants `workers` workers."""
    live = d.api.get(d.api.path(d.ray, d.ray["metadata"]["name"]))
    status = live.get("status") or {}
    return status.get("observedGeneration") == live["metadata"]["generation"] and \
        status.get("desiredWorkerReplicas", 0) == workers


def _group(d: Deployed) -> dict:
    live = d.api.get(d.api.path(d.ray, d.ray["metadata"]["name"]))
    return live["spec"]["workerGroupSpecs"][0]


def test_the_supervisors_release_removes_the_gpu_workers_and_keeps_them_gone(deployed, tmp_path):
    _settled_ray_pods(deployed)
    assert _release(deployed, _service_account_dir(deployed, tmp_path / "sa"))
    wait_for("no GPU worker pod left", lambda: deployed.ray_pods("worker") == [], SETTLE_S)
    assert _group(deployed)["replicas"] == 0
    wait_for("the operator's status for the released spec", lambda: _reconciled(deployed, workers=0), SETTLE_S)
    time.sleep(KEPT_GONE_S)
    assert deployed.ray_pods("worker") == []
    (head,) = deployed.ray_pods("head")
    assert _phase_running(head)


def test_a_preview_after_the_release_keeps_the_released_replicas(deployed, tmp_path):
    """Pulumi ignores the worker group the supervisor and the provider scale (components.ray_cluster): a
    preview that reads the live cluster first (--refresh) neither resets the replicas nor replaces it."""
    _release(deployed, _service_account_dir(deployed, tmp_path / "sa"))
    assert _group(deployed)["replicas"] == 0
    result = deployed.pulumi("preview", "--refresh", "--diff", "--expect-no-changes")
    assert result.code == 0, str(result)[-3000:]


def test_the_release_is_refused_to_another_service_account(deployed, tmp_path):
    """The Role grants the head's account alone: the default account of the namespace cannot scale."""
    sa = _service_account_dir(deployed, tmp_path / "sa")
    deployed.api.request("POST", f"/api/v1/namespaces/{deployed.namespace}/serviceaccounts",
                         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "k8s-tier-other"}})
    (sa / "token").write_text(deployed.api.service_account_token(deployed.namespace, "k8s-tier-other"))
    before = _group(deployed)["replicas"]
    assert not _release(deployed, sa)
    assert _group(deployed)["replicas"] == before


def test_the_job_providers_scale_up_brings_the_workers_back(deployed, tmp_path, monkeypatch):
    """ray_recovery.scale_up, as the job provider sends it before the next submission (through the API
    server, with the job's `scale` input), after a release."""
    assert _release(deployed, _service_account_dir(deployed, tmp_path / "sa"))
    wait_for("no GPU worker pod left", lambda: deployed.ray_pods("worker") == [], SETTLE_S)
    job = _job(deployed.plan)
    gke = {**job["gke"], "endpoint": f"127.0.0.1:{deployed.api.port}", "public_ca": False,
           "ca_certificate": base64.b64encode((deployed.cp.folder / "ca.crt").read_bytes()).decode()}
    monkeypatch.setenv(TOKEN_ENV, deployed.cp.token)
    with Dashboard({"gke": gke}) as dash:
        ray_recovery.scale_up(dash, job["scale"], time.monotonic() + 60)
    _, workers = _settled_ray_pods(deployed)
    assert len(workers) == int(job["scale"]["replicas"])
    assert _group(deployed)["minReplicas"] == int(job["scale"]["replicas"])


def test_a_deleted_head_pod_is_replaced(deployed):
    (head,) = wait_for("the head Running", lambda: [p for p in deployed.ray_pods("head") if _phase_running(p)],
                       SETTLE_S)
    deployed.api.request("DELETE", f"/api/v1/namespaces/{deployed.namespace}/pods/{head['metadata']['name']}")
    wait_for("a new head pod Running", lambda: (pods := deployed.ray_pods("head")) and all(
        p["metadata"]["uid"] != head["metadata"]["uid"] and _phase_running(p) for p in pods), SETTLE_S)


def test_a_replaced_raycluster_has_a_new_uid_and_new_pods(deployed):
    """What the job provider follows (components.ray_cluster `uid`, the job's cluster_uid): `pulumi up
    --replace` of the RayCluster gives it a new uid, the garbage collector takes the old pods (their owner
    references) and the operator makes new ones."""
    path = deployed.api.path(deployed.ray, deployed.ray["metadata"]["name"])
    old = deployed.api.get(path)["metadata"]["uid"]
    (head,) = wait_for("the head", lambda: deployed.ray_pods("head"), SETTLE_S)
    exported = json.loads(deployed.workspace.run("stack", "export").out)
    (urn,) = [r["urn"] for r in exported["deployment"]["resources"] if r["type"] == "kubernetes:ray.io/v1:RayCluster"]
    result = deployed.pulumi("up", "--yes", "--skip-preview", "--replace", urn)
    assert result.code == 0, str(result)[-3000:]
    assert deployed.api.get(path)["metadata"]["uid"] != old
    (new_head,), workers = _settled_ray_pods(deployed)
    assert new_head["metadata"]["uid"] != head["metadata"]["uid"]
    assert all(w["metadata"]["ownerReferences"][0]["uid"] != old for w in workers)


def test_the_control_plane_is_still_whole(deployed):
    deployed.cp.check_alive()
    assert json.loads(json.dumps(deployed.api.get("/readyz"))) == "ok"


def test_pulumi_destroy_removes_the_layer(deployed):
    """Last: `pulumi destroy` deletes every object it created (gone, or on its way out)."""
    result = deployed.pulumi("destroy", "--yes", "--skip-preview")
    assert result.code == 0, result
    for obj in deployed.objects:
        live = deployed.api.maybe(deployed.api.path(obj, obj["metadata"]["name"]))
        assert live is None or live["metadata"].get("deletionTimestamp"), obj["metadata"]["name"]
