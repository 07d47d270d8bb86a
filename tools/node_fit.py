"""Standard node pools: does every pod fit the allocatable CPU, memory and ephemeral storage of its node?

Read from the plan's rendered objects: each node pool's machine type, boot disk and local SSDs, each
pod's container requests plus the GCS FUSE sidecar the webhook adds (catalog.gcsfuse.sidecar_resources).
Allocatable comes from GKE's published reservations (catalog.accelerators for CPU/memory,
catalog.nodes for ephemeral storage), minus room for GKE's own DaemonSets. A pod that does not fit
stays Pending; the plan fails instead. Autopilot sizes its nodes to the pods (catalog.autopilot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from catalog import gcsfuse, nodes
from catalog.accelerators import ACCELERATORS, GPU_RESOURCE, GiB, gke_reserved_cpu, gke_reserved_memory_gib
from catalog.naming import machine_vcpus, quantity


@dataclass
class NodeShape:
    pool: str
    machine_type: str
    cpu: float  # allocatable, less the DaemonSets' room
    memory_gib: float
    ephemeral_gib: float
    disk: str  # where ephemeral storage lives, for the message


@dataclass
class Fit:
    pod: str
    node: str
    need: dict[str, float]
    have: dict[str, float]
    problems: list[str] = field(default_factory=list)


def shape(pool: dict[str, Any]) -> NodeShape | None:
    node = pool["inputs"].get("nodeConfig") or {}
    machine = node.get("machineType", "")
    acc = next((a for a in ACCELERATORS.values() if a.machine_type == machine), None)
    disk_gb = int(node.get("diskSizeGb") or nodes.DEFAULT_BOOT_DISK_GB)
    ssds = int((node.get("ephemeralStorageLocalSsdConfig") or {}).get("localSsdCount") or 0)
    if acc is not None:
        cpu, mem = acc.allocatable_cpu - acc.daemon_cpu, acc.allocatable_memory_gib - acc.daemon_memory_gib
    else:
        vcpus, mem_gb = machine_vcpus(machine), nodes.machine_memory_gb(machine)
        if vcpus is None or mem_gb is None:
            return None
        total = mem_gb * 1e9 / GiB
        cpu = vcpus - gke_reserved_cpu(vcpus) - nodes.DAEMON_CPU
        mem = total - gke_reserved_memory_gib(total) - 0.1 - nodes.DAEMON_MEMORY_GIB
    if ssds:
        eph, where = nodes.local_ssd_allocatable_gib(ssds), f"{ssds} local SSDs"
    else:
        eph, where = nodes.boot_disk_allocatable_gib(disk_gb), f"{disk_gb} GB boot disk"
    return NodeShape(pool["name"], machine, cpu, mem, eph - nodes.DAEMON_EPHEMERAL_GIB, where)


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


def fits(plan: dict[str, Any], pod_templates: list[tuple[str, dict]]) -> list[Fit]:
    pools = {r["name"]: r for r in plan["resources"] if r["type"] == "gcp:container/nodePool:NodePool"}
    shapes = {name: s for name, r in pools.items() if (s := shape(r)) is not None}
    gpu_pool = next((s for s in shapes.values() if any(a.machine_type == s.machine_type
                                                       for a in ACCELERATORS.values())), None)
    cpu_pool = next((s for s in shapes.values() if s is not gpu_pool), None)
    out = []
    for label, template in pod_templates:
        need, gpu = pod_requests(template)
        node = gpu_pool if gpu else cpu_pool
        if node is None:
            continue
        have = {"cpu": node.cpu, "memory": node.memory_gib, "ephemeral-storage": node.ephemeral_gib}
        f = Fit(label, f"{node.pool} ({node.machine_type}, {node.disk})", need, have)
        for k, unit in (("cpu", "CPU"), ("memory", "GiB memory"), ("ephemeral-storage", "GiB ephemeral storage")):
            if need[k] > have[k] + 1e-9:
                f.problems.append(f"{label} requests {need[k]:.2f} {unit} (GCS FUSE sidecar included) but a "
                                  f"{node.machine_type} node with {node.disk} leaves {have[k]:.2f} to pods "
                                  "(GKE's reservations, eviction threshold and DaemonSets: catalog/nodes.py)")
        out.append(f)
    return out
