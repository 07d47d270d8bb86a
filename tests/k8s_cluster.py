"""A real Kubernetes control plane for the `k8s` test tier, started and stopped by the tests.

etcd (its own server, at the release k8s.io/kubernetes requires: tools/k8s/etcd says why not Debian's),
kube-apiserver, kube-controller-manager and kube-scheduler (k8s.io/kubernetes), the KubeRay operator
(github.com/ray-project/kuberay/ray-operator) and kwok (sigs.k8s.io/kwok: nodes without a kubelet; its
upstream "fast" stages make pods Running and Ready, complete a Job's pods and finish deletions), all built
by tools/k8s/build.sh. Each runs as a process in a session of its own; `stop()` kills each
process group and checks that none of them is left.

What GKE runs and this does not is listed, with its sources, in docs/development.md ("The k8s tier").

Addresses: the API server listens on loopback only. Pod IPs (kwok's --cidr) and the node IP lie in a
network namespace this module makes (`Netns`), routed through a veth pair to it, so anything that dials a
pod (the API server's service proxy) reaches that namespace and nothing else. Without `ip netns` (no
CAP_NET_ADMIN) they are loopback addresses: the proxy refuses those, nothing leaves the machine.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "k8s" / "bin"
SHARE = ROOT / "build" / "k8s" / "share"  # what build.sh copies from the modules: kwok's stages, KubeRay's CRDs
KUBERAY_CRDS = SHARE / "kuberay-crds"
SCHEMAS = ROOT / "tests" / "data" / "schemas"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "ray-operator", "kwok",
            "pulumi-resource-kubernetes")
# Bounds for a loaded 2-core machine: measured 60-150 s to a ready control plane while other builds ran
# (the API server's post-start hooks and its first RBAC bootstrap take most of it).
START_TIMEOUT_S = 300
STOP_TIMEOUT_S = 20
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"  # the nodes kwok manages: annotated "fake"
FIELD_MANAGER = "verl-gke-k8s-tier"

# GKE's kube-apiserver admission where it is a flag: the plugins Kubernetes enables by default (among them
# DefaultStorageClass, which GKE's default StorageClass below then acts through), NodeRestriction (GKE's
# hardening guide) and ExtendedResourceToleration ("Run GPUs in GKE Standard node pools": GKE adds the
# tolerations of the nvidia.com/gpu taint to Pods requesting GPUs with that admission controller). GKE
# publishes no flag list; its own webhooks are not reproduced (docs/development.md).
ADMISSION_PLUGINS = "NodeRestriction,ExtendedResourceToleration"
# The default StorageClass of a GKE cluster ("Persistent volumes and dynamic provisioning": standard-rwo, the
# Compute Engine persistent disk CSI driver's balanced disks): the DefaultStorageClass plugin gives it to a claim
# that names no class, as on GKE. (A claim and a PV pre-bound to each other, volumeName and claimRef, as the
# layer's are, bind whatever their classes: the PV controller checks the class only for a PV without claimRef,
# kubernetes pkg/controller/volume/persistentvolume/pv_controller.go syncUnboundClaim @v1.35.4.)
GKE_DEFAULT_STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
    "metadata": {"name": "standard-rwo", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    "provisioner": "pd.csi.storage.gke.io", "parameters": {"type": "pd-balanced"},
    "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": True, "reclaimPolicy": "Delete"}
SERVICE_CIDR = "10.96.0.0/16"  # never dialed: no kube-proxy, and the service proxy uses endpoints


def missing() -> str | None:
    """Why the tier cannot run here, or None."""
    absent = [b for b in BINARIES if not os.access(BIN / b, os.X_OK)]
    if absent:
        return f"the k8s tier's binaries are not built ({', '.join(absent)}): run tools/k8s/build.sh (.ci/run does)"
    if not (SHARE / "kwok-stages.yaml").is_file():
        return "kwok's stages are not in build/k8s/share: run tools/k8s/build.sh"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- certificates


def _certificates(folder: Path, ips: list[str]) -> None:
    """A CA, the API server's serving certificate (loopback, the service IP and `ips`) and the service
    accounts' signing key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    def key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def pem(k: rsa.RSAPrivateKey) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                               serialization.NoEncryption())

    now = datetime.datetime.now(datetime.UTC)
    ca_key, srv_key, sa_key = key(), key(), key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "verl-gke-k8s-tier-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    names = [x509.DNSName(n) for n in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")]
    addresses = [x509.IPAddress(ipaddress.ip_address(a)) for a in ["127.0.0.1", "10.96.0.1", *ips]]
    srv = (x509.CertificateBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
           .issuer_name(ca_name).public_key(srv_key.public_key()).serial_number(x509.random_serial_number())
           .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
           .add_extension(x509.SubjectAlternativeName(names + addresses), critical=False)
           .sign(ca_key, hashes.SHA256()))
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "apiserver.crt").write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    (folder / "apiserver.key").write_bytes(pem(srv_key))
    (folder / "sa.key").write_bytes(pem(sa_key))
    (folder / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


# ----------------------------------------------------------------------------- a network namespace


@dataclass
class Netns:
    """A network namespace joined to this one by a veth pair: `host_ip` here, `ns_ip` there, and `pods`
    (kwok's pod CIDR) routed to it. Addresses from 198.18.0.0/15 (RFC 2544, for network tests): a /30 and
    the /24 after it, the first pair no other namespace here routes (parallel test workers each make one)."""

    name: str
    host_ip: str
    ns_ip: str
    pods: str
    made: bool = False
    routed: bool = False
    BLOCKS = 120  # pairs of /24s in 198.18.0.0/16

    @classmethod
    def make(cls) -> Netns | None:
        if not shutil.which("ip"):
            return None
        cls._remove_stale()
        pid = os.getpid()
        for i in range(cls.BLOCKS):
            block = (pid + i) % cls.BLOCKS * 2
            ns = cls(f"verl-k8s-{pid}", f"198.18.{block}.1", f"198.18.{block}.2", f"198.18.{block + 1}.0/24")
            if subprocess.run(["ip", "netns", "add", ns.name], capture_output=True).returncode:
                return None  # no CAP_NET_ADMIN here
            ns.made = True
            if ns._join(f"vk{pid % 100000}h", f"vk{pid % 100000}n"):
                return ns
            ns.remove()  # another namespace routes this block: the next one
        return None

    def _join(self, host_if: str, ns_if: str) -> bool:
        steps = [
            ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
            ["ip", "link", "set", ns_if, "netns", self.name],
            ["ip", "addr", "add", f"{self.host_ip}/30", "dev", host_if],
            ["ip", "link", "set", host_if, "up"],
            ["ip", "-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", ns_if],
            ["ip", "-n", self.name, "link", "set", ns_if, "up"],
            ["ip", "-n", self.name, "link", "set", "lo", "up"],
            ["ip", "route", "add", self.pods, "via", self.ns_ip],
        ]
        for step in steps:
            if subprocess.run(step, capture_output=True).returncode:
                return False
        self.routed = True
        return True

    @staticmethod
    def _remove_stale() -> None:
        """Namespaces (with their veth and route) this module made in a process that is gone (a killed run)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        for name in listed:
            if name.startswith("verl-k8s-") and name[9:].isdigit() and not Path(f"/proc/{name[9:]}").exists():
                subprocess.run(["ip", "netns", "del", name], capture_output=True)

    def exec(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def adopt(self, ip: str) -> None:
        """Give the namespace a pod's address (one kwok assigned from `pods`), so a server there answers it."""
        subprocess.run(["ip", "-n", self.name, "addr", "add", f"{ip}/32", "dev", "lo"], check=True,
                       capture_output=True)

    def remove(self) -> None:
        if self.made:
            if self.routed:
                subprocess.run(["ip", "route", "del", self.pods], capture_output=True)
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)  # the veth pair goes with it
            self.made = False


# ----------------------------------------------------------------------------- the API


class ApiError(Exception):
    def __init__(self, status: int, body: str, what: str):
        super().__init__(f"{what}: HTTP {status}: {body[:2000]}")
        self.status, self.body = status, body


class Api:
    """The API server over HTTPS with a bearer token: just enough of a client for the tests."""

    def __init__(self, port: int, ca: Path, token: str):
        self.port, self.token = port, token
        self.context = ssl.create_default_context(cafile=str(ca))
        self._resources: dict[tuple[str, str], tuple[str, bool, str]] = {}

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                token: str | None = None, timeout: float = 60) -> Any:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=timeout)
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Authorization": f"Bearer {token or self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            text = response.read().decode(errors="replace")
        finally:
            conn.close()
        if response.status >= 400:
            raise ApiError(response.status, text, f"{method} {path}")
        return json.loads(text) if text.strip().startswith(("{", "[")) else text

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def maybe(self, path: str) -> Any | None:
        try:
            return self.get(path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    # -- objects by apiVersion and kind, through discovery (the server's own resource names and scopes)

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(the collection path's prefix, namespaced) for a kind, from the server's discovery."""
        if (api_version, kind) not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for r in self.get(base)["resources"]:
                if "/" not in r["name"]:
                    self._resources[(api_version, r["kind"])] = (f"{base}", r["namespaced"], r["name"])
        base, namespaced, plural = self._resources[(api_version, kind)]
        return f"{base}/{{ns}}{plural}", namespaced

    def path(self, obj: dict, name: str | None = None) -> str:
        template, namespaced = self.resource(obj["apiVersion"], obj["kind"])
        ns = (obj.get("metadata") or {}).get("namespace") or "default"
        prefix = template.format(ns=f"namespaces/{ns}/" if namespaced else "")
        return prefix + (f"/{quote(name)}" if name else "")

    def apply(self, obj: dict, manager: str = FIELD_MANAGER) -> dict:
        """Server-side apply (as pulumi-kubernetes does by default): the server's validation decides."""
        path = self.path(obj, obj["metadata"]["name"]) + f"?fieldManager={manager}&force=true"
        return self.request("PATCH", path, obj, content_type="application/apply-patch+yaml")

    def create(self, obj: dict) -> dict:
        return self.request("POST", self.path(obj), obj)

    def delete(self, obj: dict, name: str | None = None) -> None:
        with contextlib.suppress(ApiError):
            self.request("DELETE", self.path(obj, name or obj["metadata"]["name"]))

    def list(self, api_version: str, kind: str, namespace: str | None = None, selector: str = "") -> list[dict]:
        template, namespaced = self.resource(api_version, kind)
        path = template.format(ns=f"namespaces/{namespace}/" if namespaced and namespace else "")
        return self.get(path + (f"?labelSelector={quote(selector)}" if selector else ""))["items"]

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A real bound token for a service account (TokenRequest), as the kubelet projects into pods."""
        review = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                               "spec": {"expirationSeconds": seconds}})
        return review["status"]["token"]


def wait_for(what: str, check, timeout: float, every: float = 0.5):
    """Poll `check()` until it returns something truthy; AssertionError naming `what` (and the last
    value or error seen) after `timeout`."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except (ApiError, OSError) as err:
            last = err
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r:.1500})")


# ----------------------------------------------------------------------------- the processes


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""


@dataclass
class ControlPlane:
    folder: Path
    netns: Netns | None = None
    procs: list[Proc] = field(default_factory=list)
    api: Api | None = None
    token: str = ""
    start_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds from the start to each step's end

    # -- start

    def start(self, timeout: float = START_TIMEOUT_S) -> ControlPlane:
        began = time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._start(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - began
        return self

    def _mark(self, step: str) -> None:
        self.phases[step] = round(time.monotonic() - self._began, 1)

    def _start(self, deadline: float) -> None:
        self._began = time.monotonic()
        f = self.folder
        self.netns = Netns.make()
        _certificates(f, [self.netns.host_ip] if self.netns else [])
        self.token = secrets.token_hex(16)
        (f / "tokens.csv").write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
        self._spawn("etcd", [str(BIN / "etcd"), f"--data-dir={f / 'etcd'}", "--name=tier",
                             f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                             f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                             f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                             f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                             f"--initial-cluster=tier=http://127.0.0.1:{etcd_peer}",
                             "--unsafe-no-fsync", "--log-level=warn"])
        self._spawn("kube-apiserver", [
            str(BIN / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", f"--secure-port={api_port}",
            *([f"--advertise-address={self.netns.host_ip}"] if self.netns else []),
            "--endpoint-reconciler-type=none",  # no advertised address for the `kubernetes` Service to point at
            f"--tls-cert-file={f / 'apiserver.crt'}", f"--tls-private-key-file={f / 'apiserver.key'}",
            f"--token-auth-file={f / 'tokens.csv'}", "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={ADMISSION_PLUGINS}", "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={f / 'sa.pub'}", f"--service-account-signing-key-file={f / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", f"--cert-dir={f / 'certs'}", "--profiling=false",
            "--v=1"])
        self.api = Api(api_port, f / "ca.crt", self.token)
        wait_for("the API server's /readyz", lambda: self._alive() and self.api.get("/readyz") == "ok",
                 max(1.0, deadline - time.monotonic()))
        self._mark("api server ready")
        kubeconfig = self.kubeconfig(f / "kubeconfig")
        self._spawn("kube-controller-manager", [
            str(BIN / "kube-controller-manager"), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--secure-port=0", f"--root-ca-file={f / 'ca.crt'}",
            f"--service-account-private-key-file={f / 'sa.key'}", "--use-service-account-credentials=false",
            "--controllers=*", "--v=1"])
        self._spawn("kube-scheduler", [str(BIN / "kube-scheduler"), f"--kubeconfig={kubeconfig}",
                                       "--leader-elect=false", "--secure-port=0", "--v=1"])
        self.api.create(GKE_DEFAULT_STORAGE_CLASS)
        for crd in crds():  # created, not applied: server-side apply of KubeRay's 1-2 MB CRDs took ~20 s here
            self.api.create(crd)
        self._mark("CRDs created")
        for crd in crds():
            name = crd["metadata"]["name"]
            wait_for(f"CRD {name} Established", lambda n=name: any(
                c["type"] == "Established" and c["status"] == "True" for c in
                (self.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
                 .get("status") or {}).get("conditions") or []), max(1.0, deadline - time.monotonic()))
        self._mark("CRDs established")
        self._spawn("ray-operator", [str(BIN / "ray-operator"), f"--kubeconfig={kubeconfig}",
                                     "--enable-leader-election=false", "--metrics-addr=0",
                                     f"--health-probe-bind-address=127.0.0.1:{free_port()}"])
        pods = self.netns.pods if self.netns else "127.1.0.0/16"
        node_ip = self.netns.ns_ip if self.netns else "127.0.0.2"
        self._spawn("kwok", [str(BIN / "kwok"), f"--kubeconfig={kubeconfig}",
                             f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                             f"--cidr={pods}", f"--node-ip={node_ip}", f"--server-address=127.0.0.1:{free_port()}",
                             f"--config={SHARE / 'kwok-stages.yaml'}", "--node-lease-duration-seconds=40"])
        # The controller-manager's service-account controller makes each namespace's `default` account.
        wait_for("the default service account", lambda: self._alive() and self.api.maybe(
            "/api/v1/namespaces/default/serviceaccounts/default"), max(1.0, deadline - time.monotonic()))
        self._mark("controllers serving")

    def _spawn(self, name: str, argv: list[str]) -> Proc:
        log = self.folder / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=self.folder)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def _alive(self) -> bool:
        dead = [p for p in self.procs if not p.alive()]
        if dead:
            raise AssertionError("\n".join(f"{p.name} exited {p.popen.returncode}:\n{p.tail()}" for p in dead))
        return True

    def check_alive(self) -> None:
        self._alive()

    def kubeconfig(self, path: Path) -> Path:
        ca = base64.b64encode((self.folder / "ca.crt").read_bytes()).decode()
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "tier",
            "clusters": [{"name": "tier", "cluster": {"server": self.api.url, "certificate-authority-data": ca}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "tier", "context": {"cluster": "tier", "user": "admin"}}]}))
        return path

    def log(self, name: str, n: int = 60) -> str:
        return next((p.tail(n) for p in self.procs if p.name == name), "")

    # -- stop

    def stop(self) -> list[str]:
        """Kill every process group (the newest first), remove the namespace; the names of any left."""
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
        left = [p.name for p in self.procs if _group_alive(p.popen.pid)]
        if self.netns:
            self.netns.remove()
        return left


def _group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is still there (a zombie counts as gone)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def crds() -> list[dict]:
    """The CRDs the tier installs: the operator's own release of KubeRay's RayCluster, RayJob and RayService
    (it watches all three; the schema tests' RayCluster copy is the same file: tests/test_k8s_build.py) and
    GKE's networking CRDs (tests/data/schemas)."""
    files = [*sorted(KUBERAY_CRDS.glob("*.yaml")), *sorted((SCHEMAS / "gke-networking-api").glob("*.yaml"))]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the pure-Python loader takes ~5 s for 3 MB
    return [yaml.load(p.read_text(), Loader=loader) for p in files]  # noqa: S506 - a safe loader
