"""Ray and KubeRay facts: ports, object names, API version, head sizing.

Sources: KubeRay ray-operator (head Service `<cluster>-head-svc`, headless; `ray.io/v1`), Ray's
default ports (GCS 6379, dashboard 8265, client 10001), the tutorial's head request.
"""

from __future__ import annotations

API_VERSION = "ray.io/v1"
GCS_PORT = 6379
DASHBOARD_PORT = 8265
CLIENT_PORT = 10001
# KubeRay appends "-serve-svc" to the cluster name for a Service: 63 - len("-serve-svc").
MAX_CLUSTER_NAME = 53
# The head's request (tutorial: 12 CPU / 32G): the CPU node must hold it next to its DaemonSets.
HEAD_CPU = 12
HEAD_MEMORY_GIB = 32
HEAD_EPHEMERAL_GIB = 9  # tutorial; logs live in their own emptyDir
WORKER_GROUP = "gpu-group"
# KubeRay RayCluster status condition "HeadPodReady": whether the head Pod is ready for requests,
# kept live (ray-project/kuberay@3275ee09 ray-operator/apis/ray/v1/raycluster_types.go). Unlike
# `RayClusterProvisioned` (set once) or `status.state == ready` (every worker running), it still
# holds with the GPU workers scaled to zero. Beta and on by default from KubeRay v1.3.0.
HEAD_READY_CONDITION = "HeadPodReady"
# Label KubeRay puts on every Pod of a RayCluster (head and workers).
CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"


HEAD_SERVICE_SUFFIX = "-head-svc"


def head_service(cluster_name: str) -> str:
    """KubeRay's head Service for a RayCluster (headless, in-cluster only)."""
    return f"{cluster_name}{HEAD_SERVICE_SUFFIX}"


def cluster_of_service(service: str) -> str | None:
    """The RayCluster a head Service belongs to; None for a name KubeRay did not make."""
    return service.removesuffix(HEAD_SERVICE_SUFFIX) if service.endswith(HEAD_SERVICE_SUFFIX) else None
