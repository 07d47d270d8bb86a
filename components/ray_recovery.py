"""What the job provider needs for bounded recovery and for the GPUs the run supervisor releases.

- The recovery budget: one counter per run (the base submission id) covers the provider's
  resubmissions (`-r<k>`) and the supervisor's in-run restarts (components/scripts/supervise.py).
  The supervisor prints `[verl-gke] ... recoveries used N of M` / `recovery N of M: ...` lines;
  the newest of them in a job's logs is that run's count. Without such a line (a job that is not
  supervised, or that died before printing), attempt k has used k-1.
- Each attempt learns its number and the count so far from two env vars in its runtime env.
- Scaling the RayCluster's GPU worker group back up before waiting for the GPUs: the supervisor
  scales it to 0 when a run ends; Pulumi ignores the replica fields (components.ray_cluster).
"""

from __future__ import annotations

import re
from typing import Any

from components.ray_client import Dashboard, DashboardError, RayJobError

SUPERVISOR_LINE = re.compile(r"^\[verl-gke\] (.*)$", re.MULTILINE)
COUNT = re.compile(r"recover(?:y|ies used) (\d+) of (\d+)")
# What each attempt learns from the provider, through its runtime env: not in the entrypoint, so
# raising the cap neither changes the run's submission id nor restarts it.
RUN_ENV = "VERL_GKE_RUN"  # the base submission id: the budget's key
ATTEMPT_ENV = "VERL_GKE_ATTEMPT"
USED_ENV = "VERL_GKE_RECOVERIES_USED"
MAX_ENV = "VERL_GKE_MAX_RECOVERIES"
# KubeRay's RayCluster API (ray.io/v1): the object the worker replicas live on.
RAYCLUSTER_PATH = "/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}"


def supervisor_note(logs: str) -> tuple[int | None, str]:
    """(recoveries used, the supervisor's newest line) from a job's logs; (None, "") if unsupervised."""
    lines = SUPERVISOR_LINE.findall(logs)
    used = None
    for line in lines:
        if m := COUNT.search(line):
            used = int(m.group(1))
    return used, (lines[-1].strip() if lines else "")


def used_by(dash: Dashboard, job: dict[str, Any], attempt: int) -> tuple[int, str]:
    """(recoveries used by the run up to and including this attempt, the supervisor's newest line)."""
    try:
        used, line = supervisor_note(dash.logs(job["submission_id"]))
    except DashboardError:
        used, line = None, ""
    return max(used or 0, attempt - 1), line


def with_attempt_env(runtime_env: dict[str, Any] | None, run: str, attempt: int, used: int,
                     max_recoveries: int) -> dict[str, Any]:
    """The runtime env plus the run, the attempt's number, the count so far (the supervisor's floor), the cap."""
    env = dict(runtime_env or {})
    env["env_vars"] = {**(env.get("env_vars") or {}), RUN_ENV: run, ATTEMPT_ENV: str(attempt),
                       USED_ENV: str(used), MAX_ENV: str(max_recoveries)}
    return env


def budget_left(used: int | None, attempt: int | None, max_recoveries: int) -> bool:
    """May one more recovery (a resubmission) start? `used` None: state from before the counter."""
    return (used if used is not None else max((attempt or 1) - 1, 0)) < max_recoveries


def scale_to(dash: Dashboard, scale: dict[str, Any], replicas: int, deadline: float | None = None) -> str:
    """Set the RayCluster's worker group to `replicas` (and minReplicas: KubeRay clamps to it).

    A JSON patch that first tests the group's name at `index`, so a reordered spec fails loudly
    instead of scaling another group. Returns what was done, for the log.
    """
    path = RAYCLUSTER_PATH.format(namespace=scale["namespace"], name=scale["name"]) + "?fieldManager=verl-gke-job"
    index = int(scale.get("index") or 0)
    patch = [
        {"op": "test", "path": f"/spec/workerGroupSpecs/{index}/groupName", "value": scale["group"]},
        {"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/minReplicas", "value": replicas},
        {"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/replicas", "value": replicas},
    ]
    try:
        dash.kube_send("PATCH", path, patch, "application/json-patch+json", deadline)
    except DashboardError as err:
        raise RayJobError(
            f"could not scale RayCluster {scale['namespace']}/{scale['name']} group {scale['group']} "
            f"to {replicas} replicas: {err}"
        ) from None
    return f"{scale['name']}/{scale['group']} scaled to {replicas}"


def scale_up(dash: Dashboard, scale: dict[str, Any], deadline: float | None = None) -> str:
    """Back to the run's size before waiting for the GPUs (the supervisor scaled it to 0 when a run ended)."""
    return scale_to(dash, scale, int(scale["replicas"]), deadline)
