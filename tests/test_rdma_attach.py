"""Issue 43 item 11: the readiness wait's check that each GPU worker pod's first container is the Ray one.

The pods are the stack's own rendered GPU worker template (the b200 stack, Autopilot and Standard) as
Kubernetes runs it after the GCS FUSE webhook: the sidecar `gke-gcsfuse-sidecar` as a native sidecar
(an init container) or, when the webhook cannot inject one, inserted at index 0 of the containers
(gcs-fuse-csi-driver pkg/webhook/injection.go and sidecar_spec.go @5fcdc04a: GcsFuseSidecarName,
`insert(pod.Spec.Containers, containerSpec, 0)` without an istio-proxy). They are served by a
Kubernetes-like HTTPS API server (tests.ray_fixtures.ServiceProxy) and read as the job provider reads
pods (components.ray_client.Dashboard.kube).
"""

from __future__ import annotations

import copy

import pytest

from catalog.ray import CLUSTER_LABEL, NODE_TYPE_LABEL
from components import rdma_attach
from components.ray_client import Dashboard
from tests.ray_fixtures import ServiceProxy
from tests.stack_helpers import composed

SIDECAR = "gke-gcsfuse-sidecar"  # gcs-fuse-csi-driver pkg/webhook/sidecar_spec.go GcsFuseSidecarName
NAMESPACE, CLUSTER = "ray", "rc"


def worker_pod(mode: str, name: str, native_sidecar: bool) -> dict:
    """The stack's GPU worker template as a running Pod, after the GCS FUSE webhook placed its sidecar."""
    template = composed({"accelerator": "b200", "clusterMode": mode}).one("kubernetes:ray.io/v1:RayCluster") \
        .inputs["spec"]["workerGroupSpecs"][0]["template"]
    pod = {"metadata": {**copy.deepcopy(template["metadata"]), "name": name, "namespace": NAMESPACE,
                        "labels": {CLUSTER_LABEL: CLUSTER, NODE_TYPE_LABEL: "worker"}},
           "spec": copy.deepcopy(template["spec"]), "status": {"phase": "Running"}}
    sidecar = {"name": SIDECAR, "image": "gke.gcr.io/gcs-fuse-csi-driver-sidecar-mounter"}
    if native_sidecar:
        pod["spec"]["initContainers"] = [{**sidecar, "restartPolicy": "Always"}]
    else:
        pod["spec"]["containers"].insert(0, sidecar)
    return pod


def head_pod() -> dict:
    return {"metadata": {"name": "rc-head-x", "labels": {CLUSTER_LABEL: CLUSTER, NODE_TYPE_LABEL: "head"}},
            "spec": {"containers": [{"name": SIDECAR}]}, "status": {"phase": "Running"}}


def check_through_the_api_server(pods: list[dict] | None, monkeypatch) -> tuple[rdma_attach.Verdict, list[str]]:
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    objects = {} if pods is None else {f"/api/v1/namespaces/{NAMESPACE}/pods": {"kind": "PodList", "items": pods}}
    with ServiceProxy("http://127.0.0.1:9", "tok", namespace=NAMESPACE, service=f"{CLUSTER}-head-svc",
                      objects=objects) as proxy, Dashboard({"gke": proxy.gke()}) as dash:
        return rdma_attach.check(dash), proxy.seen_paths


@pytest.mark.parametrize("mode", ["autopilot", "standard"])
def test_a_worker_whose_gcsfuse_sidecar_went_first_fails_naming_both_containers(mode, monkeypatch):
    pods = [worker_pod(mode, "rc-gpu-group-worker-a", native_sidecar=True),
            worker_pod(mode, "rc-gpu-group-worker-b", native_sidecar=False), head_pod()]
    verdict, seen = check_through_the_api_server(pods, monkeypatch)
    (problem,) = verdict.problems
    assert verdict.checked == 2 and not verdict.ok
    assert problem.startswith("GPU worker pod rc-gpu-group-worker-b: its first container is "
                              "'gke-gcsfuse-sidecar', not the Ray container 'ray-worker'.")
    assert "8 RDMA NICs (rdma-0, rdma-1, rdma-2, rdma-3, rdma-4, rdma-5, rdma-6, rdma-7)" in problem
    assert f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={CLUSTER_LABEL}%3D{CLUSTER}," \
           f"{NODE_TYPE_LABEL}%3Dworker" in seen


@pytest.mark.parametrize("mode", ["autopilot", "standard"])
def test_workers_with_a_native_sidecar_keep_the_ray_container_first(mode, monkeypatch):
    pods = [worker_pod(mode, f"rc-gpu-group-worker-{i}", native_sidecar=True) for i in range(2)]
    verdict, _ = check_through_the_api_server(pods, monkeypatch)
    assert verdict.ok and verdict.checked == 2


def test_an_unreadable_pod_list_checks_nothing_and_says_why(monkeypatch):
    verdict, _ = check_through_the_api_server(None, monkeypatch)  # the API server answers 404
    assert verdict.ok and verdict.checked == 0
    assert verdict.note.startswith(f"could not list the worker pods of RayCluster {CLUSTER}:")


def test_a_refused_api_server_checks_nothing_and_says_why(monkeypatch):
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    gke = {"endpoint": "127.0.0.1:9", "ca_certificate": "", "public_ca": True, "namespace": NAMESPACE,
           "service": f"{CLUSTER}-head-svc", "port": 8265}
    with Dashboard({"gke": gke}) as dash:
        verdict = rdma_attach.check(dash)
    assert verdict.ok and verdict.note.startswith("could not list the worker pods")


def test_a_plain_ray_address_has_no_pods_to_check():
    with Dashboard({"address": "http://127.0.0.1:8265"}) as dash:
        verdict = rdma_attach.check(dash)
    assert verdict.ok and "no API server" in verdict.note


def test_a_machine_without_rdma_has_nothing_to_check():
    pod = worker_pod("standard", "rc-gpu-group-worker-a", native_sidecar=False)
    pod["metadata"]["annotations"].pop("networking.gke.io/interfaces")
    verdict = rdma_attach.pod_problems([pod])
    assert verdict.ok and verdict.checked == 0 and "nothing to check" in verdict.note
