"""The Kubernetes layer (NetworkMapping, TrainingStorage, RayCluster) composed directly under Pulumi mocks.

A small program wires the three components the way the stack does, with fake network names and a
fake project number, for Autopilot and Standard on B200 and H200; the tests read the registered
inputs (camelCase wire form, secrets as "[secret]") and validate the objects against upstream schemas.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from catalog import gcsfuse, nics
from catalog.accelerators import ACCELERATORS, GIB_MOUNT, NVIDIA_MOUNT, nccl_env
from catalog.capacity import Capacity
from catalog.paths import CHECKPOINT_MOUNT, MOUNT, bucket_paths
from catalog.ray import HEAD_CPU
from components import network_mapping as nm
from components import ray_cluster as rc
from components import storage as st
from components.network import AttachedNic
from components.problems import ArgsError, require
from tests import schemas
from tools import mocking

TOKEN = "hf_K8sLayerDistinctiveToken5e0c7b91"
PROJECT = "verl-test-project"
GVNIC_NET, GVNIC_SUB, RDMA_NET = "verl-gvnic-net", "verl-gvnic-sub", "verl-rdma-net"
RDMA_SUBNETS = [f"verl-rdma-sub-{i}" for i in range(8)]
NAMESPACE, KSA = "verl", "verl-ray"
MODEL, VERL = "Qwen/Qwen2.5-32B-Instruct", "v0.6.1"

PARAM_SET = "kubernetes:networking.gke.io/v1:GKENetworkParamSet"
NETWORK = "kubernetes:networking.gke.io/v1:Network"
RAY = "kubernetes:ray.io/v1:RayCluster"
PV, PVC = "kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim"
SECRET, SA = "kubernetes:core/v1:Secret", "kubernetes:core/v1:ServiceAccount"
NS = "kubernetes:core/v1:Namespace"
BUCKET, MEMBER = "gcp:storage/bucket:Bucket", "gcp:storage/bucketIAMMember:BucketIAMMember"
K8S_PROVIDER = "pulumi:providers:kubernetes"
ZONE = "us-central1-b"
ALL_MODES = [(acc, autopilot) for acc in ("b200", "h200") for autopilot in (True, False)]
MODE_IDS = [f"{acc}-{'autopilot' if ap else 'standard'}" for acc, ap in ALL_MODES]
# PYTHONPATH and HF_HOME spelled out here on purpose: catalog/paths.py must put them there.
BASE_ENV = {"PYTHONPATH": f"{MOUNT}/verl/{VERL}", "HF_HOME": f"{MOUNT}/huggingface_cache",
            "PYTHONDONTWRITEBYTECODE": "1", "HF_DATASETS_CACHE": "/tmp/hf-datasets"}


@dataclass(frozen=True)
class Case:
    accelerator: str = "b200"
    autopilot: bool = False
    capacity: str = "spot"
    reservation: str = ""
    namespace: str = NAMESPACE
    token: bool = True
    delete_on_destroy: bool = False

    @property
    def stack(self) -> str:
        return self.accelerator

    @property
    def ray_name(self) -> str:
        return f"verl-{self.stack}-ray"


def attached_nics(rdma: int = 8) -> list[AttachedNic]:
    """The NIC list RdmaNetwork.handle carries, with fixed VPC/subnet names."""
    backing = [(GVNIC_NET, GVNIC_SUB)] + [(RDMA_NET, s) for s in RDMA_SUBNETS[:rdma]]
    return [AttachedNic(spec, vpc, sub) for spec, (vpc, sub) in zip(nics.additional_nics(rdma), backing, strict=True)]


def program(case: Case) -> None:
    provider = k8s.Provider("k8s", kubeconfig="{}")
    in_cluster = pulumi.ResourceOptions(provider=provider)
    acc = ACCELERATORS[case.accelerator]
    # Stands in for the NCCL RDMA installer the lead passes in depends_on.
    installer = k8s.core.v1.ConfigMap(
        "installer-standin", metadata={"name": "standin", "namespace": "kube-system"},
        opts=pulumi.ResourceOptions(provider=provider))
    mapping = nm.NetworkMapping("netmap", attached_nics(), opts=in_cluster)
    store = st.TrainingStorage("storage", st.TrainingStorageArgs(
        project_id=PROJECT,
        # The stack passes gcp.organizations.get_project_output().number; the mocks answer this number.
        project_number=pulumi.Output.from_input(mocking.MOCK_PROJECT_NUMBER),
        location="us-central1", bucket_prefix=f"verl-{case.stack}", namespace=case.namespace, ksa_name=KSA,
        hf_token=pulumi.Output.secret(TOKEN) if case.token else None,
        delete_on_destroy=case.delete_on_destroy), opts=in_cluster)
    standard = not case.autopilot
    ray = rc.RayCluster("ray", rc.RayClusterArgs(
        name=case.ray_name, namespace=store.namespace, accelerator=acc, gpu_nodes=2,
        autopilot=case.autopilot, capacity=Capacity(case.capacity, case.reservation),
        cpu_pool_name=pulumi.Output.from_input("cpu-pool") if standard else None,
        gpu_pool_name=pulumi.Output.from_input("gpu-pool") if standard else None,
        zone=None if standard else ZONE,
        image="verlai/verl:vllm011.latest", ray_version="2.49.2", service_account=store.ksa_name,
        pvc_name=store.pvc_name, network_annotations=mapping.pod_annotations,
        paths=bucket_paths(case.stack, MODEL, VERL), writer_pvc_name=store.writer_pvc_name,
        checkpoint_pvc_name=store.checkpoint_pvc_name, head_checkpoint_pvc_name=store.head_checkpoint_pvc_name,
    ), opts=pulumi.ResourceOptions(provider=provider, depends_on=[mapping, store, installer]))
    for owner, names in ((mapping, ("network_names", "pod_annotations")),
                         (store, ("bucket_name", "namespace", "ksa_name", "pvc_name", "hf_secret_name",
                                  "hf_secret_key")),
                         (ray, ("head_service", "dashboard_port", "expected_gpus"))):
        for name in names:
            pulumi.export(name, getattr(owner, name))
    pulumi.export("ray_name", ray.name)
    pulumi.export("ray_namespace", ray.namespace)


@functools.cache
def run(case: Case) -> mocking.Run:
    return mocking.run(lambda: program(case), {"gcp:project": PROJECT}, case.stack)


def mode(acc: str, autopilot: bool) -> mocking.Run:
    return run(Case(accelerator=acc, autopilot=autopilot))


def ray_spec(r: mocking.Run) -> dict[str, Any]:
    return r.one(RAY).inputs["spec"]


def head_pod(r: mocking.Run) -> dict[str, Any]:
    return ray_spec(r)["headGroupSpec"]["template"]


def worker_group(r: mocking.Run) -> dict[str, Any]:
    (group,) = ray_spec(r)["workerGroupSpecs"]
    return group


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def quantity_gib(q: str) -> float:
    m = re.fullmatch(r"(\d+)(Gi|Mi)", q)
    assert m, q
    return int(m.group(1)) / (1 if m.group(2) == "Gi" else 1024)


# ----------------------------------------------------------------------------- network mapping


def test_pod_interfaces_order():
    ifaces = nics.pod_interfaces(nics.additional_nics(8))
    assert [i["interfaceName"] for i in ifaces] == [f"eth{n}" for n in range(10)]
    assert [i["network"] for i in ifaces] == ["default", "gvnic-1", *(f"rdma-{n}" for n in range(8))]
    with pytest.raises(ValueError, match="rdma_count"):
        nics.additional_nics(-1)


@pytest.mark.parametrize("acc,autopilot", ALL_MODES, ids=MODE_IDS)
def test_network_objects(acc, autopilot):
    r = mode(acc, autopilot)
    param_sets, networks = r.of_type(PARAM_SET), r.of_type(NETWORK)
    expected = ["gvnic-1", *(f"rdma-{n}" for n in range(8))]
    assert len(param_sets) == len(networks) == 9
    assert sorted(p.inputs["metadata"]["name"] for p in param_sets) == sorted(expected)
    assert r.outputs["network_names"] == expected
    by_name = {p.inputs["metadata"]["name"]: p for p in param_sets}
    assert by_name["gvnic-1"].inputs["spec"] == {
        "vpc": GVNIC_NET, "vpcSubnet": GVNIC_SUB, "deviceMode": "NetDevice"}
    for n, subnet in enumerate(RDMA_SUBNETS):  # NIC n <-> subnet n <-> rdma-n
        assert by_name[f"rdma-{n}"].inputs["spec"] == {
            "vpc": RDMA_NET, "vpcSubnet": subnet, "deviceMode": "RDMA"}
    for net in networks:
        name = net.inputs["metadata"]["name"]
        assert net.inputs["apiVersion"] == "networking.gke.io/v1"
        assert net.inputs["spec"] == {"type": "Device", "parametersRef": {
            "group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": name}}
        assert by_name[name].urn in net.depends_on  # created after its param set
    for obj in param_sets + networks:
        assert "namespace" not in obj.inputs["metadata"]  # cluster-scoped


@pytest.mark.parametrize("acc,autopilot", ALL_MODES, ids=MODE_IDS)
def test_interfaces_annotation_is_the_network_objects(acc, autopilot):
    r = mode(acc, autopilot)
    annotations = worker_group(r)["template"]["metadata"]["annotations"]
    assert annotations["networking.gke.io/default-interface"] == "eth0"
    interfaces = json.loads(annotations["networking.gke.io/interfaces"])
    assert interfaces == nics.pod_interfaces(nics.additional_nics(ACCELERATORS[acc].rdma_nics))
    assert interfaces[0] == {"interfaceName": "eth0", "network": "default"}
    assert [i["network"] for i in interfaces[1:]] == r.outputs["network_names"]
    objects = {n.inputs["metadata"]["name"] for n in r.of_type(NETWORK)}
    assert {i["network"] for i in interfaces[1:]} == objects
    networking = {k: v for k, v in annotations.items() if k.startswith("networking.")}
    assert r.outputs["pod_annotations"] == networking
    # The head talks to GCS and the dashboard only: no RDMA networks.
    assert not any(k.startswith("networking.gke.io") for k in head_pod(r)["metadata"]["annotations"])


# ----------------------------------------------------------------------------- storage


def test_bucket_and_its_lifecycle():
    kept = run(Case())
    bucket = kept.one(BUCKET)
    assert re.fullmatch(r"verl-b200-[0-9a-f]{8}", bucket.inputs["name"])
    assert kept.outputs["bucket_name"] == bucket.inputs["name"]
    assert bucket.inputs["hierarchicalNamespace"] == {"enabled": True}
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["location"] == "us-central1"
    assert bucket.inputs["project"] == PROJECT
    # Default: destroy keeps the bucket and its weights/checkpoints.
    assert bucket.retain_on_delete is True and bucket.inputs["forceDestroy"] is False
    dropped = run(Case(delete_on_destroy=True)).one(BUCKET)
    assert dropped.retain_on_delete is False and dropped.inputs["forceDestroy"] is True


def test_workload_identity_binding_uses_the_project_number():
    r = run(Case())
    member = r.one(MEMBER)
    assert member.inputs["role"] == "roles/storage.objectUser"
    assert member.inputs["bucket"] == r.outputs["bucket_name"]
    assert member.inputs["member"] == (
        f"principal://iam.googleapis.com/projects/{mocking.MOCK_PROJECT_NUMBER}/locations/global/"
        f"workloadIdentityPools/{PROJECT}.svc.id.goog/subject/ns/{NAMESPACE}/sa/{KSA}")
    sa = r.one(SA)
    assert sa.inputs["metadata"] == {"name": KSA, "namespace": NAMESPACE}


def test_namespace_created_unless_default():
    r = run(Case())
    assert r.one(NS).inputs["metadata"]["name"] == NAMESPACE
    assert r.outputs["namespace"] == r.outputs["ray_namespace"] == NAMESPACE
    default = run(Case(namespace="default"))
    assert default.of_type(NS) == []
    namespaced = default.of_type(PVC) + default.of_type(SA)
    assert {x.inputs["metadata"]["namespace"] for x in namespaced} == {"default"}


def pv_by_name(r) -> dict[str, dict]:
    return {x.inputs["metadata"]["name"]: x.inputs for x in r.of_type(PV)}


def test_pvs_and_pvcs_are_bound_to_each_other():
    r = run(Case())
    pvs, pvcs = pv_by_name(r), {x.inputs["metadata"]["name"]: x.inputs for x in r.of_type(PVC)}
    assert len(pvs) == len(pvcs) == 4  # reader, writer, the workers' and the head's checkpoints
    for pv in pvs.values():
        pvc = pvcs[pv["spec"]["claimRef"]["name"]]
        assert pv["spec"]["claimRef"] == {"namespace": NAMESPACE, "name": pvc["metadata"]["name"]}
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pvc["metadata"]["namespace"] == NAMESPACE and "namespace" not in pv["metadata"]
        assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == st.STORAGE_CLASS
        assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pv["spec"]["capacity"]["storage"] == pvc["spec"]["resources"]["requests"]["storage"]
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        assert pv["spec"]["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
        # The driver mounts the bucket before any `:suffix` (gcs-fuse-csi-driver util.ParseVolumeID).
        assert gcsfuse.bucket_of_handle(pv["spec"]["csi"]["volumeHandle"]) == r.outputs["bucket_name"]
    handles = {name: pv["spec"]["csi"]["volumeHandle"] for name, pv in pvs.items()}
    bucket = r.outputs["bucket_name"]
    assert handles == {"training-bucket-pv": bucket, "training-bucket-writer-pv": bucket,
                       "training-bucket-checkpoints-pv": f"{bucket}:ckpt",
                       "training-bucket-head-ckpt-pv": f"{bucket}:head-ckpt"}
    assert r.outputs["pvc_name"] == pvs["training-bucket-pv"]["spec"]["claimRef"]["name"]


SAMPLES = json.loads((Path(__file__).parent / "data" / "gcsfuse_gpu_samples.json").read_text())
# Where we deliberately differ from Google's samples: no implicit-dirs (hierarchical namespace: folders
# are real objects) and a bounded file cache (its volume has a size; -1 would overflow it).
DELIBERATE = {"implicit-dirs", "file-cache:max-size-mb"}


def option_key(option: str) -> str:
    return option.rsplit(":", 1)[0] if ":" in option else option.split("=", 1)[0]


@pytest.mark.parametrize("pv_name,sample", [("training-bucket-pv", "serving")])
def test_reading_mounts_are_googles_samples_with_a_bounded_cache(pv_name, sample):
    pv = pv_by_name(run(Case()))[pv_name]
    ours, theirs = pv["spec"]["mountOptions"], SAMPLES[sample]
    for option in theirs["mountOptions"]:
        if option_key(option) not in DELIBERATE:
            assert option in ours, f"{pv_name} lacks {option} ({theirs['file']} @ {theirs['commit']})"
    (cache,) = [o for o in ours if option_key(o) == "file-cache:max-size-mb"]
    assert int(cache.rsplit(":", 1)[1]) > 0
    assert "implicit-dirs" not in ours
    assert pv["spec"]["csi"]["volumeAttributes"] == theirs["volumeAttributes"]


@pytest.mark.parametrize("pv_name", ["training-bucket-checkpoints-pv", "training-bucket-head-ckpt-pv"])
def test_checkpoint_mounts_see_only_the_checkpoint_folder_with_a_finite_ttl_and_no_file_cache(pv_name):
    pv = pv_by_name(run(Case()))[pv_name]
    options = pv["spec"]["mountOptions"]
    assert "only-dir=checkpoints" in options
    # verl rewrites latest_checkpointed_iteration.txt in place, read by other pods: never cached forever.
    (ttl,) = [int(o.rsplit(":", 1)[1]) for o in options if option_key(o) == "metadata-cache:ttl-secs"]
    assert 0 <= ttl <= 60
    assert "file-cache:max-size-mb:0" in options
    assert not any(o.startswith(("file-cache:enable-parallel", "file-cache:cache-file")) for o in options)
    assert "gcsfuseMetadataPrefetchOnMount" not in pv["spec"]["csi"]["volumeAttributes"]


def test_writer_mount_has_no_cache_no_prefetch_and_a_short_ttl():
    pv = pv_by_name(run(Case()))["training-bucket-writer-pv"]
    options = pv["spec"]["mountOptions"]
    assert "file-cache:max-size-mb:0" in options
    assert not any(o.startswith(("file-cache:enable-parallel", "read_ahead_kb")) for o in options)
    (ttl,) = [int(o.rsplit(":", 1)[1]) for o in options if option_key(o) == "metadata-cache:ttl-secs"]
    assert 0 <= ttl <= 60  # sees what an interrupted run left; never -1 (infinite)
    assert "gcsfuseMetadataPrefetchOnMount" not in pv["spec"]["csi"]["volumeAttributes"]
    assert "write:enable-streaming-writes:true" in options


def test_hf_token_is_only_in_the_secret():
    r = run(Case())
    secret = r.one(SECRET)
    assert secret.inputs["metadata"] == {"name": r.outputs["hf_secret_name"], "namespace": NAMESPACE}
    assert secret.inputs["stringData"] == mocking.SECRET
    # Not vacuous: the token did reach the Secret...
    assert secret.raw_inputs["stringData"] == {r.outputs["hf_secret_key"]: TOKEN}
    # ...and nowhere else, in any registration, in plain text.
    for reg in r.resources:
        assert TOKEN not in json.dumps(reg.inputs), f"{reg.type} {reg.name} carries the HF token"
    assert TOKEN not in json.dumps(r.outputs)


def test_no_secret_without_token():
    r = run(Case(token=False))
    assert r.of_type(SECRET) == []
    assert r.outputs["hf_secret_name"] is None


def test_gcsfuse_annotations_per_mode():
    standard = gcsfuse.pod_annotations(False, gcsfuse.WORKER_SIDECAR)
    assert standard["gke-gcsfuse/volumes"] == "true"
    assert all(standard[f"gke-gcsfuse/{k}-limit"] == "0" for k in ("cpu", "memory"))
    # A "0" ephemeral limit adds nothing to the pod's limit on Standard: the sidecar's disk must be bounded.
    assert standard["gke-gcsfuse/ephemeral-storage-limit"] == "10Gi"
    sidecar = gcsfuse.SidecarResources(cpu=0.5, memory_gib=4, ephemeral_storage_gib=10)
    assert gcsfuse.SidecarResources(cpu=2, memory_gib=0.25, ephemeral_storage_gib=1.5).memory_quantity == "256Mi"
    autopilot = gcsfuse.pod_annotations(True, sidecar)
    assert autopilot == {"gke-gcsfuse/volumes": "true", "gke-gcsfuse/cpu-limit": "500m",
                         "gke-gcsfuse/memory-limit": "4Gi", "gke-gcsfuse/ephemeral-storage-limit": "10Gi"}
    assert "0" not in autopilot.values()  # Autopilot rejects "0" (unlimited)


# ----------------------------------------------------------------------------- ray cluster


@pytest.mark.parametrize("acc,autopilot", ALL_MODES, ids=MODE_IDS)
def test_ray_cluster_identity_and_outputs(acc, autopilot):
    r = mode(acc, autopilot)
    cr = r.one(RAY).inputs
    assert cr["apiVersion"] == "ray.io/v1"
    assert {k: v for k, v in cr["metadata"].items() if k != "annotations"} == {
        "name": f"verl-{acc}-ray", "namespace": NAMESPACE}
    other = "h200" if acc == "b200" else "b200"
    assert other not in json.dumps(cr)
    assert cr["spec"]["rayVersion"] == "2.49.2"
    assert r.outputs["head_service"] == f"verl-{acc}-ray-head-svc"
    assert r.outputs["dashboard_port"] == 8265
    assert r.outputs["expected_gpus"] == 16


@pytest.mark.parametrize("acc,autopilot", ALL_MODES, ids=MODE_IDS)
def test_head(acc, autopilot):
    r = mode(acc, autopilot)
    head = ray_spec(r)["headGroupSpec"]
    assert head["rayStartParams"] == {"dashboard-host": "0.0.0.0", "num-cpus": "0"}
    spec = head["template"]["spec"]
    (container,) = spec["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "gcs-server": 6379, "dashboard": 8265, "client": 10001}
    res = container["resources"]
    assert res["requests"] == res["limits"]
    assert res["requests"]["cpu"] == str(HEAD_CPU) and res["requests"]["memory"] == "32Gi"
    assert spec["serviceAccountName"] == KSA
    assert env_of(container) == BASE_ENV
    assert head["template"]["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    assert {"name": "ray-logs", "mountPath": "/tmp/ray"} in container["volumeMounts"]
    assert "tolerations" not in spec


@pytest.mark.parametrize("acc,autopilot", ALL_MODES, ids=MODE_IDS)
def test_worker_requests_fit_the_node(acc, autopilot):
    a = ACCELERATORS[acc]
    group = worker_group(mode(acc, autopilot))
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2
    (container,) = group["template"]["spec"]["containers"]
    req, lim = container["resources"]["requests"], container["resources"]["limits"]
    assert req == lim
    cpu, memory_gib = a.worker_size(autopilot)
    assert req["cpu"] == str(cpu) and req["memory"] == f"{memory_gib}Gi"
    assert req["nvidia.com/gpu"] == str(a.gpus_per_node) == "8"
    assert group["rayStartParams"] == {"num-cpus": req["cpu"]}
    assert (req["cpu"], req["memory"]) != ("220", "2800Gi")  # not the tutorial's fixed numbers
    annotations = group["template"]["metadata"]["annotations"]
    if autopilot:  # the sidecar's requests are inside the pod: both must fit
        side_cpu = float(annotations["gke-gcsfuse/cpu-limit"])
        side_mem = quantity_gib(annotations["gke-gcsfuse/memory-limit"])
    else:  # CPU/memory limits lifted (GKE's default requests remain); disk bounded
        assert annotations["gke-gcsfuse/ephemeral-storage-limit"] == "10Gi"
        side_cpu, side_mem = 0.25, 0.25
    assert cpu + side_cpu <= a.allocatable_cpu
    assert memory_gib + side_mem <= a.allocatable_memory_gib
    (shm,) = [v for v in group["template"]["spec"]["volumes"] if v["name"] == "shared-memory"]
    assert shm["emptyDir"]["medium"] == "Memory"
    assert 64 <= quantity_gib(shm["emptyDir"]["sizeLimit"]) <= memory_gib / 4


@pytest.mark.parametrize("acc,autopilot", ALL_MODES, ids=MODE_IDS)
def test_worker_env_volumes_and_tolerations(acc, autopilot):
    a = ACCELERATORS[acc]
    spec = worker_group(mode(acc, autopilot))["template"]["spec"]
    (container,) = spec["containers"]
    env = env_of(container)
    assert env == {**BASE_ENV, **nccl_env(a)}
    assert env["NCCL_NET"] == "gIB" and env["NCCL_TUNER_CONFIG_PATH"] == a.nccl_tuner_file
    assert spec["serviceAccountName"] == KSA
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "initContainers" not in spec  # verl comes from the bucket via PYTHONPATH
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    # No declared-but-unused volumes (the tutorial's lib64, sys, proc-sys); the cache is the sidecar's.
    assert set(mounts) == set(volumes) - {gcsfuse.CACHE_VOLUME}
    assert mounts["training-bucket"]["mountPath"] == MOUNT
    assert volumes["training-bucket"]["persistentVolumeClaim"] == {"claimName": "training-bucket-pvc"}
    assert mounts["checkpoints"]["mountPath"] == CHECKPOINT_MOUNT
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "training-bucket-checkpoints-pvc"}
    assert "sizeLimit" in volumes[gcsfuse.CACHE_VOLUME]["emptyDir"]
    host = {n: v["hostPath"]["path"] for n, v in volumes.items() if "hostPath" in v}
    # Both modes: the gIB dirs the installer fills (issue 10 item 1); NCCL finds gIB by its default name.
    assert host == {"nvidia": "/home/kubernetes/bin/nvidia", "gib": "/home/kubernetes/bin/gib"}
    assert mounts["nvidia"] == {"name": "nvidia", "mountPath": NVIDIA_MOUNT, "readOnly": True}
    assert mounts["gib"] == {"name": "gib", "mountPath": GIB_MOUNT, "readOnly": True}
    assert "NCCL_NET_PLUGIN" not in env
    head = head_pod(mode(acc, autopilot))["spec"]
    assert {m["name"] for m in head["containers"][0]["volumeMounts"]} == {v["name"] for v in head["volumes"]}
    # The head reads verl's source through the writer PV, read-only: no file cache on the head.
    (bucket,) = [v for v in head["volumes"] if v["name"] == "training-bucket"]
    assert bucket["persistentVolumeClaim"] == {"claimName": "training-bucket-writer-pvc", "readOnly": True}
    # The job's driver (the run supervisor) runs on the head: the checkpoints, writable, on a PV of its own.
    (ckpt,) = [v for v in head["volumes"] if v["name"] == "checkpoints"]
    assert ckpt["persistentVolumeClaim"] == {"claimName": "training-bucket-head-ckpt-pvc"}
    (mount,) = [m for m in head["containers"][0]["volumeMounts"] if m["name"] == "checkpoints"]
    assert mount["mountPath"] == "/checkpoints" and not mount.get("readOnly")


SELECTOR_CASES = [
    (Case(autopilot=False, capacity="spot"), {"cloud.google.com/gke-nodepool": "gpu-pool"}),
    (Case(autopilot=False, capacity="flex-start"),
     {"cloud.google.com/gke-nodepool": "gpu-pool", "cloud.google.com/gke-flex-start": "true"}),
    (Case(autopilot=False, capacity="reservation", reservation="my-res"),
     {"cloud.google.com/gke-nodepool": "gpu-pool"}),
    (Case(autopilot=True, capacity="spot"), {"cloud.google.com/gke-spot": "true"}),
    (Case(autopilot=True, capacity="on-demand"), {}),
    (Case(autopilot=True, capacity="reservation", reservation="my-res"),
     {"cloud.google.com/reservation-name": "my-res", "cloud.google.com/reservation-affinity": "specific"}),
    (Case(autopilot=True, capacity="flex-start"), {"cloud.google.com/gke-flex-start": "true"}),
    (Case(accelerator="h200", autopilot=True, capacity="spot"), {"cloud.google.com/gke-spot": "true"}),
]


SELECTOR_IDS = [f"{c.accelerator}-{'ap' if c.autopilot else 'std'}-{c.capacity}" for c, _ in SELECTOR_CASES]


@pytest.mark.parametrize("case,expected", SELECTOR_CASES, ids=SELECTOR_IDS)
def test_node_selectors(case, expected):
    r = run(case)
    worker = worker_group(r)["template"]["spec"]["nodeSelector"]
    head = head_pod(r)["spec"].get("nodeSelector")
    if case.autopilot:
        a = ACCELERATORS[case.accelerator]
        expected = {"cloud.google.com/gke-accelerator": a.accelerator_type,
                    "cloud.google.com/gke-accelerator-count": "8", "topology.kubernetes.io/zone": ZONE,
                    **({"cloud.google.com/gke-gpu-driver-version": "latest"} if case.accelerator == "h200" else {}),
                    **expected}
        # Performance class, on-demand: never spot, never a GPU node, and big enough for its disk.
        assert head == {"cloud.google.com/compute-class": "Performance"}
    else:
        assert head == {"cloud.google.com/gke-nodepool": "cpu-pool"}
    assert worker == expected
    assert all(isinstance(v, str) for v in worker.values())


def test_ordering_waits_for_networks_storage_and_installer():
    r = run(Case())
    # depends_on names the RayCluster component; its children wait for the component's registration.
    cluster = r.one("verl-gke:ray_cluster:RayCluster")
    assert r.one(RAY).parent == cluster.urn
    needed = [*r.of_type(PARAM_SET), *r.of_type(NETWORK), *r.of_type(PV), *r.of_type(PVC), r.one(SA), r.one(MEMBER),
              r.one(NS), r.one("kubernetes:core/v1:ConfigMap")]
    missing = [f"{x.type} {x.name}" for x in needed if x.urn not in cluster.depends_on]
    assert not missing, f"RayCluster does not wait for {missing}"
    for pv, pvc in zip(sorted(r.of_type(PV), key=lambda x: x.name), sorted(r.of_type(PVC), key=lambda x: x.name),
                       strict=True):  # bound by volumeName: created after its PV
        assert pv.urn in pvc.depends_on or pv.urn in pvc.property_dependencies.get("spec", [])


def test_every_kubernetes_object_uses_the_explicit_provider():
    r = run(Case())
    (provider,) = r.of_type(K8S_PROVIDER)
    objects = [x for x in r.resources if x.custom and x.type.startswith("kubernetes:")]
    # 9 param sets, 9 networks; namespace, KSA, secret, 4 PVs, 4 PVCs; the RayCluster; the installer stand-in.
    assert len(objects) == 9 + 9 + 3 + 8 + 1 + 1
    for obj in objects:
        assert obj.provider.startswith(provider.urn + "::"), f"{obj.type} {obj.name}: {obj.provider!r}"


def test_components_are_parents_with_typed_tokens():
    r = run(Case())
    urns = {x.type: x.urn for x in r.resources if x.type.startswith("verl-gke:")}
    assert set(urns) == {"verl-gke:network_mapping:NetworkMapping", "verl-gke:storage:TrainingStorage",
                         "verl-gke:ray_cluster:RayCluster"}
    for reg in r.resources:
        if reg.type in (PARAM_SET, NETWORK):
            assert reg.parent == urns["verl-gke:network_mapping:NetworkMapping"]
        elif reg.type in (BUCKET, MEMBER, PV, PVC, SA, NS, SECRET):
            assert reg.parent == urns["verl-gke:storage:TrainingStorage"]
        elif reg.type == RAY:
            assert reg.parent == urns["verl-gke:ray_cluster:RayCluster"]


# ----------------------------------------------------------------------------- validation


def _refusal(component: str, args: Callable[..., Any], changes: dict[str, Any]) -> str:
    """What `require` says of the args `args(**changes)`, the defaults `args()` being valid."""
    assert args().problems() == []
    with pytest.raises(ArgsError) as err:
        require(component, args(**changes))
    return str(err.value)


def _ray_args(**changes: Any) -> rc.RayClusterArgs:
    values: dict[str, Any] = dict(
        name="verl-h200-ray", namespace=NAMESPACE,
        accelerator=ACCELERATORS["h200"], gpu_nodes=2, autopilot=False, image="verlai/verl:vllm011.latest",
        ray_version="2.49.2", service_account=KSA, pvc_name="training-bucket-pvc",
        network_annotations=nics.interface_annotations(nics.additional_nics(8)),
        paths=bucket_paths("h200", MODEL, VERL), writer_pvc_name="training-bucket-writer-pvc",
        checkpoint_pvc_name="training-bucket-checkpoints-pvc", head_checkpoint_pvc_name="training-bucket-head-ckpt-pvc",
        cpu_pool_name="cpu-pool", gpu_pool_name="gpu-pool")
    values.update(changes)
    return rc.RayClusterArgs(**values)


@pytest.mark.parametrize("changes,needle", [
    ({"capacity": Capacity("preemptible")}, "RayClusterArgs.capacity.kind = 'preemptible'"),
    ({"capacity": Capacity("reservation")}, "RayClusterArgs.capacity.reservation = ''"),
    ({"capacity": Capacity("spot", "my-res")}, "RayClusterArgs.capacity.reservation = 'my-res'"),
    ({"gpu_pool_name": None}, "RayClusterArgs.gpu_pool_name = None: is required on Standard"),
    ({"autopilot": True}, "RayClusterArgs.cpu_pool_name = 'cpu-pool': must be None on Autopilot"),
    ({"autopilot": True, "cpu_pool_name": None, "gpu_pool_name": None},
     "RayClusterArgs.zone = None: is required on Autopilot (the RoCE VPC's zone)"),
    ({"name": "b200-ray-cluster"}, "names accelerator b200 but the stack runs h200"),
    ({"name": "x" * 54}, "at most 53"),
    ({"gpu_nodes": 0}, "RayClusterArgs.gpu_nodes = 0"),
    ({"network_annotations": nics.interface_annotations(nics.additional_nics(7))},
     "attaches 7 RDMA networks; h200 has 8"),
    ({"network_annotations": {}}, "pass NetworkMapping.pod_annotations"),
    ({"image": "verlai/verl"}, "RayClusterArgs.image = 'verlai/verl'"),
    ({"ray_version": "latest"}, "RayClusterArgs.ray_version = 'latest'"),
])
def test_ray_cluster_args_are_validated(changes, needle):
    assert needle in _refusal("RayCluster", _ray_args, changes)


def _storage_args(**changes: Any) -> st.TrainingStorageArgs:
    values: dict[str, Any] = dict(
        project_id=PROJECT, project_number="1",
        location="us-central1", bucket_prefix="verl-b200", namespace=NAMESPACE)
    values.update(changes)
    return st.TrainingStorageArgs(**values)


@pytest.mark.parametrize("changes,needle", [
    ({"bucket_prefix": "google-data"}, "TrainingStorageArgs.bucket_prefix = 'google-data'"),
    ({"bucket_prefix": "Verl_B200"}, "TrainingStorageArgs.bucket_prefix = 'Verl_B200'"),
    ({"namespace": "kube-system"}, "TrainingStorageArgs.namespace = 'kube-system'"),
    ({"hf_token": TOKEN}, "TrainingStorageArgs.hf_token: a plain value: must be a secret Output"),
    ({"project_id": "X"}, "TrainingStorageArgs.project_id = 'X'"),
])
def test_storage_args_are_validated(changes, needle):
    refusal = _refusal("TrainingStorage", _storage_args, changes)
    assert needle in refusal
    assert TOKEN not in refusal


def test_network_mapping_args_are_validated():
    def bad_program() -> None:
        nm.NetworkMapping("netmap", [])

    seen = mocking.Run()
    with pytest.raises(ValueError, match=r"NetworkMapping.nics = \[\]"):
        mocking.run(bad_program, {"gcp:project": PROJECT}, "bad", result=seen)
    assert seen.resources == []


def test_bad_args_create_nothing():
    def bad_program() -> None:
        provider = k8s.Provider("k8s", kubeconfig="{}")
        rc.RayCluster("ray", _ray_args(capacity=Capacity("preemptible")),
                      opts=pulumi.ResourceOptions(provider=provider))

    seen = mocking.Run()
    with pytest.raises(ValueError, match="capacity"):
        mocking.run(bad_program, {"gcp:project": PROJECT}, "bad", result=seen)
    assert [x.type for x in seen.resources] == [K8S_PROVIDER]


# ----------------------------------------------------------------------------- upstream schemas

needs_schemas = pytest.mark.skipif(schemas.schemas_missing_reason() is not None,
                                   reason=schemas.schemas_missing_reason() or "")


@needs_schemas
@pytest.mark.parametrize("acc,autopilot", ALL_MODES, ids=MODE_IDS)
def test_ray_cluster_matches_kuberay_crd(acc, autopilot):
    obj = schemas.manifest(mode(acc, autopilot).one(RAY))
    assert schemas.crd_errors(obj, schemas.KUBERAY_RAYCLUSTER) == []


@needs_schemas
def test_network_objects_match_gke_networking_crds():
    r = run(Case())
    for reg in r.of_type(PARAM_SET):
        assert schemas.crd_errors(schemas.manifest(reg), schemas.GKE_NETWORK_PARAM_SET) == [], reg.name
    for reg in r.of_type(NETWORK):
        assert schemas.crd_errors(schemas.manifest(reg), schemas.GKE_NETWORK) == [], reg.name


@needs_schemas
def test_strict_schema_rejects_what_the_api_server_would_prune():
    obj = schemas.manifest(run(Case()).one(RAY))
    obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelecter"] = {"a": "b"}
    obj["spec"]["workerGroupSpecs"][0]["replicas"] = "2"
    errors = schemas.crd_errors(obj, schemas.KUBERAY_RAYCLUSTER)
    assert any("nodeSelecter" in e for e in errors) and any("replicas" in e for e in errors)
    # int-or-string quantities accept both forms, and still check the string's format.
    obj = schemas.manifest(run(Case()).one(RAY))
    limits = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["cpu"] = 12
    assert schemas.crd_errors(obj, schemas.KUBERAY_RAYCLUSTER) == []
    limits["cpu"] = "twelve"
    assert schemas.crd_errors(obj, schemas.KUBERAY_RAYCLUSTER) != []


@pytest.mark.parametrize("type_", [PV, PVC, SECRET, SA, NS])
def test_core_objects_match_kubernetes_schema(type_):
    r = run(Case())
    for reg in r.of_type(type_):
        obj = schemas.manifest(reg, secret_values={"stringData": {r.outputs["hf_secret_key"]: "redacted"}})
        assert schemas.core_errors(obj) == [], reg.name


def test_the_crd_schemas_ship_with_the_repository(monkeypatch):
    """The schema tests run on a clean clone: the CRDs are in tests/data/schemas, never skipped for want of them."""
    from tests import schemas

    monkeypatch.delenv(schemas.SCHEMAS_ENV, raising=False)
    assert schemas.schemas_missing_reason() is None
    assert schemas.schemas_dir().is_relative_to(schemas.REPO)
