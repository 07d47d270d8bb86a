"""Parity with Google's references for A4 (b200) and A3 Ultra (h200) RDMA clusters.

tests/data/reference/gke_rdma_references.yaml holds what the references set, each value with its
source file and commit: cluster-toolkit gke-a4 / gke-a3-ultragpu with the modules they use
(Standard), container-engine-accelerators' Autopilot RDMA samples and Google's verl samples. This
test composes our stack for b200 and h200 in both cluster modes and compares field by field; a
difference fails unless ALLOWED names it with its reason, and an ALLOWED entry that no longer
differs fails too, so the list stays the list of real deviations.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.stack_helpers import BASE, run_config
from tools import mocking

REFERENCE = yaml.safe_load((Path(__file__).parent / "data" / "reference" / "gke_rdma_references.yaml").read_text())
ACCELERATOR_TYPE = {"b200": "nvidia-b200", "h200": "nvidia-h200-141gb"}
CASES = [(acc, mode) for acc in ("b200", "h200") for mode in ("standard", "autopilot")]
PLACEHOLDERS = {"zone": BASE["gcp:zone"], "project": BASE["gcp:project"]}

# (mode or "both", field, accelerator or None) -> why our value differs from the reference and is right.
ALLOWED: dict[tuple[str, str, str | None], str] = {
    ("both", "network.gvnic.firewall_source", None):
        "the blueprint opens its internal rule to all of 192.168.0.0/16 (its subnets share it); ours admits "
        "exactly the gVNIC subnet, the only sender on that VPC: same protocols and ports, narrower source",
    ("standard", "cluster.addons.ray_operator", None):
        "KubeRay runs the verl job; Google's verl Standard sample enables the RayOperator add-on "
        "(verl_rl_standard/2_setup_cluster.sh --addons=RayOperator,GcsFuseCsiDriver)",
    ("standard", "pool.gpu_driver_version", "h200"):
        "LATEST (R570) instead of DEFAULT (R550 on A3 Ultra): the image is built for CUDA 12.8, whose minimum "
        "driver is 570.26 (test_rdma_nodes.test_driver_meets_the_images_cuda checks it against data)",
    ("both", "network.primary.nat_addresses", None):
        "2 reserved addresses (cluster-toolkit vpc's ips_per_nat default) instead of gke-a4's 6: one address serves "
        "64512 ports, about 1000 VMs at Cloud NAT's default 64 ports per VM, and each takes a static-address quota",
    ("both", "network.primary.firewall_rules", None):
        "no rule of our own on the cluster VPC: GKE creates the node, pod and control-plane rules it needs, and "
        "nothing else needs to reach the private nodes (no SSH, no IAP): narrower than the module's defaults",
    ("both", "cluster.dns_endpoint_external", None):
        "the DNS-based endpoint, authorized by IAM, is how pulumi, kubectl and the job provider reach the cluster "
        "from anywhere without opening the IP endpoint (README 'Who can reach the cluster')",
    ("both", "cluster.ip_endpoint", None):
        "the IP endpoint is off unless masterAuthorizedNetworks lists CIDRs (then limited to them, as the "
        "blueprint does): the DNS endpoint serves every caller we have",
    ("standard", "pool.reservation_affinity", None):
        "capacity is a config key (spot in the shipped stacks); capacity=reservation sends SPECIFIC_RESERVATION "
        "with the blueprints' key (test_foundation.test_capacity_types)",
    ("standard", "pool.sizing", None):
        "autoscaling 0..gpuNodes instead of a static count: flex-start forbids static_node_count (cluster-toolkit "
        "precondition) and a static spot pool fails as a whole when capacity is short; the RayCluster's fixed "
        "replicas ask for exactly gpuNodes nodes",
    ("standard", "worker.mounts", None):
        "read-only, as Google's Autopilot RDMA samples mount them: the pod only reads the driver and gIB plugin",
    ("standard", "worker.node_selector.cloud.google.com/gke-accelerator", None):
        "we select the GPU pool by name instead, which fixes machine, zone, driver and capacity at once",
    ("standard", "worker.node_selector.cloud.google.com/gke-nodepool", None):
        "the GPU pool by name (see gke-accelerator)",
    ("standard", "worker.requests", None):
        "the sample's fixed 220 CPU / 2800Gi does not fit a3-ultragpu-8g (2952 GB = 2749 GiB); ours is the "
        "node's allocatable minus GKE's DaemonSets and the GCS FUSE sidecar (catalog.accelerators)",
    ("autopilot", "worker.env.LD_LIBRARY_PATH", None):
        "not in the pod's env, which would replace the image's own entries (cuda/compat, torch/lib): the Ray "
        "runtime env extends it instead, /usr/local/nvidia/lib64:/usr/local/gib/lib64:${LD_LIBRARY_PATH} "
        "(recipe.grpo.library_path_env; the gIB libraries as Google's verl Autopilot sample adds them, @50ec13c9)",
    ("autopilot", "worker.node_selector.cloud.google.com/gke-accelerator-count", None):
        "Autopilot's documented GPU count selector: pins the 8-GPU machine shape the RDMA NICs belong to",
    ("autopilot", "worker.node_selector.topology.kubernetes.io/zone", None):
        "the RoCE network profile is zonal (<zone>-vpc-roce): a worker placed in another zone has no RDMA NICs",
    ("autopilot", "worker.node_selector.cloud.google.com/gke-spot", None):
        "capacity=spot in the shipped stacks; reservation and flex-start select their own labels",
    ("autopilot", "worker.node_selector.cloud.google.com/gke-gpu-driver-version", "h200"):
        "latest (R570) for the CUDA 12.8 image, Autopilot's spelling of the Standard pool's LATEST",
    ("autopilot", "worker.rdma_attachment", None):
        "multi-network annotations as container-engine-accelerators' Autopilot RDMA samples (@992db81) attach "
        "the NICs; DRANET needs the RAPID channel and DRA, while the same NetworkMapping serves both modes",
    ("autopilot", "cluster.release_channel", None):
        "RAPID is in Google's verl Autopilot sample only for DRANET, which we do not use; REGULAR as the blueprints",
    ("autopilot", "worker.requests", None):
        "the Ray container asks 990Gi of ephemeral storage so that it plus the 10Gi GCS FUSE sidecar the "
        "webhook adds stay within 1000Gi, the Accelerator-class pod bound we can prove (catalog.autopilot); "
        "CPU, memory and GPUs are the sample's",
}


def fmt(value: Any, acc: str) -> Any:
    if isinstance(value, str):
        return value.format(**PLACEHOLDERS, accelerator_type=ACCELERATOR_TYPE[acc])
    if isinstance(value, list):
        return [fmt(v, acc) for v in value]
    if isinstance(value, dict):
        if set(value) == {"b200", "h200"}:
            return fmt(value[acc], acc)
        return {k: fmt(v, acc) for k, v in value.items()}
    return value


def reference(acc: str, mode: str) -> dict[str, Any]:
    return {f["field"]: fmt(f["value"], acc) for f in REFERENCE["facts"] if f["mode"] in (mode, "both")}


@functools.cache
def composed(acc: str, mode: str) -> mocking.Run:
    return run_config({"accelerator": acc, "clusterMode": mode})


def _role(subnet: str) -> str:
    if subnet.endswith("-gvnic-sub"):
        return "gvnic"
    m = re.search(r"-rdma-sub-(\d+)$", subnet)
    return f"rdma-{m.group(1)}" if m else subnet


def ours(acc: str, mode: str) -> dict[str, Any]:
    run = composed(acc, mode)
    rdma = next(r for r in run.of_type("gcp:compute/network:Network") if "networkProfile" in r.inputs)
    gvnic = next(r for r in run.of_type("gcp:compute/network:Network") if r.inputs["name"].endswith("-gvnic-net"))
    firewalls = run.of_type("gcp:compute/firewall:Firewall")

    def fw_on(net) -> list:
        return [f for f in firewalls if net.urn in f.property_dependencies.get("network", [])]

    (gvnic_fw,) = fw_on(gvnic)
    primary = next(r for r in run.of_type("gcp:compute/network:Network")
                   if r.inputs["name"].endswith("-net") and r not in (rdma, gvnic)
                   and not r.inputs["name"].endswith(("-gvnic-net", "-rdma-net")))
    routers = [r for r in run.of_type("gcp:compute/router:Router") if primary.urn in r.property_dependencies["network"]]
    nats = [n for n in run.of_type("gcp:compute/routerNat:RouterNat") if n.parent in {r.urn for r in routers}]
    cluster = run.one("gcp:container/cluster:Cluster").inputs
    endpoints = cluster.get("controlPlaneEndpointsConfig") or {}
    worker = run.one("kubernetes:ray.io/v1:RayCluster").inputs["spec"]["workerGroupSpecs"][0]["template"]
    annotations = worker["metadata"]["annotations"]
    interfaces = json.loads(annotations["networking.gke.io/interfaces"])
    param_sets = {r.inputs["metadata"]["name"]: r.inputs["spec"]
                  for r in run.of_type("kubernetes:networking.gke.io/v1:GKENetworkParamSet")}
    pod_networks = [i["network"] for i in interfaces[1:]]
    (container,) = worker["spec"]["containers"]
    host_vols = {v["name"]: v["hostPath"] for v in worker["spec"]["volumes"] if "hostPath" in v}
    env = {e["name"]: e.get("value") for e in container["env"]}
    installer = run.one("kubernetes:yaml/v2:ConfigFile").inputs["file"]
    revision, installer_file = re.search(r"/([0-9a-f]{40})/(.+)$", installer).groups()
    at_revision = REFERENCE["installer_revisions"].get(revision, {})
    maintenance = cluster.get("maintenancePolicy") or {}
    addons = cluster.get("addonsConfig") or {}
    values: dict[str, Any] = {
        "network.rdma.mtu": rdma.inputs.get("mtu"),
        "network.rdma.profile": rdma.inputs["networkProfile"].rsplit("/", 1)[1],
        "network.rdma.routing_mode": rdma.inputs.get("routingMode"),
        "network.rdma.subnets": len([s for s in run.of_type("gcp:compute/subnetwork:Subnetwork")
                                     if s.parent == rdma.urn]),
        "network.rdma.firewall_rules": len(fw_on(rdma)),
        "network.gvnic.mtu": gvnic.inputs.get("mtu"),
        "network.gvnic.firewall_allow": sorted(
            a["protocol"] + "".join(f":{p}" for p in a.get("ports", [])) for a in gvnic_fw.inputs["allows"]),
        "network.gvnic.firewall_source": gvnic_fw.inputs["sourceRanges"],
        "network.primary.mtu": primary.inputs.get("mtu"),
        "network.primary.nat": bool(nats),
        "network.primary.nat_addresses": sum(len(n.inputs.get("natIps", [])) for n in nats),
        "network.primary.firewall_rules": sorted(f.inputs["name"] for f in fw_on(primary)),
        "cluster.private_nodes": (cluster.get("privateClusterConfig") or {}).get("enablePrivateNodes", False),
        "cluster.dns_endpoint_external": (endpoints.get("dnsEndpointConfig") or {}).get("allowExternalTraffic", False),
        "cluster.ip_endpoint": ("off" if (endpoints.get("ipEndpointsConfig") or {}).get("enabled") is False
                                else "authorized-networks-only" if cluster.get("masterAuthorizedNetworksConfig")
                                else "any-address"),
        "network.nic_order": [_role(param_sets[n]["vpcSubnet"]) for n in pod_networks],
        "k8s.networks": [[n, param_sets[n]["deviceMode"]] for n in pod_networks],
        "cluster.autopilot": bool(cluster.get("enableAutopilot")),
        "cluster.datapath_provider": cluster.get("datapathProvider"),
        "cluster.multi_networking": cluster.get("enableMultiNetworking"),
        "cluster.workload_pool": (cluster.get("workloadIdentityConfig") or {}).get("workloadPool"),
        "cluster.release_channel": (cluster.get("releaseChannel") or {}).get("channel"),
        "cluster.maintenance_exclusions": [
            {"name": e["exclusionName"], "start_time": e["startTime"], "scope": e["exclusionOptions"]["scope"],
             "end_time_behavior": e["exclusionOptions"]["endTimeBehavior"]}
            for e in maintenance.get("maintenanceExclusions", [])],
        "cluster.maintenance_window": (maintenance.get("dailyMaintenanceWindow") or {}).get("startTime"),
        "cluster.addons.gcs_fuse_csi": (addons.get("gcsFuseCsiDriverConfig") or {}).get("enabled", False),
        "cluster.addons.ray_operator": any(c.get("enabled") for c in addons.get("rayOperatorConfigs", [])),
        "cluster.deletion_protection": cluster.get("deletionProtection"),
        "worker.annotations": {
            "networking.gke.io/default-interface": annotations["networking.gke.io/default-interface"],
            "networking.gke.io/interfaces": [[i["interfaceName"], i["network"]] for i in interfaces]},
        "worker.mounts": {m["mountPath"]: [host_vols[m["name"]]["path"], bool(m.get("readOnly"))]
                          for m in container["volumeMounts"] if m["name"] in host_vols},
        "worker.host_path_type": sorted({h.get("type") for h in host_vols.values()} - {None}) or None,
        "worker.env.LD_LIBRARY_PATH": env.get("LD_LIBRARY_PATH"),
        "worker.env.NCCL_SOCKET_IFNAME": env.get("NCCL_SOCKET_IFNAME"),
        # What selects and tunes NCCL's network: every NCCL_* but the log level and the bootstrap interface
        # (worker.env.NCCL_SOCKET_IFNAME above), which the recipe leaves to the workload.
        "worker.env.set_nccl_env": {k: v for k, v in env.items() if k.startswith("NCCL_")
                                    and k not in ("NCCL_DEBUG", "NCCL_SOCKET_IFNAME")},
        "worker.requests": container["resources"]["requests"],
        "worker.rdma_attachment": ("dranet-resource-claim" if worker["spec"].get("resourceClaims")
                                   else "multi-network-annotations"),
        "installer.file": installer_file,
        "installer.plugin_image": ("us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:"
                                   f"{at_revision.get('plugin_image_tag', 'revision not in the data')}"),
        "installer.privileged_alpine_init": at_revision.get("privileged_alpine_init", "revision not in the data"),
    }
    selector = worker["spec"]["nodeSelector"]
    for key in set(selector) | {f.removeprefix("worker.node_selector.") for f in reference(acc, mode)
                                if f.startswith("worker.node_selector.")}:
        values[f"worker.node_selector.{key}"] = selector.get(key)
    if mode == "standard":
        pool = run.one("gcp:container/nodePool:NodePool", "gke-gpu-pool")
        node = pool.inputs["nodeConfig"]
        (gpu,) = node["guestAccelerators"]
        values.update({
            "pool.machine_type": node["machineType"],
            "pool.accelerator": [gpu["type"], gpu["count"]],
            "pool.gpu_driver_version": gpu["gpuDriverInstallationConfig"]["gpuDriverVersion"],
            "pool.gvnic": node["gvnic"]["enabled"],
            "pool.local_ssd_ephemeral": node["ephemeralStorageLocalSsdConfig"]["localSsdCount"],
            # The node config fields GKE reports differently (components/cluster.py GPU_POOL_IGNORE_CHANGES).
            "pool.ignore_changes": [_snake(p.removeprefix("nodeConfig.")) for p in getattr(pool, "ignore_changes", [])
                                    if p.startswith("nodeConfig.")],
            "pool.taints": [[t["key"], t["value"], t["effect"]] for t in node["taints"]],
            # GKE's API defaults when management is not sent: auto-repair and auto-upgrade on.
            "pool.auto_upgrade": (pool.inputs.get("management") or {}).get("autoUpgrade", True),
            "pool.auto_repair": (pool.inputs.get("management") or {}).get("autoRepair", True),
            "pool.node_locations": pool.inputs["nodeLocations"],
            "pool.placement_policy": (pool.inputs.get("placementPolicy") or {}).get("type"),
            "pool.reservation_affinity": (node.get("reservationAffinity") or {}).get("consumeReservationType"),
            "pool.sizing": "autoscaling" if pool.inputs.get("autoscaling") else "static",
            "pool.autoscaling_location_policy": (pool.inputs.get("autoscaling") or {}).get("locationPolicy"),
            "pool.workload_metadata": node["workloadMetadataConfig"]["mode"],
            "pool.private_nodes": (pool.inputs.get("networkConfig") or {}).get("enablePrivateNodes", False),
            "pool.upgrade_settings": {_snake(k): v for k, v in (pool.inputs.get("upgradeSettings") or {}).items()},
            # The GKE API's default boot disk (nodeConfig.diskSizeGb: 100) when we send none.
            "pool.disk_size_gb": node.get("diskSizeGb", 100),
        })
    return values


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def allowed(mode: str, field: str, acc: str) -> str | None:
    for key_mode in (mode, "both"):
        for key_acc in (acc, None):
            if (key_mode, field, key_acc) in ALLOWED:
                return ALLOWED[(key_mode, field, key_acc)]
    return None


def test_every_fact_names_its_source_file_and_commit():
    sources = REFERENCE["sources"]
    for fact in REFERENCE["facts"]:
        src = fact["source"]
        assert src["ref"] in sources, fact["field"]
        assert src.get("path"), fact["field"]
        commit = src.get("commit") or sources[src["ref"]].get("commit")
        assert commit and re.fullmatch(r"[0-9a-f]{40}", commit), f"{fact['field']}: no full commit"
        assert fact["mode"] in ("standard", "autopilot", "both")
    for rev in REFERENCE["installer_revisions"]:
        assert re.fullmatch(r"[0-9a-f]{40}", rev)


@pytest.mark.parametrize("acc,mode", CASES, ids=[f"{a}-{m}" for a, m in CASES])
def test_plan_matches_the_references_field_by_field(acc, mode):
    ref, got = reference(acc, mode), ours(acc, mode)
    unknown = sorted(set(ref) - set(got))
    assert not unknown, f"no extractor for reference fields {unknown}"
    unreferenced = sorted(f for f in got if f.startswith("worker.node_selector.") and f not in ref)
    assert not unreferenced, f"our worker selects {unreferenced}, which no reference fact covers"
    unexplained, stale = [], []
    for field, want in sorted(ref.items()):
        differs = got[field] != want
        reason = allowed(mode, field, acc)
        if differs and reason is None:
            unexplained.append(f"{field}: ours {got[field]!r}, reference {want!r}")
        elif reason is not None and not differs:
            stale.append(field)
    assert not unexplained, "differences from Google's references without a reason:\n  " + "\n  ".join(unexplained)
    assert not stale, f"allow-listed but equal now (remove from ALLOWED): {stale}"


def test_allow_list_names_only_reference_fields():
    fields = {f["field"] for f in REFERENCE["facts"]}
    assert {field for (_, field, _) in ALLOWED} <= fields
    assert all(len(reason) > 40 for reason in ALLOWED.values())


SETTLED = {item["id"]: item for item in REFERENCE["settled"]}


def test_each_settled_claim_names_its_evidence_and_verdict():
    for item in SETTLED.values():
        assert item["verdict"] in ("changed", "kept", "open"), item["id"]
        assert item["evidence"], item["id"]
        for ev in item["evidence"]:
            by_ref = ev.get("ref") and REFERENCE["sources"][ev["ref"]].get("commit")
            pinned = ev.get("commit") or ev.get("tag") or by_ref
            assert ev.get("url") or pinned, f"{item['id']}: evidence without a commit, tag or URL"
        if item["verdict"] == "open":
            assert len(item.get("bound", "")) > 40, f"{item['id']}: an open claim says what bounds the risk"
        if item["verdict"] == "changed":
            assert item.get("change"), item["id"]


def test_the_pinned_provider_compares_the_roce_profile_as_a_relative_path():
    """A provider without CompareSelfLinkRelativePaths on network_profile would diff (and replace the RoCE
    VPC) on every run; pulumi-gcp has it from the release that bridges google-beta v6.39.0."""
    import importlib.metadata

    from packaging.version import Version

    first = Version(SETTLED["roce-profile-relative-path"]["first_fixed_pulumi_gcp"])
    assert Version(importlib.metadata.version("pulumi_gcp")) >= first
    floor = re.search(r"^pulumi-gcp>=([0-9.]+)", (Path(__file__).parent.parent / "requirements.txt").read_text(), re.M)
    assert floor and Version(floor.group(1)) >= first, "requirements.txt allows a pulumi-gcp without the fix"
    # And the program sends the relative form the fix compares.
    run = composed("b200", "standard")
    rdma = next(r for r in run.of_type("gcp:compute/network:Network") if "networkProfile" in r.inputs)
    assert re.fullmatch(r"projects/[^/]+/global/networkProfiles/[a-z0-9-]+-vpc-roce", rdma.inputs["networkProfile"])


def test_the_ray_cluster_wait_does_not_depend_on_a_kuberay_feature_gate():
    """GKE does not say which KubeRay its add-on runs; HeadPodReady exists only behind a gate that is off
    up to v1.2.2, so `up` waits on a field every KubeRay v1 sets."""
    from components import ray_cluster

    item = SETTLED["kuberay-head-pod-ready"]
    wait_for = ray_cluster.await_annotations(60)[ray_cluster.WAIT_FOR_ANNOTATION]
    assert wait_for == item["wait_for"]
    assert "condition=" not in wait_for and item["condition"] not in wait_for
    assert item["kuberay_default_on_from"] == "v1.3.0"


def test_changed_claims_show_in_the_plan():
    pool = composed("b200", "standard").one("gcp:container/nodePool:NodePool", "gke-gpu-pool")
    assert "placementPolicy" not in pool.inputs  # compact-placement-on-spot
    assert pool.inputs["upgradeSettings"] == {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1}
    primary = next(r for r in composed("b200", "standard").of_type("gcp:compute/network:Network")
                   if r.inputs["name"] == "verl-net")
    assert primary.inputs["mtu"] == 8896  # primary-vpc-mtu
