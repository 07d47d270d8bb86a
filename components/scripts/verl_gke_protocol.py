"""What the Ray job provider and the run supervisor say to each other; both sides import this module.

- The attempt: the provider resubmits a dead job under another id (components.attempts); the
  supervisor learns its run and attempt from the env below, never by parsing an id.
- The runtime env of each attempt tells the supervisor the run, the attempt, the recoveries counted so
  far and the cap (env vars, not the entrypoint: raising the cap neither changes the run's id nor
  restarts it).
- The supervisor's `[verl-gke]` lines in the job's log: the newest `recoveries used N of M` or
  `recovery N of M: ...` is the run's count, which the provider reads back.
- The worker group: one JSON patch, used by the provider to scale the RayCluster's GPU group back up
  and by the supervisor to release it, that tests the group's name at its index (a reordered spec
  fails instead of scaling another group) and sets replicas and minReplicas together.

Shipped into the bucket next to the supervisor (components.run_supervisor.shipped_files) and part of
its content hash: a running job's copy is never overwritten, and a change here is a new run (the
job is resubmitted). Standard library only: it runs in the training image before anything else is
known to work. The supervisor imports it from its own folder; the provider as
components.scripts.verl_gke_protocol.
"""

from __future__ import annotations

import re

LINE_PREFIX = "[verl-gke]"
RUN_ENV = "VERL_GKE_RUN"  # the base submission id: the recovery budget's key
ATTEMPT_ENV = "VERL_GKE_ATTEMPT"
USED_ENV = "VERL_GKE_RECOVERIES_USED"
MAX_ENV = "VERL_GKE_MAX_RECOVERIES"
# KubeRay's RayCluster API (ray.io/v1): the object the worker replicas live on.
RAYCLUSTER_PATH = "/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}"

_LINE = re.compile(r"^" + re.escape(LINE_PREFIX) + r" (.*)$", re.MULTILINE)
_COUNT = re.compile(r"recover(?:y|ies used) ([0-9]{1,9}) of ([0-9]{1,9})")


# ----------------------------------------------------------------------------- the supervisor's lines


def attempt_env(run: str, attempt: int, used: int, max_recoveries: int) -> dict[str, str]:
    """The env vars an attempt is submitted with (what the supervisor's options default to)."""
    return {RUN_ENV: run, ATTEMPT_ENV: str(attempt), USED_ENV: str(used), MAX_ENV: str(max_recoveries)}


def line(message: str) -> str:
    return f"{LINE_PREFIX} {message}"


def tally(used: int, limit: int) -> str:
    return f"recoveries used {used} of {limit}"


def recovery(used: int, limit: int, why: str) -> str:
    return f"recovery {used} of {limit}: {why}"


def supervisor_note(logs: str) -> tuple[int | None, str]:
    """(recoveries used, the supervisor's newest line) from a job's log; (None, "") if unsupervised."""
    lines = _LINE.findall(logs)
    used = None
    for text in lines:
        if m := _COUNT.search(text):
            used = int(m.group(1))
    return used, (lines[-1].strip() if lines else "")


# ----------------------------------------------------------------------------- the worker group


def raycluster_path(namespace: str, name: str) -> str:
    return RAYCLUSTER_PATH.format(namespace=namespace, name=name)


def worker_group_patch(index: int, group: str, replicas: int) -> list[dict]:
    """The JSON patch (application/json-patch+json) that sets worker group `group`, at `index`, to `replicas`.

    minReplicas too: KubeRay never scales a group below it, so replicas alone would not stay down.
    """
    at = f"/spec/workerGroupSpecs/{int(index)}"
    return [
        {"op": "test", "path": f"{at}/groupName", "value": group},
        {"op": "replace", "path": f"{at}/minReplicas", "value": replicas},
        {"op": "replace", "path": f"{at}/replicas", "value": replicas},
    ]
