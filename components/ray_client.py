"""A client for one Ray dashboard's REST Jobs API, reached directly or through GKE's API server proxy.

The dashboard is reached over plain HTTP (`address`) or through the Kubernetes API server's service
proxy (`gke`), with a bearer token minted at run time from the operator's Google credentials: the
token is never an input, an output or in state. We talk to Ray's REST Jobs API with `requests`
instead of `ray.job_submission`, which would let RAY_ADDRESS silently redirect us. Heavy imports
happen inside functions: the job provider that uses this module is unpickled in a fresh process.
"""

from __future__ import annotations

import base64
import binascii
import os
import sys
import tempfile
import time
from typing import Any, Self, TypedDict

from catalog.ray import CLUSTER_LABEL, DASHBOARD_PORT, NODE_TYPE_LABEL, cluster_of_service
from components import provider_stop, rdma_attach

ACTIVE = frozenset({"PENDING", "RUNNING"})
TERMINAL = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
GONE = "GONE"  # our own status: the job or the whole cluster no longer exists
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TOKEN_ENV = "CLOUDSDK_AUTH_ACCESS_TOKEN"  # gcloud's own override, honoured first
READY_POLL_CAP_S = 2.0  # a poll is three small GETs: cheap even through the API server
FOLLOW_POLL_CAP_S = 10.0
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30  # between two reads of one answer; the whole answer is bounded by the call's deadline
BODY_CHUNK = 65536
LOGS_WINDOW_S = 60.0  # a job's whole log, when the caller gives no deadline
PROGRESS_EVERY_S = 60.0  # a line on the console about once a minute while waiting for the GPUs
REPORT_BUDGET_S = 10  # the Pods/events report added to a readiness timeout: two small GETs
EVENTS_PER_POD = 3  # the newest few: what the scheduler and the autoscaler last said


class GkeDashboard(TypedDict, total=False):
    """The KubeRay head service, reached through the cluster's API server service proxy."""

    endpoint: str  # API server host or IP (GKE `endpoint`), https assumed
    ca_certificate: str  # base64 PEM cluster CA, as GKE returns `master_auth.cluster_ca_certificate`
    # True: the endpoint is GKE's DNS-based one, whose certificate a public CA signs (gcloud writes no CA
    # for it: googlecloudsdk api_lib/container/kubeconfig.py Cluster(has_dns_endpoint=True)), so TLS is
    # checked against requests' bundle (certifi's Mozilla roots, not the OS store: a TLS-intercepting
    # proxy's CA must be added through REQUESTS_CA_BUNDLE); the cluster CA is then only the cluster's identity.
    public_ca: bool
    namespace: str
    service: str  # KubeRay head service, `<raycluster>-head-svc`
    port: int  # dashboard port, 8265


class RayJobError(Exception):
    """A failure the operator has to act on; the message says what was tried and where."""


class StoppedError(RayJobError):
    """The provider process is stopping (the engine's Cancel, its kill, or the engine gone): no more waiting."""


class DashboardError(RayJobError):
    """An HTTP call to the dashboard failed: no answer (status None) or a non-2xx answer."""

    def __init__(self, method: str, url: str, status: int | None, detail: str, tls: bool = False,
                 expired: bool = False):
        self.method, self.url, self.status, self.detail, self.tls = method, url, status, detail, tls
        self.expired = expired  # not sent at all: the deadline it serves had passed
        answer = f"HTTP {status}: {detail}" if status is not None else detail
        super().__init__(f"{method} {url} -> {answer}")

    @property
    def fatal(self) -> bool:
        """TLS or authorization failures do not heal by waiting: fail at once instead of at the deadline."""
        return self.tls or self.status in (401, 403)

    @property
    def transient(self) -> bool:
        """Worth another try: no answer, a 404 from a proxy that lost its endpoints, a 502/503/504.
        Never a reason to call a job gone (components.ray_presence decides that)."""
        return not self.fatal and (self.status is None or self.status in (404, 502, 503, 504))

    @property
    def job_missing(self) -> bool:
        """Ray's own answer for a job id it does not know: 404 "Job <id> does not exist" (ray-project/ray
        python/ray/dashboard/modules/job/job_head.py `get_job_info`/`stop_job`, commit 017deaf1a528).
        Alone it proves nothing (a stray 404 can say anything): ray_presence also asks the health endpoint."""
        return self.status == 404 and "does not exist" in self.detail


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


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


def pause(step: int, deadline: float, cap: float) -> bool:
    """Sleep a capped exponential backoff, never past the deadline; False once the deadline has passed.
    Raises StoppedError at once when the provider process is stopping (components.provider_stop)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    if provider_stop.wait(min(cap, 0.25 * 2**step, remaining)):
        raise StoppedError(f"stopped waiting: {provider_stop.reason()}")
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



class _LateAnswerError(Exception):
    """The answer was still arriving at the deadline (the number of bytes read is the message)."""


def _body(resp, deadline: float | None) -> bytes:
    """The whole body, read as it arrives and never past `deadline`. requests' read timeout bounds each read,
    not the answer: a trickling front or a large log would otherwise run on long past the window it serves."""
    read1 = getattr(resp.raw, "read1", None)  # urllib3 >= 2: what has arrived, at most one socket read
    chunks: list[bytes] = []
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise _LateAnswerError(sum(map(len, chunks)))
        chunk = read1(BODY_CHUNK, decode_content=True) if read1 else resp.raw.read(1024, decode_content=True)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


# ----------------------------------------------------------------------------- the dashboard


class Dashboard:
    """HTTP access to one Ray dashboard for the span of one provider call; never kept on the provider."""

    def __init__(self, inputs: dict[str, Any]):
        self.url = base_url(inputs)
        self._gke = inputs.get("gke")
        # The API server itself, for the Pods and Events behind a wait (same token, same CA).
        self.api_server = f"https://{_gke_parts(self._gke)[0]}" if self._gke else None
        self._credentials = None
        self._ca_file: str | None = None
        self._session = None

    def __enter__(self) -> Self:
        import requests

        if self._gke and not self._gke.get("public_ca"):
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

    def headers(self) -> dict[str, str]:
        """What a request needs besides the URL (a fresh bearer token through the API server proxy)."""
        return {"Authorization": f"Bearer {self._token()}"} if self._gke else {}

    @property
    def verify(self) -> str | bool:
        """requests' `verify`: the cluster CA file for the IP endpoint, requests' certifi bundle otherwise."""
        return self._ca_file if self._ca_file else True

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = READ_TIMEOUT_S,
             deadline: float | None = None):
        """JSON (or text) of a 2xx answer from the dashboard; DashboardError otherwise."""
        return self._send(method, self.url + path, body, timeout, deadline)

    def kube(self, path: str, deadline: float | None = None) -> dict[str, Any]:
        """GET from the Kubernetes API server (gke target only), e.g. a namespace's Pods."""
        if not self.api_server:
            raise RayJobError("no Kubernetes API server behind a plain dashboard address")
        return self._send("GET", self.api_server + path, None, READ_TIMEOUT_S, deadline)

    def kube_send(self, method: str, path: str, body: Any, content_type: str,
                  deadline: float | None = None) -> Any:
        """A write to the Kubernetes API server itself (not the service proxy), e.g. a RayCluster patch."""
        if not self.api_server:
            raise RayJobError(f"{method} {path}: only a `gke` target has a Kubernetes API server")
        import json

        return self._send(method, self.api_server + path, None, READ_TIMEOUT_S, deadline,
                          raw=(json.dumps(body).encode(), content_type))

    def _send(self, method: str, url: str, body: dict | None, timeout: float, deadline: float | None = None,
              raw: tuple[bytes, str] | None = None):
        """Errors never carry the token. With a `deadline` (time.monotonic()) the connect and read
        timeouts never reach past it, and past it the call is not made at all. `raw`: (bytes, content
        type) sent instead of `body` as JSON (e.g. a JSON patch)."""
        import requests

        connect, read = CONNECT_TIMEOUT_S, timeout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DashboardError(method, url, None, "not called: the deadline has passed", expired=True)
            connect, read = min(connect, left), min(read, left)
        headers = self.headers()
        if raw is not None:
            headers["Content-Type"] = raw[1]
        import urllib3

        try:
            resp = self._session.request(
                method,
                url,
                json=body if raw is None else None,
                data=raw[0] if raw is not None else None,
                headers=headers,
                timeout=(connect, read),
                verify=self.verify,
                allow_redirects=False,
                stream=True,  # the body is read by _body, against the deadline
            )
            try:
                content = _body(resp, deadline)
            except BaseException:
                resp.close()  # cut short: this connection cannot be reused
                raise
            resp.raw.release_conn()  # read to the end: back to the pool for the next poll
        except requests.exceptions.SSLError as err:
            detail = f"TLS verification against the cluster CA failed: {err}"
            raise DashboardError(method, url, None, detail, tls=True) from None
        except _LateAnswerError as late:
            detail = f"answer not complete at the deadline ({late} bytes read)"
            raise DashboardError(method, url, None, detail) from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as err:
            raise DashboardError(method, url, None, f"unreachable: {err}") from None
        text = content.decode(resp.encoding or "utf-8", errors="replace")
        if not 200 <= resp.status_code < 300:
            raise DashboardError(method, url, resp.status_code, text.strip()[:2000])
        import json

        try:
            return json.loads(text)
        except ValueError:
            return text

    # Ray's Jobs API --------------------------------------------------------------------------

    def jobs(self, deadline: float | None = None) -> list[dict[str, Any]]:
        listed = self.call("GET", "/api/jobs/", deadline=deadline)
        return list(listed.values()) if isinstance(listed, dict) else list(listed)

    def job(self, job_id: str, deadline: float | None = None) -> dict[str, Any]:
        return self.call("GET", f"/api/jobs/{job_id}", deadline=deadline)

    def logs(self, job_id: str, deadline: float | None = None) -> str:
        """The job's whole log (Ray has no tail on this endpoint): a long run's log can take a while through
        the API server, so it gets a deadline too (LOGS_WINDOW_S from now unless given)."""
        deadline = time.monotonic() + LOGS_WINDOW_S if deadline is None else deadline
        answer = self.call("GET", f"/api/jobs/{job_id}/logs", deadline=deadline)
        return answer.get("logs", "") if isinstance(answer, dict) else str(answer)

    def nodes(self, deadline: float | None = None) -> tuple[float, int, str | None]:
        """(total GPUs, nodes, head node id) over ALIVE nodes, from the state API (Ray >= 2.0)."""
        answer = self.call("GET", "/api/v0/nodes?limit=10000&detail=false", deadline=deadline)
        data = answer.get("data", {}).get("result", {})
        nodes = data.get("result", []) if isinstance(data, dict) else data
        alive = [n for n in nodes if n.get("state") == "ALIVE"]
        head = next((n.get("node_id") for n in alive if n.get("is_head_node")), None)
        return sum(float(n.get("resources_total", {}).get("GPU", 0)) for n in alive), len(alive), head

    def agent_ready(self, head_node_id: str, deadline: float) -> None:
        """Raise DashboardError unless the head node's dashboard agent, which runs submitted jobs, answers.

        The Jobs API hands a submission to the head's agent, found under its node id in the GCS KV
        (ray/dashboard/modules/job/job_head.py `_fetch_agent_info`); until the agent has registered
        there, a submission fails with "No available agent". Listing the head's log files goes through
        the same KV entry to the same agent (ray/util/state/state_manager.py get_log_service_stub), so
        a 2xx here means the agent is registered and serving.
        """
        left = max(1, min(int(deadline - time.monotonic()), int(READ_TIMEOUT_S)))
        self.call("GET", f"/api/v0/logs?node_id={head_node_id}&glob=dashboard_agent*&timeout={left}",
                  deadline=deadline)


def progress(text: str) -> None:
    """One line on the provider's stderr. Since Pulumi CLI 3.146.0 the engine passes a dynamic provider's
    stdout/stderr through to the console line by line (pulumi/pulumi#18253, sdk/go/common/resource/plugin/
    plugin.go `isDynamicPluginBinary`); `pulumi.log` from a provider does not reach it (#18249)."""
    try:
        print(f"[verl-gke] {text}", file=sys.stderr, flush=True)
    except OSError:
        pass  # the engine is gone (pulumi killed): nobody reads it, and the wait must reach its release


def wait_until_ready(dash: Dashboard, expected_gpus: int, timeout_s: float,
                     progress_every_s: float = PROGRESS_EVERY_S, what: str = "the Ray job") -> list[dict[str, Any]]:
    """Poll until the dashboard is healthy, the GPUs have joined, the head's job agent answers and the
    Jobs API lists the jobs. Every call is capped to the time left before the deadline.

    Returns the jobs on the head (to pick the attempt from). At the deadline: what was missing, where.
    Every `progress_every_s` it prints how many GPUs have joined (the wait can last an hour).
    """
    started = time.monotonic()
    deadline = started + timeout_s
    next_note = started + progress_every_s
    missing = "nothing polled yet"
    step = 0
    while True:
        if time.monotonic() >= next_note:
            next_note = time.monotonic() + progress_every_s
            progress(f"waiting for {what} at {dash.url}: {missing} ({time.monotonic() - started:.0f}s of "
                     f"{timeout_s:g}s)")
        try:
            dash.call("GET", "/api/gcs_healthz", timeout=10, deadline=deadline)
            gpus, nodes, head = dash.nodes(deadline)
            if gpus < expected_gpus:
                missing = f"found {gpus:g} of {expected_gpus} GPUs on {nodes} alive node(s)"
            elif head is None:
                missing = "no alive head node in the state API"
            else:
                attach = rdma_attach.check(dash, deadline)
                if attach.problems:  # running and billing pods a retry would find the same: fail the wait now
                    raise RayJobError(f"Ray cluster at {dash.url}: the GPUs joined, but NCCL would find no RDMA "
                                      "NIC in the Ray container: " + "; ".join(attach.problems))
                missing = f"all {gpus:g} of {expected_gpus} GPUs joined; the head's job agent is not serving yet"
                try:
                    dash.agent_ready(head, deadline)
                except DashboardError as err:
                    if err.fatal:
                        raise
                    raise DashboardError(err.method, err.url, err.status,
                                         f"the head's job agent is not serving yet: {err.detail}") from None
                return dash.jobs(deadline)
        except DashboardError as err:
            if err.fatal:
                raise
            # Out of time before the call, or a call the deadline cut short after a poll that got answers:
            # what was missing is still the news (a slow last answer must not hide "found 0 of 16 GPUs").
            cut_short = time.monotonic() >= deadline and missing != "nothing polled yet"
            if not err.expired and not cut_short:
                missing = f"dashboard not ready; last error: {err}"
        try:
            waited = pause(step, deadline, READY_POLL_CAP_S)
        except StoppedError as stopped:
            raise StoppedError(f"{stopped} after {time.monotonic() - started:.0f}s of {timeout_s:g}s for the Ray "
                               f"cluster at {dash.url}: {missing}") from None
        if not waited:
            raise RayJobError(f"Ray cluster at {dash.url} not ready after {timeout_s:g}s: {missing}"
                              + pods_report(dash))
        step += 1


# ----------------------------------------------------------------------------- what Kubernetes saw


def pods_report(dash: Dashboard) -> str:
    """Why GPUs are missing, as Kubernetes saw it: the RayCluster's Pods that are not running and their
    newest events (no capacity, quota, ...). Empty without an API server; never raises."""
    if not dash.api_server:
        return ""
    namespace, service = dash._gke["namespace"], dash._gke["service"]
    cluster = cluster_of_service(service)
    if not cluster:
        return ""
    deadline = time.monotonic() + REPORT_BUDGET_S  # a diagnosis after the deadline: bounded too
    try:
        pods = dash.kube(f"/api/v1/namespaces/{namespace}/pods?labelSelector={CLUSTER_LABEL}%3D{cluster}",
                         deadline)
        events = dash.kube(f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.kind%3DPod",
                           deadline)
    except (DashboardError, RayJobError) as err:
        return f"\n(could not list the Pods of RayCluster {cluster}: {err})"
    return "\n" + describe_pods(cluster, namespace, pods.get("items", []), events.get("items", []))


def _event_time(event: dict[str, Any]) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""


def describe_pods(cluster: str, namespace: str, pods: list[dict[str, Any]], events: list[dict[str, Any]]) -> str:
    """Pods (from a PodList) that are not Running and Ready, each with its unscheduled reason and events."""
    waiting = []
    for pod in pods:
        status = pod.get("status", {})
        conditions = {c.get("type"): c for c in status.get("conditions", [])}
        ready = conditions.get("Ready", {}).get("status") == "True"
        if status.get("phase") == "Running" and ready:
            continue
        name = pod.get("metadata", {}).get("name", "?")
        role = pod.get("metadata", {}).get("labels", {}).get(NODE_TYPE_LABEL, "pod")
        line = f"  - {name} ({role}): {status.get('phase', 'Unknown')}"
        scheduled = conditions.get("PodScheduled", {})
        if scheduled.get("status") == "False":
            line += f", unscheduled ({scheduled.get('reason', '')}: {scheduled.get('message', '').strip()})"
        mine = sorted((e for e in events if e.get("involvedObject", {}).get("name") == name), key=_event_time)
        for event in mine[-EVENTS_PER_POD:]:
            count = f" x{event['count']}" if (event.get("count") or 1) > 1 else ""
            what = f"{event.get('type', '')} {event.get('reason', '')}{count}"
            line += f"\n      {what}: {event.get('message', '').strip()}"
        waiting.append(line)
    total = len(pods)
    if not waiting:
        return f"Kubernetes: all {total} Pods of RayCluster {cluster} in {namespace} are running and ready."
    return (f"Kubernetes: {len(waiting)} of {total} Pods of RayCluster {cluster} in {namespace} "
            "are not running and ready:\n" + "\n".join(waiting))


def submit(dash: Dashboard, job_id: str, inputs: dict[str, Any], deadline: float) -> str:
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
            dash.call("POST", "/api/jobs/", body, deadline=deadline)
            return "submitted"
        except DashboardError as err:
            if "already exists" in err.detail:
                return "adopted"  # an earlier or concurrent create got there first
            # Right after the head is up the job agent may not be registered yet.
            transient = err.transient or "No available agent" in err.detail
            if err.fatal or not transient or not pause(step, deadline, READY_POLL_CAP_S):
                raise RayJobError(f"submitting Ray job {job_id} failed: {err}") from None
        step += 1


def follow(dash: Dashboard, job_id: str, timeout_s: float) -> dict[str, Any]:
    """The job once terminal; raises if it is not terminal by the deadline."""
    deadline = time.monotonic() + timeout_s
    step, job = 0, {}
    while True:
        try:
            job = dash.job(job_id, deadline=deadline)
            if job.get("status") in TERMINAL:
                return job
        except DashboardError as err:
            if err.fatal or err.status == 404:
                raise RayJobError(f"lost Ray job {job_id} while waiting for it: {err}") from None
        if not pause(step, deadline, FOLLOW_POLL_CAP_S):
            raise RayJobError(
                f"Ray job {job_id} at {dash.url} is still {job.get('status', 'unknown')} after "
                f"{timeout_s:g}s; it keeps running and the next `pulumi up` adopts it"
            )
        step += 1
