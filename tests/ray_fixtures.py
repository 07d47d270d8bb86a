"""Real local Ray nodes (tools.local_ray, shared with the bench) and a Kubernetes-like HTTPS service proxy
for the provider tests."""

from __future__ import annotations

import base64
import datetime
import functools
import http.server
import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import requests

from tools.local_ray import VENV_BIN, RayNode, free_port, gpus_on

__all__ = ["BOGUS_RAY_ADDRESS", "IMAGE_LIBRARY_PATH", "QuietHandler", "REPO", "VENV_BIN", "RayNode", "ServiceProxy",
           "b64_pem", "delete_job", "file_json", "file_text", "free_port", "gpus_on", "image_env", "job_logs",
           "jobs_on", "make_ca", "make_server_cert", "no_mount_namespace", "pem", "point_ray_env_nowhere",
           "refused_address", "stop_running_jobs", "wait_for", "wait_for_line", "wait_for_no_gpu_workers",
           "wait_status"]
REPO = Path(__file__).resolve().parents[1]


# The library path an image sets for its container (NGC images: cuda/compat and torch's lib), so the Ray
# nodes that stand in for pods start with one, as KubeRay's do.
IMAGE_LIBRARY_PATH = "/image/cuda/compat:/image/torch/lib"


def image_env(library_path: str = IMAGE_LIBRARY_PATH) -> dict[str, str]:
    """The environment a node standing in for a pod adds: the image's LD_LIBRARY_PATH, ahead of this host's
    own value where it has one (this host's Python may need it)."""
    own = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": f"{library_path}:{own}" if own else library_path}


def jobs_on(address: str, prefix: str) -> list[dict]:
    jobs = requests.get(f"{address}/api/jobs/", timeout=10).json()
    return [j for j in jobs if (j.get("submission_id") or "").startswith(prefix)]


def wait_status(address: str, job_id: str, wanted: set[str] | frozenset[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status = requests.get(f"{address}/api/jobs/{job_id}", timeout=10).json()["status"]
        if status in wanted:
            return status
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still {status}, wanted {wanted}")


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def job_logs(address: str, job_id: str, timeout: float = 30) -> str:
    """What the job's driver printed so far (the Jobs API's logs)."""
    return requests.get(f"{address}/api/jobs/{job_id}/logs", timeout=timeout).json()["logs"]


def wait_for_line(address: str, job_id: str, needle: str, timeout: float = 900, every_s: float = 1) -> str:
    """The job's log once it contains `needle`; fails at once, with the log's tail, if the job ends first."""
    deadline = time.monotonic() + timeout
    while needle not in (text := job_logs(address, job_id, timeout=10)):
        status = requests.get(f"{address}/api/jobs/{job_id}", timeout=10).json()["status"]
        if status not in ("PENDING", "RUNNING") and needle not in (text := job_logs(address, job_id, timeout=10)):
            raise AssertionError(f"job {job_id} ended {status} before its log said {needle!r}:\n{text[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} not in the log of job {job_id} after {timeout}s:\n{text[-4000:]}")
        time.sleep(every_s)
    return text


def delete_job(address: str, job_id: str, quiet_s: float = 3, timeout: float = 120) -> None:
    """Delete a finished job from the head for good. Ray's job monitor notices the supervisor actor's exit
    up to a loop period (1 s, more on a loaded machine) after the job turned terminal; when the job was
    deleted in between, it finds no status and writes the job back as FAILED ("Job supervisor actor
    died"), then stops watching (ray-project/ray, python/ray/dashboard/modules/job/job_manager.py,
    `_monitor_job_internal`, tag ray-2.60.0). So: delete until the job stays gone for `quiet_s`."""
    deadline = time.monotonic() + timeout
    while True:
        requests.delete(f"{address}/api/jobs/{job_id}", timeout=10).raise_for_status()
        gone_since = time.monotonic()
        while requests.get(f"{address}/api/jobs/{job_id}", timeout=10).status_code == 404:
            if time.monotonic() - gone_since >= quiet_s:
                return
            time.sleep(0.2)
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} came back after each delete for {timeout}s")


def wait_for_no_gpu_workers(head: RayNode, timeout: float = 180, also: float = 0) -> None:
    """Until the head reports no GPUs but its own and `also` (those of running workers the caller keeps) (no
    other ALIVE GPU worker): a test that adds GPU workers to a head an earlier test used starts only once that
    test's workers are gone. A worker killed before its raylet said goodbye stays ALIVE until Ray's health
    checks fail, and the next run would take its disappearance for a lost node (or count its GPUs)."""
    wait_for(lambda: gpus_on(head.address) <= head.gpus + also, timeout,
             f"the GPU workers of earlier tests to leave {head.address}")


@functools.cache
def file_text(path: Path) -> str:
    """What a run left in a file, "" when it left none."""
    return path.read_text() if path.exists() else ""


def file_json(path: Path) -> Any:
    """What a run left in a JSON file, None when it left none."""
    return json.loads(path.read_text()) if path.exists() else None


def no_mount_namespace() -> str | None:
    """Why this machine cannot give each simulated pod a mount namespace (tests/test_rehearsal.py), or None when
    it can.

    Root and unshare(1) are not enough: an unprivileged container (root without CAP_SYS_ADMIN) has
    both and still refuses `unshare --mount`. Probe exactly what the rehearsal does: a private mount
    namespace with a tmpfs in it."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare(1) for a mount namespace per pod"
    with tempfile.TemporaryDirectory() as d:
        try:
            done = subprocess.run(["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs",
                                   "-o", "size=1m", "tmpfs", d], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"unshare --mount did not run: {err}"
    return None if done.returncode == 0 else f"unshare --mount refused here: {done.stderr.strip()[:200]}"


# ----------------------------------------------------------------------------- TLS and the proxy


def make_ca(name: str):
    """(key, cert) of a throwaway CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_server_cert(ca_key, ca_cert, ip: str = "127.0.0.1"):
    """(key, cert) for an API server reached by IP, as GKE's is."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def pem(obj) -> bytes:
    from cryptography.hazmat.primitives import serialization

    if hasattr(obj, "public_bytes"):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def b64_pem(cert) -> str:
    """A CA the way GKE returns `master_auth.cluster_ca_certificate`."""
    return base64.b64encode(pem(cert)).decode()


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """An HTTP/1.1 handler without an access log (the test servers': the proxy, the fault front)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_args) -> None:
        pass

    def _head(self, status: int, ctype: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.end_headers()


class ServiceProxy:
    """The part of a Kubernetes API server the provider uses: HTTPS, a bearer token, and
    `/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy/...` forwarded to one real Ray dashboard."""

    def __init__(self, upstream: str, token: str, namespace: str = "ray", service: str = "rc-head-svc",
                 objects: dict[str, dict] | None = None):
        self.upstream, self.token = upstream.rstrip("/"), token
        # API paths (without the query) answered with recorded JSON, e.g. a namespace's PodList.
        self.objects = objects or {}
        self.seen_paths: list[str] = []
        self.prefix = f"/api/v1/namespaces/{namespace}/services/{service}:8265/proxy"
        self.namespace, self.service = namespace, service
        self.seen_auth: list[str] = []
        self.ca_key, self.ca_cert = make_ca("test-cluster-ca")
        self._dir = tempfile.mkdtemp(prefix="rj-tls-")
        key, cert = make_server_cert(self.ca_key, self.ca_cert)
        certfile, keyfile = Path(self._dir, "server.pem"), Path(self._dir, "server.key")
        certfile.write_bytes(pem(cert))
        keyfile.write_bytes(pem(key))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._server.handle_error = lambda *_: None  # clients that reject our cert end handshakes rudely
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ca_b64(self) -> str:
        return b64_pem(self.ca_cert)

    def gke(self, **overrides) -> dict:
        return {
            "endpoint": self.endpoint,
            "ca_certificate": self.ca_b64,
            "namespace": self.namespace,
            "service": self.service,
            "port": 8265,
            **overrides,
        }

    def __enter__(self) -> ServiceProxy:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _handler(self):
        proxy = self

        class Handler(QuietHandler):
            def _reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self._head(status, ctype, len(body))
                self.wfile.write(body)

            def _status(self, code: int, reason: str, message: str) -> None:
                body = (
                    '{"kind":"Status","apiVersion":"v1","status":"Failure",'
                    f'"message":"{message}","reason":"{reason}","code":{code}}}'
                )
                self._reply(code, body.encode())

            def _forward(self) -> None:
                auth = self.headers.get("Authorization", "")
                proxy.seen_auth.append(auth)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if auth != f"Bearer {proxy.token}":
                    return self._status(401, "Unauthorized", "Unauthorized")
                proxy.seen_paths.append(self.path)
                if self.command == "GET" and self.path.split("?", 1)[0] in proxy.objects:
                    import json

                    return self._reply(200, json.dumps(proxy.objects[self.path.split("?", 1)[0]]).encode())
                if not self.path.startswith(proxy.prefix + "/"):
                    return self._status(404, "NotFound", f"services not found for {self.path}")
                request = urllib.request.Request(
                    proxy.upstream + self.path[len(proxy.prefix) :], data=body, method=self.command
                )
                if self.headers.get("Content-Type"):
                    request.add_header("Content-Type", self.headers["Content-Type"])
                try:
                    with urllib.request.urlopen(request, timeout=30) as resp:
                        self._reply(resp.status, resp.read(), resp.headers.get("Content-Type", "text/plain"))
                except urllib.error.HTTPError as err:
                    self._reply(err.code, err.read(), err.headers.get("Content-Type", "text/plain"))
                except OSError as err:
                    self._status(503, "ServiceUnavailable", f"error trying to reach service: {err}")

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._forward()

            def do_POST(self) -> None:  # noqa: N802
                self._forward()

            def do_DELETE(self) -> None:  # noqa: N802
                self._forward()

        return Handler


# TEST-NET-3: nothing answers there. Set as RAY_ADDRESS in every test that talks to a head: the code
# under test must use the address it is given, never follow the environment.
BOGUS_RAY_ADDRESS = "http://203.0.113.7:1"
_HELD: list[socket.socket] = []


def refused_address() -> str:
    """An http:// address on this machine that refuses connections for the rest of the process: a port
    bound and never listened on, so another test worker's Ray cannot take it (unlike a free_port())."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


def stop_running_jobs(address: str) -> bool:
    """Stop every submitted job still PENDING or RUNNING on the head and wait for each to end: a job a test
    left running would hold its GPUs (and a CPU) in the next test on the same head. False if that failed."""
    try:
        for job in requests.get(f"{address}/api/jobs/", timeout=30).json():
            # A driver that was not submitted (no submission id) cannot be stopped through the Jobs API.
            if job.get("submission_id") and job["status"] in ("PENDING", "RUNNING"):
                requests.post(f"{address}/api/jobs/{job['submission_id']}/stop", timeout=30)
                wait_status(address, job["submission_id"], {"STOPPED", "FAILED", "SUCCEEDED"})
        return True
    except (requests.RequestException, AssertionError):
        return False


def point_ray_env_nowhere(monkeypatch) -> None:
    """RAY_ADDRESS and RAY_API_SERVER_ADDRESS at BOGUS_RAY_ADDRESS; no gcloud token override."""
    monkeypatch.setenv("RAY_ADDRESS", BOGUS_RAY_ADDRESS)
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", BOGUS_RAY_ADDRESS)
    monkeypatch.delenv("CLOUDSDK_AUTH_ACCESS_TOKEN", raising=False)
