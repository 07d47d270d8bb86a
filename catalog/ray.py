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
# The Ray container of a GPU worker pod: the pod's first container, which GKE gives the RDMA NICs
# (components.rdma_attach checks that it still is once the webhooks have run).
WORKER_CONTAINER = "ray-worker"
# Seconds Ray's job supervisor waits after the SIGTERM of `ray job stop` before it SIGKILLs the entrypoint's
# process tree: int(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S", 3)) in the supervisor actor, whose env is the
# job's runtime env (ray/dashboard/modules/job/job_supervisor.py JobSupervisor.run and job_manager.py
# _get_supervisor_runtime_env, ray 2.60.0 b7f4259e). Ray's 3 s cannot hold the run supervisor's release of
# the GPU group (up to 3 PATCHes of 30 s) and its stop record on the bucket: components/scripts/supervise.py
# bounds its release by this value less STOP_RECORD_S. An integer string: Ray parses it with int().
JOB_STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
JOB_STOP_WAIT_S = 90
# What `pulumi up` waits for on the RayCluster: KubeRay's record of its head Pod's IP,
# `status.head.podIP` (ray-project/kuberay ray-operator/apis/ray/v1/raycluster_types.go HeadInfo, set
# from the head Pod by raycluster_controller.go updateHeadInfo; both at v1.0.0 1add258f, v1.2.2
# 0ea404b8 and v1.5.2 9f65eca1). It does not depend on the KubeRay version GKE's Ray add-on runs,
# which no Google page names: the `HeadPodReady` condition needs the RayClusterStatusConditions
# feature gate, off by default up to v1.2.2 (ray-operator/pkg/features/features.go @0ea404b8), where
# a wait on it would never end. Unlike `status.state == ready` it holds with the GPU workers scaled
# to zero. The kubelet gives a Pod its IP once its sandbox is up, before any image is pulled
# (kubernetes/kubernetes pkg/kubelet/kuberuntime/kuberuntime_manager.go SyncPod @000f2605): this says
# the head is placed, not that it runs. The head's readiness is the job provider's wait
# (ray_client.wait_until_ready). pulumi-kubernetes only checks it once status.observedGeneration has
# caught up with metadata.generation, and KubeRay writes status for a new generation only when
# another status field moves (ray-operator/controllers/ray/utils/consistency.go @v1.7.0): an in-place
# update must leave the generation alone, i.e. change metadata only; any spec change replaces the
# cluster (components.ray_cluster.runtime_scaled_options).
HEAD_READY_JSONPATH = "{.status.head.podIP}"
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
