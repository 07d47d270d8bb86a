"""Each component is usable alone: built by itself under mocks from nothing but its own args.

No stack config, no compose, no other component: plain strings where the stack would pass another
component's outputs. What a program of your own would do with `from components.x import X`.
"""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pytest

from catalog import gcsfuse, nics
from catalog.accelerators import ACCELERATORS
from catalog.paths import bucket_paths
from components.apis import ProjectApis
from components.cluster import GkeCluster, GkeClusterArgs
from components.data_prep import DataPrep, DataPrepArgs
from components.network import AttachedNic, ClusterNetwork, RdmaNetwork, RdmaNetworkArgs
from components.network_mapping import NetworkMapping
from components.ray_cluster import RayCluster, RayClusterArgs
from components.ray_job import RayJob, RayJobArgs
from components.storage import TrainingStorage, TrainingStorageArgs
from tools import mocking

PROJECT = "alone-project-1"
B200 = ACCELERATORS["b200"]
PATHS = bucket_paths("alone", "Qwen/Qwen2.5-0.5B-Instruct", "v0.6.1")


def handle() -> ClusterNetwork:
    backing = [("g-net", "g-sub")] + [("r-net", f"r-sub-{i}") for i in range(B200.rdma_nics)]
    return ClusterNetwork(network="net", subnet="sub", pods_range_name="pods", services_range_name="svc",
                          nics=tuple(AttachedNic(s, n, sub) for s, (n, sub)
                                     in zip(nics.additional_nics(B200.rdma_nics), backing, strict=True)))


BUILDERS: dict[str, tuple[str, Callable[[], object]]] = {
    "ProjectApis": ("verl-gke:apis:ProjectApis", lambda: ProjectApis("apis", PROJECT)),
    "RdmaNetwork": ("verl-gke:network:RdmaNetwork", lambda: RdmaNetwork("net", RdmaNetworkArgs(
        project=PROJECT, region="us-central1", zone="us-central1-b", prefix="alone",
        primary_cidr="10.0.0.0/20", pods_cidr="10.4.0.0/14", services_cidr="10.8.0.0/20",
        gvnic_cidr="192.168.0.0/24", rdma_cidrs=tuple(f"192.168.{i + 1}.0/24" for i in range(8))))),
    "GkeCluster": ("verl-gke:cluster:GkeCluster", lambda: GkeCluster("gke", GkeClusterArgs(
        project=PROJECT, region="us-central1", zone="us-central1-b", name="alone-gke", autopilot=False,
        accelerator=B200, gpu_nodes=1, network=handle(), min_version="1.33.5-gke.1000000"))),
    "NetworkMapping": ("verl-gke:network_mapping:NetworkMapping",
                       lambda: NetworkMapping("netmap", list(handle().nics))),
    "TrainingStorage": ("verl-gke:storage:TrainingStorage", lambda: TrainingStorage("storage", TrainingStorageArgs(
        project_id=PROJECT, project_number="123", location="us-central1", bucket_prefix="alone-data",
        namespace="alone"))),
    "DataPrep": ("verl-gke:data_prep:DataPrep", lambda: DataPrep("data-prep", DataPrepArgs(
        namespace="alone", service_account="ksa", pvc_name="pvc", paths=PATHS,
        model_id="Qwen/Qwen2.5-0.5B-Instruct", verl_version="v0.6.1",
        pod_annotations=gcsfuse.pod_annotations(False, gcsfuse.WORKER_SIDECAR)))),
    "RayCluster": ("verl-gke:ray_cluster:RayCluster", lambda: RayCluster("ray", RayClusterArgs(
        name="alone-ray", namespace="alone", accelerator=B200, gpu_nodes=1, autopilot=True, zone="us-central1-b",
        image="verlai/verl:vllm011.latest", ray_version="2.49.2", service_account="ksa", pvc_name="pvc",
        writer_pvc_name="writer-pvc", checkpoint_pvc_name="ckpt-pvc", head_checkpoint_pvc_name="head-ckpt-pvc",
        network_annotations=nics.interface_annotations(nics.additional_nics(B200.rdma_nics)), paths=PATHS))),
    "RayJob": ("pulumi-python:dynamic/verl-gke:RayJob", lambda: RayJob("job", RayJobArgs(
        submission_id="alone-1", entrypoint="echo hi", expected_gpus=0, address="http://127.0.0.1:8265"))),
}


@pytest.mark.parametrize("component", sorted(BUILDERS))
def test_component_builds_alone(component):
    type_token, build = BUILDERS[component]
    run = mocking.run(lambda: pulumi.export("built", type(build()).__name__), {"gcp:project": PROJECT}, "alone")
    assert run.outputs["built"] == component
    (root,) = [r for r in run.resources if r.type == type_token]
    children = [r for r in run.resources if r.parent == root.urn]
    assert children or root.custom, f"{component} registered no children"
    # Everything registered is the component or one of its descendants: it needed nothing else.
    strays = [r.name for r in run.resources if r is not root and not _descends(run, r, root)]
    assert strays == [], strays


def _descends(run: mocking.Run, reg: mocking.Registration, root: mocking.Registration) -> bool:
    by_urn = run.by_urn()
    while reg.parent in by_urn:
        if reg.parent == root.urn:
            return True
        reg = by_urn[reg.parent]
    return False
