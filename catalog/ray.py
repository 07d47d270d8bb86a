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


def head_service(cluster_name: str) -> str:
    """KubeRay's head Service for a RayCluster (headless, in-cluster only)."""
    return f"{cluster_name}-head-svc"
