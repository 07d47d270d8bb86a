"""RdmaNetwork: the cluster VPC, the gVNIC VPC and the RoCE VPC with one subnet per GPU NIC.

With no RDMA CIDRs (a machine without RDMA NICs) it is the cluster VPC and its subnet alone: no
gVNIC or RoCE VPC, subnet or firewall, and no additional NIC in the handle.

The cluster VPC has a Cloud Router and Cloud NAT in the region: the nodes are private (no external
address), and staging (Hugging Face, the `git clone` of verl), Docker Hub pulls when the image is not
mirrored, and W&B need the internet. Google APIs (GCS, Artifact Registry, whose remote repository
fetches Docker Hub on Google's side) go through Private Google Access on the subnet.

Its `handle` is what a cluster needs of it: the primary VPC and subnet with their secondary
ranges, and the additional NICs in the one order (catalog.nics) that the node pool, the network
objects and the pods' annotations all read.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from catalog import naming
from catalog.nics import NicSpec, additional_nics
from catalog.problems import Problem
from components.problems import require

PRIMARY_MTU = 8896
NAT_ADDRESSES = 2


@dataclass(frozen=True)
class AttachedNic:
    """One additional NIC of a GPU node and the VPC/subnet (names) that back it."""

    spec: NicSpec
    network: pulumi.Input[str]
    subnet: pulumi.Input[str]


@dataclass(frozen=True)
class ClusterNetwork:
    """The networks a GKE cluster and its GPU nodes attach to."""

    network: pulumi.Input[str]
    subnet: pulumi.Input[str]
    pods_range_name: str
    services_range_name: str
    nics: tuple[AttachedNic, ...]  # gVNIC first, then RDMA NIC 0..N-1
    # Every VPC and subnet above. A cluster lists them in depends_on: Pulumi deletes dependents before
    # their dependencies, so `pulumi destroy` removes the cluster (and with it every node and instance
    # template, also Autopilot's) before any subnet its nodes use.
    resources: tuple[pulumi.Resource, ...] = ()
    # What gives private nodes the internet (the region's Cloud NAT): pods that download wait for it.
    egress: tuple[pulumi.Resource, ...] = ()

    @property
    def rdma_nics(self) -> int:
        return sum(1 for n in self.nics if n.spec.vpc_role == "rdma")


@dataclass
class RdmaNetworkArgs:
    project: str
    region: str
    zone: str
    prefix: str
    primary_cidr: str
    pods_cidr: str
    services_cidr: str
    gvnic_cidr: str
    rdma_cidrs: tuple[str, ...]
    mtu: int = 8896
    pods_range_name: str = "pods"
    services_range_name: str = "services"
    # The cluster VPC's MTU (cluster-toolkit modules/network/vpc `mtu` default 8896, used by gke-a4's
    # net-0 @1047080). None sends none (GCP's 1460).
    primary_mtu: int | None = PRIMARY_MTU
    # External addresses of the region's Cloud NAT (cluster-toolkit vpc `ips_per_nat`; gke-a4 sets 6
    # for a fleet of A4 nodes, the module default is 2). Reserved here, so `pulumi up` fails on quota
    # before the cluster rather than a node failing to pull.
    nat_addresses: int = NAT_ADDRESSES
    # What the reserved addresses (billed by the hour from their creation) register after: pass the
    # preflight gate (stacks.preflight.Gate.after), so a refused quota reserves none.
    addresses_after: tuple[pulumi.Input[pulumi.Resource], ...] = ()

    def problems(self) -> list[Problem]:
        return [Problem("zone", problem)] if (problem := naming.zone_in_region_problem(self.zone, self.region)) else []


class RdmaNetwork(pulumi.ComponentResource):
    """Three VPCs. Subnets live in the zone's region; the RoCE profile is per zone."""

    handle: ClusterNetwork
    gvnic_network: pulumi.Output[str] | None  # None without RDMA NICs
    rdma_network: pulumi.Output[str] | None
    rdma_subnets: list[pulumi.Output[str]]  # NIC order: rdma_subnets[i] backs GPU NIC i

    def __init__(self, name: str, args: RdmaNetworkArgs, opts: pulumi.ResourceOptions | None = None):
        require("RdmaNetwork", args)
        super().__init__("verl-gke:network:RdmaNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        p = args.prefix

        primary = gcp.compute.Network(
            f"{name}-primary-net", name=f"{p}-net", project=args.project,
            auto_create_subnetworks=False, mtu=args.primary_mtu, opts=child)
        primary_sub = gcp.compute.Subnetwork(
            f"{name}-primary-sub", name=f"{p}-sub", project=args.project, region=args.region,
            network=primary.id, ip_cidr_range=args.primary_cidr, private_ip_google_access=True,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=args.pods_range_name,
                                                           ip_cidr_range=args.pods_cidr),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=args.services_range_name,
                                                           ip_cidr_range=args.services_cidr),
            ],
            opts=pulumi.ResourceOptions(parent=primary))
        self.nat = self._nat(name, args, primary)
        primary_only = ClusterNetwork(
            network=primary.name, subnet=primary_sub.name, pods_range_name=args.pods_range_name,
            services_range_name=args.services_range_name, nics=(), resources=(primary, primary_sub),
            egress=(self.nat,))
        if not args.rdma_cidrs:  # no RDMA NICs: nothing the machine could not use
            self.handle, self.gvnic_network, self.rdma_network, self.rdma_subnets = primary_only, None, None, []
            self.register_outputs({"primary_network": primary.name, "nat": self.nat.name})
            return

        gvnic = gcp.compute.Network(
            f"{name}-gvnic-net", name=f"{p}-gvnic-net", project=args.project,
            auto_create_subnetworks=False, mtu=args.mtu, opts=child)
        gvnic_sub = gcp.compute.Subnetwork(
            f"{name}-gvnic-sub", name=f"{p}-gvnic-sub", project=args.project, region=args.region,
            network=gvnic.id, ip_cidr_range=args.gvnic_cidr, opts=pulumi.ResourceOptions(parent=gvnic))
        # Only the gVNIC subnet itself talks on this VPC; nothing from outside is allowed in.
        gcp.compute.Firewall(
            f"{name}-gvnic-internal", name=f"{p}-gvnic-internal", project=args.project, network=gvnic.id,
            direction="INGRESS", source_ranges=[args.gvnic_cidr],
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["0-65535"]),
                    gcp.compute.FirewallAllowArgs(protocol="udp", ports=["0-65535"]),
                    gcp.compute.FirewallAllowArgs(protocol="icmp")],
            opts=pulumi.ResourceOptions(parent=gvnic))

        # RoCE VPCs carry implicit allow rules and reject firewall rules: none is created.
        rdma = gcp.compute.Network(
            f"{name}-rdma-net", name=f"{p}-rdma-net", project=args.project, auto_create_subnetworks=False,
            mtu=args.mtu, network_profile=roce_profile(args.project, args.zone),
            # The RoCE profile is zonal; cluster-toolkit gke-a4/gke-a3-ultragpu set REGIONAL routing on it.
            routing_mode="REGIONAL", opts=child)
        rdma_subs = [
            gcp.compute.Subnetwork(
                f"{name}-rdma-sub-{i}", name=f"{p}-rdma-sub-{i}", project=args.project, region=args.region,
                network=rdma.id, ip_cidr_range=cidr, opts=pulumi.ResourceOptions(parent=rdma))
            for i, cidr in enumerate(args.rdma_cidrs)
        ]

        self.gvnic_network = gvnic.name
        self.rdma_network = rdma.name
        self.rdma_subnets = [s.name for s in rdma_subs]
        backing = [(gvnic.name, gvnic_sub.name)] + [(rdma.name, s) for s in self.rdma_subnets]
        self.handle = ClusterNetwork(
            network=primary.name, subnet=primary_sub.name, pods_range_name=args.pods_range_name,
            services_range_name=args.services_range_name,
            nics=tuple(AttachedNic(spec, vpc, subnet) for spec, (vpc, subnet)
                       in zip(additional_nics(len(args.rdma_cidrs)), backing, strict=True)),
            resources=(primary, primary_sub, gvnic, gvnic_sub, rdma, *rdma_subs), egress=(self.nat,))
        self.register_outputs({
            "primary_network": primary.name, "nat": self.nat.name, "gvnic_network": self.gvnic_network,
            "gvnic_subnet": gvnic_sub.name, "rdma_network": self.rdma_network, "rdma_subnets": self.rdma_subnets,
        })


    def _nat(self, name: str, args: RdmaNetworkArgs, primary: gcp.compute.Network) -> gcp.compute.RouterNat:
        """The region's Cloud Router and NAT on the cluster VPC, as cluster-toolkit modules/network/vpc
        builds them (@1047080): a router per subnet region, reserved regional external addresses, a NAT
        for every subnet range of the VPC (terraform-google-cloud-router's default). The gVNIC and RoCE
        VPCs need none: a node's default route is on its first NIC, in the cluster VPC."""
        p, under = args.prefix, pulumi.ResourceOptions(parent=primary)
        router = gcp.compute.Router(f"{name}-router", name=f"{p}-router", project=args.project,
                                    region=args.region, network=primary.id, opts=under)
        billed = pulumi.ResourceOptions(parent=primary, depends_on=list(args.addresses_after) or None)
        addresses = [gcp.compute.Address(f"{name}-nat-ip-{i}", name=f"{p}-nat-ip-{i}", project=args.project,
                                         region=args.region, address_type="EXTERNAL", opts=billed)
                     for i in range(args.nat_addresses)]
        return gcp.compute.RouterNat(
            f"{name}-nat", name=f"{p}-nat", project=args.project, region=args.region, router=router.name,
            nat_ip_allocate_option="MANUAL_ONLY", nat_ips=[a.self_link for a in addresses],
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            # Errors only: a refused connection shows up in Cloud Logging without logging every flow.
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=pulumi.ResourceOptions(parent=router))


def roce_profile(project: str, zone: str) -> str:
    """The RoCE network profile is per ZONE (the tutorial wrongly uses the region)."""
    return f"projects/{project}/global/networkProfiles/{zone}-vpc-roce"
