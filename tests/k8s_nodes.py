"""kwok nodes shaped like a stack's GKE nodes, from its offline plan.

Standard: each node pool of the plan (gcp:container/nodePool:NodePool) gives nodes with the labels GKE puts
on its nodes (cloud.google.com/gke-nodepool, the machine type, zone and region, the accelerator, the driver
version, spot, flex-start, the pool's own labels), the pool's taints plus the one GKE adds to GPU nodes
(nvidia.com/gpu=present:NoSchedule, "Run GPUs in GKE Standard node pools"), and allocatable as GKE computes
it ("About GKE node sizing": the CPU and memory reservation tiers and the 100 MiB eviction threshold, the
boot disk's or local SSDs' ephemeral storage; the formulas live in catalog.accelerators and catalog.nodes).
The CPU pool has its minimum node count (the cluster autoscaler, which would add nodes to a pending pod, is
not reproduced); the GPU pool as many nodes as the worker group's replicas, up to its maximum.
GPU nodes advertise nvidia.com/gpu (the device plugin) and, per pod network of the plan, the multi-network
resources networking.gke.io.networks/<network> and <network>.IP.
Autopilot: a node per pod, made as Autopilot makes one for the pod's selector (not reproduced: Autopilot's
node sizing and its webhook's tolerations): GPU nodes of the accelerator's machine, a Performance-class node
for each Performance pod.
"""

from __future__ import annotations

from typing import Any

from catalog import nodes
from catalog.accelerators import ACCELERATORS, GPU_RESOURCE, GiB
from catalog.naming import machine_vcpus
from tests.k8s_cluster import KWOK_NODE_ANNOTATION

POOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
NETWORK_RESOURCE = "networking.gke.io.networks/"
GKE_GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
MAX_PODS = 110  # GKE Standard's default maximum Pods per node
# Autopilot sizes a Performance node to its pod; this stand-in (30 vCPU, 120 GB) is larger than any pod here.
AUTOPILOT_PERFORMANCE_MACHINE = "c2-standard-30"
_EFFECT = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}


def _resources(plan: dict[str, Any], type_: str) -> list[dict]:
    return [r for r in plan["resources"] if r["type"] == type_]


def _machine(machine: str) -> tuple[int, float]:
    """(vCPUs, memory GiB) of a machine type."""
    acc = next((a for a in ACCELERATORS.values() if a.machine_type == machine), None)
    if acc is not None:
        return acc.vcpus, acc.memory_gb * 1e9 / GiB
    vcpus, memory_gb = machine_vcpus(machine), nodes.machine_memory_gb(machine)
    if vcpus is None or memory_gb is None:
        raise ValueError(f"no shape known for machine type {machine!r}")
    return vcpus, memory_gb * 1e9 / GiB


def _status(machine: str, disk_gb: int, local_ssds: int, extended: dict[str, str]) -> dict:
    vcpus, memory_gib = _machine(machine)
    if local_ssds:
        eph_capacity = local_ssds * nodes.LOCAL_SSD_GB * 1e9 / GiB
        eph = nodes.local_ssd_allocatable_gib(local_ssds)
    else:
        eph_capacity = disk_gb * nodes.FS_CAPACITY_FRACTION
        eph = nodes.boot_disk_allocatable_gib(disk_gb)
    cpu, memory = nodes.allocatable(vcpus, memory_gib)
    cpu_m, memory_ki = int(cpu * 1000), int(memory * 1024 * 1024)
    capacity = {"cpu": str(vcpus), "memory": f"{int(memory_gib * 1024 * 1024)}Ki",
                "ephemeral-storage": f"{int(eph_capacity * 1024 * 1024)}Ki", "pods": str(MAX_PODS), **extended}
    allocatable = {"cpu": f"{cpu_m}m", "memory": f"{memory_ki}Ki",
                   "ephemeral-storage": f"{int(eph * 1024 * 1024)}Ki", "pods": str(MAX_PODS), **extended}
    return {"capacity": capacity, "allocatable": allocatable}


def _node(name: str, labels: dict[str, str], taints: list[dict], status: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok", **labels}},
            "spec": {"taints": taints}, "status": status}


def _network_resources(plan: dict[str, Any]) -> dict[str, str]:
    names = [r["inputs"]["metadata"]["name"] for r in _resources(plan, "kubernetes:networking.gke.io/v1:Network")]
    return {f"{NETWORK_RESOURCE}{n}{suffix}": "1" for n in names for suffix in ("", ".IP")}


def _machine_labels(machine: str, zone: str) -> dict[str, str]:
    return {"node.kubernetes.io/instance-type": machine, "cloud.google.com/machine-family": machine.split("-")[0],
            "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": zone.rsplit("-", 1)[0]}


def worker_replicas(plan: dict[str, Any]) -> int:
    (ray,) = _resources(plan, "kubernetes:ray.io/v1:RayCluster")
    return int(ray["inputs"]["spec"]["workerGroupSpecs"][0]["replicas"])


def standard_nodes(plan: dict[str, Any]) -> list[dict]:
    out = []
    for pool in _resources(plan, "gcp:container/nodePool:NodePool"):
        inputs = pool["inputs"]
        config = inputs.get("nodeConfig") or {}
        machine = config["machineType"]
        zone = (inputs.get("nodeLocations") or [plan["outputs"].get("zone") or "us-central1-b"])[0]
        labels = {POOL_LABEL: inputs["name"], **_machine_labels(machine, zone), **(config.get("labels") or {})}
        taints = [{"key": t["key"], "value": t.get("value", ""), "effect": _EFFECT[t["effect"]]}
                  for t in config.get("taints") or []]
        extended: dict[str, str] = {}
        accelerators = config.get("guestAccelerators") or []
        scaling = inputs.get("autoscaling") or {}
        count = int(scaling.get("minNodeCount", inputs.get("initialNodeCount", 1)))
        if accelerators:
            (gpu,) = accelerators
            labels[ACCELERATOR_LABEL] = gpu["type"]
            driver = (gpu.get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion")
            if driver:
                labels["cloud.google.com/gke-gpu-driver-version"] = driver.lower()
            extended = {GPU_RESOURCE: str(gpu["count"]), **_network_resources(plan)}
            if not any(t["key"] == GPU_RESOURCE for t in taints):
                taints.append(dict(GKE_GPU_TAINT))
            count = min(worker_replicas(plan), int(scaling.get("maxNodeCount", worker_replicas(plan))))
        if config.get("spot"):
            labels["cloud.google.com/gke-spot"] = "true"
        if config.get("flexStart"):
            labels["cloud.google.com/gke-flex-start"] = "true"
        ssds = int((config.get("ephemeralStorageLocalSsdConfig") or {}).get("localSsdCount") or 0)
        status = _status(machine, int(config.get("diskSizeGb") or nodes.DEFAULT_BOOT_DISK_GB), ssds, extended)
        out += [_node(f"gke-{inputs['name']}-{i}", labels, taints, status) for i in range(count)]
    return out


def autopilot_nodes(plan: dict[str, Any], pod_selectors: list[dict[str, str]]) -> list[dict]:
    """A node per pod (`pod_selectors`: each pod's nodeSelector), labelled as its selector asks."""
    zone = plan["outputs"].get("zone") or "us-central1-b"
    out = []
    for i, selector in enumerate(pod_selectors):
        acc = next((a for a in ACCELERATORS.values() if a.accelerator_type == selector.get(ACCELERATOR_LABEL)), None)
        if acc is not None:
            extended = {GPU_RESOURCE: str(acc.gpus_per_node), **_network_resources(plan)}
            status = _status(acc.machine_type, nodes.DEFAULT_BOOT_DISK_GB, acc.local_ssds, extended)
            out.append(_node(f"gk3-gpu-{i}", {**_machine_labels(acc.machine_type, zone), **selector},
                             [dict(GKE_GPU_TAINT)], status))
        elif selector.get(COMPUTE_CLASS_LABEL) == "Performance":
            machine = AUTOPILOT_PERFORMANCE_MACHINE
            out.append(_node(f"gk3-performance-{i}", {**_machine_labels(machine, zone), **selector}, [],
                             _status(machine, nodes.DEFAULT_BOOT_DISK_GB, 0, {})))
        else:
            raise ValueError(f"no Autopilot node known for the selector {selector}")
    return out
