"""RdmaNetwork: the cluster VPC, the gVNIC VPC and the RoCE VPC with one subnet per GPU NIC."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp


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


class RdmaNetwork(pulumi.ComponentResource):
    """Three VPCs. Subnets live in the zone's region; the RoCE profile is per zone."""

    primary_network: pulumi.Output[str]
    primary_subnet: pulumi.Output[str]
    gvnic_network: pulumi.Output[str]
    gvnic_subnet: pulumi.Output[str]
    rdma_network: pulumi.Output[str]
    rdma_subnets: list[pulumi.Output[str]]  # NIC order: rdma_subnets[i] backs GPU NIC i
    pods_range_name: str
    services_range_name: str

    def __init__(self, name: str, args: RdmaNetworkArgs, opts: pulumi.ResourceOptions | None = None):
        if not args.zone.startswith(args.region + "-"):
            raise ValueError(f"RdmaNetworkArgs.zone = {args.zone!r}: must be a zone of region {args.region!r}")
        if not args.rdma_cidrs:
            raise ValueError("RdmaNetworkArgs.rdma_cidrs is empty: give one CIDR per RDMA NIC")
        super().__init__("verl-gke:network:RdmaNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        p = args.prefix

        primary = gcp.compute.Network(
            f"{name}-primary-net", name=f"{p}-net", project=args.project,
            auto_create_subnetworks=False, opts=child)
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
            mtu=args.mtu, network_profile=roce_profile(args.project, args.zone), opts=child)
        rdma_subs = [
            gcp.compute.Subnetwork(
                f"{name}-rdma-sub-{i}", name=f"{p}-rdma-sub-{i}", project=args.project, region=args.region,
                network=rdma.id, ip_cidr_range=cidr, opts=pulumi.ResourceOptions(parent=rdma))
            for i, cidr in enumerate(args.rdma_cidrs)
        ]

        self.primary_network = primary.name
        self.primary_subnet = primary_sub.name
        self.gvnic_network = gvnic.name
        self.gvnic_subnet = gvnic_sub.name
        self.rdma_network = rdma.name
        self.rdma_subnets = [s.name for s in rdma_subs]
        self.pods_range_name = args.pods_range_name
        self.services_range_name = args.services_range_name
        self.register_outputs({
            "primary_network": self.primary_network, "gvnic_network": self.gvnic_network,
            "gvnic_subnet": self.gvnic_subnet, "rdma_network": self.rdma_network,
            "rdma_subnets": self.rdma_subnets,
        })


def roce_profile(project: str, zone: str) -> str:
    """The RoCE network profile is per ZONE (the tutorial wrongly uses the region)."""
    return f"projects/{project}/global/networkProfiles/{zone}-vpc-roce"
