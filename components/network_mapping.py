"""NetworkMapping: the GKENetworkParamSet + Network objects that expose the gVNIC and RDMA VPCs to pods.

`pod_interfaces` is the one ordered list of pod interfaces (eth0 = default, eth1 = gVNIC, eth2.. =
RDMA NIC 0..N-1). The objects' names and the pods' `networking.gke.io/interfaces` annotation both
come from it, so the two cannot drift apart. The order must also match the GPU node pool's
additional node networks (gVNIC first, then RDMA subnets in NIC order).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

API_VERSION = "networking.gke.io/v1"
DEFAULT_NETWORK = "default"
GVNIC_NETWORK = "gvnic-1"
DEFAULT_INTERFACE_ANNOTATION = "networking.gke.io/default-interface"
INTERFACES_ANNOTATION = "networking.gke.io/interfaces"
# Device mode per additional network kind (GKENetworkParamSet.spec.deviceMode).
GVNIC_DEVICE_MODE = "NetDevice"
RDMA_DEVICE_MODE = "RDMA"


def rdma_network_name(nic: int) -> str:
    return f"rdma-{nic}"


def pod_interfaces(rdma_count: int) -> list[dict[str, str]]:
    """The pod's interfaces in order: eth0 default, eth1 gVNIC, eth2..eth(N+1) RDMA NIC 0..N-1."""
    if rdma_count < 1:
        raise ValueError(f"rdma_count = {rdma_count}: must be >= 1")
    networks = [DEFAULT_NETWORK, GVNIC_NETWORK, *(rdma_network_name(i) for i in range(rdma_count))]
    return [{"interfaceName": f"eth{i}", "network": net} for i, net in enumerate(networks)]


def interface_annotations(rdma_count: int) -> dict[str, str]:
    """Multi-network pod annotations; the default route stays on eth0 (the cluster's VPC)."""
    interfaces = pod_interfaces(rdma_count)
    return {
        DEFAULT_INTERFACE_ANNOTATION: interfaces[0]["interfaceName"],
        INTERFACES_ANNOTATION: json.dumps(interfaces, separators=(",", ":")),
    }


def rdma_count_of(annotations: dict[str, str]) -> int:
    """How many RDMA networks a pod annotated with `interface_annotations` attaches (for cross-checks)."""
    interfaces = json.loads(annotations[INTERFACES_ANNOTATION])
    return sum(1 for i in interfaces if i["network"] not in (DEFAULT_NETWORK, GVNIC_NETWORK))


@dataclass
class NetworkMappingArgs:
    """The gVNIC VPC/subnet and the RDMA VPC with its subnets in NIC order (names, not self links)."""

    provider: pulumi.ProviderResource
    gvnic_network: pulumi.Input[str]
    gvnic_subnet: pulumi.Input[str]
    rdma_network: pulumi.Input[str]
    rdma_subnets: Sequence[pulumi.Input[str]]

    def validate(self) -> None:
        problems = []
        if not isinstance(self.provider, pulumi.ProviderResource):
            problems.append(f"NetworkMappingArgs.provider = {self.provider!r}: "
                            "must be a pulumi_kubernetes.Provider")
        if isinstance(self.rdma_subnets, str) or len(self.rdma_subnets) < 1:
            problems.append(f"NetworkMappingArgs.rdma_subnets = {self.rdma_subnets!r}: "
                            "must be a list of one or more subnet names in NIC order")
        for field_name in ("gvnic_network", "gvnic_subnet", "rdma_network"):
            value = getattr(self, field_name)
            if value is None or value == "":
                problems.append(f"NetworkMappingArgs.{field_name} = {value!r}: must be a VPC/subnet name")
        if problems:
            raise ValueError("invalid NetworkMapping arguments:\n  - " + "\n  - ".join(problems))


class NetworkMapping(pulumi.ComponentResource):
    """One GKENetworkParamSet and one Network per additional pod network (cluster-scoped objects)."""

    network_names: list[str]
    pod_annotations: dict[str, str]
    param_sets: list[k8s.apiextensions.CustomResource]
    networks: list[k8s.apiextensions.CustomResource]
    resources: list[pulumi.Resource]  # what GPU pods must wait for (depends_on)

    def __init__(self, name: str, args: NetworkMappingArgs, opts: pulumi.ResourceOptions | None = None):
        args.validate()
        super().__init__("verl-gke:network_mapping:NetworkMapping", name, None, opts)
        interfaces = pod_interfaces(len(args.rdma_subnets))
        backing = [(args.gvnic_network, args.gvnic_subnet, GVNIC_DEVICE_MODE)] + [
            (args.rdma_network, subnet, RDMA_DEVICE_MODE) for subnet in args.rdma_subnets]
        self.param_sets, self.networks = [], []
        # interfaces[0] is the cluster's own network: it needs no objects.
        for iface, (vpc, subnet, mode) in zip(interfaces[1:], backing, strict=True):
            net = iface["network"]
            param_set = k8s.apiextensions.CustomResource(
                f"{name}-paramset-{net}", api_version=API_VERSION, kind="GKENetworkParamSet",
                metadata={"name": net},
                spec={"vpc": vpc, "vpcSubnet": subnet, "deviceMode": mode},
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
            network = k8s.apiextensions.CustomResource(
                f"{name}-network-{net}", api_version=API_VERSION, kind="Network",
                metadata={"name": net},
                spec={"type": "Device", "parametersRef": {
                    "group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": net}},
                # Created after (and deleted before) the param set it points at.
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[param_set]))
            self.param_sets.append(param_set)
            self.networks.append(network)
        self.network_names = [i["network"] for i in interfaces[1:]]
        self.pod_annotations = interface_annotations(len(args.rdma_subnets))
        self.resources = [*self.param_sets, *self.networks]
        self.register_outputs({"network_names": self.network_names, "pod_annotations": self.pod_annotations})
