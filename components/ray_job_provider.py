"""RayJobProvider: the dynamic provider that submits a Ray job once the cluster can run it, and tracks it.

Pulumi pickles the provider (dill, by reference to this module) into state and runs it in a separate
process, also for refresh and destroy. So this module has no import-time side effects, the provider
keeps nothing on `self`, heavy imports happen inside functions, and every deadline lives in `create`
(custom timeouts do not apply to dynamic providers).

Like KubeRay's RayJob: wait for the cluster (healthy dashboard, `expected_gpus` GPUs and the head's
job agent), submit with a fixed submission id and adopt on "already exists", resubmit a failed or
vanished job as the next attempt (`<id>-r<k>`; `read` keeps the last attempt in the inputs, so a job
whose cluster was recreated does not start over at attempt 1), stop the job on delete. Values still
unknown at preview are never judged, and every call is capped to the deadline it serves.

Refresh and delete know three answers (components.ray_presence): present, absent (Ray or the API
server says so) or unknown; unknown fails the call and the state stays. Delete succeeds only for a
job seen stopped or finished, or absent. A job adopted from the head must be ours (the digest in its
metadata). Create is all or nothing: a worker group it scaled up goes back to 0
when the cluster is not ready in time, the submission fails, or the provider process is stopping (the
engine's Cancel on Ctrl-C, its kill, or `pulumi` killed: components.provider_stop). The job follows its RayCluster:
`cluster_uid` is a replace key.

Bounded recovery (components.ray_recovery): a resubmission is a recovery, counted with the run
supervisor's in-run restarts against `max_recoveries`; a run that has used them up is adopted and
reported, not resubmitted. Before waiting for the GPUs, `scale` brings the RayCluster's worker group
back to its size (the supervisor scales it to 0 when a run ends).

Pulumi keeps the pickled provider (`__provider`) in the outputs, and refresh and destroy unpickle it from there: a
pickle that changed (the class moved) is an update, so the outputs move on with it (`pickle_changed`).

Every method reads its props through one typed input (components.ray_job_input: JobInput.from_props)
and the job's outputs (JobOutputs); what is said to the run supervisor is
components/scripts/verl_gke_protocol.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pulumi.dynamic as dyn

from components import provider_stop
from components.attempts import attempt_id, attempt_number
from components.ray_client import (
    ACTIVE,
    GONE,
    READY_POLL_CAP_S,
    TERMINAL,
    Dashboard,
    DashboardError,
    RayJobError,
    base_url,
    follow,
    pause,
    progress,
    submit,
    tail,
    target_key,
    wait_until_ready,
)
from components.ray_job_input import INPUT_KEYS, LAST_JOB_KEY, OUTPUT_KEYS, JobInput, JobOutputs, is_unknown
from components.ray_presence import ABSENT, PRESENT, look, unknown_message, unreachable_is_gone
from components.ray_recovery import budget_left, scale_to, scale_up, used_by, with_attempt_env
from components.scripts.verl_gke_protocol import supervisor_note, worker_group_patch

RESUBMIT_ON = frozenset({"FAILED", "STOPPED", GONE})
# What makes a different job. The target is compared without the CA, so a CA rotation is no restart.
# cluster_uid: the RayCluster the job runs on (a replaced cluster, a replaced job).
REPLACE_KEYS = ("submission_id", "entrypoint", "runtime_env", "expected_gpus", "cluster_uid")
DIGEST_KEY = "verl_gke_digest"  # in the submitted job's metadata: what makes a job on the head ours
SUBMIT_MIN_WINDOW_S = 30  # retries of "No available agent" get at least this long after readiness
PROVIDER_KEY = "__provider"  # where the SDK keeps the pickled provider in the inputs and outputs


def _wire_unknowns(value: Any) -> Any:
    """Unknown objects back to the wire sentinel: the provider server can serialize only that."""
    from pulumi.runtime import rpc

    if isinstance(value, dict):
        return {k: _wire_unknowns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire_unknowns(v) for v in value]
    return rpc.UNKNOWN if is_unknown(value) else value


def pick_attempt(
    existing_jobs: list[dict[str, Any]], base_id: str, resubmit: bool, last_job_id: str | None = None
) -> tuple[str, int, dict[str, Any] | None]:
    """(submission id, attempt, job to adopt or None to submit) given the jobs on the head.

    The newest attempt wins: a live or finished one is adopted (never a second job); a failed or
    stopped one is followed by attempt k+1 when resubmitting, else adopted to report its status.
    `last_job_id` is the attempt state remembers: when the head no longer has it (the job or the
    whole cluster vanished: GONE), the next attempt follows it, never attempt 1 again.
    """
    attempts = [
        (n, job)
        for job in existing_jobs
        if (n := attempt_number(job.get("submission_id"), base_id)) is not None
    ]
    last = attempt_number(last_job_id, base_id) or 0
    if last > max((n for n, _ in attempts), default=0):
        return attempt_id(base_id, last + 1), last + 1, None
    if not attempts:
        return base_id, 1, None
    number, newest = max(attempts, key=lambda pair: pair[0])
    if newest.get("status") in ("FAILED", "STOPPED") and resubmit:
        return attempt_id(base_id, number + 1), number + 1, None
    return newest["submission_id"], number, newest


def _target_replaces(old: JobInput, new: JobInput) -> list[str]:
    """`address`/`gke` when the job would live on another Ray cluster. A value not known yet (the whole
    `gke` input, or which service it names) counts as another cluster; an unknown CA alone does not."""
    gke = new.gke
    if is_unknown(new.address) or (is_unknown(gke) and not isinstance(gke, dict)):
        return [k for k in ("address", "gke") if is_unknown(getattr(new, k))]
    if isinstance(gke, dict):
        known_parts = {k: v for k, v in gke.items() if k != "ca_certificate"}
        if is_unknown(known_parts):
            return ["gke"]
        if is_unknown(gke.get("ca_certificate")):
            gke = {**gke, "ca_certificate": ""}
    if target_key({"address": old.address, "gke": old.gke}) == target_key({"address": new.address, "gke": gke}):
        return []  # the same service behind the same endpoint: a rotated CA is no new cluster
    return [k for k in ("address", "gke") if getattr(old, k) != getattr(new, k)]


def diff_inputs(olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
    """Replace for a different job or cluster, or to resubmit a dead job; update in place otherwise.

    `olds` are the state's outputs (inputs with defaults, and the job's outputs), `news` the program's
    inputs. Any input may arrive wholly unknown: the engine's dependents pass (pulumi/pulumi
    pkg/resource/deploy/step_generator.go `calculateDependentReplacements`, commit 1b5949891b3c) turns
    every input that has a property dependency on a resource being replaced into one unknown value and
    asks this diff; a replace key not known yet replaces.
    """
    old, new, state = JobInput.from_props(olds), JobInput.from_props(news), JobOutputs.from_props(olds)

    def differs(key: str) -> bool:
        return is_unknown(getattr(new, key)) or getattr(old, key) != getattr(new, key)

    replaces = [k for k in REPLACE_KEYS if differs(k)]
    replaces += _target_replaces(old, new)
    # After `pulumi up --refresh` finds the job dead (spot preemption): a new attempt resumes training.
    # ... while the run's recovery budget lasts: a run that used it up stays as it is until its inputs change.
    cap = new.max_recoveries
    if (state.status in RESUBMIT_ON and new.resubmit_on_failure is not False
            and (is_unknown(cap) or budget_left(state.recoveries, cap))):
        replaces.append("status")
    changed = bool(replaces) or any(differs(k) for k in INPUT_KEYS)
    # Stop the old job before the new one needs the same GPUs.
    return dyn.DiffResult(changes=changed, replaces=replaces, delete_before_replace=True)


def pickle_changed(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    """The provider pickled into the state's outputs (`__provider`, the SDK's key) is not the program's now: another
    class path or another pickle of it. Unknown or absent on either side: no change."""
    old, new = olds.get(PROVIDER_KEY), news.get(PROVIDER_KEY)
    return isinstance(old, str) and isinstance(new, str) and not is_unknown(new) and old != new


def _message(ray_message: str | None, note: str) -> str:
    """Ray's message, led by the run supervisor's newest line (its recoveries) when there is one."""
    return f"{note} | {ray_message or ''}".strip(" |") if note else (ray_message or "")


# ----------------------------------------------------------------------------- the provider


class RayJobProvider(dyn.ResourceProvider):
    """Submits one Ray job per attempt and tracks it. Stateless: safe to pickle and run anywhere."""

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        provider_stop.watch()  # from the first call on: a Cancel may come before the create it is meant for
        failures = [dyn.CheckFailure(p.key, p.allowed) for p in JobInput.from_props(news).problems()]
        inputs = _wire_unknowns(news)  # stored as given: no defaults, so a state's inputs never grow by themselves
        # The attempt state remembers (put into the inputs by `read`) rides along to the next create.
        if olds.get(LAST_JOB_KEY) and not news.get(LAST_JOB_KEY):
            inputs[LAST_JOB_KEY] = olds[LAST_JOB_KEY]
        return dyn.CheckResult(inputs, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        result = diff_inputs(olds, news)
        if not result.changes and pickle_changed(olds, news):
            # An update, which stores the new pickle in the outputs: refresh and destroy unpickle the provider from
            # the outputs, and a "no change" keeps the old ones (the engine's Same step), and with them the class
            # path of the day the job was created. The job is not touched (update keeps it).
            return dyn.DiffResult(changes=True, replaces=[], delete_before_replace=True)
        return result

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        """All or nothing: when the cluster is not ready in time, the submission fails or the provider process
        is stopping, the worker group this create scaled up goes back to 0 before the error is raised (the
        engine records nothing for a failed or interrupted create, so nothing else would ever scale it down)."""
        provider_stop.watch()
        job = JobInput.from_props(props)
        problems = job.problems()
        if problems:
            raise RayJobError("; ".join(f"{p.key}: {p.allowed}" for p in problems))
        with Dashboard(job.target) as dash:
            scaled = False
            try:
                if job.scale:
                    # The run supervisor released the GPUs when the last run ended: bring them back first.
                    scale_up(dash, job.scale, time.monotonic() + job.ready_timeout_s)
                    scaled = True
                outs = self._submit_or_adopt(dash, job)
                if scaled and outs.get("status") in TERMINAL:
                    # An adopted attempt that has already ended (a spent budget adopts the dead one) releases
                    # nothing any more: the group this create scaled up goes back to 0 here.
                    outs["message"] = f"{outs.get('message') or ''}; {self._release(dash, job)}".lstrip("; ")
            except RayJobError as err:
                if not scaled:
                    raise
                raise RayJobError(f"{err}\n{self._release(dash, job)}") from None
        return dyn.CreateResult(outs["job_id"], outs)

    def _submit_or_adopt(self, dash: Dashboard, job: JobInput) -> dict[str, Any]:
        base = job.submission_id
        deadline = time.monotonic() + job.ready_timeout_s
        jobs = wait_until_ready(dash, job.expected_gpus, job.ready_timeout_s,
                                progress_every_s=job.progress_every_s, what=f"Ray job {base}")
        job_id, attempt, adopted, used, note = self._choose(dash, jobs, job)
        if adopted is not None:
            check_ours(adopted, job, dash.url)
        else:
            runtime_env = with_attempt_env(job.runtime_env, base, attempt, used, job.max_recoveries)
            # The agent was part of readiness; a short window still covers a head that restarts it.
            outcome = submit(dash, job_id, {"entrypoint": job.entrypoint, "runtime_env": runtime_env,
                                            "metadata": {**job.metadata, DIGEST_KEY: digest(job)}},
                             max(deadline, time.monotonic() + SUBMIT_MIN_WINDOW_S))
        info = dash.job(job_id, deadline=max(deadline, time.monotonic() + SUBMIT_MIN_WINDOW_S))
        if adopted is None and outcome == "adopted":
            check_ours(info, job, dash.url)  # another create got there first: it must be the same run
        if job.wait_for_completion:
            info = follow(dash, job_id, job.completion_timeout_s)
            used, note = used_by(dash, info, attempt)
            if info.get("status") in ("FAILED", "STOPPED"):
                raise RayJobError(self._failure(dash, job_id, info, job.log_tail_lines, job.logs_hint))
        outputs = JobOutputs(job_id=job_id, attempt=attempt, status=info.get("status"),
                             message=_message(info.get("message"), note), dashboard_url=dash.url, recoveries=used)
        return {**job.props(), **vars(outputs)}

    @staticmethod
    def _release(dash: Dashboard, job: JobInput) -> str:
        """Scale the worker group back to 0 after a failed create, unless an attempt of this run is live on
        the head (a create after lost state must not take the GPUs from a running job). Never raises."""
        scale = job.scale
        where = f"RayCluster {scale['namespace']}/{scale['name']} group {scale['group']}"
        # Inside the engine's grace when it is killing the provider process.
        deadline = min(time.monotonic() + job.release_timeout_s, provider_stop.deadline() or float("inf"))
        try:
            live = [j["submission_id"] for j in dash.jobs(deadline)
                    if attempt_number(j.get("submission_id"), job.submission_id) and j.get("status") in ACTIVE]
        except DashboardError:
            live = []  # the head does not answer: nothing of ours can be running usefully on it
        if live:
            return f"left {where} at {scale['replicas']} replicas: {', '.join(live)} of this run is still running"
        try:
            scale_to(dash, scale, 0, deadline)
        except RayJobError as err:
            patch = json.dumps(worker_group_patch(int(scale.get("index") or 0), scale["group"], 0))
            return (f"could NOT scale {where} back to 0 ({err}); its GPU nodes keep billing until you run: "
                    f"kubectl -n {scale['namespace']} patch raycluster {scale['name']} --type json -p '{patch}'")
        return f"scaled {where} back to 0 replicas: this failed create leaves no GPU node billing"

    @staticmethod
    def _choose(dash: Dashboard, jobs: list[dict[str, Any]], job: JobInput):
        """(job id, attempt, job to adopt or None, recoveries used, supervisor's note).

        A new attempt after a dead one is itself a recovery: only while the budget lasts; otherwise
        the dead attempt is adopted and its status reported.
        """
        base = job.submission_id
        job_id, attempt, adopted = pick_attempt(jobs, base, job.resubmit_on_failure, job.last_job_id)
        if adopted is not None:
            return (job_id, attempt, adopted, *used_by(dash, adopted, attempt))
        if attempt == 1:
            return job_id, 1, None, 0, ""
        previous_id = attempt_id(base, attempt - 1)
        previous = next((j for j in jobs if j.get("submission_id") == previous_id), None)
        # GONE: the head no longer has the last attempt (its cluster was recreated); its in-run
        # restarts are unknown here, its resubmissions are not (attempt k followed k-1 of them).
        used, note = used_by(dash, previous, attempt - 1) if previous is not None else (attempt - 2, "")
        if not budget_left(used, job.max_recoveries):
            spent = (f"recovery budget spent ({used} of {job.max_recoveries}): not resubmitted; "
                     "change the run's inputs (or raise jobMaxRecoveries) to start again")
            if previous is None:
                raise RayJobError(f"Ray job {previous_id} is gone and the {spent}")
            return previous["submission_id"], attempt - 1, previous, used, spent
        return job_id, attempt, None, used + 1, note

    @staticmethod
    def _failure(dash: Dashboard, job_id: str, job: dict[str, Any], lines: int, hint: str = "") -> str:
        try:
            logs = tail(dash.logs(job_id), lines)
        except DashboardError as err:
            logs = f"(logs unavailable: {err})"
        kept = f"\n--- all logs, also after the pods are gone ---\n{hint}" if hint else ""
        return (
            f"Ray job {job_id} at {dash.url} ended {job.get('status')}: {job.get('message')}\n"
            f"--- last {lines} log lines ---\n{logs}{kept}"
        )

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        """Present: its status. Absent (Ray or the API server says so): GONE. Unknown: refresh fails and the
        state stays as it was (components.ray_presence)."""
        provider_stop.watch()
        outs = {k: v for k, v in props.items() if not k.startswith("__")}
        if not outs.get("address") and not outs.get("gke"):
            raise RayJobError(f"cannot read Ray job {id_}: no `address` or `gke` in its state")
        job, state = JobInput.from_props(outs), JobOutputs.from_props(outs)
        job_id = state.job_id or id_
        recoveries, note = state.recoveries, ""
        with Dashboard(job.target) as dash:
            seen = look(dash, job_id, job.probe_window_s, job.raycluster)
            if seen.state == PRESENT:
                status, message = seen.job.get("status", "UNKNOWN"), seen.job.get("message") or ""
                try:
                    used, note = supervisor_note(dash.logs(job_id, time.monotonic() + job.probe_window_s))
                    recoveries = max(used or 0, (state.attempt or 1) - 1)
                except DashboardError:
                    pass  # the count from the last look stays
            elif seen.state == ABSENT:
                status, message = GONE, f"job {job_id} is gone: {seen.why}"
            elif unreachable_is_gone():
                status, message = GONE, f"job {job_id} unreachable, taken as gone ({seen.why})"
                progress(f"Ray job {job_id}: {message}")
            else:
                raise RayJobError(unknown_message("refresh", job_id, dash.url, seen.why, job.probe_window_s))
        # The inputs keep the attempt, so a resubmission after GONE is the next attempt, not attempt 1
        # (check carries it from the old inputs into the new ones; create reads it). The others as stored.
        kept = {k: outs[k] for k in INPUT_KEYS if k in outs} | {LAST_JOB_KEY: job_id}
        return dyn.ReadResult(id_, {**outs, "job_id": job_id, "status": status,
                                    "message": _message(message, note), "recoveries": recoveries}, kept)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        # Only knobs changed (timeouts, flags, metadata, CA): the running job stays as it is.
        kept = {k: olds.get(k) for k in OUTPUT_KEYS}
        job = JobInput.from_props(news)
        return dyn.UpdateResult({**job.props(), **kept, "dashboard_url": base_url(job.target)})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Succeeds only when the job is seen stopped or finished, or Ray or the API server says it is gone.
        Anything else fails, and the job stays in the state (a replacement is never submitted beside it)."""
        provider_stop.watch()
        job = JobInput.from_props(props)
        job_id = JobOutputs.from_props(props).job_id or id_
        window = job.probe_window_s
        with Dashboard(job.target) as dash:
            seen = look(dash, job_id, window, job.raycluster)
            if seen.state == ABSENT:
                return
            if seen.state != PRESENT:
                if unreachable_is_gone():
                    progress(f"Ray job {job_id}: unreachable, forgotten without stopping it ({seen.why})")
                    return
                raise RayJobError(unknown_message("stop", job_id, dash.url, seen.why, window))
            status = seen.job.get("status")
            deadline = time.monotonic() + job.stop_timeout_s  # from the moment we know what to stop
            step, stop_sent, last = 0, False, ""
            while status not in TERMINAL:
                try:
                    if not stop_sent:
                        dash.call("POST", f"/api/jobs/{job_id}/stop", deadline=deadline)
                        stop_sent = True
                    status = dash.job(job_id, deadline=deadline).get("status")
                    if status in TERMINAL:
                        return
                except DashboardError as err:
                    if err.fatal:
                        raise
                    last = str(err)
                    if err.job_missing and look(dash, job_id, window, job.raycluster).state == ABSENT:
                        return
                if not pause(step, deadline, READY_POLL_CAP_S):
                    raise RayJobError(
                        f"Ray job {job_id} at {dash.url} is still {status} {job.stop_timeout_s:g}s after "
                        f"{'the stop request' if stop_sent else 'trying to stop it'} (last error: {last or 'none'}); "
                        "it stays in the state: retry `pulumi up`/`pulumi destroy`")
                step += 1


# ----------------------------------------------------------------------------- whose job it is


def digest(job: JobInput) -> str:
    """What makes a job on the head this run: its entrypoint and runtime env (without the per-attempt vars)."""
    import hashlib

    return hashlib.sha256(json.dumps([job.entrypoint, job.runtime_env or {}], sort_keys=True).encode()).hexdigest()[:16]


def check_ours(found: dict[str, Any], job: JobInput, url: str) -> None:
    """A job found on the head under our submission id is adopted only when it is ours: the digest this
    provider puts in the metadata of every job it submits."""
    theirs = (found.get("metadata") or {}).get(DIGEST_KEY)
    mine = digest(job)
    if theirs == mine:
        return

    def short(text: Any) -> str:
        text = str(text)
        return text if len(text) <= 200 else text[:200] + "..."

    raise RayJobError(
        f"Ray job {found.get('submission_id')} at {url} is not this stack's run, not adopted: its entrypoint is "
        f"{short(found.get('entrypoint'))!r} (digest {theirs}), ours is {short(job.entrypoint)!r} (digest {mine}). "
        "Stop or delete that job on the head (`ray job stop`/`ray job delete`), or change the submission id."
    )
