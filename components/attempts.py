"""A run's attempts: a dead job is resubmitted as `<run>-r<k>` (k >= 2), the run being the base
submission id. The provider makes and reads these ids and tools.watch reads them; the supervisor
never parses one (it gets its run and attempt from the env, scripts/verl_gke_protocol.py). Kept out
of the supervisor's shipped, hashed files so that a fix here never restarts a running job.
"""

from __future__ import annotations

import re

_RETRY = re.compile(r"(?P<run>.+)-r(?P<n>[1-9][0-9]{0,8})")  # ASCII digits, no leading zero: attempt_id's own form


def attempt_id(run: str, attempt: int) -> str:
    """The submission id of attempt `attempt` (1, 2, ...) of `run`."""
    return run if attempt == 1 else f"{run}-r{attempt}"


def split_attempt(job_id: str) -> tuple[str, int]:
    """(run, attempt) of a submission id: `<run>-r<k>` with k >= 2 is attempt k; anything else is attempt 1."""
    match = _RETRY.fullmatch(job_id)
    if match and int(match.group("n")) >= 2:
        return match.group("run"), int(match.group("n"))
    return job_id, 1


def attempt_number(job_id: str | None, run: str) -> int | None:
    """1 for the run's own id, k for `<run>-r<k>`, None for somebody else's job."""
    if not job_id:
        return None
    if job_id == run:
        return 1
    of, number = split_attempt(job_id)
    return number if of == run and number >= 2 else None
