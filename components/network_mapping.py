"""NetworkMapping: the GKENetworkParamSet + Network objects that expose the gVNIC and RDMA VPCs to pods.

It reads the one ordered NIC list (RdmaNetwork.handle.nics, catalog.nics): the objects' names and
the pods' `networking.gke.io/interfaces` annotation both come from it, so they cannot drift apart,
and the node pool attaches the same list in the same order. Pass the cluster's Kubernetes provider
in `opts` (`ResourceOptions(provider=...)`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from catalog.nics import API_VERSION, interface_annotations
from catalog.problems import Problem
from components.network import AttachedNic
from components.problems import require


def problems(nics: Sequence[AttachedNic]) -> list[Problem]:
    if isinstance(nics, str) or not nics or not all(isinstance(n, AttachedNic) for n in nics):
        return [Problem("nics", "must be RdmaNetwork.handle.nics (one or more AttachedNic in NIC order)")]
    return []


class NetworkMapping(pulumi.ComponentResource):
    """One GKENetworkParamSet and one Network per additional pod network (cluster-scoped objects)."""

    network_names: list[str]
    pod_annotations: dict[str, str]  # what a pod attaching every NIC carries

    def __init__(self, name: str, nics: Sequence[AttachedNic], opts: pulumi.ResourceOptions | None = None):
        require("NetworkMapping", {"nics": nics}, problems(nics), owner="NetworkMapping")
        super().__init__("verl-gke:network_mapping:NetworkMapping", name, None, opts)
        for nic in nics:
            net = nic.spec.pod_network
            param_set = k8s.apiextensions.CustomResource(
                f"{name}-paramset-{net}", api_version=API_VERSION, kind="GKENetworkParamSet",
                metadata={"name": net},
                spec={"vpc": nic.network, "vpcSubnet": nic.subnet, "deviceMode": nic.spec.device_mode},
                opts=pulumi.ResourceOptions(parent=self))
            k8s.apiextensions.CustomResource(
                f"{name}-network-{net}", api_version=API_VERSION, kind="Network",
                metadata={"name": net},
                spec={"type": "Device", "parametersRef": {
                    "group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": net}},
                # Created after (and deleted before) the param set it points at.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[param_set]))
        specs = [n.spec for n in nics]
        self.network_names = [s.pod_network for s in specs]
        self.pod_annotations = interface_annotations(specs)
        self.register_outputs({"network_names": self.network_names, "pod_annotations": self.pod_annotations})
