"""Node disk sizing for the Standard CPU pool: the boot disk holds everything its pods write.

The CPU pool's boot disk is shared by the image, the node's system, and the ephemeral storage of
the staging Job and the Ray head (their containers' writable layers, emptyDirs and the GCS FUSE
sidecars' buffers). Sized here from the pods' disk budgets so DiskPressure never evicts them.
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
