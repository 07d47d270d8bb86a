"""Is a Ray job still there? Three answers, never two: present, absent or unknown.

A refresh or a delete that mistakes "no answer" for "gone" stops a healthy run (the next `up`
replaces the job) or forgets a running one (delete returns, the job keeps its GPUs). So "absent"
needs a definite answer from someone who knows:
- Ray itself: the dashboard answers its health endpoint and says 404 "Job <id> does not exist"
  for the job, twice (ray-project/ray python/ray/dashboard/modules/job/job_head.py `get_job_info`,
  commit 017deaf1a528); or
- the Kubernetes API server: the RayCluster the job ran on is not found (a `Status` NotFound that
  names that RayCluster; namespace deletion removes it too).
Everything else (refused connection, a 5xx, a stray 404 from a front, a slow answer, a RayCluster
that exists while its dashboard does not answer) is unknown. Fault table: tests/test_ray_presence.py.

Escape hatch for a cluster deleted out of band: UNREACHABLE_IS_GONE_ENV=true lets refresh and
destroy treat an unknown answer as absent (as PULUMI_K8S_DELETE_UNREACHABLE does for the
Kubernetes provider).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from components.ray_client import READY_POLL_CAP_S, Dashboard, DashboardError, pause
from components.scripts.verl_gke_protocol import raycluster_path

PRESENT, ABSENT, UNKNOWN = "present", "absent", "unknown"
UNREACHABLE_IS_GONE_ENV = "VERL_GKE_JOB_UNREACHABLE_IS_GONE"
PROBE_WINDOW_S = 45.0  # how long refresh/delete keep asking before "unknown": a few polls on a loaded machine


@dataclass
class Presence:
    state: str  # PRESENT, ABSENT or UNKNOWN
    job: dict[str, Any] | None  # Ray's job info when present
    why: str  # for absent and unknown: who said so, or the last error


def unreachable_is_gone() -> bool:
    return os.environ.get(UNREACHABLE_IS_GONE_ENV, "").strip().lower() in ("1", "true", "yes")


def _raycluster_not_found(dash: Dashboard, namespace: str, name: str, deadline: float) -> str | None:
    """The API server's own NotFound for this RayCluster (the reason why), or None for anything else."""
    try:
        dash.kube(raycluster_path(namespace, name), deadline)
        return None  # it exists: the job's absence is not proven by the cluster
    except DashboardError as err:
        if err.status != 404:
            return None
        import json

        try:
            body = json.loads(err.detail)
        except ValueError:
            return None  # a 404 page from something else in front of the API server
        details = body.get("details") or {}
        if (body.get("kind") == "Status" and body.get("reason") == "NotFound"
                and details.get("name") == name and details.get("kind") in ("rayclusters", "RayCluster")):
            return f"the API server says RayCluster {namespace}/{name} does not exist"
        return None


def _ray_says_missing(dash: Dashboard, job_id: str, deadline: float) -> bool:
    """The dashboard answers its health endpoint, and Ray says 404 "does not exist" for the job again."""
    try:
        dash.call("GET", "/api/gcs_healthz", timeout=10, deadline=deadline)
        dash.job(job_id, deadline=deadline)
        return False
    except DashboardError as err:
        return err.job_missing


def look(dash: Dashboard, job_id: str, window_s: float = PROBE_WINDOW_S,
         raycluster: tuple[str, str] | None = None) -> Presence:
    """Ask until a definite answer or `window_s` has passed; every call is capped to that window.
    `raycluster`: (namespace, name) of the RayCluster the job runs on, asked of the API server too."""
    deadline = time.monotonic() + window_s
    cluster = raycluster if dash.api_server else None
    last, step = "nothing asked yet", 0
    while True:
        try:
            return Presence(PRESENT, dash.job(job_id, deadline=deadline), "")
        except DashboardError as err:
            if err.fatal:
                raise  # TLS, authorization: the operator has to act; waiting does not help
            if not err.expired:
                last = str(err)
            if err.job_missing and _ray_says_missing(dash, job_id, deadline):
                return Presence(ABSENT, None, f"Ray at {dash.url} answers and says job {job_id} does not exist")
        if cluster is not None:
            why = _raycluster_not_found(dash, *cluster, deadline)
            if why:
                return Presence(ABSENT, None, why)
        if not pause(step, deadline, READY_POLL_CAP_S):
            return Presence(UNKNOWN, None, last)
        step += 1


def unknown_message(action: str, job_id: str, url: str, why: str, window_s: float) -> str:
    """What to check when neither Ray nor the API server gave a definite answer."""
    return (
        f"cannot {action} Ray job {job_id}: no definite answer from {url} within {window_s:g}s "
        f"(last: {why}). Nothing was changed and the job stays in the state. Check that the cluster's "
        "API server is reachable from here (authorized networks, `gcloud auth application-default login`) "
        "and that the Ray head pod is running, then retry. If the cluster was deleted out of band, "
        f"{UNREACHABLE_IS_GONE_ENV}=true lets refresh and destroy treat the job as gone."
    )
