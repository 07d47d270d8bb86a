"""Whether the RDMA NICs of each GPU worker pod reach its Ray container, as Kubernetes shows the pod.

GKE attaches a pod's device-mode networks (the RDMA NICs of `networking.gke.io/interfaces`) to the
pod's first container only (issue 43 item 11). The RayCluster puts the Ray container first, but the
pod Kubernetes runs is the one the admission webhooks made of it: the GCS FUSE webhook inserts its
sidecar at index 0 of `containers` whenever it cannot inject it as a native sidecar (an init container),
that is when any node's kubelet is older than 1.29 or the pod opts out
(gcs-fuse-csi-driver pkg/webhook/injection.go @5fcdc04a: injectAsNativeSidecar, supportsNativeSidecar
over every node, `insert(pod.Spec.Containers, ..., getInjectIndexAfterContainer(...))` = 0 without an
istio-proxy). The sidecar would then hold the NICs and NCCL in the Ray container would find none.

`check(dash, deadline)` reads the RayCluster's worker pods through the API server and returns what is
wrong, one message per pod; the job's NCCL check (components/scripts/nccl_check.py) then counts the RDMA
devices inside the Ray container. Call it in the readiness wait once the GPUs have joined
(components.ray_client.wait_until_ready), where a problem fails the wait with its message: the pods are
running and billing, and a retry would find them the same. A pod list that cannot be read is not a
problem here (the NCCL check still stands between the trainer and a pod without its NICs): the answer
says why nothing was checked.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from catalog.nics import INTERFACES_ANNOTATION
from catalog.ray import CLUSTER_LABEL, NODE_TYPE_LABEL, WORKER_CONTAINER, cluster_of_service

READ_BUDGET_S = 30.0  # one pod list; the readiness wait's own deadline still bounds it
WEBHOOK_SOURCE = "gcs-fuse-csi-driver pkg/webhook/injection.go"


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)  # each fails the readiness wait
    checked: int = 0  # worker pods that declare RDMA networks and were looked at
    note: str = ""  # why nothing was checked, when nothing was

    @property
    def ok(self) -> bool:
        return not self.problems


def rdma_networks(pod: dict[str, Any]) -> list[str]:
    """The RDMA networks (rdma-N) a pod's multi-network annotation attaches; none for a pod without it."""
    raw = (pod.get("metadata", {}).get("annotations") or {}).get(INTERFACES_ANNOTATION)
    try:
        interfaces = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [i.get("network", "") for i in interfaces if isinstance(i, dict)
            and str(i.get("network", "")).startswith("rdma-")]


def pod_problem(pod: dict[str, Any], container: str = WORKER_CONTAINER) -> str | None:
    """Why this GPU worker pod's RDMA NICs miss its Ray container, or None."""
    networks = rdma_networks(pod)
    if not networks:
        return None
    name = pod.get("metadata", {}).get("name", "?")
    containers = (pod.get("spec") or {}).get("containers") or []
    first = containers[0].get("name", "?") if containers else None
    if first == container:
        return None
    where = "no containers" if first is None else f"its first container is {first!r}"
    return (f"GPU worker pod {name}: {where}, not the Ray container {container!r}. GKE attaches the pod's "
            f"{len(networks)} RDMA NICs ({', '.join(networks)}) to its first container only, so NCCL in the "
            f"Ray container would find none. The GCS FUSE webhook puts its sidecar first when it cannot inject "
            f"it as a native sidecar (a node's kubelet older than 1.29, or the pod opting out; {WEBHOOK_SOURCE}): "
            "check `kubectl get nodes -o wide` for old nodes and the pod's gke-gcsfuse annotations")


def pod_problems(pods: list[dict[str, Any]], container: str = WORKER_CONTAINER) -> Verdict:
    """The verdict over a PodList's items: running worker pods that declare RDMA networks."""
    verdict = Verdict()
    for pod in pods:
        labels = pod.get("metadata", {}).get("labels") or {}
        if labels.get(NODE_TYPE_LABEL) != "worker" or (pod.get("status") or {}).get("phase") != "Running":
            continue
        if not rdma_networks(pod):
            continue
        verdict.checked += 1
        if problem := pod_problem(pod, container):
            verdict.problems.append(problem)
    if not verdict.checked:
        verdict.note = "no running GPU worker pod attaches RDMA networks: nothing to check"
    return verdict


def check(dash: Any, deadline: float | None = None) -> Verdict:
    """The RayCluster's worker pods through the API server (a components.ray_client.Dashboard on a gke
    target). Never raises: without an API server, or when the list cannot be read, nothing is checked."""
    if not getattr(dash, "api_server", None):
        return Verdict(note="no API server in the target (a plain Ray address): pods not checked")
    gke = dash._gke  # noqa: SLF001 - the target's namespace and head Service, as pods_report reads them
    cluster = cluster_of_service(gke.get("service", ""))
    if not cluster:
        return Verdict(note=f"service {gke.get('service')!r} is not a KubeRay head Service: pods not checked")
    budget = time.monotonic() + READ_BUDGET_S
    deadline = budget if deadline is None else min(deadline, budget)
    path = (f"/api/v1/namespaces/{gke['namespace']}/pods?labelSelector={CLUSTER_LABEL}%3D{cluster},"
            f"{NODE_TYPE_LABEL}%3Dworker")
    try:
        answer = dash.kube(path, deadline)
    except Exception as err:  # noqa: BLE001 - refused, 5xx, 403, a slow answer: reported, not raised
        return Verdict(note=f"could not list the worker pods of RayCluster {cluster}: {err}")
    items = answer.get("items") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        return Verdict(note=f"the pod list of RayCluster {cluster} had no items: pods not checked")
    return pod_problems(items)
