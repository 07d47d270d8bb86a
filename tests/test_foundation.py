"""Config validation, networks and the GKE cluster, composed under Pulumi mocks."""

from __future__ import annotations

import json

import pulumi
import pytest

from catalog.accelerators import ACCELERATORS, installer_url
from catalog.versions import GIB_INSTALLER_REVISION
from stacks import config
from tests.stack_helpers import STACK_FILES, composed, composed_file
from tools import engine_versions, mocking, schema

NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"


def test_stack_files_exist():
    assert {p.name for p in STACK_FILES} >= {"Pulumi.dev.yaml", "Pulumi.b200.yaml", "Pulumi.h200.yaml"}


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_every_stack_file_composes(path):
    run = composed_file(path)
    cfg_acc = {"b200": ("a4-highgpu-8g", 8), "h200": ("a3-ultragpu-8g", 8), "l4": ("g2-standard-24", 2)}
    machine, per_node = cfg_acc[run.outputs["accelerator"]]
    cluster = run.one(CLUSTER)
    assert cluster.inputs["name"].endswith("-gke")
    assert run.outputs["gpus"] == run.outputs["gpus"] // per_node * per_node > 0
    if not cluster.inputs.get("enableAutopilot"):
        gpu = run.one(POOL, "gke-gpu-pool")
        assert gpu.inputs["nodeConfig"]["machineType"] == machine


def test_stack_files_ship_no_real_project():
    for path in STACK_FILES:
        text = path.read_text()
        assert f"gcp:project: {config.PLACEHOLDER_PROJECT}" in text, path.name


def test_placeholder_project_is_rejected_for_real_runs():
    with pytest.raises(config.ConfigError, match="gcp:project.*placeholder"):
        config.load({**_base(), "gcp:project": config.PLACEHOLDER_PROJECT}, "b200")


def test_pulumi_yaml_declares_every_project_key():
    assert schema.main(["--check"]) == 0, "Pulumi.yaml is stale: python -m tools.schema --write"
    declared = schema.project_file()["config"]
    # Optional secrets are not declared: the CLI would call them missing (tools.schema).
    assert "hfToken" not in declared and "wandbApiKey" not in declared
    assert set(declared) == {k.name for k in config.KEYS
                             if ":" not in k.name and not (k.secret and k.default is None)}
    assert all("description" in v and "type" in v for v in declared.values())


def test_pulumi_yaml_defaults_read_back_as_their_declared_type():
    """yaml.v3 (the CLI's parser) reads every default as the type the key declares: `1e-6` unquoted
    is a float to it, and Project.Validate refuses a float default for a string key."""
    from tools.stack_file import load_yaml

    doc = load_yaml((schema.ROOT / "Pulumi.yaml").read_text(), "Pulumi.yaml")
    python_type = {"string": str, "integer": int, "boolean": bool, "array": list}
    for name, entry in doc["config"].items():
        if "default" in entry:
            value = entry["default"]
            assert type(value) is python_type[entry["type"]], (name, value)
            if entry["type"] == "array":
                assert all(type(v) is str for v in value), (name, value)
    assert doc["config"]["grpoLearningRate"]["default"] == "1e-6"


@pytest.mark.parametrize("stack", [p.name[len("Pulumi."):-len(".yaml")] for p in STACK_FILES])
def test_cli_injected_defaults_change_no_verdict(stack):
    """The CLI copies every declared default a stack leaves out into the config the program gets
    (pkg/workspace/config.go): absent and default must mean the same (the dev stack on L4 once
    refused the injected gvnicCidr/rdmaCidrs)."""
    from tools import plan, stack_file

    path = schema.ROOT / f"Pulumi.{stack}.yaml"
    injected, _ = plan.read_stack_file(path, stack)  # as `pulumi up` merges Pulumi.yaml
    written = {stack_file.config_key(k) for k in stack_file.load_yaml(path.read_text(), path.name)["config"]}
    raw = {k: v for k, v in injected.items() if k in written}
    assert set(injected) > set(raw)
    assert config.load(raw, stack, allow_placeholder_project=True) == \
        config.load(injected, stack, allow_placeholder_project=True)


@pytest.mark.parametrize("mode", ["autopilot", "standard"])
@pytest.mark.parametrize("acc", ["b200", "h200"])
def test_modes_and_accelerators(mode, acc):
    run = composed({"accelerator": acc, "clusterMode": mode})
    a = ACCELERATORS[acc]
    cluster = run.one(CLUSTER).inputs
    assert cluster["enableMultiNetworking"] is True
    assert cluster["datapathProvider"] == "ADVANCED_DATAPATH"
    # The Ray add-on with its logging and monitoring: Ray's logs outlive the pods (issue 14).
    assert cluster["addonsConfig"]["rayOperatorConfigs"] == [{
        "enabled": True, "rayClusterLoggingConfig": {"enabled": True},
        "rayClusterMonitoringConfig": {"enabled": True}}]
    assert cluster["addonsConfig"]["gcsFuseCsiDriverConfig"] == {"enabled": True}
    # The channel's newest version (the mocks answer like GKE), not a floor; later channel moves are ignored.
    assert cluster["minMasterVersion"] == engine_versions.lookup(engine_versions.CURRENT)[
        "releaseChannelLatestVersion"]["REGULAR"]
    assert "minMasterVersion" in run.one(CLUSTER).ignore_changes
    assert cluster["deletionProtection"] is False
    assert cluster["location"] == "us-central1"
    installer = run.one("kubernetes:yaml/v2:ConfigFile").inputs["file"]
    assert installer == installer_url(mode == "autopilot", GIB_INSTALLER_REVISION)
    assert GIB_INSTALLER_REVISION in installer
    if mode == "autopilot":
        assert cluster["enableAutopilot"] is True
        assert run.of_type(POOL) == []
        assert installer.endswith("nccl-rdma-installer-autopilot.yaml")
        return
    assert "enableAutopilot" not in cluster
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "test-project-1.svc.id.goog"}
    assert cluster["networkingMode"] == "VPC_NATIVE"
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["nodeLocations"] == ["us-central1-b"]
    gpu = run.one(POOL, "gke-gpu-pool").inputs
    node = gpu["nodeConfig"]
    assert node["machineType"] == a.machine_type
    # h200: LATEST (R570) for the CUDA 12.8 image; DEFAULT is R550 on A3 Ultra (issue 10 item 7).
    driver = {"b200": "DEFAULT", "h200": "LATEST"}[acc]
    assert node["guestAccelerators"] == [{"type": a.accelerator_type, "count": 8,
                                          "gpuDriverInstallationConfig": {"gpuDriverVersion": driver}}]
    assert node["spot"] is True
    assert node["gvnic"] == {"enabled": True}
    assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"} in node["taints"]
    assert gpu["location"] == "us-central1" and gpu["nodeLocations"] == ["us-central1-b"]
    assert gpu["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 2, "locationPolicy": "ANY"}
    assert gpu["management"] == {"autoRepair": True, "autoUpgrade": True}
    assert "placementPolicy" not in gpu, "Google's A4/A3 Ultra blueprints set no placement policy"
    assert gpu["upgradeSettings"] == {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1}
    extra = gpu["networkConfig"]["additionalNodeNetworkConfigs"]
    prefix = "verl"
    assert extra[0] == {"network": f"{prefix}-gvnic-net", "subnetwork": f"{prefix}-gvnic-sub"}
    assert extra[1:] == [{"network": f"{prefix}-rdma-net", "subnetwork": f"{prefix}-rdma-sub-{i}"} for i in range(8)]
    cpu = run.one(POOL, "gke-cpu-pool").inputs
    assert cpu["nodeConfig"]["machineType"] == "c2-standard-16"
    assert cpu["autoscaling"] == {"minNodeCount": 1, "maxNodeCount": 5}
    assert cpu["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}


def test_rdma_networks():
    run = composed({"accelerator": "h200"})
    nets = {r.inputs["name"]: r.inputs for r in run.of_type(NETWORK)}
    assert nets["verl-rdma-net"]["networkProfile"] == (
        "projects/test-project-1/global/networkProfiles/us-central1-b-vpc-roce")
    assert nets["verl-rdma-net"]["mtu"] == 8896 and nets["verl-gvnic-net"]["mtu"] == 8896
    subs = {r.inputs["name"]: r.inputs for r in run.of_type(SUBNET)}
    rdma = [subs[f"verl-rdma-sub-{i}"] for i in range(8)]
    assert [s["ipCidrRange"] for s in rdma] == [f"192.168.{i + 1}.0/24" for i in range(8)]
    assert {s["region"] for s in subs.values()} == {"us-central1"}
    assert len([n for n in subs if "rdma" in n]) == ACCELERATORS["h200"].rdma_nics
    assert subs["verl-gvnic-sub"]["ipCidrRange"] == "192.168.0.0/24"
    firewalls = run.of_type("gcp:compute/firewall:Firewall")
    assert len(firewalls) == 1, "no firewall may be created on the RoCE VPC"
    fw = firewalls[0]
    assert fw.inputs["sourceRanges"] == ["192.168.0.0/24"]
    assert fw.parent.endswith("network-gvnic-net")


@pytest.mark.parametrize("capacity,expect", [
    ("spot", {"placement": None, "spot": True,
              "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}}),
    ("reservation", {"placement": None, "spot": None,
                     "reservationAffinity": {"consumeReservationType": "SPECIFIC_RESERVATION",
                                             "key": "compute.googleapis.com/reservation-name",
                                             "values": ["my-a4-res"]}}),
    ("flex-start", {"placement": None, "spot": None, "flexStart": True,
                    "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"}}),
])
def test_capacity_types(capacity, expect):
    extra = {"reservation": "my-a4-res"} if capacity == "reservation" else {}
    node_pool = composed({"capacity": capacity, **extra}).one(POOL, "gke-gpu-pool").inputs
    assert node_pool.get("placementPolicy") == expect["placement"]
    assert node_pool["nodeConfig"].get("spot") == expect["spot"]
    for key in ("reservationAffinity", "flexStart"):
        if key in expect:
            assert node_pool["nodeConfig"][key] == expect[key]


def test_kubernetes_resources_use_the_cluster_provider():
    run = composed()
    provider = run.one("pulumi:providers:kubernetes")
    k8s = [r for r in run.resources if r.type.startswith("kubernetes:")]
    assert k8s, "the stack registers Kubernetes resources"
    for r in k8s:
        assert r.provider.startswith(provider.urn + "::"), f"{r.name} does not use the explicit provider"
    assert provider.inputs["kubeconfig"] == mocking.SECRET
    # No deleteUnreachable: one refresh that cannot reach the cluster must not empty the state (issue 21);
    # a clusterIdentifier instead, so a changed kubeconfig does not replace every object
    assert "deleteUnreachable" not in provider.inputs and provider.inputs["clusterIdentifier"]
    kubeconfig = json.loads(provider.raw_inputs["kubeconfig"])
    assert kubeconfig["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    # The DNS endpoint, whose certificate a public CA signs: no cluster CA, as gcloud writes it.
    assert kubeconfig["clusters"][0]["cluster"] == {
        "server": "https://" + mocking.MOCK_DNS_ENDPOINT.format(location="us-central1")}
    assert "token" not in json.dumps(kubeconfig["users"])
    assert "kubeconfig" in run.secret_outputs


def _base() -> dict[str, str]:
    return {"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}


BAD = [
    ({"verl-gke:accelerator": "a100"}, "verl-gke:accelerator", "b200, h200"),
    ({"verl-gke:clusterMode": "serverless"}, "verl-gke:clusterMode", "autopilot, standard"),
    ({"gcp:zone": "europe-west4-b"}, "gcp:zone", "must be a zone in region"),
    ({"verl-gke:gpuNodes": "0"}, "verl-gke:gpuNodes", ">= 1"),
    ({"verl-gke:gpuNodes": "two"}, "verl-gke:gpuNodes", "integer"),
    ({"verl-gke:gkeVersion": "1.32.2-gke.1422000"}, "verl-gke:gkeVersion", "below 1.33.2-gke.4655000, the floor"),
    ({"verl-gke:gkeVersion": "1.31"}, "verl-gke:gkeVersion", "below 1.33.2-gke.4655000, the floor"),
    ({"verl-gke:accelerator": "h200", "verl-gke:capacity": "flex-start", "verl-gke:gkeVersion": "1.32.2-gke.1500000"},
     "verl-gke:gkeVersion", "below 1.33.2-gke.4655000"),
    ({"verl-gke:gkeVersion": "latest"}, "verl-gke:gkeVersion", "GKE version"),
    ({"verl-gke:masterAuthorizedNetworks": json.dumps(["10.0.0.1/24"])}, "verl-gke:masterAuthorizedNetworks",
     "IPv4 CIDR"),
    ({"verl-gke:masterAuthorizedNetworks": json.dumps(["2001:db8::/32"])}, "verl-gke:masterAuthorizedNetworks",
     "endpoint is IPv4"),
    ({"verl-gke:masterAuthorizedNetworks": "203.0.113.0/24"}, "verl-gke:masterAuthorizedNetworks", "list of strings"),
    ({"verl-gke:masterAuthorizedNetworks": json.dumps(["203.0.113.0/24", "203.0.113.0/24"])},
     "verl-gke:masterAuthorizedNetworks", "twice"),
    ({"verl-gke:gvnicCidr": "192.168.0.0/33"}, "verl-gke:gvnicCidr", "IPv4 CIDR"),
    ({"verl-gke:gvnicCidr": "192.168.0.1/24"}, "verl-gke:gvnicCidr", "IPv4 CIDR"),
    ({"verl-gke:gvnicCidr": "8.8.8.0/24"}, "verl-gke:gvnicCidr", "private"),
    ({"verl-gke:gvnicCidr": "192.168.0.0/30"}, "verl-gke:gvnicCidr", "too small"),
    ({"verl-gke:gvnicCidr": "192.168.1.0/24"}, "verl-gke:gvnicCidr", "overlaps rdmaCidrs[0]"),
    ({"verl-gke:podsCidr": "10.10.0.0/16"}, "verl-gke:primaryCidr", "overlaps podsCidr"),
    ({"verl-gke:rdmaCidrs": json.dumps(["192.168.1.0/24"])}, "verl-gke:rdmaCidrs", "must list 8 subnets"),
    ({"verl-gke:rdmaCidrs": "not json"}, "verl-gke:rdmaCidrs", "list of strings"),
    ({"verl-gke:namePrefix": "Verl_GKE"}, "verl-gke:namePrefix", "lowercase"),
    ({"verl-gke:namePrefix": "a-very-long-prefix-for-names"}, "verl-gke:namePrefix", "at most 20"),
    ({"verl-gke:namespace": "-bad"}, "verl-gke:namespace", "DNS label"),
    ({"verl-gke:reservation": "my-res"}, "verl-gke:reservation", "spot VMs cannot consume reservations"),
    ({"verl-gke:capacity": "reservation"}, "verl-gke:reservation", "must name a Compute Engine reservation"),
    ({"verl-gke:capacity": "preemptible"}, "verl-gke:capacity", "spot, on-demand, reservation, flex-start"),
    ({"verl-gke:capacity": "on-demand"}, "verl-gke:capacity", "a4-highgpu-8g is not offered as on-demand"),
    ({"verl-gke:capacity": "on-demand", "verl-gke:accelerator": "h200"}, "verl-gke:capacity",
     "use one of reservation, flex-start, spot (source: Google's consumption-option table"),
    ({"verl-gke:cpuMachineType": "c2-standard-8"}, "verl-gke:cpuMachineType", "Ray head requests 12"),
    ({"verl-gke:cpuMachineType": "c2standard16"}, "verl-gke:cpuMachineType", "machine type"),
    ({"verl-gke:cpuNodesMin": "3", "verl-gke:cpuNodesMax": "2"}, "verl-gke:cpuNodesMax", ">= cpuNodesMin"),
    ({"verl-gke:mtu": "9000"}, "verl-gke:mtu", "8896"),
    ({"verl-gke:releaseChannel": "NIGHTLY"}, "verl-gke:releaseChannel", "RAPID, REGULAR, STABLE"),
    ({"verl-gke:model": "not a model"}, "verl-gke:model", "Hugging Face model id"),
    ({"verl-gke:model": "meta-llama/Llama-3.1-8B-Instruct"}, "verl-gke:hfToken", "gated"),
    ({"verl-gke:verlVersion": "main"}, "verl-gke:verlVersion", "release tag"),
    ({"verl-gke:image": "verlai/verl"}, "verl-gke:image", "tag or digest"),
    ({"verl-gke:grpoLearningRate": "fast"}, "verl-gke:grpoLearningRate", "number"),
    ({"verl-gke:grpoGpuMemoryUtilization": "1.5"}, "verl-gke:grpoGpuMemoryUtilization", "(0.0, 1.0]"),
    ({"verl-gke:bucketDeleteOnDestroy": "yes"}, "verl-gke:bucketDeleteOnDestroy", "true or false"),
    ({"verl-gke:gpuNode": "2"}, "verl-gke:gpuNode", "not a known key"),
    ({"gcp:project": "Bad_Project"}, "gcp:project", "project id"),
    ({"gcp:region": None}, "gcp:region", "is not set"),
]


@pytest.mark.parametrize("overrides,key,allowed", BAD, ids=[b[1] + ":" + b[2][:20] for b in BAD])
def test_bad_config_is_rejected_before_any_resource(overrides, key, allowed):
    raw = {k: v for k, v in {**_base(), **overrides}.items() if v is not None}
    result = mocking.Run()
    from tests.stack_helpers import program
    with pytest.raises(pulumi.RunError) as err:
        mocking.run(program, raw, "test", result=result)
    message = str(err.value)
    problems = [line.removeprefix("  - ") for line in message.splitlines()[1:]]
    line = next((p for p in problems if p.startswith(key)), None)
    assert line is not None, f"no problem names {key}: {message}"
    assert allowed in line, line
    assert result.resources == [], "bad config must register nothing"


def test_all_problems_reported_at_once():
    with pytest.raises(config.ConfigError) as err:
        config.load({**_base(), "verl-gke:gpuNodes": "0", "verl-gke:accelerator": "tpu"}, "x")
    assert len(err.value.problems) == 2
