"""Private by default: no node with an external address, the control plane by DNS with IAM, and a NAT
route for every destination outside Google that staging and training need (issue 24)."""

from __future__ import annotations

import pytest

from catalog import egress
from tests.stack_helpers import STACK_FILES, composed, composed_file

CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
NAT = "gcp:compute/routerNat:RouterNat"
ROUTER = "gcp:compute/router:Router"


@pytest.mark.parametrize("path", STACK_FILES, ids=[p.stem for p in STACK_FILES])
def test_no_shipped_stack_has_a_public_node_or_an_open_ip_endpoint(path):
    run = composed_file(path)
    cluster = run.one(CLUSTER).inputs
    assert cluster["privateClusterConfig"] == {"enablePrivateNodes": True}  # Autopilot's nodes, new pools
    for pool in run.of_type(POOL):
        assert pool.inputs["networkConfig"]["enablePrivateNodes"] is True, pool.name
    endpoints = cluster["controlPlaneEndpointsConfig"]
    assert endpoints["dnsEndpointConfig"] == {"allowExternalTraffic": True}
    # Off, or on only for the listed CIDRs: never reachable by IP from any address.
    assert endpoints["ipEndpointsConfig"]["enabled"] is bool(cluster.get("masterAuthorizedNetworksConfig"))


@pytest.mark.parametrize("path", STACK_FILES, ids=[p.stem for p in STACK_FILES])
def test_the_endpoint_subnetwork_gke_fills_in_never_replaces_the_cluster(path):
    """GKE fills privateClusterConfig.privateEndpointSubnetwork on a PSC cluster (the node subnet); the field is
    ForceNew, not Computed, and its diff is suppressed only with master_ipv4_cidr_block
    (hashicorp/terraform-provider-google resource_container_cluster.go @e03b7622,
    containerClusterPrivateClusterConfigSuppress; #20429 shows the replacement): the program never sets it and
    the engine keeps what the state holds."""
    cluster = composed_file(path).one(CLUSTER)
    assert "privateEndpointSubnetwork" not in cluster.inputs["privateClusterConfig"]
    assert "privateClusterConfig.privateEndpointSubnetwork" in cluster.ignore_changes


def test_authorized_networks_turn_the_ip_endpoint_on_for_them_only():
    cluster = composed({"masterAuthorizedNetworks": ["203.0.113.0/24"]}).one(CLUSTER).inputs
    assert cluster["controlPlaneEndpointsConfig"]["ipEndpointsConfig"] == {"enabled": True}
    assert [b["cidrBlock"] for b in cluster["masterAuthorizedNetworksConfig"]["cidrBlocks"]] == ["203.0.113.0/24"]


def _nat_of(run):
    (nat,) = run.of_type(NAT)
    (router,) = run.of_type(ROUTER)
    return nat, router


@pytest.mark.parametrize("overrides, needs", [
    ({}, {egress.HUGGING_FACE, "github.com"}),
    ({"imageMirror": False}, {egress.HUGGING_FACE, "github.com", egress.DOCKER_HUB}),
    ({"grpoLogger": ["console", "wandb"], "wandbApiKey": "k"}, {egress.HUGGING_FACE, "github.com", egress.WANDB}),
])
def test_every_destination_outside_google_goes_through_the_regions_nat(overrides, needs):
    run = composed(overrides, secret_keys=["verl-gke:wandbApiKey"] if "wandbApiKey" in overrides else None)
    nat, router = _nat_of(run)
    routes = run.outputs["egress"]
    assert {host for host, via in routes.items() if via == f"Cloud NAT {nat.inputs['name']}"} == needs
    # The NAT serves every range of the cluster VPC, in the cluster's region, on the nodes' network.
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert nat.inputs["region"] == router.inputs["region"] == run.one(CLUSTER).inputs["location"]
    primary = next(n for n in run.of_type("gcp:compute/network:Network")
                   if n.inputs["name"] == run.one(CLUSTER).inputs["network"])
    assert router.property_dependencies["network"] == [primary.urn]
    assert nat.inputs["natIpAllocateOption"] == "MANUAL_ONLY"
    assert len(nat.inputs["natIps"]) == len(run.of_type("gcp:compute/address:Address"))


def test_staging_waits_for_the_nat():
    """The staging Job downloads at once (Hugging Face, git clone): it waits for the NAT. The Ray pods
    start after the cluster and its pools (minutes after the NAT) and pull images with kubelet retries."""
    run = composed({"clusterMode": "standard"})
    nat, _ = _nat_of(run)
    by_urn = run.by_urn()

    def waits_for(urn: str, target: str, seen: set[str]) -> bool:
        if urn in seen or urn not in by_urn:
            return False
        seen.add(urn)
        r = by_urn[urn]
        deps = set(r.depends_on) | {u for us in r.property_dependencies.values() for u in us}
        return target in deps or any(waits_for(d, target, seen) for d in deps)

    checked = run.of_type("kubernetes:batch/v1:Job")
    assert checked
    for r in checked:
        assert waits_for(r.urn, nat.urn, set()), f"{r.name} may start before its egress exists"


def test_authorized_networks_leave_out_every_other_google_cloud_vm():
    """With authorized networks on, GKE still admits "Google Compute Engine Public IPs" unless
    gcp_public_cidrs_access_enabled is false (GKE API MasterAuthorizedNetworksConfig: "disallow all
    external traffic ... except traffic from the given CIDR blocks, Google Compute Engine Public IPs
    and Google Prod IPs"): any VM of any project would reach the IP endpoint. cluster-toolkit
    gke-cluster sends false by default (variables.tf gcp_public_cidrs_access_enabled @1047080)."""
    cluster = composed({"masterAuthorizedNetworks": ["203.0.113.0/24"]}).one(CLUSTER).inputs
    assert cluster["masterAuthorizedNetworksConfig"]["gcpPublicCidrsAccessEnabled"] is False
