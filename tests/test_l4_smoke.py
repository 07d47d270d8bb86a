"""Issue 17: the `dev` smoke stack on 2 x L4 without RDMA, priced under $2/h on spot.

The dev plan must register nothing the G2 machine cannot use (no RoCE or gVNIC network, no
GKENetworkParamSet/Network objects, no multi-network annotation, no gIB setting, host mount or
installer), decided from the catalog row alone; the same checks hold for b200 the other way round,
so they cannot pass vacuously. Staging, the job and checkpoints are the same code as for the big
stacks.
"""

from __future__ import annotations

import functools

import pytest

from catalog import nics, prices, quotas
from catalog.accelerators import ACCELERATORS, nccl_env
from catalog.models import model_spec
from recipe import grpo
from stacks import config, cost, derived
from stacks import quotas as quota_check
from tests.stack_helpers import ROOT, composed_file
from tools import mocking, plan

CLUSTER, POOL = "gcp:container/cluster:Cluster", "gcp:container/nodePool:NodePool"
NETWORK, SUBNET, FIREWALL = ("gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork",
                             "gcp:compute/firewall:Firewall")
RAY = "kubernetes:ray.io/v1:RayCluster"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
NETWORK_KINDS = ("GKENetworkParamSet", "Network")
L4 = ACCELERATORS["l4"]


@functools.cache
def stack(name: str) -> mocking.Run:
    return composed_file(ROOT / f"Pulumi.{name}.yaml")


def dev_config() -> config.StackConfig:
    raw, _ = plan.read_stack_file(ROOT / "Pulumi.dev.yaml")
    return config.load(raw, "dev", allow_placeholder_project=True)


def rdma_objects(run: mocking.Run) -> dict[str, list[str]]:
    """Everything RDMA/multi-network a plan registers, by kind (empty lists: none)."""
    workers = [g for r in run.of_type(RAY) for g in r.inputs["spec"]["workerGroupSpecs"]]
    templates = [w["template"] for w in workers]
    env = [e["name"] for t in templates for c in t["spec"]["containers"] for e in c.get("env", [])]
    cluster = run.one(CLUSTER)
    pools = [p for p in run.of_type(POOL) if p.inputs.get("networkConfig", {}).get("additionalNodeNetworkConfigs")]
    return {
        "roce network": [n.name for n in run.of_type(NETWORK) if n.inputs.get("networkProfile")],
        "extra VPCs/subnets": [r.name for r in run.of_type(NETWORK) + run.of_type(SUBNET)
                               if "primary" not in r.name],
        "firewalls": [f.name for f in run.of_type(FIREWALL)],
        "network objects": [r.name for r in run.resources if r.inputs.get("kind") in NETWORK_KINDS
                            and r.inputs.get("apiVersion") == nics.API_VERSION],
        "multi-networking": ["enableMultiNetworking"] if cluster.inputs.get("enableMultiNetworking") else [],
        "pool extra networks": [p.name for p in pools],
        "interface annotations": [k for t in templates for k in t["metadata"].get("annotations", {})
                                  if k.startswith("networking.gke.io/")],
        "gIB env": [v for v in env if v.startswith(("NCCL_NET", "NCCL_IB", "NCCL_TUNER"))],
        "host mounts": [v["name"] for t in templates for v in t["spec"]["volumes"] if "hostPath" in v],
        "installer": [r.name for r in run.of_type(CONFIG_FILE) if "nccl-rdma-installer" in r.name],
        "rdma outputs": [k for k in run.outputs if k.startswith(("rdma", "gvnic"))],
    }


# --- no RDMA object on dev, all of them on b200 --------------------------------------------------


def test_the_dev_plan_registers_no_rdma_or_multi_network_object():
    found = rdma_objects(stack("dev"))
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    assert stack("dev").outputs["accelerator"] == "l4"
    (net,), (_sub,) = stack("dev").of_type(NETWORK), stack("dev").of_type(SUBNET)  # the cluster VPC alone
    assert stack("dev").one(CLUSTER).inputs["network"] == net.inputs["name"]


def test_the_b200_plan_still_registers_every_one_of_them():
    found = rdma_objects(stack("dev-b200"))  # the former dev: Standard, so it has a GPU pool
    empty = [k for k, v in found.items() if not v]
    assert not empty, f"the checks above would pass vacuously: dev-b200 has no {empty}"


def test_no_rdma_is_decided_by_the_catalog_row_alone():
    assert not L4.rdma and L4.rdma_nics == 0 and not L4.nccl_installer and L4.host_dirs == ()
    assert nics.additional_nics(0) == []
    assert nccl_env(L4) == {}
    assert all(ACCELERATORS[k].rdma and nccl_env(ACCELERATORS[k])["NCCL_NET"] == "gIB" for k in ("b200", "h200"))


def test_the_l4_row_is_googles_g2_machine():
    # G2 table (accelerator-optimized machines) and SkyPilot's row: g2-standard-24,24.0,96.0; L4 = 24 GB.
    assert (L4.machine_type, L4.accelerator_type, L4.gpus_per_node, L4.vcpus, L4.memory_gb) == \
        ("g2-standard-24", "nvidia-l4", 2, 24, 96)
    assert L4.gpu_memory_gib == pytest.approx(24e9 / 1024**3)
    assert "spot" in L4.consumption


def test_the_dev_gpu_pool_is_one_spot_g2_node_with_its_ephemeral_storage_on_the_boot_disk():
    run = stack("dev")
    gpu = run.one(POOL, "gke-gpu-pool")
    node = gpu.inputs["nodeConfig"]
    assert node["machineType"] == "g2-standard-24" and node["spot"] is True
    assert node["guestAccelerators"][0]["type"] == "nvidia-l4" and node["guestAccelerators"][0]["count"] == 2
    assert gpu.inputs["autoscaling"]["maxNodeCount"] == 1
    assert "ephemeralStorageLocalSsdConfig" not in node and node["diskSizeGb"] == L4.boot_disk_gb
    (worker,) = run.one(RAY).inputs["spec"]["workerGroupSpecs"]
    requests = worker["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["ephemeral-storage"] == f"{L4.worker_ephemeral_gib}Gi" and requests["nvidia.com/gpu"] == "2"


# --- zonal cluster, small head ------------------------------------------------------------------


def test_dev_is_a_zonal_standard_cluster_and_the_big_stacks_stay_regional():
    dev = stack("dev")
    assert dev.one(CLUSTER).inputs["location"] == "us-central1-b"
    assert "nodeLocations" not in dev.one(CLUSTER).inputs
    assert all(p.inputs["location"] == "us-central1-b" and "nodeLocations" not in p.inputs for p in dev.of_type(POOL))
    assert "--location us-central1-b" in dev.outputs["getCredentials"]
    for big in ("b200", "h200", "dev-b200"):
        raw, _ = plan.read_stack_file(ROOT / f"Pulumi.{big}.yaml")
        assert stack(big).one(CLUSTER).inputs["location"] == raw["gcp:region"]


def test_the_head_is_sized_by_the_stack_so_a_small_cpu_machine_holds_it():
    run = stack("dev")
    head = run.one(RAY).inputs["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    assert head["requests"]["cpu"] == "2" and head["requests"]["memory"] == "8Gi"
    cpu_pool = run.one(POOL, "gke-cpu-pool")
    assert cpu_pool.inputs["nodeConfig"]["machineType"] == "e2-standard-8"


@pytest.mark.parametrize("overrides, key", [
    ({"cpuMachineType": "e2-standard-8"}, "cpuMachineType"),  # 8 vCPUs, the default head asks 12
    ({"cpuMachineType": "e2-standard-4", "rayHeadCpu": "4"}, "cpuMachineType"),
    ({"rayHeadCpu": "0"}, "rayHeadCpu"),
    ({"accelerator": "l4", "clusterMode": "autopilot", "model": "Qwen/Qwen2.5-0.5B-Instruct"}, "clusterMode"),
    ({"clusterMode": "autopilot", "zonalCluster": "true"}, "zonalCluster"),
    ({"accelerator": "l4", "model": "Qwen/Qwen2.5-0.5B-Instruct", "rdmaCidrs": '["192.168.1.0/24"]'}, "rdmaCidrs"),
    ({"accelerator": "l4", "model": "Qwen/Qwen2.5-0.5B-Instruct", "gvnicCidr": "192.168.100.0/24"}, "gvnicCidr"),
    ({"accelerator": "l4", "model": "Qwen/Qwen2.5-0.5B-Instruct", "capacity": "flex-start"}, "capacity"),
])
def test_the_gate_names_the_key(overrides, key):
    raw = {"gcp:project": "p-1234567", "gcp:region": "us-central1", "gcp:zone": "us-central1-b",
           **{f"verl-gke:{k}": v for k, v in overrides.items()}}
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "t")
    assert any(p.startswith(f"verl-gke:{key} ") for p in err.value.problems), err.value.problems


def test_a_small_head_on_a_small_machine_passes_the_gate():
    raw = {"gcp:project": "p-1234567", "gcp:region": "us-central1", "gcp:zone": "us-central1-b",
           "verl-gke:cpuMachineType": "e2-standard-4", "verl-gke:rayHeadCpu": "2",
           # e2-standard-4 has 16 GiB, ~13.3 allocatable: the default 32 GiB head would never be scheduled
           "verl-gke:rayHeadMemoryGib": "8"}
    assert config.load(raw, "t").cluster.head_cpu == 2


# --- memory, price, quota -----------------------------------------------------------------------


def test_the_memory_model_says_dev_fits_24_gb_with_margin():
    cfg = dev_config()
    b = grpo.memory_breakdown(cfg.grpo, model_spec(cfg.model), cfg.accelerator, cfg.total_gpus)
    assert b.fits and b.gpu_gib == pytest.approx(22.35, abs=0.01)
    # Every phase keeps >= 10% of the PyTorch budget free (the recipe's own check adds 15% headroom).
    assert max(b.update_peak, b.logprob_peak) <= 0.9 * b.torch_budget, b
    assert b.kv_tokens >= 2 * b.kv_tokens_needed  # the whole rollout batch fits the KV cache twice


def test_the_run_is_short_one_validation_one_checkpoint():
    cfg = dev_config()
    assert cfg.grpo.total_training_steps == 20 and not cfg.grpo.val_before_train
    from recipe import sizing
    z = sizing.run_sizing(cfg)
    assert (z.total_steps, z.validations, z.checkpoints_saved) == (20, 1, 1)
    assert "trainer.total_training_steps=20" in grpo.overrides(
        cfg.grpo, stack="dev", nnodes=1, gpus_per_node=2,
        paths=__import__("catalog.paths", fromlist=["bucket_paths"]).bucket_paths("dev", cfg.model, cfg.verl_version))


def test_the_whole_hourly_price_on_spot_is_under_two_dollars():
    table = cost.hourly(dev_config())
    assert table.complete, [m for line in table.lines for m in line.missing]
    by_class = {line.resource_class: line.usd_per_hour for line in table.lines}
    assert set(by_class) == {cost.GPU_NODES, cost.CPU_NODES, cost.CLUSTER_FEE} and all(by_class.values())
    # 0.35242 host + 0.4462 2 x L4 (spot) + 0.26805 e2-standard-8 + 0.10 fee (SkyPilot v8, GKE pricing)
    assert table.known_usd_per_hour == pytest.approx(0.35242 + 0.4462 + 0.26805 + 0.10)
    assert table.known_usd_per_hour <= 2.0
    assert all(r.source for line in table.lines for r in line.rows)
    assert prices.find("g2-standard-24", "us-central1", "spot").usd == 0.35242


def test_the_plan_prints_the_hourly_and_the_run_price(capsys, tmp_path):
    assert plan.main(["--stack", "dev", "--quiet", "--out", str(tmp_path / "dev")]) == 0
    text = capsys.readouterr().out
    assert "total                 $1.17/h" in text and "estimated run (ESTIMATE, low / expected / high)" in text


def test_the_quota_preflight_checks_the_l4_and_the_global_gpu_quotas():
    by_id = {n.ref.quota_id: n for n in quota_check.needs(dev_config())}
    assert by_id["PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region"].needed == 2
    assert by_id["GPUS-ALL-REGIONS-per-project"].needed == 2
    assert by_id["CPUS-PER-VM-FAMILY-per-project-region"].ref.dimensions == {"vm_family": "E2"}
    assert quotas.gpu_quota("nvidia-l4", "on-demand").quota_id == "NVIDIA-L4-GPUS-per-project-region"


def test_no_l4_quota_is_a_fatal_problem_naming_gpu_nodes():
    cfg = dev_config()
    wanted = quota_check.needs(cfg)
    # 64 of everything counted in units, ample disk (GB) quota: only the L4 quota decides below.
    infos = {n.ref.quota_id: [{"dimensions": {}, "value": "100000" if "-GB-" in n.ref.quota_id else "64",
                               "locations": []}] for n in wanted}
    assert quota_check.quota_problems(cfg, wanted, infos) == []
    infos["PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region"] = [{"dimensions": {}, "value": "0", "locations": []}]
    (finding,) = quota_check.quota_problems(cfg, wanted, infos)
    assert finding.fatal and finding.key == "verl-gke:gpuNodes"
    assert ("PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region (region=us-central1) is 0, the stack needs 2"
            in finding.allowed)


# --- the same staging, job and checkpoint code as the big stacks --------------------------------


def _shape(run: mocking.Run, prefixes: tuple[str, ...]) -> list[tuple[str, str]]:
    return sorted((r.type, r.name) for r in run.resources if r.name.startswith(prefixes))


def test_staging_job_and_checkpoints_are_the_big_stacks_code():
    dev, big = stack("dev"), stack("b200")
    for prefixes in (("storage-",), ("data-prep",), ("grpo",)):
        assert _shape(dev, prefixes) == _shape(big, prefixes) != []
    ckpt = [r for r in dev.resources if r.name == "storage-ckpt-pv"]
    assert ckpt and ckpt[0].type == [r for r in big.resources if r.name == "storage-ckpt-pv"][0].type
    # The job's command: the same trainer entry (verl's main_ppo) with the checkpoint directory on the
    # checkpoint mount.
    for name in ("dev", "b200"):
        raw, _ = plan.read_stack_file(ROOT / f"Pulumi.{name}.yaml")
        cfg = config.load(raw, name, allow_placeholder_project=True)
        trainer = derived.of(cfg).job.spec.trainer
        assert trainer.script.endswith("/verl_main.py")
        assert trainer.values()["trainer.default_local_dir"].startswith("/checkpoints/")
