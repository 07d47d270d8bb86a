"""What the job provider needs for bounded recovery and for the GPUs the run supervisor releases.

- The recovery budget: one counter per run (the base submission id) covers the provider's
  resubmissions (`-r<k>`) and the supervisor's in-run restarts (components/scripts/supervise.py).
  The newest count in a job's log (protocol.supervisor_note) is that run's; without one (a job that
  is not supervised, or that died before printing), attempt k has used k-1.
- Each attempt learns its number and the count so far from env vars in its runtime env.
- Scaling the RayCluster's GPU worker group back up before waiting for the GPUs: the supervisor
  scales it to 0 when a run ends; Pulumi ignores the replica fields (components.ray_cluster).

What is said to the supervisor, and read back from it, is components/scripts/verl_gke_protocol.py.
"""

from __future__ import annotations

from typing import Any

from components.ray_client import Dashboard, DashboardError, RayJobError
from components.scripts import verl_gke_protocol as protocol


def used_by(dash: Dashboard, job: dict[str, Any], attempt: int) -> tuple[int, str]:
    """(recoveries used by the run up to and including this attempt, the supervisor's newest line)."""
    try:
        used, line = protocol.supervisor_note(dash.logs(job["submission_id"]))
    except DashboardError:
        used, line = None, ""
    return max(used or 0, attempt - 1), line


def with_attempt_env(runtime_env: dict[str, Any] | None, run: str, attempt: int, used: int,
                     max_recoveries: int) -> dict[str, Any]:
    """The runtime env plus the run, the attempt's number, the count so far (the supervisor's floor), the cap."""
    env = dict(runtime_env or {})
    env["env_vars"] = {**(env.get("env_vars") or {}), **protocol.attempt_env(run, attempt, used, max_recoveries)}
    return env


def budget_left(used: int, max_recoveries: int) -> bool:
    """May one more recovery (a resubmission) start, `used` of the run's `max_recoveries` spent?"""
    return used < max_recoveries


def scale_to(dash: Dashboard, scale: dict[str, Any], replicas: int, deadline: float | None = None) -> str:
    """Set the RayCluster's worker group to `replicas` (protocol.worker_group_patch). Returns what was done."""
    path = protocol.raycluster_path(scale["namespace"], scale["name"]) + "?fieldManager=verl-gke-job"
    patch = protocol.worker_group_patch(int(scale.get("index") or 0), scale["group"], replicas)
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
