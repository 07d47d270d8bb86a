"""The Kubernetes provider's config: no preview can show it replaced, and with it every Kubernetes object.

pulumi-kubernetes DiffConfig (pulumi/pulumi-kubernetes provider/pkg/provider/provider.go, commit
94977969d641) replaces the provider when `kubeconfig`, `context` or `cluster` is unknown, when the
kubeconfig's active cluster changes, or when `clusterIdentifier` or `renderYamlToDirectory` changes; but when
`clusterIdentifier` is set and the same on both sides it drops every replacement (`diff.Same(clusterIdentifierKey)
&& news.HasValue(clusterIdentifierKey)`: the deferred `resp.Replaces = nil`). An update of the cluster (its
controlPlaneEndpointsConfig, say) leaves the kubeconfig unknown at preview; the identifier must then be known,
and the one the stack was created with.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pulumi.runtime import rpc

from tests.stack_helpers import BASE, STACK_FILES, composed, composed_file, program
from tools import mocking, plan

PROVIDER = "pulumi:providers:kubernetes"
CLUSTER = "gcp:container/cluster:Cluster"
# What GKE computes for a cluster: what a preview of its update may not know (the program sets the rest).
CLUSTER_COMPUTED = ("endpoint", "masterAuth", "controlPlaneEndpointsConfig", "selfLink")


def _unknown(value: object) -> bool:
    return value == rpc.UNKNOWN or rpc.contains_unknowns(value)


def _update_preview(path: Path) -> mocking.Run:
    """`pulumi preview` of the stack file's next `up` on a deployed stack: every resource in state, the cluster's
    computed outputs unknown."""
    raw, secret_keys = plan.read_stack_file(path)
    raw = {**raw, "gcp:project": BASE["gcp:project"]}
    in_state = frozenset(r.type for r in composed_file(path).resources)
    return mocking.run(program, raw, path.stem.split(".", 1)[1], secret_keys, preview=True, existing=in_state,
                       unknown={CLUSTER: CLUSTER_COMPUTED})


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_an_update_preview_hands_diffconfig_the_cluster_identifier_the_stack_was_created_with(path: Path) -> None:
    preview = _update_preview(path).one(PROVIDER)
    created = composed_file(path).one(PROVIDER)
    assert _unknown(preview.raw_inputs["kubeconfig"])  # the case the identifier is there for
    identifier = preview.raw_inputs["clusterIdentifier"]
    assert not _unknown(identifier) and identifier == created.raw_inputs["clusterIdentifier"]


def test_the_provider_takes_every_new_kubeconfig() -> None:
    """Nothing of the provider is kept from state: a cluster replaced under the same name (a new DNS endpoint)
    is reached at its new address."""
    assert composed_file(STACK_FILES[0]).one(PROVIDER).ignore_changes == []


def test_the_provider_reaches_the_dns_endpoint_when_authorized_networks_open_the_ip_endpoint() -> None:
    """The endpoint is the config's choice, not what the cluster reports: with masterAuthorizedNetworks the
    IP endpoint is on, for the listed CIDRs only, and pulumi still goes through the DNS endpoint (README)."""
    run = composed({"masterAuthorizedNetworks": ["203.0.113.0/24"]})
    assert run.one(CLUSTER).inputs["controlPlaneEndpointsConfig"]["ipEndpointsConfig"] == {"enabled": True}
    kubeconfig = json.loads(run.one(PROVIDER).raw_inputs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"] == {
        "server": "https://" + mocking.MOCK_DNS_ENDPOINT.format(location="us-central1")}
