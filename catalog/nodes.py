"""Node disk sizing for the Standard CPU pool: the boot disk holds everything its pods write.

The CPU pool's boot disk is shared by the image, the node's system, and the ephemeral storage of
the staging Job and the Ray head (their containers' writable layers, emptyDirs and the GCS FUSE
sidecars' buffers). Sized here from the pods' disk budgets so DiskPressure never evicts them. The
size is kept as it was computed (a new size replaces the CPU pool); whether each pod fits the
node's allocatable, with GKE's full system reservation, is checked by the gate (catalog.node_fit,
with the formulas below).
"""

from __future__ import annotations

import math

# Assumption: verlai/verl vLLM images are ~12-15 GB compressed on Docker Hub and about twice that
# unpacked; 30 GiB holds one unpacked copy (the image is pulled once per node).
IMAGE_GIB = 30
# Assumption: COS, kubelet/containerd state, logs and GKE's system pod images on a CPU node.
SYSTEM_GIB = 20
# The kubelet evicts at nodefs.available < 10% (Kubernetes' default hard eviction threshold, which
# GKE keeps): only 90% of the disk is usable by pods.
EVICTION_FREE_FRACTION = 0.10
DEFAULT_BOOT_DISK_GB = 100  # GKE's default node boot disk


def cpu_boot_disk_gb(staging_pod_gib: float, head_pod_gib: float) -> int:
    """Boot disk (GB, rounded up to 10) for a CPU node that may hold the Ray head and two staging
    pods: a replaced Job's finished pod keeps its disk until the old Job is deleted."""
    need_gib = IMAGE_GIB + SYSTEM_GIB + 2 * staging_pod_gib + head_pod_gib
    need_gb = need_gib * 1024**3 / 1e9 / (1 - EVICTION_FREE_FRACTION)
    return max(DEFAULT_BOOT_DISK_GB, 10 * math.ceil(need_gb / 10))


# ----------------------------------------------------------------------------- Standard node allocatable
# GKE "About GKE node sizing" (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes):
# allocatable = capacity - kube/system reservation - eviction threshold (allocatable() below).
# Ephemeral storage on the boot disk: GKE reserves min(50 %, 6 GiB + 35 %, 100 GiB) of the disk, and
# the kubelet evicts below 10 % of the filesystem free. The filesystem is smaller than the disk: the
# page's own sample node reports capacity 98831908Ki and allocatable 47060071478 bytes for a 100 GB
# boot disk, which this model reproduces (tests/test_nodes.py) with the capacity below.
FS_CAPACITY_FRACTION = 98831908 * 1024 / (100 * 1024**3)  # the page's sample: 94.25 GiB of a 100 GiB disk
BOOT_RESERVE_CAP_GIB = 100
# Local SSD ephemeral storage (375 GB each): the 10 % eviction threshold on its filesystem and a system
# reservation no larger than the boot disk's cap. Assumption: the page's local-SSD reservation table was
# not in the stored copies; 100 GiB bounds it from above, so the check errs on the safe side.
LOCAL_SSD_GB = 375
LOCAL_SSD_RESERVE_GIB = 100
# Per-vCPU memory of Compute Engine's predefined types ("General-purpose machine family" and "Compute-
# optimized" tables: standard 4 GB, highmem 8 GB, highcpu 1 GB per vCPU).
MEMORY_GB_PER_VCPU = {"standard": 4, "highmem": 8, "highcpu": 1}
# GKE's own DaemonSets on a CPU node (logging, metrics, kube-proxy/dataplane, GCS FUSE and PD CSI
# node drivers). Assumption: their requests stay within these; the plan leaves them free on every node.
DAEMON_CPU = 1.0
DAEMON_MEMORY_GIB = 2.0
DAEMON_EPHEMERAL_GIB = 2.0
EVICTION_MEMORY_GIB = 0.1  # the kubelet's 100 MiB hard memory eviction threshold, rounded up
# GKE's reservation tiers: (size, rate) from the first vCPU / GiB up.
CPU_RESERVATION = ((1, 0.06), (1, 0.01), (2, 0.005), (float("inf"), 0.0025))
MEMORY_RESERVATION = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02))


def allocatable(vcpus: float, memory_gib: float) -> tuple[float, float]:
    """(CPU, memory GiB) GKE leaves to pods on a Standard node of this size: the one place of GKE's formula
    (6 % of the 1st core, 1 % of the 2nd, 0.5 % of the next 2, 0.25 % above 4; 25 % of the first 4 GiB,
    20 % of the next 4, 10 % of the next 8, 6 % of the next 112, 2 % above 128 GiB; the eviction threshold)."""
    return (vcpus - _tiered(vcpus, CPU_RESERVATION),
            memory_gib - _tiered(memory_gib, MEMORY_RESERVATION) - EVICTION_MEMORY_GIB)


def _tiered(amount: float, tiers: tuple[tuple[float, float], ...]) -> float:
    reserved, left = 0.0, amount
    for size, rate in tiers:
        take = min(left, size)
        reserved += take * rate
        left -= take
        if left <= 0:
            break
    return reserved


def boot_disk_allocatable_gib(boot_disk_gb: int) -> float:
    """Pods' allocatable ephemeral storage on a boot disk of this size (Compute Engine GB are GiB)."""
    capacity = boot_disk_gb * FS_CAPACITY_FRACTION
    reserved = min(0.5 * boot_disk_gb, 6 + 0.35 * boot_disk_gb, BOOT_RESERVE_CAP_GIB)
    return capacity - reserved - EVICTION_FREE_FRACTION * capacity


def local_ssd_allocatable_gib(local_ssds: int) -> float:
    capacity = local_ssds * LOCAL_SSD_GB * 1e9 / 1024**3
    return capacity - LOCAL_SSD_RESERVE_GIB - EVICTION_FREE_FRACTION * capacity


def machine_memory_gb(machine_type: str) -> int | None:
    """Memory of a predefined standard/highmem/highcpu machine type; None for any other."""
    from catalog.naming import machine_vcpus

    vcpus = machine_vcpus(machine_type)
    parts = machine_type.split("-")
    per = MEMORY_GB_PER_VCPU.get(parts[1]) if len(parts) >= 3 else None
    return None if vcpus is None or per is None else vcpus * per
