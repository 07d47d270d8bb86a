"""Wires the components for one stack: the only place that knows the whole graph."""

from __future__ import annotations

from typing import Any

import pulumi

from components.apis import ProjectApis
from components.cluster import GkeCluster, GkeClusterArgs
from components.network import RdmaNetwork, RdmaNetworkArgs
from stacks.config import StackConfig


def build(cfg: StackConfig, hf_token: pulumi.Output[str] | None = None) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs."""
    apis = ProjectApis("apis", cfg.project)
    after_apis = pulumi.ResourceOptions(depends_on=apis.services)
    net = cfg.network
    network = RdmaNetwork("network", RdmaNetworkArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, prefix=cfg.prefix,
        primary_cidr=net.primary_cidr, pods_cidr=net.pods_cidr, services_cidr=net.services_cidr,
        gvnic_cidr=net.gvnic_cidr, rdma_cidrs=net.rdma_cidrs, mtu=net.mtu), opts=after_apis)
    cl = cfg.cluster
    cluster = GkeCluster("gke", GkeClusterArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, name=cfg.name("gke"),
        autopilot=cl.autopilot, accelerator=cfg.accelerator, gpu_nodes=cfg.gpu_nodes,
        network=network.primary_network, subnetwork=network.primary_subnet,
        pods_range_name=network.pods_range_name, services_range_name=network.services_range_name,
        gvnic_network=network.gvnic_network, gvnic_subnet=network.gvnic_subnet,
        rdma_network=network.rdma_network, rdma_subnets=network.rdma_subnets,
        min_version=cl.min_version, release_channel=cl.release_channel,
        deletion_protection=cl.deletion_protection, capacity=cfg.capacity, reservation=cfg.reservation,
        cpu_machine_type=cl.cpu_machine_type, cpu_nodes_min=cl.cpu_nodes_min, cpu_nodes_max=cl.cpu_nodes_max,
    ), opts=after_apis)

    location = cfg.region
    return {
        "clusterName": cluster.name,
        "clusterMode": cl.mode,
        "accelerator": cfg.accelerator.key,
        "gpus": cfg.total_gpus,
        "kubeconfig": cluster.kubeconfig,
        "getCredentials": cluster.name.apply(
            lambda n: f"gcloud container clusters get-credentials {n} --location {location} "
                      f"--project {cfg.project}"),
        "gvnicNetwork": network.gvnic_network,
        "rdmaNetwork": network.rdma_network,
        "rdmaSubnets": network.rdma_subnets,
    }
