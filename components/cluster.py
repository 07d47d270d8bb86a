"""GkeCluster: Autopilot or Standard GKE with multi-networking, its GPU capacity, the
kubeconfig, the explicit Kubernetes provider and the NCCL RDMA installer.

What the GPUs need decides what is registered: multi-networking and the GPU pool's additional
networks only when the network handle carries NICs, the installer only when the accelerator's row
asks for it, local SSDs and the boot disk size from the row. A zonal cluster (`location` = the zone)
puts the control plane and the pools in that zone.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from catalog.accelerators import GPU_RESOURCE, Accelerator, installer_url
from catalog.capacity import FLEX_START, RESERVATION, SPOT, Capacity
from catalog.gke import NODE_OAUTH_SCOPES
from catalog.problems import Problem
from catalog.versions import GIB_INSTALLER_REVISION
from components.network import ClusterNetwork
from components.problems import require

# cluster-toolkit examples/gke-a4 and gke-a3-ultragpu (@1047080): a release channel upgrades nodes
# under a running job; this exclusion holds minor and node upgrades until the minor version's end
# of support (control-plane patches still apply). The blueprints' start time, reused as is.
# Standard only: those blueprints are Standard clusters, Google's Autopilot verl sample sets no
# exclusion (AIHypercomputerSamples gpu/tuning/verl_rl_autopilot/1_setup_cluster.sh @955b7330), and no
# source read says the API accepts this scope on an Autopilot cluster, which would then fail to create.
MAINTENANCE_EXCLUSION = {"exclusion_name": "no-minor-or-node-upgrades-indefinite",
                         "start_time": "2025-12-01T00:00:00Z", "scope": "NO_MINOR_OR_NODE_UPGRADES",
                         "end_time_behavior": "UNTIL_END_OF_SUPPORT"}
MAINTENANCE_WINDOW_START = "09:00"  # cluster-toolkit gke-cluster default daily window (UTC)
# cluster-toolkit gke-node-pool lifecycle.ignore_changes: GKE reports the local SSD configs tied to
# the machine type differently from what was sent, which would otherwise replace the GPU pool.
GPU_POOL_IGNORE_CHANGES = ["nodeConfig.ephemeralStorageLocalSsdConfig", "nodeConfig.localNvmeSsdBlockConfig"]
# cluster-toolkit gke-node-pool upgrade_settings (@1047080): SURGE with max_surge 0, max_unavailable 1.
# A surge of 1 would need a spare 8-GPU node (spot or reserved) that a job's pool rarely has; the
# maintenance exclusion keeps upgrades off a running job either way. Updated in place.
GPU_POOL_UPGRADE = {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}
# Chosen by GKE, never by the program: see GkeCluster's ignore_changes.
PRIVATE_ENDPOINT_SUBNETWORK = "privateClusterConfig.privateEndpointSubnetwork"


def maintenance_policy(autopilot: bool) -> gcp.container.ClusterMaintenancePolicyArgs:
    ex = MAINTENANCE_EXCLUSION
    return gcp.container.ClusterMaintenancePolicyArgs(
        daily_maintenance_window=gcp.container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
            start_time=MAINTENANCE_WINDOW_START),
        maintenance_exclusions=None if autopilot else [gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
            exclusion_name=ex["exclusion_name"], start_time=ex["start_time"],
            exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                scope=ex["scope"], end_time_behavior=ex["end_time_behavior"]))])


# Pool names are inputs we choose: pods select a pool by this constant, so they need not wait for
# the pool resource in Pulumi (a pod pends until the pool's first node is Ready, which is sooner).
CPU_POOL_NAME = "cpu-pool"
GPU_POOL_NAME = "gpu-pool"


@dataclass(frozen=True)
class CpuPool:
    """The Standard cluster's CPU pool (Ray head, staging, system pods); unused on Autopilot."""

    machine_type: str = "c2-standard-16"
    min_nodes: int = 1
    max_nodes: int = 5
    boot_disk_gb: int = 100  # catalog.nodes.cpu_boot_disk_gb: the image + staging buffer + head


@dataclass
class GkeClusterArgs:
    project: str
    region: str
    zone: str
    name: str
    autopilot: bool
    accelerator: Accelerator
    gpu_nodes: int
    network: ClusterNetwork  # RdmaNetwork.handle
    # The version to create the control plane (and so the first nodes) at: one the release channel
    # offers now (stacks.preflight resolves it), never a floor. Later channel moves are ignored.
    min_version: pulumi.Input[str]
    release_channel: str = "REGULAR"
    # Nodes' IAM identity (NodeServiceAccount.email); None = GKE's default, the Compute Engine account.
    node_service_account: pulumi.Input[str] | None = None
    # CIDRs allowed to reach the control plane endpoint; empty = any address (IAM still authenticates).
    authorized_networks: tuple[str, ...] = ()
    capacity: Capacity = field(default_factory=Capacity)
    cpu_pool: CpuPool = field(default_factory=CpuPool)
    # Where the control plane lives: None = the region (regional); the zone for a zonal cluster.
    location: str | None = None
    deletion_protection: bool = False
    installer_revision: str = GIB_INSTALLER_REVISION
    # GKE image streaming on the Standard pools (node_config.gcfs_config; Autopilot streams eligible
    # images by itself). Needs containerfilesystem.googleapis.com and an Artifact Registry image.
    image_streaming: bool = True
    # Nodes without external addresses (egress through the network's Cloud NAT).
    private_nodes: bool = True

    def problems(self) -> list[Problem]:
        acc = self.accelerator
        found = [dataclasses.replace(p, key=f"capacity.{p.key}") for p in self.capacity.problems()]
        if why := self.capacity.offered_problem(acc.consumption, acc.machine_type, acc.consumption_source):
            found.append(Problem("capacity.kind", why))
        if self.network.rdma_nics != acc.rdma_nics:
            found.append(Problem("network", f"has {self.network.rdma_nics} RDMA NICs: {acc.key} has {acc.rdma_nics}"))
        if self.location not in (None, self.region, self.zone):
            found.append(Problem("location", f"must be None, the region {self.region} or the zone {self.zone}"))
        if self.location == self.zone and self.autopilot:
            found.append(Problem("location", "Autopilot clusters are regional; pass None"))
        if self.gpu_nodes < 1:
            found.append(Problem("gpu_nodes", "must be >= 1"))
        return found


def kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str | None) -> str:
    """A kubeconfig that holds no credential: kubectl and the provider run gke-gcloud-auth-plugin.

    It depends only on the cluster's name, endpoint and CA, so it changes (and the provider with
    it) only when the cluster itself does, never on token refresh. `ca_certificate` None: the DNS
    endpoint, whose certificate a public CA signs, so the system trust store verifies it (gcloud's
    own kubeconfig for `get-credentials --dns-endpoint` carries no CA: googlecloudsdk
    api_lib/container/kubeconfig.py Cluster(has_dns_endpoint=True)).
    """
    server: dict = {"server": f"https://{endpoint}"}
    if ca_certificate is not None:
        server["certificate-authority-data"] = ca_certificate
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": server}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [{"name": cluster_name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "gke-gcloud-auth-plugin",
            "installHint": "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
            "provideClusterInfo": True,
        }}}],
    }, indent=2)


def ray_operator_addon() -> gcp.container.ClusterAddonsConfigRayOperatorConfigArgs:
    """The GKE Ray add-on (KubeRay) with its logging and monitoring: Ray's own logs (raylet.out, the
    job driver's log) go to Cloud Logging and outlive the pods (pulumi-gcp ClusterAddonsConfig
    ray_operator_configs[].ray_cluster_logging_config / ray_cluster_monitoring_config; both default off)."""
    return gcp.container.ClusterAddonsConfigRayOperatorConfigArgs(
        enabled=True,
        ray_cluster_logging_config=gcp.container.ClusterAddonsConfigRayOperatorConfigRayClusterLoggingConfigArgs(
            enabled=True),
        ray_cluster_monitoring_config=gcp.container.ClusterAddonsConfigRayOperatorConfigRayClusterMonitoringConfigArgs(
            enabled=True),
    )


class GkeCluster(pulumi.ComponentResource):
    """Depend on the component itself to wait for the cluster, its pools and the NCCL installer."""

    cluster: gcp.container.Cluster
    name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    ca_certificate: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]  # secret
    provider: k8s.Provider  # pass in ResourceOptions(provider=...) of the cluster's Kubernetes objects
    installer: k8s.yaml.v2.ConfigFile | None  # the NCCL RDMA installer (after the GPU pool on Standard)
    cpu_pool_name: pulumi.Output[str] | None  # Standard only
    gpu_pool_name: pulumi.Output[str] | None  # Standard only

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None):
        require("GkeCluster", args)
        super().__init__("verl-gke:cluster:GkeCluster", name, None, opts)
        net = args.network
        location = args.location or args.region
        # Multi-networking only carries the additional NICs; a network without any needs none.
        multi_network = bool(net.nics)
        addons = gcp.container.ClusterAddonsConfigArgs(
            ray_operator_configs=[ray_operator_addon()],
            gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
        )
        common = dict(
            name=args.name, project=args.project, location=location, network=net.network,
            subnetwork=net.subnet, min_master_version=args.min_version,
            master_authorized_networks_config=authorized_networks(args.authorized_networks),
            control_plane_endpoints_config=control_plane_endpoints(args.authorized_networks),
            private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(enable_private_nodes=True)
            if args.private_nodes else None,
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.release_channel),
            deletion_protection=args.deletion_protection, enable_multi_networking=multi_network or None,
            # Multi-networking requires Dataplane V2.
            datapath_provider="ADVANCED_DATAPATH", addons_config=addons,
            maintenance_policy=maintenance_policy(args.autopilot),
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=net.pods_range_name,
                services_secondary_range_name=net.services_range_name),
        )
        # The version is the channel's at creation; GKE upgrades the cluster within its channel after
        # that, so a later run's newer resolution must not force an update (cluster-toolkit gke-cluster
        # ignores min_master_version and node_config the same way).
        # It also depends on every VPC and subnet of the network (not only the primary ones it names):
        # `pulumi destroy` then deletes it, its nodes and instance templates, before them.
        # GKE fills private_endpoint_subnetwork on a PSC cluster (the node subnet) that the program never
        # sets; the field is ForceNew and not Computed, and the provider suppresses its diff only when
        # master_ipv4_cidr_block is set (resource_container_cluster.go @e03b7622,
        # containerClusterPrivateClusterConfigSuppress), so the next `up` after a refresh would replace the
        # cluster (terraform-provider-google #20429: "private_endpoint_subnetwork = ... # forces
        # replacement"). The bridge drops ignored paths from the provider's diff.
        keep = ["min_master_version", "node_config", PRIVATE_ENDPOINT_SUBNETWORK]
        cluster_opts = pulumi.ResourceOptions(parent=self, depends_on=list(net.resources), ignore_changes=keep)
        pools: list[gcp.container.NodePool] = []
        if args.autopilot:
            # Autopilot provisions GPU nodes (with the pods' extra networks) on demand, as the
            # auto-provisioning defaults' service account.
            self.cluster = gcp.container.Cluster(
                f"{name}-cluster", enable_autopilot=True, **common,
                cluster_autoscaling=gcp.container.ClusterClusterAutoscalingArgs(
                    auto_provisioning_defaults=gcp.container.ClusterClusterAutoscalingAutoProvisioningDefaultsArgs(
                        service_account=args.node_service_account, oauth_scopes=list(NODE_OAUTH_SCOPES)),
                ) if args.node_service_account is not None else None,
                opts=cluster_opts)
            self.cpu_pool_name = self.gpu_pool_name = None
        else:
            self.cluster = gcp.container.Cluster(
                f"{name}-cluster", **common, node_locations=_node_locations(args), networking_mode="VPC_NATIVE",
                # Without the pool, GCS FUSE mounts and principal:// bucket bindings fail.
                workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                    workload_pool=f"{args.project}.svc.id.goog"),
                # The default pool lives only until creation ends, but its node too runs as the nodes' account.
                node_config=gcp.container.ClusterNodeConfigArgs(
                    service_account=args.node_service_account, oauth_scopes=list(NODE_OAUTH_SCOPES),
                    workload_metadata_config=gcp.container.ClusterNodeConfigWorkloadMetadataConfigArgs(
                        mode="GKE_METADATA")),
                remove_default_node_pool=True, initial_node_count=1, opts=cluster_opts)
            pools = [self._cpu_pool(name, args), self._gpu_pool(name, args)]
            self.cpu_pool_name, self.gpu_pool_name = (p.name for p in pools)

        self.name = self.cluster.name
        # The DNS-based endpoint (IAM-authorized, reachable from anywhere): the one address that works
        # whether the IP endpoint is off or limited to masterAuthorizedNetworks.
        self.endpoint = self.cluster.control_plane_endpoints_config.apply(dns_endpoint)
        self.ca_certificate = self.cluster.master_auth.cluster_ca_certificate
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(self.cluster.name, self.endpoint).apply(
            lambda a: kubeconfig(a[0], a[1], None)))
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig, cluster_identifier=cluster_identifier(args),
            # No deleteUnreachable: with it, one refresh that cannot reach the API server (an expired
            # login, an address outside the authorized networks, a control-plane upgrade) drops every
            # Kubernetes object from the state. A cluster already gone is destroyed with
            # PULUMI_K8S_DELETE_UNREACHABLE=true (README "Destroy").
            # No ignore_changes: a replaced cluster's new endpoint must reach the provider. An update that
            # leaves the kubeconfig unknown at preview replaces nothing: cluster_identifier says why.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster]))
        # Deleted by `pulumi destroy` before the GPU pool and the cluster (it depends on both). Its
        # DaemonSet runs on GPU nodes only: it waits for the GPU pool, not the CPU pool.
        self.installer = k8s.yaml.v2.ConfigFile(
            f"{name}-nccl-rdma-installer", file=installer_url(args.autopilot, args.installer_revision),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=pools[1:]),
        ) if args.accelerator.nccl_installer else None
        self.register_outputs({"name": self.name, "endpoint": self.endpoint, "kubeconfig": self.kubeconfig})

    def _cpu_pool(self, name: str, args: GkeClusterArgs) -> gcp.container.NodePool:
        pool = args.cpu_pool
        private = gcp.container.NodePoolNetworkConfigArgs(enable_private_nodes=True) if args.private_nodes else None
        return gcp.container.NodePool(
            f"{name}-cpu-pool", name=CPU_POOL_NAME, project=args.project, cluster=self.cluster.name,
            location=args.location or args.region, node_locations=_node_locations(args),
            initial_node_count=pool.min_nodes,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                min_node_count=pool.min_nodes, max_node_count=pool.max_nodes),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=pool.machine_type,
                service_account=args.node_service_account, oauth_scopes=list(NODE_OAUTH_SCOPES),
                disk_size_gb=pool.boot_disk_gb,
                gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=args.image_streaming),
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA")),
            network_config=private,
            # No deleted_with: that would make the pool's delete a no-op (Pulumi skips the delete of a
            # resource whose deleted_with target is deleted too), so nothing would order it first.
            opts=pulumi.ResourceOptions(parent=self))

    def _gpu_pool(self, name: str, args: GkeClusterArgs) -> gcp.container.NodePool:
        acc = args.accelerator
        node_config = gcp.container.NodePoolNodeConfigArgs(
            machine_type=acc.machine_type,
            guest_accelerators=[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                type=acc.accelerator_type, count=acc.gpus_per_node,
                gpu_driver_installation_config=gcp.container
                .NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(gpu_driver_version=acc.gpu_driver),
            )],
            gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
            gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(enabled=args.image_streaming),
            ephemeral_storage_local_ssd_config=gcp.container.NodePoolNodeConfigEphemeralStorageLocalSsdConfigArgs(
                local_ssd_count=acc.local_ssds) if acc.local_ssds else None,
            disk_size_gb=acc.boot_disk_gb,
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
            service_account=args.node_service_account, oauth_scopes=list(NODE_OAUTH_SCOPES),
            taints=[gcp.container.NodePoolNodeConfigTaintArgs(key=GPU_RESOURCE, value="present",
                                                              effect="NO_SCHEDULE")],
            **capacity_settings(args.capacity),
        )
        # No placement policy: Google's A4 and A3 Ultra blueprints set none (cluster-toolkit gke-a4,
        # gke-a3-ultragpu @1047080), and COMPACT on spot would take nodes only from one placement group.
        # Order matters (catalog.nics): the gVNIC network first, then RDMA NIC 0..N-1 (eth1, eth2..).
        extra_networks = [gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
            network=nic.network, subnetwork=nic.subnet) for nic in args.network.nics]
        return gcp.container.NodePool(
            f"{name}-gpu-pool", name=GPU_POOL_NAME, project=args.project, cluster=self.cluster.name,
            location=args.location or args.region, node_locations=_node_locations(args), initial_node_count=0,
            # location_policy ANY: cluster-toolkit gke-node-pool always sets it; flex-start requires it.
            autoscaling=gcp.container.NodePoolAutoscalingArgs(min_node_count=0, max_node_count=args.gpu_nodes,
                                                              location_policy="ANY"),
            # Auto-upgrade as the A4/A3U blueprints (the maintenance exclusion keeps it off a running job);
            # flex-start requires auto-repair off (cluster-toolkit gke-node-pool precondition).
            management=gcp.container.NodePoolManagementArgs(auto_upgrade=True,
                                                            auto_repair=not args.capacity.flex_start),
            network_config=gcp.container.NodePoolNetworkConfigArgs(
                additional_node_network_configs=extra_networks or None,
                enable_private_nodes=True if args.private_nodes else None,
            ) if extra_networks or args.private_nodes else None,
            upgrade_settings=gcp.container.NodePoolUpgradeSettingsArgs(**GPU_POOL_UPGRADE),
            node_config=node_config,
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=GPU_POOL_IGNORE_CHANGES))


def _endpoints_field(config: object, block: str, field: str) -> object:
    """controlPlaneEndpointsConfig.<block>.<field>, whichever form the provider hands over (an args
    object, a snake_case or camelCase dict, a block as a one-element list); None when absent."""
    camel = block.split("_")[0] + "".join(w.title() for w in block.split("_")[1:])
    value = getattr(config, block, None) if config is not None else None
    if isinstance(config, dict):
        value = config.get(block) or config.get(camel)
    if isinstance(value, list):
        value = value[0] if value else None
    return value.get(field) if isinstance(value, dict) else getattr(value, field, None)


def dns_endpoint(config: object) -> str:
    """The cluster's DNS endpoint (controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint, `gke-<uid>.
    <location>.gke.goog`, "accessible from the public internet": GKE API reference)."""
    return _endpoints_field(config, "dns_endpoint_config", "endpoint") or ""


def control_plane_endpoints(cidrs: tuple[str, ...]) -> gcp.container.ClusterControlPlaneEndpointsConfigArgs:
    """The DNS endpoint open to IAM-authorized callers anywhere; the IP endpoint off, or on only for
    masterAuthorizedNetworks (cluster-toolkit gke-cluster sets dns_endpoint_config.allow_external_traffic
    from enable_external_dns_endpoint @1047080; both fields update in place)."""
    return gcp.container.ClusterControlPlaneEndpointsConfigArgs(
        dns_endpoint_config=gcp.container.ClusterControlPlaneEndpointsConfigDnsEndpointConfigArgs(
            allow_external_traffic=True),
        ip_endpoints_config=gcp.container.ClusterControlPlaneEndpointsConfigIpEndpointsConfigArgs(
            enabled=bool(cidrs)))


def cluster_identifier(args: GkeClusterArgs) -> str:
    """Which cluster the Kubernetes provider talks to, for pulumi-kubernetes' `clusterIdentifier` (4.16.0,
    panic fixed in 4.17.1: its CHANGELOG.md). With it set, DiffConfig replaces the provider (and every
    object it manages) only when this string changes, not when the kubeconfig does (a new endpoint, a
    rotated CA, a kubeconfig unknown at preview): pulumi/pulumi-kubernetes provider/pkg/provider/provider.go
    `DiffConfig`, commit 94977969d641: with the identifier the same on both sides it drops every
    replacement, an unknown kubeconfig's too. Built from what names the cluster and what replaces it
    (project, location, name, mode), all known at preview."""
    mode = "autopilot" if args.autopilot else "standard"
    return f"projects/{args.project}/locations/{args.location or args.region}/clusters/{args.name}/{mode}"


def _node_locations(args: GkeClusterArgs) -> list[str] | None:
    """The GPU zone for a regional cluster; none for a zonal one, whose nodes already live in its zone
    (google_container_cluster / node_pool `node_locations`: "If this is specified for a zonal
    cluster, omit the cluster's zone")."""
    return None if args.location == args.zone else [args.zone]


def authorized_networks(cidrs: tuple[str, ...]) -> gcp.container.ClusterMasterAuthorizedNetworksConfigArgs | None:
    """None (no block: the endpoint accepts any address) when empty."""
    if not cidrs:
        return None
    # gcp_public_cidrs_access_enabled false: otherwise GKE also admits every Compute Engine VM's public
    # address (GKE API MasterAuthorizedNetworksConfig; cluster-toolkit gke-cluster defaults it to false
    # @1047080). Updated in place with the rest of the endpoint config.
    return gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(gcp_public_cidrs_access_enabled=False, cidr_blocks=[
        gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(cidr_block=c, display_name=f"authorized-{i}")
        for i, c in enumerate(cidrs)])


def capacity_settings(capacity: Capacity) -> dict:
    """Node config fields for a capacity type. Spot and flex-start cannot consume reservations."""
    no_reservation = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="NO_RESERVATION")
    if capacity.kind == SPOT:
        return {"spot": True, "reservation_affinity": no_reservation}
    if capacity.kind == FLEX_START:
        return {"flex_start": True, "reservation_affinity": no_reservation}
    if capacity.kind == RESERVATION:
        return {"reservation_affinity": gcp.container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key="compute.googleapis.com/reservation-name", values=[capacity.reservation])}
    return {}
