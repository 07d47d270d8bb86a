"""The ordered list of a GPU node's additional NICs and the pod networks that expose them.

One list, read by everything that must agree on the order: the node pool's additional node
networks (gVNIC first, then RDMA NIC 0..N-1), the GKENetworkParamSet/Network objects, and the pods'
`networking.gke.io/interfaces` annotation (eth0 = default, eth1 = gVNIC, eth2.. = RDMA 0..N-1).
Source: GKE "Create a custom AI-optimized GKE cluster which uses A4 or A3 Ultra" (network names
gvnic-1, rdma-0..7) and the tutorial's GoogleCloudPlatform/kubernetes-engine-samples
ai-ml/verl-on-gke/network-mapping.yaml @f6f7c67 (gvnic-1 NetDevice, rdma-0..7 RDMA, in that order).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

API_VERSION = "networking.gke.io/v1"
DEFAULT_NETWORK = "default"
DEFAULT_INTERFACE_ANNOTATION = "networking.gke.io/default-interface"
INTERFACES_ANNOTATION = "networking.gke.io/interfaces"
# GKENetworkParamSet.spec.deviceMode per kind of additional network.
GVNIC_DEVICE_MODE = "NetDevice"
RDMA_DEVICE_MODE = "RDMA"


@dataclass(frozen=True)
class NicSpec:
    """One additional NIC: its pod network's name and how GKE attaches it."""

    pod_network: str  # Network / GKENetworkParamSet name, e.g. gvnic-1, rdma-0
    device_mode: str  # NetDevice (gVNIC) or RDMA
    vpc_role: str  # which VPC backs it: "gvnic" or "rdma"


def additional_nics(rdma_count: int) -> list[NicSpec]:
    """gVNIC first, then RDMA NIC 0..N-1: the order of the node pool's additional networks.

    A machine without RDMA NICs attaches no additional network at all (not even the gVNIC one).
    """
    if rdma_count < 0:
        raise ValueError(f"rdma_count = {rdma_count}: must be >= 0")
    if rdma_count == 0:
        return []
    return [NicSpec("gvnic-1", GVNIC_DEVICE_MODE, "gvnic"),
            *(NicSpec(f"rdma-{i}", RDMA_DEVICE_MODE, "rdma") for i in range(rdma_count))]


def pod_interfaces(nics: list[NicSpec]) -> list[dict[str, str]]:
    """The pod's interfaces in order: eth0 on the cluster's network, eth1.. on the additional NICs."""
    networks = [DEFAULT_NETWORK, *(n.pod_network for n in nics)]
    return [{"interfaceName": f"eth{i}", "network": net} for i, net in enumerate(networks)]


def interface_annotations(nics: list[NicSpec]) -> dict[str, str]:
    """Multi-network pod annotations; the default route stays on eth0 (the cluster's VPC)."""
    interfaces = pod_interfaces(nics)
    return {
        DEFAULT_INTERFACE_ANNOTATION: interfaces[0]["interfaceName"],
        INTERFACES_ANNOTATION: json.dumps(interfaces, separators=(",", ":")),
    }


def rdma_count_of(annotations: dict[str, str]) -> int:
    """How many RDMA networks a pod annotated with `interface_annotations` attaches (for cross-checks)."""
    interfaces = json.loads(annotations[INTERFACES_ANNOTATION])
    return sum(1 for i in interfaces if i["network"].startswith("rdma-"))
