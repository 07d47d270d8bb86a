"""The Ray job dynamic provider: submit the GRPO job once the cluster can run it, and track it.

Pulumi pickles the provider (dill, by reference to this module) into state and runs it in a separate
process, also for refresh and destroy. So this module has no import-time side effects, the provider
keeps nothing on `self`, heavy imports happen inside functions, and every deadline lives in `create`
(custom timeouts do not apply to dynamic providers).

The dashboard is reached over plain HTTP (`address`) or through the Kubernetes API server's service
proxy (`gke`), with a bearer token minted at run time from the operator's Google credentials: the
token is never an input, an output or in state. We talk to Ray's REST Jobs API with `requests`
instead of `ray.job_submission`, which would let RAY_ADDRESS silently redirect us.

Like KubeRay's RayJob: wait for the cluster (healthy dashboard and `expected_gpus` GPUs), submit with
a fixed submission id and adopt on "already exists", resubmit a failed or vanished job as a new
attempt (`<id>-r<k>`), stop the job on delete.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import tempfile
import time
from dataclasses import dataclass, field, fields
from typing import Any, Self, TypedDict

import pulumi
import pulumi.dynamic as dyn

ACTIVE = frozenset({"PENDING", "RUNNING"})
TERMINAL = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
GONE = "GONE"  # our own status: the job or the whole cluster no longer exists
RESUBMIT_ON = frozenset({"FAILED", "STOPPED", GONE})

DEFAULTS: dict[str, Any] = {
    "address": None,
    "gke": None,
    "runtime_env": {},
    "metadata": {},
    "expected_gpus": 0,
    "ready_timeout_s": 3600,
    "wait_for_completion": False,
    "completion_timeout_s": 86400,
    "resubmit_on_failure": True,
    "log_tail_lines": 50,
    "stop_timeout_s": 120,
}
INPUT_KEYS = ("submission_id", "entrypoint", *DEFAULTS)
INT_KEYS = (
    "expected_gpus",
    "ready_timeout_s",
    "completion_timeout_s",
    "log_tail_lines",
    "stop_timeout_s",
    "attempt",
)
OUTPUT_KEYS = ("job_id", "attempt", "status", "message", "dashboard_url")
# What makes a different job. The target is compared without the CA, so a CA rotation is no restart.
REPLACE_KEYS = ("submission_id", "entrypoint", "runtime_env", "expected_gpus")

DASHBOARD_PORT = 8265
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TOKEN_ENV = "CLOUDSDK_AUTH_ACCESS_TOKEN"  # gcloud's own override, honoured first
SUBMISSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
READY_POLL_CAP_S = 2.0  # a poll is three small GETs: cheap even through the API server
FOLLOW_POLL_CAP_S = 10.0
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
SUBMIT_MIN_WINDOW_S = 30  # retries of "No available agent" get at least this long after readiness


class GkeDashboard(TypedDict, total=False):
    """The KubeRay head service, reached through the cluster's API server service proxy."""

    endpoint: str  # API server host or IP (GKE `endpoint`), https assumed
    ca_certificate: str  # base64 PEM cluster CA, as GKE returns `master_auth.cluster_ca_certificate`
    namespace: str
    service: str  # KubeRay head service, `<raycluster>-head-svc`
    port: int  # dashboard port, 8265


class RayJobError(Exception):
    """A failure the operator has to act on; the message says what was tried and where."""


class DashboardError(RayJobError):
    """An HTTP call to the dashboard failed: no answer (status None) or a non-2xx answer."""

    def __init__(self, method: str, url: str, status: int | None, detail: str, tls: bool = False):
        self.method, self.url, self.status, self.detail, self.tls = method, url, status, detail, tls
        answer = f"HTTP {status}: {detail}" if status is not None else detail
        super().__init__(f"{method} {url} -> {answer}")

    @property
    def fatal(self) -> bool:
        """TLS or authorization failures do not heal by waiting: fail at once instead of at the deadline."""
        return self.tls or self.status in (401, 403)

    @property
    def gone(self) -> bool:
        """The job or the cluster does not exist: Ray's or Kubernetes' 404, no endpoints, no listener."""
        return not self.fatal and (self.status is None or self.status in (404, 502, 503, 504))


# ----------------------------------------------------------------------------- pure helpers


def with_defaults(props: dict[str, Any]) -> dict[str, Any]:
    """Inputs with defaults filled in and engine-private keys (`__provider`) dropped.

    Pulumi's wire format has only doubles and drops None: 16 comes back as 16.0, so counts are
    turned back into ints here, once, for every method.
    """
    given = {k: v for k, v in props.items() if not k.startswith("__") and v is not None}
    for key in INT_KEYS:
        if isinstance(given.get(key), float) and given[key].is_integer():
            given[key] = int(given[key])
    return {**DEFAULTS, **given}


def _is_unknown(value: Any) -> bool:
    from pulumi.runtime import rpc

    return isinstance(value, str) and value == rpc.UNKNOWN


def validate_inputs(inputs: dict[str, Any]) -> list[tuple[str, str]]:
    """(property, reason) for each bad input; values still unknown at preview are not judged."""
    bad: list[tuple[str, str]] = []
    known = {k: v for k, v in with_defaults(inputs).items() if not _is_unknown(v)}
    has_address, has_gke = bool(inputs.get("address")), bool(inputs.get("gke"))
    if has_address == has_gke:
        bad.append(("address", "give exactly one of `address` (dashboard URL) and `gke` (service proxy)"))
    address = known.get("address")
    if isinstance(address, str) and not address.startswith(("http://", "https://")):
        bad.append(("address", f"{address!r} is not an http(s):// URL"))
    gke = known.get("gke")
    if isinstance(gke, dict):
        for key in ("endpoint", "ca_certificate", "namespace", "service"):
            if not gke.get(key):
                bad.append((f"gke.{key}", "required"))
    for key in ("submission_id", "entrypoint"):
        if not inputs.get(key):
            bad.append((key, "required"))
    sid = known.get("submission_id")
    if sid and not (isinstance(sid, str) and SUBMISSION_ID_RE.match(sid)):
        bad.append(("submission_id", f"{sid!r} must match {SUBMISSION_ID_RE.pattern}"))
    entrypoint = known.get("entrypoint")
    if entrypoint and not (isinstance(entrypoint, str) and entrypoint.strip()):
        bad.append(("entrypoint", "must be a non-empty shell command"))
    for key in ("expected_gpus", "log_tail_lines"):
        if key in known and not (isinstance(known[key], int) and known[key] >= 0):
            bad.append((key, f"{known[key]!r} must be an integer >= 0"))
    for key in ("ready_timeout_s", "completion_timeout_s", "stop_timeout_s"):
        if key in known and not (isinstance(known[key], (int, float)) and known[key] > 0):
            bad.append((key, f"{known[key]!r} must be a number of seconds > 0"))
    metadata = known.get("metadata")
    if isinstance(metadata, dict) and not all(isinstance(v, str) for v in metadata.values()):
        bad.append(("metadata", "Ray job metadata values must be strings"))
    return bad


def _gke_parts(gke: dict[str, Any]) -> tuple[str, str, str, int]:
    endpoint = str(gke["endpoint"]).removeprefix("https://").rstrip("/")
    return endpoint, gke["namespace"], gke["service"], int(gke.get("port") or DASHBOARD_PORT)


def base_url(inputs: dict[str, Any]) -> str:
    """The dashboard base URL: the plain address, or the API server's proxy for the head service."""
    if inputs.get("address"):
        return str(inputs["address"]).rstrip("/")
    endpoint, namespace, service, port = _gke_parts(inputs["gke"])
    return f"https://{endpoint}/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy"


def target_key(inputs: dict[str, Any]) -> tuple:
    """Which Ray cluster the job lives on (the CA is how we check it, not which one it is)."""
    if inputs.get("address"):
        return ("address", str(inputs["address"]).rstrip("/"))
    if inputs.get("gke"):
        return ("gke", *_gke_parts(inputs["gke"]))
    return ("none",)


def attempt_number(job_id: str | None, base_id: str) -> int | None:
    """1 for the base id, k for `<base>-r<k>`, None for somebody else's job."""
    if job_id == base_id:
        return 1
    if job_id and job_id.startswith(base_id + "-r") and job_id[len(base_id) + 2 :].isdigit():
        number = int(job_id[len(base_id) + 2 :])
        return number if number >= 2 else None
    return None


def attempt_id(base_id: str, attempt: int) -> str:
    return base_id if attempt == 1 else f"{base_id}-r{attempt}"


def pick_attempt(
    existing_jobs: list[dict[str, Any]], base_id: str, resubmit: bool
) -> tuple[str, int, dict[str, Any] | None]:
    """(submission id, attempt, job to adopt or None to submit) given the jobs on the head.

    The newest attempt wins: a live or finished one is adopted (never a second job); a failed or
    stopped one is followed by attempt k+1 when resubmitting, else adopted to report its status.
    """
    attempts = [
        (n, job)
        for job in existing_jobs
        if (n := attempt_number(job.get("submission_id"), base_id)) is not None
    ]
    if not attempts:
        return base_id, 1, None
    number, newest = max(attempts, key=lambda pair: pair[0])
    if newest.get("status") in ("FAILED", "STOPPED") and resubmit:
        return attempt_id(base_id, number + 1), number + 1, None
    return newest["submission_id"], number, newest


def diff_inputs(olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
    """Replace for a different job or cluster, or to resubmit a dead job; update in place otherwise."""
    old, new = with_defaults(olds), with_defaults(news)
    replaces = [k for k in REPLACE_KEYS if old.get(k) != new.get(k)]
    if target_key(old) != target_key(new):
        replaces += [k for k in ("address", "gke") if old.get(k) != new.get(k)]
    # After `pulumi up --refresh` finds the job dead (spot preemption): a new attempt resumes training.
    if old.get("status") in RESUBMIT_ON and new.get("resubmit_on_failure"):
        replaces.append("status")
    changed = bool(replaces) or any(old.get(k) != new.get(k) for k in INPUT_KEYS)
    # Stop the old job before the new one needs the same GPUs.
    return dyn.DiffResult(changes=changed, replaces=replaces, delete_before_replace=True)


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


def _pause(step: int, deadline: float, cap: float) -> bool:
    """Sleep a capped exponential backoff, never past the deadline; False once the deadline has passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    time.sleep(min(cap, 0.25 * 2**step, remaining))
    return True


def _pem_from_base64(ca_certificate: str) -> bytes:
    """GKE hands out the CA as base64 of the PEM; accept a bare PEM too."""
    if ca_certificate.lstrip().startswith("-----BEGIN"):
        return ca_certificate.encode()
    try:
        pem = base64.b64decode(ca_certificate, validate=True)
    except (binascii.Error, ValueError) as err:
        raise RayJobError(f"gke.ca_certificate is neither PEM nor base64 of a PEM: {err}") from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise RayJobError("gke.ca_certificate decodes to something that is not a PEM certificate")
    return pem


# ----------------------------------------------------------------------------- the dashboard


class _Dashboard:
    """HTTP access to one Ray dashboard for the span of one provider call; never kept on the provider."""

    def __init__(self, inputs: dict[str, Any]):
        self.url = base_url(inputs)
        self._gke = inputs.get("gke")
        self._credentials = None
        self._ca_file: str | None = None
        self._session = None

    def __enter__(self) -> Self:
        import requests

        if self._gke:
            # requests verifies against a file: the cluster CA only, never the system store.
            ca = _pem_from_base64(self._gke["ca_certificate"])
            fd, self._ca_file = tempfile.mkstemp(prefix="ray-job-ca-", suffix=".pem")
            with os.fdopen(fd, "wb") as out:
                out.write(ca)
        self._session = requests.Session()
        return self

    def __exit__(self, *_exc) -> None:
        if self._session is not None:
            self._session.close()
        if self._ca_file:
            os.unlink(self._ca_file)

    def _token(self) -> str:
        """Minted per call, refreshed when stale: a create can wait longer than a token lives."""
        if os.environ.get(TOKEN_ENV):
            return os.environ[TOKEN_ENV]
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests

        try:
            if self._credentials is None:
                self._credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
            if not self._credentials.valid:
                self._credentials.refresh(google.auth.transport.requests.Request())
        except google.auth.exceptions.GoogleAuthError as err:
            raise RayJobError(
                f"no Google credentials to reach {self.url}: {err}. Run `gcloud auth application-default "
                f"login` or set {TOKEN_ENV}."
            ) from None
        return self._credentials.token

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = READ_TIMEOUT_S):
        """JSON (or text) of a 2xx answer; DashboardError otherwise. Errors never carry the token."""
        import requests

        url = self.url + path
        headers = {"Authorization": f"Bearer {self._token()}"} if self._gke else {}
        try:
            resp = self._session.request(
                method,
                url,
                json=body,
                headers=headers,
                timeout=(CONNECT_TIMEOUT_S, timeout),
                verify=self._ca_file if self._gke else True,
                allow_redirects=False,
            )
        except requests.exceptions.SSLError as err:
            detail = f"TLS verification against the cluster CA failed: {err}"
            raise DashboardError(method, url, None, detail, tls=True) from None
        except requests.exceptions.RequestException as err:
            raise DashboardError(method, url, None, f"unreachable: {err}") from None
        if not 200 <= resp.status_code < 300:
            raise DashboardError(method, url, resp.status_code, resp.text.strip()[:2000])
        try:
            return resp.json()
        except ValueError:
            return resp.text

    # Ray's Jobs API --------------------------------------------------------------------------

    def jobs(self) -> list[dict[str, Any]]:
        listed = self.call("GET", "/api/jobs/")
        return list(listed.values()) if isinstance(listed, dict) else list(listed)

    def job(self, job_id: str) -> dict[str, Any]:
        return self.call("GET", f"/api/jobs/{job_id}")

    def logs(self, job_id: str) -> str:
        answer = self.call("GET", f"/api/jobs/{job_id}/logs")
        return answer.get("logs", "") if isinstance(answer, dict) else str(answer)

    def gpus(self) -> tuple[float, int]:
        """(total GPUs, nodes) over ALIVE nodes, from the state API (Ray >= 2.0)."""
        answer = self.call("GET", "/api/v0/nodes?limit=10000&detail=false")
        data = answer.get("data", {}).get("result", {})
        nodes = data.get("result", []) if isinstance(data, dict) else data
        alive = [n for n in nodes if n.get("state") == "ALIVE"]
        return sum(float(n.get("resources_total", {}).get("GPU", 0)) for n in alive), len(alive)


def wait_until_ready(dash: _Dashboard, expected_gpus: int, timeout_s: float) -> list[dict[str, Any]]:
    """Poll until the dashboard is healthy, the Jobs API answers and the GPUs have joined.

    Returns the jobs on the head (to pick the attempt from). At the deadline: what was missing, where.
    """
    deadline = time.monotonic() + timeout_s
    missing = "nothing polled yet"
    step = 0
    while True:
        try:
            dash.call("GET", "/api/gcs_healthz", timeout=10)
            gpus, nodes = dash.gpus()
            if gpus >= expected_gpus:
                return dash.jobs()
            missing = f"found {gpus:g} of {expected_gpus} GPUs on {nodes} alive node(s)"
        except DashboardError as err:
            if err.fatal:
                raise
            missing = f"dashboard not ready; last error: {err}"
        if not _pause(step, deadline, READY_POLL_CAP_S):
            raise RayJobError(f"Ray cluster at {dash.url} not ready after {timeout_s:g}s: {missing}")
        step += 1


def submit(dash: _Dashboard, job_id: str, inputs: dict[str, Any], deadline: float) -> str:
    """Submit with the fixed id: 'submitted', or 'adopted' when a job with that id already exists."""
    body = {
        "entrypoint": inputs["entrypoint"],
        "submission_id": job_id,
        "runtime_env": inputs.get("runtime_env") or None,
        "metadata": inputs.get("metadata") or None,
    }
    step = 0
    while True:
        try:
            dash.call("POST", "/api/jobs/", body)
            return "submitted"
        except DashboardError as err:
            if "already exists" in err.detail:
                return "adopted"  # an earlier or concurrent create got there first
            # Right after the head is up the job agent may not be registered yet.
            transient = err.gone or "No available agent" in err.detail
            if err.fatal or not transient or not _pause(step, deadline, READY_POLL_CAP_S):
                raise RayJobError(f"submitting Ray job {job_id} failed: {err}") from None
        step += 1


def follow(dash: _Dashboard, job_id: str, timeout_s: float) -> dict[str, Any]:
    """The job once terminal; raises if it is not terminal by the deadline."""
    deadline = time.monotonic() + timeout_s
    step, job = 0, {}
    while True:
        try:
            job = dash.job(job_id)
            if job.get("status") in TERMINAL:
                return job
        except DashboardError as err:
            if err.fatal or err.status == 404:
                raise RayJobError(f"lost Ray job {job_id} while waiting for it: {err}") from None
        if not _pause(step, deadline, FOLLOW_POLL_CAP_S):
            raise RayJobError(
                f"Ray job {job_id} at {dash.url} is still {job.get('status', 'unknown')} after "
                f"{timeout_s:g}s; it keeps running and the next `pulumi up` adopts it"
            )
        step += 1


def probe(inputs: dict[str, Any], job_id: str, tries: int = 3) -> tuple[str, str]:
    """(status, message) of a job, GONE when it or its cluster no longer exists."""
    with _Dashboard(inputs) as dash:
        step = 0
        while True:
            try:
                job = dash.job(job_id)
                return job.get("status", "UNKNOWN"), job.get("message") or ""
            except DashboardError as err:
                if not err.gone:
                    raise  # TLS, auth, a broken head: not a reason to resubmit
                step += 1
                # A 404 is Ray's or Kubernetes' definite answer; no answer at all may be a blip.
                if err.status == 404 or step >= tries:
                    return GONE, f"job {job_id} or its Ray cluster is gone: {err}"
                time.sleep(2.0 * step)


# ----------------------------------------------------------------------------- the provider


class RayJobProvider(dyn.ResourceProvider):
    """Submits one Ray job per attempt and tracks it. Stateless: safe to pickle and run anywhere."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = [dyn.CheckFailure(prop, reason) for prop, reason in validate_inputs(news)]
        return dyn.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        return diff_inputs(olds, news)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        inputs = with_defaults(props)
        problems = validate_inputs(inputs)
        if problems:
            raise RayJobError("; ".join(f"{prop}: {reason}" for prop, reason in problems))
        base = inputs["submission_id"]
        with _Dashboard(inputs) as dash:
            started = time.monotonic()
            jobs = wait_until_ready(dash, inputs["expected_gpus"], inputs["ready_timeout_s"])
            job_id, attempt, adopted = pick_attempt(jobs, base, inputs["resubmit_on_failure"])
            if adopted is None:
                window = max(started + inputs["ready_timeout_s"], time.monotonic() + SUBMIT_MIN_WINDOW_S)
                submit(dash, job_id, inputs, window)
            job = dash.job(job_id)
            if inputs["wait_for_completion"]:
                job = follow(dash, job_id, inputs["completion_timeout_s"])
                if job.get("status") in ("FAILED", "STOPPED"):
                    raise RayJobError(self._failure(dash, job_id, job, inputs["log_tail_lines"]))
            outs = {
                **inputs,
                "job_id": job_id,
                "attempt": attempt,
                "status": job.get("status"),
                "message": job.get("message") or "",
                "dashboard_url": dash.url,
            }
        return dyn.CreateResult(job_id, outs)

    @staticmethod
    def _failure(dash: _Dashboard, job_id: str, job: dict[str, Any], lines: int) -> str:
        try:
            logs = tail(dash.logs(job_id), lines)
        except DashboardError as err:
            logs = f"(logs unavailable: {err})"
        return (
            f"Ray job {job_id} at {dash.url} ended {job.get('status')}: {job.get('message')}\n"
            f"--- last {lines} log lines ---\n{logs}"
        )

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        outs = {k: v for k, v in props.items() if not k.startswith("__")}
        if not outs.get("address") and not outs.get("gke"):
            raise RayJobError(f"cannot read Ray job {id_}: no `address` or `gke` in its state")
        job_id = outs.get("job_id") or id_
        status, message = probe(with_defaults(outs), job_id)
        return dyn.ReadResult(id_, {**outs, "job_id": job_id, "status": status, "message": message})

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        # Only knobs changed (timeouts, flags, metadata, CA): the running job stays as it is.
        kept = {k: olds.get(k) for k in OUTPUT_KEYS}
        new = with_defaults(news)
        return dyn.UpdateResult({**new, **kept, "dashboard_url": base_url(new)})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        inputs = with_defaults(props)
        job_id = props.get("job_id") or id_
        with _Dashboard(inputs) as dash:
            try:
                if dash.job(job_id).get("status") in TERMINAL:
                    return
                dash.call("POST", f"/api/jobs/{job_id}/stop")
            except DashboardError as err:
                if err.gone:
                    return  # the job or the cluster is already gone: nothing left to stop
                raise
            deadline = time.monotonic() + inputs["stop_timeout_s"]
            step, status = 0, "unknown"
            while True:
                try:
                    status = dash.job(job_id).get("status")
                    if status in TERMINAL:
                        return
                except DashboardError as err:
                    if err.gone:
                        return
                    raise
                if not _pause(step, deadline, READY_POLL_CAP_S):
                    waited = inputs["stop_timeout_s"]
                    raise RayJobError(f"Ray job {job_id} at {dash.url} still {status} {waited}s after stop")
                step += 1


# ----------------------------------------------------------------------------- the resource


@dataclass
class RayJobArgs:
    """What to run where. `submission_id` must change whenever the job should (hash the content)."""

    submission_id: pulumi.Input[str]
    entrypoint: pulumi.Input[str]
    expected_gpus: pulumi.Input[int]
    address: pulumi.Input[str] | None = None
    gke: pulumi.Input[GkeDashboard] | None = None
    runtime_env: pulumi.Input[dict[str, Any]] = field(default_factory=dict)
    metadata: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    ready_timeout_s: pulumi.Input[int] = DEFAULTS["ready_timeout_s"]
    wait_for_completion: pulumi.Input[bool] = DEFAULTS["wait_for_completion"]
    completion_timeout_s: pulumi.Input[int] = DEFAULTS["completion_timeout_s"]
    resubmit_on_failure: pulumi.Input[bool] = DEFAULTS["resubmit_on_failure"]
    log_tail_lines: pulumi.Input[int] = DEFAULTS["log_tail_lines"]
    stop_timeout_s: pulumi.Input[int] = DEFAULTS["stop_timeout_s"]


class GrpoJob(dyn.Resource, module="verl-gke", name="GrpoJob"):
    """The verl GRPO run as a Ray job on the RayCluster; replaced (stopped, resubmitted) when it changes."""

    job_id: pulumi.Output[str]
    attempt: pulumi.Output[int]
    status: pulumi.Output[str]
    message: pulumi.Output[str]
    dashboard_url: pulumi.Output[str]

    def __init__(self, name: str, args: RayJobArgs, opts: pulumi.ResourceOptions | None = None):
        plain = {f.name: getattr(args, f.name) for f in fields(args)}
        if (plain["address"] is None) == (plain["gke"] is None):
            raise ValueError(f"GrpoJob {name!r}: give exactly one of `address` and `gke`")
        props = {**plain, **dict.fromkeys(OUTPUT_KEYS)}
        opts = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(delete_before_replace=True), opts)
        super().__init__(RayJobProvider(), name, props, opts)
