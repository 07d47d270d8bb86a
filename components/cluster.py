"""GkeCluster: Autopilot or Standard GKE with multi-networking, its GPU capacity, the
kubeconfig, the explicit Kubernetes provider and the NCCL RDMA installer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from stacks.accelerators import Accelerator
from stacks.versions import GIB_INSTALLER_REVISION

INSTALLER_BASE = "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators"
GPU_TAINT = "nvidia.com/gpu"
CAPACITIES = ("spot", "on-demand", "reservation", "flex-start")


@dataclass
class GkeClusterArgs:
    project: str
    region: str
    zone: str
    name: str
    autopilot: bool
    accelerator: Accelerator
    gpu_nodes: int
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    pods_range_name: str
    services_range_name: str
    gvnic_network: pulumi.Input[str]
    gvnic_subnet: pulumi.Input[str]
    rdma_network: pulumi.Input[str]
    rdma_subnets: Sequence[pulumi.Input[str]]
    min_version: str
    release_channel: str = "REGULAR"
    deletion_protection: bool = False
    capacity: str = "spot"
    reservation: str = ""
    cpu_machine_type: str = "c2-standard-16"
    cpu_nodes_min: int = 1
    cpu_nodes_max: int = 5
    installer_revision: str = GIB_INSTALLER_REVISION


def installer_url(autopilot: bool, revision: str) -> str:
    variant = "nccl-rdma-installer-autopilot.yaml" if autopilot else "nccl-rdma-installer.yaml"
    return f"{INSTALLER_BASE}/{revision}/gpudirect-rdma/{variant}"


def kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that holds no credential: kubectl and the provider run gke-gcloud-auth-plugin.

    It depends only on the cluster's name, endpoint and CA, so it changes (and the provider with
    it) only when the cluster itself does, never on token refresh.
    """
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {
            "server": f"https://{endpoint}", "certificate-authority-data": ca_certificate}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [{"name": cluster_name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "gke-gcloud-auth-plugin",
            "installHint": "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
            "provideClusterInfo": True,
        }}}],
    }, indent=2)


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    ca_certificate: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]  # secret
    provider: k8s.Provider
    cpu_pool: gcp.container.NodePool | None
    gpu_pool: gcp.container.NodePool | None
    cpu_pool_name: pulumi.Output[str] | None
    gpu_pool_name: pulumi.Output[str] | None
    nccl_installer: pulumi.Resource

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None):
        _validate(args)
        super().__init__("verl-gke:cluster:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        addons = gcp.container.ClusterAddonsConfigArgs(
            ray_operator_configs=[gcp.container.ClusterAddonsConfigRayOperatorConfigArgs(enabled=True)],
            gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
        )
        common = dict(
            name=args.name, project=args.project, location=args.region, network=args.network,
            subnetwork=args.subnetwork, min_master_version=args.min_version,
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.release_channel),
            deletion_protection=args.deletion_protection, enable_multi_networking=True,
            # Multi-networking requires Dataplane V2.
            datapath_provider="ADVANCED_DATAPATH", addons_config=addons,
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=args.pods_range_name,
                services_secondary_range_name=args.services_range_name),
        )
        if args.autopilot:
            # Autopilot provisions GPU nodes (with the pods' extra networks) on demand.
            self.cluster = gcp.container.Cluster(f"{name}-cluster", enable_autopilot=True, **common, opts=child)
            self.cpu_pool = self.gpu_pool = None
            self.cpu_pool_name = self.gpu_pool_name = None
        else:
            self.cluster = gcp.container.Cluster(
                f"{name}-cluster", **common, node_locations=[args.zone], networking_mode="VPC_NATIVE",
                # Without the pool, GCS FUSE mounts and principal:// bucket bindings fail.
                workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                    workload_pool=f"{args.project}.svc.id.goog"),
                remove_default_node_pool=True, initial_node_count=1, opts=child)
            self.cpu_pool = self._cpu_pool(name, args)
            self.gpu_pool = self._gpu_pool(name, args)
            self.cpu_pool_name = self.cpu_pool.name
            self.gpu_pool_name = self.gpu_pool.name

        self.name = self.cluster.name
        self.endpoint = self.cluster.endpoint
        self.ca_certificate = self.cluster.master_auth.cluster_ca_certificate
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(
            self.cluster.name, self.cluster.endpoint, self.ca_certificate).apply(lambda a: kubeconfig(*a)))
        pools = [p for p in (self.cpu_pool, self.gpu_pool) if p is not None]
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig,
            # After the cluster is gone, `pulumi destroy` drops its objects from state instead of failing.
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster]))
        self.nccl_installer = k8s.yaml.v2.ConfigFile(
            f"{name}-nccl-rdma-installer", file=installer_url(args.autopilot, args.installer_revision),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=pools,
                                        deleted_with=self.cluster))
        self.register_outputs({"name": self.name, "endpoint": self.endpoint, "kubeconfig": self.kubeconfig})

    def _cpu_pool(self, name: str, args: GkeClusterArgs) -> gcp.container.NodePool:
        return gcp.container.NodePool(
            f"{name}-cpu-pool", name="cpu-pool", project=args.project, cluster=self.cluster.name,
            location=args.region, node_locations=[args.zone], initial_node_count=args.cpu_nodes_min,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                min_node_count=args.cpu_nodes_min, max_node_count=args.cpu_nodes_max),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=args.cpu_machine_type,
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA")),
            opts=pulumi.ResourceOptions(parent=self, deleted_with=self.cluster))

    def _gpu_pool(self, name: str, args: GkeClusterArgs) -> gcp.container.NodePool:
        acc = args.accelerator
        node_config = gcp.container.NodePoolNodeConfigArgs(
            machine_type=acc.machine_type,
            guest_accelerators=[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                type=acc.accelerator_type, count=acc.gpus_per_node,
                gpu_driver_installation_config=gcp.container
                .NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(gpu_driver_version="DEFAULT"),
            )],
            gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
            ephemeral_storage_local_ssd_config=gcp.container.NodePoolNodeConfigEphemeralStorageLocalSsdConfigArgs(
                local_ssd_count=acc.local_ssds),
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
            oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
            taints=[gcp.container.NodePoolNodeConfigTaintArgs(key=GPU_TAINT, value="present", effect="NO_SCHEDULE")],
            **capacity_settings(args.capacity, args.reservation),
        )
        placement = (gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT")
                     if compact_placement(args.capacity) else None)
        # Order matters: the gVNIC network first, then RDMA NIC 0..N-1 (eth1, eth2..).
        extra_networks = [gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
            network=args.gvnic_network, subnetwork=args.gvnic_subnet)] + [
            gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                network=args.rdma_network, subnetwork=sub) for sub in args.rdma_subnets]
        return gcp.container.NodePool(
            f"{name}-gpu-pool", name="gpu-pool", project=args.project, cluster=self.cluster.name,
            location=args.region, node_locations=[args.zone], initial_node_count=0,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(min_node_count=0, max_node_count=args.gpu_nodes),
            placement_policy=placement,
            network_config=gcp.container.NodePoolNetworkConfigArgs(additional_node_network_configs=extra_networks),
            node_config=node_config,
            opts=pulumi.ResourceOptions(parent=self, deleted_with=self.cluster))


def capacity_settings(capacity: str, reservation: str) -> dict:
    """Node config fields for a capacity type. Spot and flex-start cannot consume reservations."""
    no_reservation = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="NO_RESERVATION")
    if capacity == "spot":
        return {"spot": True, "reservation_affinity": no_reservation}
    if capacity == "flex-start":
        return {"flex_start": True, "reservation_affinity": no_reservation}
    if capacity == "reservation":
        return {"reservation_affinity": gcp.container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key="compute.googleapis.com/reservation-name", values=[reservation])}
    return {}


def compact_placement(capacity: str) -> bool:
    """COMPACT needs a single zone (we have one); a reservation brings its own placement and
    flex-start capacity cannot be placed compactly."""
    return capacity in ("spot", "on-demand")


def _validate(args: GkeClusterArgs) -> None:
    if args.capacity not in CAPACITIES:
        raise ValueError(f"GkeClusterArgs.capacity = {args.capacity!r}: must be one of {', '.join(CAPACITIES)}")
    if (args.capacity == "reservation") != bool(args.reservation):
        raise ValueError(f"GkeClusterArgs.reservation = {args.reservation!r}: required exactly when "
                         f"capacity is 'reservation' (capacity = {args.capacity!r})")
    if len(args.rdma_subnets) != args.accelerator.rdma_nics:
        raise ValueError(f"GkeClusterArgs.rdma_subnets has {len(args.rdma_subnets)} subnets: "
                         f"{args.accelerator.key} has {args.accelerator.rdma_nics} RDMA NICs")
    if args.gpu_nodes < 1:
        raise ValueError(f"GkeClusterArgs.gpu_nodes = {args.gpu_nodes}: must be >= 1")
