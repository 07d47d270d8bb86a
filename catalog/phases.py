"""Phase durations of a deploy, for the critical path the plan prints (tools/critical_path.py).

Estimates, not measurements: each says where its figure comes from. They decide nothing a platform
accepts; they make the ordering's cost visible and comparable between stacks and changes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    minutes: float
    source: str


CLUSTER_STANDARD = Phase(7.0, "assumption: GKE Standard control plane create, typically 5-8 min")
CLUSTER_AUTOPILOT = Phase(8.0, "assumption: GKE Autopilot create, typically 6-10 min")
CPU_POOL = Phase(4.0, "assumption: node pool create with its initial nodes: VM boot, registration, "
                      "health checks of the operation")
CPU_NODE_READY = Phase(3.0, "assumption: the pool's first node is Ready (schedulable) about 1 min "
                            "before the pool operation reports done")
GPU_POOL_EMPTY = Phase(1.5, "assumption: node pool create with 0 initial nodes (no VM to boot)")
AUTOPILOT_CPU_NODE = Phase(3.0, "assumption: Autopilot provisions a Performance-class node for a pending pod")
GPU_NODE = Phase(8.0, "assumption: autoscaler scale-up of a GPU node: VM boot, GPU driver install, (on "
                      "A4/A3 Ultra) RDMA NICs, node Ready; an upper figure for a G2 node without RDMA")
IMAGE_PULL = Phase(2.5, "assumption: the verl image, ~15 GB compressed, pulled in full at ~100 MB/s "
                        "before the container starts")
IMAGE_PULL_STREAMED = Phase(0.5, "assumption: GKE image streaming starts the container on the "
                                 "first-needed layers; rest read on demand")
STAGING_FIXED = Phase(1.5, "assumption: verl clone (shallow) + GSM8K download and preprocessing")
# Staging's download of the weights (the one figure the critical path, the run estimate and the README use):
# huggingface_hub's Python downloads top out near 500 MB/s (huggingface/hf_transfer README: "a power user tool,
# to go beyond ~500MB/s on very high bandwidth network, where Python cannot cap out the available bandwidth").
# Expected: half of that for the staging Job's 4 files at once written through the GCS FUSE sidecar
# (estimate); slow: 100 MB/s, a slow CDN edge (estimate). Fast, expected, slow.
DOWNLOAD_MB_PER_S = 250.0
DOWNLOAD_MB_PER_S_RANGE = (500.0, DOWNLOAD_MB_PER_S, 100.0)
DOWNLOAD_SOURCE = ("huggingface_hub tops out near 500 MB/s (huggingface/hf_transfer README); half that "
                   "expected, 100 MB/s slow (estimates)")
INSTALLER = Phase(0.5, "assumption: applying the NCCL installer manifests (a DaemonSet; not awaited to run)")
API_CALL = Phase(0.1, "assumption: a plain API object (network, bucket, Kubernetes object)")


def staging(weights_gb: float, mb_per_s: float = DOWNLOAD_MB_PER_S) -> Phase:
    return Phase(STAGING_FIXED.minutes + weights_gb * 1000 / mb_per_s / 60,
                 f"{weights_gb:g} GB of weights at {mb_per_s:g} MB/s ({DOWNLOAD_SOURCE}) + "
                 f"{STAGING_FIXED.minutes:g} min for verl and GSM8K")
