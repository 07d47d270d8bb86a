"""Standard node pools: does a pod fit the allocatable CPU, memory and ephemeral storage of its node?

A node's room: GKE's reservations (catalog.nodes.allocatable for CPU/memory, catalog.nodes for ephemeral
storage) less room for GKE's own DaemonSets (the accelerator's, or catalog.nodes.DAEMON_* on a CPU
node). A pod's need: its containers' requests plus the GCS FUSE sidecar the webhook adds
(catalog.gcsfuse.sidecar_resources). A pod that does not fit stays Pending: the gate
(stacks.node_fit) refuses it, the plan reports the same numbers. Autopilot sizes its nodes to the pods
(catalog.autopilot).
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog import gcsfuse, nodes
from catalog.accelerators import ACCELERATORS, GPU_RESOURCE, GiB
from catalog.naming import machine_vcpus, quantity

RESOURCES = (("cpu", "CPU"), ("memory", "GiB memory"), ("ephemeral-storage", "GiB ephemeral storage"))


@dataclass(frozen=True)
class NodeShape:
    pool: str
    machine_type: str
    cpu: float  # allocatable, less the DaemonSets' room
    memory_gib: float
    ephemeral_gib: float
    disk: str  # where ephemeral storage lives, for the message

    @property
    def room(self) -> dict[str, float]:
        return {"cpu": self.cpu, "memory": self.memory_gib, "ephemeral-storage": self.ephemeral_gib}

    @property
    def label(self) -> str:
        return f"{self.pool} ({self.machine_type}, {self.disk})"


def node_shape(pool: str, machine_type: str, boot_disk_gb: int | None, local_ssds: int) -> NodeShape | None:
    """What a node of this pool leaves to pods; None for a machine type whose size the catalog does not know."""
    acc = next((a for a in ACCELERATORS.values() if a.machine_type == machine_type), None)
    if acc is not None:
        cpu, mem = acc.allocatable_cpu - acc.daemon_cpu, acc.allocatable_memory_gib - acc.daemon_memory_gib
    else:
        vcpus, mem_gb = machine_vcpus(machine_type), nodes.machine_memory_gb(machine_type)
        if vcpus is None or mem_gb is None:
            return None
        cpu, mem = nodes.allocatable(vcpus, mem_gb * 1e9 / GiB)
        cpu, mem = cpu - nodes.DAEMON_CPU, mem - nodes.DAEMON_MEMORY_GIB
    disk_gb = boot_disk_gb or nodes.DEFAULT_BOOT_DISK_GB
    if local_ssds:
        eph, where = nodes.local_ssd_allocatable_gib(local_ssds), f"{local_ssds} local SSDs"
    else:
        eph, where = nodes.boot_disk_allocatable_gib(disk_gb), f"{disk_gb} GB boot disk"
    return NodeShape(pool, machine_type, cpu, mem, eph - nodes.DAEMON_EPHEMERAL_GIB, where)


def pod_requests(template: dict) -> tuple[dict[str, float], bool]:
    """(cpu, memory GiB, ephemeral GiB) the pod requests with its sidecar; whether it asks for GPUs."""
    spec = template.get("spec") or {}
    need = {"cpu": 0.0, "memory": 0.0, "ephemeral-storage": 0.0}
    gpu = False
    for c in (spec.get("containers") or []):
        requests = (c.get("resources") or {}).get("requests") or {}
        gpu = gpu or GPU_RESOURCE in requests
        for k in need:
            if k in requests:
                need[k] += quantity(str(requests[k])) or 0.0
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    if annotations.get(gcsfuse.SIDECAR_ANNOTATION) == "true":
        for k, (req, _lim) in gcsfuse.sidecar_resources(annotations).items():
            need[k] += req or 0.0
    gib = {"cpu": need["cpu"], "memory": need["memory"] / GiB, "ephemeral-storage": need["ephemeral-storage"] / GiB}
    return gib, gpu


def short(label: str, need: dict[str, float], node: NodeShape) -> dict[str, str]:
    """Each resource the pod needs more of than the node leaves, with the sentence that says so."""
    return {k: f"{label} requests {need[k]:.2f} {unit} (GCS FUSE sidecar included) but a {node.machine_type} node "
               f"with {node.disk} leaves {node.room[k]:.2f} to pods (GKE's reservations, eviction threshold and "
               "DaemonSets: catalog/nodes.py)"
            for k, unit in RESOURCES if need[k] > node.room[k] + 1e-9}
