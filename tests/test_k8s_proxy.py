"""The job provider's GKE path through a real API server's service proxy, to a real Ray head.

The API server proxies `/api/v1/namespaces/N/services/S:8265/proxy/...` only to an address of the Service's
Endpoints that belongs to a Pod (its targetRef, checked against the Pod's IP), and refuses loopback and
link-local ones (k8s.io/kubernetes v1.35.4 pkg/registry/core/service/storage/storage.go ResourceLocation,
isValidAddress). So the dev stack is deployed as the tier deploys it, KubeRay makes its head pod and the
head Service, the endpoints controller their Endpoints, and a real Ray head runs in the control plane's
network namespace (tests/k8s_cluster.Netns) on the IP kwok gave the head pod. The provider's client
(components.ray_client) gets the stack's own `gke` inputs with this API server's endpoint and CA, and a
token (ray_client's TOKEN_ENV: what Google's credentials mint for a user on GKE).
"""

from __future__ import annotations

import base64
import time

import pytest

from components import ray_client
from components.ray_client import TOKEN_ENV, Dashboard, DashboardError
from tests.k8s_cluster import Netns, wait_for
from tests.k8s_deploy import SETTLE_S, Deployed, deployed_stack
from tests.ray_fixtures import image_env
from tools.local_ray import RayNode

pytestmark = pytest.mark.k8s

STACK = "dev"  # the smallest shipped stack: one GPU worker
DASHBOARD = 8265  # KubeRay's head Service port for the dashboard (catalog.ray)


class NetnsRayNode(RayNode):
    """A Ray head inside `netns`, on `ip`, its dashboard on KubeRay's port (the namespace has its own ports)."""

    def __init__(self, netns: Netns, ip: str, **kwargs):
        super().__init__(**kwargs)
        self.netns, self.ip, self.dashboard_port = netns, ip, DASHBOARD

    @property
    def address(self) -> str:
        return f"http://{self.ip}:{self.dashboard_port}"

    def command(self) -> list[str]:
        return [*self.netns.exec(), *(w.replace("127.0.0.1", self.ip) for w in super().command())]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    with deployed_stack(STACK, tmp_path_factory.mktemp(f"k8s-proxy-{STACK}")) as d:
        yield d


@pytest.fixture(scope="module")
def head(deployed: Deployed):
    netns = deployed.cp.netns
    if netns is None:
        pytest.skip("no network namespace could be made here (`ip netns add` needs CAP_NET_ADMIN): the API "
                    "server's proxy refuses loopback endpoints, so no Ray head is reachable from it")
    (pod,) = wait_for("the head pod Running with an IP", lambda: [
        p for p in deployed.ray_pods("head") if p["status"].get("phase") == "Running" and p["status"].get("podIP")],
        SETTLE_S)
    netns.adopt(pod["status"]["podIP"])
    node = NetnsRayNode(netns, pod["status"]["podIP"], gpus=0, env=image_env()).start(timeout=240)
    try:
        yield node
    finally:
        node.stop()


def _inputs(d: Deployed, **gke) -> dict:
    """The stack's RayJob inputs, with this API server's endpoint and CA for GKE's."""
    job = next(r["inputs"] for r in d.plan["resources"] if r["type"].endswith(":RayJob"))
    ca = base64.b64encode((d.cp.folder / "ca.crt").read_bytes()).decode()
    return {**job, "gke": {**job["gke"], "endpoint": f"127.0.0.1:{d.api.port}", "public_ca": False,
                           "ca_certificate": ca, **gke}}


def test_the_job_provider_runs_a_job_through_kuberays_head_service(deployed, head, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, deployed.cp.token)
    inputs = {**_inputs(deployed), "entrypoint": "echo through-the-service-proxy", "runtime_env": None}
    with Dashboard(inputs) as dash:
        assert dash.url == (f"https://127.0.0.1:{deployed.api.port}/api/v1/namespaces/{deployed.namespace}"
                            f"/services/{deployed.ray['metadata']['name']}-head-svc:{DASHBOARD}/proxy")
        ray_client.wait_until_ready(dash, expected_gpus=0, timeout_s=120)
        job_id = f"k8s-tier-{int(time.time())}"
        assert ray_client.submit(dash, job_id, inputs, time.monotonic() + 120) == "submitted"
        assert ray_client.follow(dash, job_id, 180)["status"] == "SUCCEEDED"
        assert "through-the-service-proxy" in dash.logs(job_id)


def test_a_bad_token_is_fatal_at_once(deployed, head, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "not-a-token")
    with Dashboard(_inputs(deployed)) as dash, pytest.raises(DashboardError) as err:
        dash.call("GET", "/api/version", timeout=30)
    assert err.value.status == 401 and err.value.fatal, err.value


def _service(d: Deployed, name: str, endpoints: list[dict] | None) -> None:
    """A Service without a selector; its Endpoints' subsets `endpoints` (None: no Endpoints object)."""
    d.api.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": d.namespace},
                 "spec": {"ports": [{"name": "dashboard", "port": DASHBOARD}]}})
    if endpoints is not None:
        d.api.apply({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": d.namespace},
                     "subsets": endpoints})


def test_a_service_with_no_endpoint_answers_503_which_the_client_waits_out(deployed, monkeypatch):
    """A head pod gone and not yet replaced: its Service's Endpoints have no address."""
    _service(deployed, "k8s-tier-empty-svc", [])
    monkeypatch.setenv(TOKEN_ENV, deployed.cp.token)
    with Dashboard(_inputs(deployed, service="k8s-tier-empty-svc")) as dash, pytest.raises(DashboardError) as err:
        dash.call("GET", "/api/version", timeout=30)
    assert err.value.status == 503 and err.value.transient and not err.value.fatal, err.value


def test_an_address_that_is_no_pod_is_not_proxied(deployed, head, monkeypatch):
    """The Ray head's own address, but in Endpoints without a Pod behind them: the proxy refuses it (503)."""
    subsets = [{"addresses": [{"ip": head.ip}], "ports": [{"name": "dashboard", "port": DASHBOARD}]}]
    _service(deployed, "k8s-tier-podless-svc", subsets)
    monkeypatch.setenv(TOKEN_ENV, deployed.cp.token)
    with Dashboard(_inputs(deployed, service="k8s-tier-podless-svc")) as dash, \
            pytest.raises(DashboardError) as err:
        dash.call("GET", "/api/version", timeout=30)
    assert err.value.status == 503 and err.value.transient, err.value


def test_a_service_without_endpoints_answers_404_which_the_client_waits_out(deployed, monkeypatch):
    """Before the endpoints controller wrote a new Service's Endpoints: a 404 that calls the *service* not
    found, though it exists. ray_client takes a 404 from the proxy as transient and never as a lost job."""
    _service(deployed, "k8s-tier-new-svc", None)
    monkeypatch.setenv(TOKEN_ENV, deployed.cp.token)
    with Dashboard(_inputs(deployed, service="k8s-tier-new-svc")) as dash, pytest.raises(DashboardError) as err:
        dash.call("GET", "/api/jobs/k8s-tier-none", timeout=30)
    assert err.value.status == 404 and err.value.transient and not err.value.job_missing, err.value
