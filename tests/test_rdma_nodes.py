"""Issue 10: RDMA GPU nodes as Google's A4 / A3 Ultra references build them.

One test (or more) per numbered item; where a fact decides whether GKE accepts what we send it is
read from tests/data/reference/gke_rdma_references.yaml (source file and commit per value). Item 4
(destroy order) is tests/test_destroy_order.py; the field-by-field comparison is
tests/test_reference_parity.py.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pulumi
import pytest
import yaml

from catalog.accelerators import ACCELERATORS
from stacks import config
from tests.stack_helpers import BASE, composed, run_config
from tools import mocking

REFERENCE = yaml.safe_load((Path(__file__).parent / "data" / "reference" / "gke_rdma_references.yaml").read_text())
FACTS = {(f["field"], f["mode"]): f["value"] for f in REFERENCE["facts"]}
POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
RAY = "kubernetes:ray.io/v1:RayCluster"
ACCS = ["b200", "h200"]


@functools.cache
def stack(acc: str, mode: str, capacity: str = "spot") -> mocking.Run:
    return composed({"accelerator": acc, "clusterMode": mode, "capacity": capacity})


def worker_spec(run: mocking.Run) -> dict:
    return run.one(RAY).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]


# ---------------------------------------------------------------- 1. Autopilot workers can load the plugin

@pytest.mark.parametrize("acc", ACCS)
def test_1_autopilot_workers_mount_the_driver_and_gib_dirs_read_only(acc):
    spec = worker_spec(stack(acc, "autopilot"))
    (container,) = spec["containers"]
    host = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: [host[m["name"]]["path"], bool(m.get("readOnly"))]
              for m in container["volumeMounts"] if m["name"] in host}
    assert mounts == FACTS[("worker.mounts", "autopilot")]
    # The Autopilot sample's volumes carry no hostPath type: send exactly that form.
    assert all(set(h) == {"path"} for h in host.values())
    env = {e["name"]: e["value"] for e in container["env"]}
    # gIB by NCCL's default plugin name from the installer's lib64 (catalog.accelerators.nccl_env).
    assert env["NCCL_NET"] == "gIB" and "NCCL_NET_PLUGIN" not in env


# ---------------------------------------------------------------- 2. Autopilot workers in the RoCE VPC's zone

@pytest.mark.parametrize("acc", ACCS)
def test_2_autopilot_workers_are_pinned_to_the_roce_zone(acc):
    run = stack(acc, "autopilot")
    rdma = next(r for r in run.of_type("gcp:compute/network:Network") if "networkProfile" in r.inputs)
    roce_zone = rdma.inputs["networkProfile"].rsplit("/", 1)[1].removesuffix("-vpc-roce")
    selector = worker_spec(run)["nodeSelector"]
    assert selector["topology.kubernetes.io/zone"] == roce_zone == BASE["gcp:zone"]
    # The documented attachment: the multi-network annotations of Google's Autopilot RDMA samples.
    annotations = run.one(RAY).inputs["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["annotations"]
    assert annotations["networking.gke.io/default-interface"] == \
        FACTS[("worker.annotations", "autopilot")]["networking.gke.io/default-interface"]


def test_2_autopilot_reservation_selects_it_explicitly():
    """Autopilot consumes specific reservations only, selected by name (GKE 'Consuming reserved zonal resources')."""
    run = composed({"clusterMode": "autopilot", "capacity": "reservation", "reservation": "my-a4-res"})
    selector = worker_spec(run)["nodeSelector"]
    assert selector["cloud.google.com/reservation-name"] == "my-a4-res"
    assert selector["cloud.google.com/reservation-affinity"] == "specific"
    assert selector["topology.kubernetes.io/zone"] == BASE["gcp:zone"]


# ---------------------------------------------------------------- 3. Autopilot worker size

@pytest.mark.parametrize("acc", ACCS)
def test_3_autopilot_worker_requests_what_googles_autopilot_sample_does(acc):
    run = stack(acc, "autopilot")
    spec = worker_spec(run)
    (container,) = spec["containers"]
    sample = FACTS[("worker.requests", "autopilot")]
    requests = container["resources"]["requests"]
    assert requests == container["resources"]["limits"]
    # CPU, memory and GPUs are the sample's; the disk leaves room for the sidecar within the pod bound.
    assert {k: v for k, v in requests.items() if k != "ephemeral-storage"} == \
        {k: v for k, v in sample.items() if k != "ephemeral-storage"}
    assert requests["ephemeral-storage"] == "990Gi" and sample["ephemeral-storage"] == "1000Gi"
    group = run.one(RAY).inputs["spec"]["workerGroupSpecs"][0]
    assert group["rayStartParams"]["num-cpus"] == sample["cpu"]
    # What is left on the node for Autopilot's own DaemonSets once the GCS FUSE sidecar is counted.
    a = ACCELERATORS[acc]
    annotations = group["template"]["metadata"]["annotations"]
    left_cpu = a.allocatable_cpu - int(sample["cpu"]) - float(annotations["gke-gcsfuse/cpu-limit"])
    assert left_cpu >= 20, f"{left_cpu:.1f} CPU left for Autopilot's DaemonSets"


# ---------------------------------------------------------------- 5. capacity types

@pytest.mark.parametrize("acc", ACCS)
def test_5_flex_start_pool_has_auto_repair_off_and_location_policy_any(acc):
    pool = stack(acc, "standard", "flex-start").one(POOL, "gke-gpu-pool").inputs
    rule = REFERENCE["flex_start"]
    assert pool["management"]["autoRepair"] is rule["auto_repair"]
    assert pool["autoscaling"]["locationPolicy"] == rule["location_policy"]
    assert pool["nodeConfig"]["reservationAffinity"]["consumeReservationType"] == rule["reservation"]
    assert pool["nodeConfig"].get("spot", False) is rule["spot"]
    assert pool["nodeConfig"]["flexStart"] is True


@pytest.mark.parametrize("acc", ACCS)
@pytest.mark.parametrize("capacity", ["on-demand", "spot", "reservation", "flex-start"])
def test_5_config_accepts_only_what_the_machine_offers(acc, capacity):
    machine = ACCELERATORS[acc].machine_type
    offered = REFERENCE["consumption"][machine]["value"]
    raw = {**BASE, "verl-gke:accelerator": acc, "verl-gke:capacity": capacity}
    if capacity == "reservation":
        raw["verl-gke:reservation"] = "my-res"
    if capacity in offered:
        assert config.load(raw, "t").capacity.kind == capacity
        return
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "t")
    (problem,) = err.value.problems
    assert problem.startswith("verl-gke:capacity = 'on-demand'")
    assert machine in problem and "consumption-option table" in problem  # names the source


def test_5_bad_capacity_registers_nothing():
    result = mocking.Run()
    with pytest.raises(pulumi.RunError, match="not offered as on-demand"):
        run_config({"capacity": "on-demand"}, result=result)
    assert result.resources == []


# ---------------------------------------------------------------- 6. no upgrades under a running job

def test_6_maintenance_exclusion_holds_node_upgrades_on_standard():
    cluster = stack("b200", "standard").one(CLUSTER).inputs
    policy = cluster["maintenancePolicy"]
    (want,) = FACTS[("cluster.maintenance_exclusions", "standard")]
    (got,) = policy["maintenanceExclusions"]
    assert got == {"exclusionName": want["name"], "startTime": want["start_time"],
                   "exclusionOptions": {"scope": want["scope"], "endTimeBehavior": want["end_time_behavior"]}}
    assert "endTime" not in got  # exactly one of end_time / end_time_behavior (pulumi-gcp, cluster-toolkit)
    assert policy["dailyMaintenanceWindow"] == {"startTime": FACTS[("cluster.maintenance_window", "standard")]}
    assert cluster["releaseChannel"]["channel"] in ("RAPID", "REGULAR", "STABLE")  # exclusions need a channel


def test_6_autopilot_sends_no_exclusion_its_sources_do_not_show_accepted():
    """Issue 43 item 13: the blueprints that set NO_MINOR_OR_NODE_UPGRADES are Standard clusters; Google's
    Autopilot verl sample sets none (the reference data's autopilot fact). A scope Autopilot refused would
    fail every Autopilot cluster's creation."""
    policy = stack("b200", "autopilot").one(CLUSTER).inputs["maintenancePolicy"]
    assert FACTS[("cluster.maintenance_exclusions", "autopilot")] == []
    assert "maintenanceExclusions" not in policy
    assert policy["dailyMaintenanceWindow"] == {"startTime": FACTS[("cluster.maintenance_window", "standard")]}


# ---------------------------------------------------------------- 7. drift, driver, installer

@pytest.mark.parametrize("acc", ACCS)
def test_7_local_ssd_config_changes_do_not_replace_the_gpu_pool(acc):
    pool = stack(acc, "standard").one(POOL, "gke-gpu-pool")
    ignored = {p.removeprefix("nodeConfig.") for p in pool.ignore_changes if p.startswith("nodeConfig.")}
    want = {"".join(w.title() if i else w for i, w in enumerate(f.split("_")))
            for f in FACTS[("pool.ignore_changes", "standard")]}
    assert ignored == want
    assert pool.inputs["nodeConfig"]["ephemeralStorageLocalSsdConfig"] == {
        "localSsdCount": FACTS[("pool.local_ssd_ephemeral", "standard")]}


@pytest.mark.parametrize("acc", ACCS)
@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_7_driver_meets_the_images_cuda(acc, mode):
    """The image is built for CUDA 12.8: the driver GKE installs must be of a branch >= its minimum."""
    drivers = REFERENCE["drivers"]
    minimum_branch = int(drivers["cuda_12_8_min_linux_driver"]["value"].split(".")[0])
    run = stack(acc, mode)
    if mode == "standard":
        (gpu,) = run.one(POOL, "gke-gpu-pool").inputs["nodeConfig"]["guestAccelerators"]
        choice = gpu["gpuDriverInstallationConfig"]["gpuDriverVersion"]
    else:
        choice = worker_spec(run)["nodeSelector"].get("cloud.google.com/gke-gpu-driver-version", "default").upper()
    branch = int(drivers["gke_branch"][acc][choice])
    assert branch >= minimum_branch, f"{acc} {mode}: {choice} installs R{branch}, CUDA 12.8 needs R{minimum_branch}"


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_7_installer_revision_has_no_privileged_alpine_init(mode):
    installer = stack("b200", mode).one("kubernetes:yaml/v2:ConfigFile").inputs["file"]
    revision = installer.split("/")[-3]
    facts = REFERENCE["installer_revisions"].get(revision)
    assert facts is not None, f"installer revision {revision} is not described in the reference data"
    assert facts["privileged_alpine_init"] is False
    assert facts["plugin_image_tag"] == "v1.1.1"
    assert installer.endswith(FACTS[("installer.file", mode)])
