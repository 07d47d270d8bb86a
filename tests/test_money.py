"""Money before it is spent: the quota preflight, the price table, the stack's cost, the budget alert."""

from __future__ import annotations

import dataclasses
import datetime
import re

import pytest

from catalog import capacity, prices, quotas
from catalog.accelerators import ACCELERATORS
from catalog.problems import ConfigError
from components.apis import APIS
from recipe import sizing
from stacks import config, cost
from stacks import quotas as quota_check
from tests.stack_helpers import BASE, STACK_FILES, run_config
from tools import mocking, plan

CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
BUDGET = "gcp:billing/budget:Budget"
ACCOUNT = "01ABCD-23EF45-6789AB"


def _cfg(overrides: dict[str, str] | None = None, stack: str = "test") -> config.StackConfig:
    raw = dict(BASE)
    raw.update({k if ":" in k else f"{config.PROJECT}:{k}": v for k, v in (overrides or {}).items()})
    return config.load(raw, stack)


# --- the price table --------------------------------------------------------------------------

def test_every_price_row_is_dated_and_sourced():
    datetime.date.fromisoformat(prices.TABLE_DATE)
    for row in prices.ROWS:
        datetime.date.fromisoformat(row.seen)
        assert row.source.startswith("https://") or re.search(r" @[0-9a-f]{40}$", row.source), row
        assert row.unit in (prices.HOUR, prices.GB_MONTH), row
        if row.usd is None:
            assert row.note, f"{row.sku}: a row without a price must say why"


def test_spot_and_flex_start_caveats_sit_next_to_their_prices():
    spot_rows = [r for r in prices.ROWS if r.capacity == capacity.SPOT]
    assert spot_rows and all("preempt" in r.note for r in spot_rows)
    column, note = prices.capacity_rate(capacity.FLEX_START)
    assert column is None and "7 days" in note


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_every_shipped_stack_has_price_rows_for_what_it_runs(path):
    raw, _ = plan.read_stack_file(path)
    cfg = config.load(raw, path.stem.split(".", 1)[1], allow_placeholder_project=True)
    acc = cfg.accelerator
    for sku in (acc.machine_type, f"{acc.accelerator_type} x{acc.gpus_per_node}"):
        assert prices.find(sku, cfg.region, capacity.SPOT) is not None, (sku, cfg.region)
    if not cfg.cluster.autopilot:
        assert prices.find(cfg.cluster.cpu_machine_type, cfg.region, capacity.ON_DEMAND).usd > 0
    assert prices.find(prices.BUCKET_STANDARD, cfg.bucket_location).usd > 0


def test_the_tables_are_keyed_so_a_new_accelerator_is_rows_only():
    assert prices.find("nvidia-l4 x2", "us-central1", capacity.SPOT).usd == pytest.approx(0.4462)
    assert quotas.gpu_quota("nvidia-l4", capacity.ON_DEMAND).quota_id == "NVIDIA-L4-GPUS-per-project-region"
    for acc in ACCELERATORS.values():
        for kind in (capacity.SPOT, capacity.ON_DEMAND, capacity.FLEX_START):
            assert quotas.gpu_quota(acc.accelerator_type, kind) is not None, (acc.key, kind)


# --- hourly price and run estimate --------------------------------------------------------------

def test_hourly_price_by_resource_class_standard(h200_on_demand):
    cfg = _cfg({"accelerator": "h200", "clusterMode": "standard", "gpuNodes": "2", "cpuNodesMin": "2",
                "capacity": "spot"})
    table = cost.hourly(cfg)
    host = prices.find("a3-ultragpu-8g", "us-central1", capacity.SPOT).usd
    gpus = prices.find("nvidia-h200-141gb x8", "us-central1", capacity.SPOT).usd
    cpu = prices.find("c2-standard-16", "us-central1", capacity.ON_DEMAND).usd
    assert table.line(cost.GPU_NODES).usd_per_hour == pytest.approx(2 * (host + gpus))
    assert table.line(cost.CPU_NODES).usd_per_hour == pytest.approx(2 * cpu)
    assert table.line(cost.CLUSTER_FEE).usd_per_hour == pytest.approx(0.10)
    assert table.complete
    assert table.known_usd_per_hour == pytest.approx(2 * (host + gpus) + 2 * cpu + 0.10)
    on_demand = cost.hourly(_cfg({"accelerator": "h200", "clusterMode": "standard", "capacity": "on-demand"}))
    assert on_demand.line(cost.GPU_NODES).usd_per_hour > table.line(cost.GPU_NODES).usd_per_hour


@pytest.fixture
def h200_on_demand(monkeypatch):
    """A3 Ultra as if Google offered it on demand (its table does not; the gate refuses it): the family
    quota and on-demand price rows are still catalog facts worth checking."""
    import dataclasses

    from catalog.accelerators import ACCELERATORS
    row = ACCELERATORS["h200"]
    monkeypatch.setitem(ACCELERATORS, "h200", dataclasses.replace(row, consumption=(*row.consumption, "on-demand")))


def test_unpriced_parts_make_the_total_a_lower_bound():
    autopilot_b200 = cost.hourly(_cfg({"accelerator": "b200", "clusterMode": "autopilot"}))
    assert not autopilot_b200.complete
    text = cost.render_hourly(autopilot_b200)
    assert "lower bound" in text and "no price source" in text and ">= $" in text
    flex = cost.hourly(_cfg({"accelerator": "h200", "clusterMode": "standard", "capacity": "flex-start"}))
    assert flex.line(cost.GPU_NODES).missing and "7 days" in flex.line(cost.GPU_NODES).note


def _timeline(gpu_node_hours: float, wall: float):
    from stacks import run_time

    hours = {c: wall for c in sizing.CASES}
    return run_time.Timeline((), {c: gpu_node_hours for c in sizing.CASES}, hours)


def test_run_estimate_prices_gpu_node_hours_and_the_wall_time():
    table = cost.hourly(_cfg({"accelerator": "h200", "clusterMode": "standard", "gpuNodes": "2"}))
    est = cost.run_estimate(table, _timeline(gpu_node_hours=15.0, wall=10.0), bucket_gb=730.0, gpu_nodes=2)
    gpu_line = table.line(cost.GPU_NODES).usd_per_hour  # both nodes
    assert est.by_class[cost.GPU_NODES]["expected"] == pytest.approx(15.0 * gpu_line / 2)  # per node-hour
    assert est.by_class[cost.CLUSTER_FEE]["expected"] == pytest.approx(1.0)  # $0.10 x 10 h wall
    assert est.by_class[cost.CPU_NODES]["expected"] == pytest.approx(10 * table.line(cost.CPU_NODES).usd_per_hour)
    assert est.by_class[cost.BUCKET]["expected"] == pytest.approx(730 * 0.020 * 10 / 730)
    assert est.usd["expected"] == pytest.approx(sum(v["expected"] for v in est.by_class.values())) and est.complete
    with pytest.raises(ValueError, match="gpu_nodes"):
        cost.run_estimate(table, _timeline(1.0, 1.0), 1.0, 0)


def test_a_class_without_a_price_source_is_unpriced_not_zero():
    autopilot_b200 = cost.hourly(_cfg({"accelerator": "b200", "clusterMode": "autopilot"}))
    est = cost.run_estimate(autopilot_b200, _timeline(4.0, 2.0), bucket_gb=100.0, gpu_nodes=2)
    assert est.by_class[cost.CPU_NODES] == {c: None for c in sizing.CASES}
    assert not est.complete and "Autopilot pod vCPU/memory prices" in est.unpriced
    assert est.as_dict()["byClass"][cost.CPU_NODES] == {"low": None, "expected": None, "high": None}
    text = cost.render_run(est, _timeline(4.0, 2.0))
    assert "CPU nodes    unpriced" in text and "lower bound" in text and "$0.00" not in text


def test_every_shipped_stack_plan_prints_its_hourly_price(capsys, tmp_path):
    for path in STACK_FILES:
        stack = path.stem.split(".", 1)[1]
        assert plan.main(["--stack", stack, "--quiet", "--out", str(tmp_path / stack)]) == 0
        out = capsys.readouterr().out
        assert f"hourly price of stack {stack}" in out and "total" in out and prices.TABLE_DATE in out


def test_plan_prints_the_run_estimate_from_the_sizing(monkeypatch, capsys, tmp_path):
    real = sizing.run_sizing
    monkeypatch.setattr(sizing, "run_sizing", lambda cfg: dataclasses.replace(
        real(cfg), total_steps=600, est_step_seconds=60.0, est_step_seconds_low=60.0, est_step_seconds_high=60.0))
    assert plan.main(["--stack", "h200", "--quiet", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    # 600 steps x 60 s = 10 h of training in every case, inside the run's wall time.
    assert "training steps                                       600.0 / 600.0 / 600.0 min" in out


def test_pulumi_up_exports_the_hourly_price():
    run = run_config({"accelerator": "h200", "clusterMode": "standard"})
    price = run.outputs["hourlyPrice"]
    assert price["tableDate"] == prices.TABLE_DATE
    assert set(price["usdPerHour"]) == {cost.GPU_NODES, cost.CPU_NODES, cost.CLUSTER_FEE}
    assert price["totalKnownUsdPerHour"] > 0


# --- quota values as Cloud Quotas reports them ------------------------------------------------

FAMILY = quotas.GPU_QUOTAS[("nvidia-b200", quotas.STANDARD)]


def test_quota_value_reads_the_family_slice_and_the_catch_all():
    infos = [{"dimensions": {"gpu_family": "NVIDIA_H200"}, "value": "8", "locations": ["us-central1"]},
             {"dimensions": {"gpu_family": "NVIDIA_B200"}, "value": "16", "locations": ["us-central1"]},
             {"dimensions": {}, "value": None, "locations": ["us-central1", "europe-west1"]}]
    assert quotas.quota_value(infos, FAMILY, "us-central1") == 16
    assert quotas.quota_value(infos, FAMILY, "europe-west1") == 0  # omitted value = 0, the catch-all
    assert quotas.quota_value(infos, FAMILY, "asia-east1") is None


def test_quota_value_zero_unlimited_and_global():
    assert quotas.quota_value([{"value": "0", "locations": ["global"]}], quotas.GPUS_ALL_REGIONS, "x") == 0
    assert quotas.quota_value([{"value": "-1", "locations": []}], quotas.GPUS_ALL_REGIONS, "x") == quotas.UNLIMITED
    per_region = [{"dimensions": {"region": "us-east4"}, "value": "4", "locations": ["us-east4"]},
                  {"dimensions": {}, "value": "12", "locations": ["us-east4", "us-central1"]}]
    preempt = quotas.GPU_QUOTAS[("nvidia-b200", quotas.PREEMPTIBLE)]
    assert quotas.quota_value(per_region, preempt, "us-east4") == 4
    assert quotas.quota_value(per_region, preempt, "us-central1") == 12


@pytest.mark.parametrize("kind, quota_id, pool", [
    ("spot", "PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region", "preemptible"),
    ("flex-start", "PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region", "preemptible"),
    ("on-demand", "GPUS-PER-GPU-FAMILY-per-project-region", "on-demand"),
])
def test_needs_follow_the_capacity_type(kind, quota_id, pool, h200_on_demand):
    cfg = _cfg({"accelerator": "h200", "clusterMode": "standard", "capacity": kind, "gpuNodes": "4",
                "cpuNodesMax": "4"})
    by_id = {n.ref.quota_id: n for n in quota_check.needs(cfg)}
    assert by_id[quota_id].needed == 32 and pool in by_id[quota_id].why
    assert by_id["GPUS-ALL-REGIONS-per-project"].needed == 32
    cpu = by_id["CPUS-PER-VM-FAMILY-per-project-region"]
    assert cpu.needed == 64 and cpu.ref.dimensions == {"vm_family": "C2"} and cpu.key == "cpuNodesMax"


def test_reservations_and_autopilot_need_fewer_quotas():
    reserved = _cfg({"capacity": "reservation", "reservation": "my-res", "clusterMode": "standard"})
    assert not [n for n in quota_check.needs(reserved) if "GPU" in n.ref.quota_id]
    autopilot = _cfg({"clusterMode": "autopilot"})
    # No CPU-pool quotas: only the nodes Autopilot starts for the head and the staging Job (issue 43 item 12).
    cpus = [n for n in quota_check.needs(autopilot) if "CPUS" in n.ref.quota_id]
    assert [(n.ref.quota_id, n.key) for n in cpus] == [("CPUS-ALL-REGIONS-per-project", "rayHeadCpu")]


# --- the preflight under mocks: refused before anything bills -------------------------------------

def _refused(overrides, quota_values):
    result = mocking.Run()
    with pytest.raises(ConfigError) as err:
        run_config(overrides, result=result, quotas=quota_values)
    billable = [r for r in result.resources if r.type in (CLUSTER, POOL)]
    assert billable == [], "the cluster must not be registered when a quota is short"
    return str(err.value)


def test_autopilot_refuses_too_little_cpu_quota_for_the_head_and_staging_nodes():
    """Issue 43 item 12: the Ray head and the staging Job run on nodes Autopilot starts in the project."""
    cfg = _cfg({"clusterMode": "autopilot"})
    msg = _refused({"clusterMode": "autopilot"}, {"CPUS-ALL-REGIONS-per-project": 8})
    (line,) = [x for x in msg.splitlines() if "CPUS-ALL-REGIONS-per-project is 8" in x]
    assert line.strip().startswith("- verl-gke:rayHeadCpu:") and "Ray head" in line and "staging Job" in line
    needed = int(line.split("the stack needs ")[1].split()[0])
    assert needed >= cfg.cluster.head_cpu + 2  # the head's and the staging container's requests at least


@pytest.mark.parametrize("acc,mode", [("b200", "standard"), ("b200", "autopilot"), ("h200", "standard")])
def test_a4_and_a3_ultra_boot_disks_need_hyperdisk_quota(acc, mode):
    """Issue 43 item 12: A4 and A3 Ultra boot from Hyperdisk Balanced only, another quota than pd-balanced's."""
    msg = _refused({"accelerator": acc, "clusterMode": mode, "gpuNodes": "2"},
                   {"HYPERDISK-BALANCED-TOTAL-GB-per-project-region": 150})
    assert "HYPERDISK-BALANCED-TOTAL-GB-per-project-region (region=us-central1) is 150, the stack needs 200" in msg
    assert "- verl-gke:gpuNodes: quota HYPERDISK" in msg


def test_a_refused_quota_reserves_no_address_and_creates_no_registry_or_bucket():
    """Issue 43 item 12: the NAT's reserved addresses, the image mirror and the bucket wait for the gate."""
    result = mocking.Run()
    with pytest.raises(ConfigError):
        run_config({"accelerator": "b200", "capacity": "spot"}, result=result,
                   quotas={"PREEMPTIBLE-NVIDIA-B200-GPUS-per-project-region": 0})
    billable = ("gcp:compute/address:Address", "gcp:artifactregistry/repository:Repository",
                "gcp:storage/bucket:Bucket", CLUSTER, POOL)
    assert [r.type for r in result.resources if r.type in billable] == []
    assert any(r.type == "gcp:compute/network:Network" for r in result.resources), "free resources go ahead"


def test_a_passing_gate_registers_what_bills_after_the_checks():
    run = run_config({"accelerator": "b200", "capacity": "spot"})
    for kind in ("gcp:compute/address:Address", "gcp:artifactregistry/repository:Repository",
                 "gcp:storage/bucket:Bucket"):
        assert run.of_type(kind), kind
    quota_reads = [i for i in run.invokes if i.token == mocking.GET_QUOTA_INFO]
    first_billable = min(n for n, r in enumerate(run.resources) if r.type in (
        "gcp:compute/address:Address", "gcp:artifactregistry/repository:Repository", "gcp:storage/bucket:Bucket"))
    assert quota_reads and max(i.after for i in quota_reads) <= first_billable


def test_a_project_with_zero_gpu_quota_is_refused_before_the_cluster():
    msg = _refused({"accelerator": "b200", "capacity": "spot"},
                   {"PREEMPTIBLE-NVIDIA-B200-GPUS-per-project-region": 0, "GPUS-ALL-REGIONS-per-project": 0})
    assert "PREEMPTIBLE-NVIDIA-B200-GPUS-per-project-region (region=us-central1) is 0, the stack needs 16" in msg
    assert "GPUS-ALL-REGIONS-per-project is 0, the stack needs 16" in msg
    assert msg.count("gpuNodes:") == 2


def test_too_little_on_demand_family_quota_names_the_family(h200_on_demand):
    msg = _refused({"accelerator": "h200", "capacity": "on-demand", "gpuNodes": "4"},
                   {"GPUS-PER-GPU-FAMILY-per-project-region": 16})
    assert "GPUS-PER-GPU-FAMILY-per-project-region (gpu_family=NVIDIA_H200, region=us-central1) is 16, " \
           "the stack needs 32" in msg


def test_too_few_cpus_for_the_cpu_pool_names_cpu_nodes_max():
    msg = _refused({"clusterMode": "standard", "cpuNodesMax": "5"}, {"CPUS-PER-VM-FAMILY-per-project-region": 32})
    assert "cpuNodesMax: quota CPUS-PER-VM-FAMILY-per-project-region (region=us-central1, vm_family=C2) is 32, " \
           "the stack needs 80" in msg


def test_enough_quota_lets_the_cluster_through():
    run = run_config({"accelerator": "b200", "capacity": "spot"}, quotas={})
    assert run.one(CLUSTER)


def test_an_unreadable_quota_is_a_warning_not_a_crash():
    denied = "Permission 'cloudquotas.quotas.get' denied on resource 'projects/test-project-1'"
    run = run_config({"clusterMode": "standard"}, quotas={q: denied for q in mocking.MOCK_QUOTAS})
    assert run.one(CLUSTER)
    cfg = _cfg({"clusterMode": "standard"})
    wanted = quota_check.needs(cfg)
    found = quota_check.quota_problems(cfg, wanted, {n.ref.quota_id: denied for n in wanted})
    assert found and not any(f.fatal for f in found)
    assert all("could not read quota" in f.allowed and quota_check.READ_ROLE in f.allowed for f in found)


def test_the_cloud_quotas_and_budget_apis_are_enabled_by_the_stack():
    assert "cloudquotas.googleapis.com" in APIS and "billingbudgets.googleapis.com" in APIS
    run = run_config()
    services = {r.inputs["service"] for r in run.of_type("gcp:projects/service:Service")}
    assert {"cloudquotas.googleapis.com", "billingbudgets.googleapis.com"} <= services


# --- the budget alert -----------------------------------------------------------------------------

def test_budget_appears_when_both_keys_are_set():
    run = run_config({"billingAccount": ACCOUNT, "budgetMonthly": "5000"})
    budget = run.one(BUDGET).inputs
    assert budget["billingAccount"] == ACCOUNT
    assert budget["amount"]["specifiedAmount"]["units"] == "5000"
    assert budget["budgetFilter"]["projects"] == [f"projects/{mocking.MOCK_PROJECT_NUMBER}"]
    assert [t["thresholdPercent"] for t in budget["thresholdRules"]] == [0.5, 0.9, 1.0]
    provider = next(r for r in run.resources if r.urn == run.one(BUDGET).provider.rsplit("::", 1)[0])
    assert provider.inputs["userProjectOverride"] in (True, "true")
    assert provider.inputs["billingProject"] == BASE["gcp:project"]


def test_no_budget_without_the_keys():
    assert run_config().of_type(BUDGET) == []


@pytest.mark.parametrize("overrides, key, allowed", [
    ({"billingAccount": ACCOUNT}, "budgetMonthly", "positive amount"),
    ({"budgetMonthly": "100"}, "billingAccount", "must be set when budgetMonthly"),
    ({"billingAccount": "my-account", "budgetMonthly": "100"}, "billingAccount", "012345-567890-ABCDEF"),
    ({"billingAccount": ACCOUNT, "budgetMonthly": "-5"}, "budgetMonthly", ">= 0"),
])
def test_budget_keys_are_validated(overrides, key, allowed):
    with pytest.raises(config.ConfigError) as err:
        _cfg(overrides)
    assert any(p.startswith(f"{config.PROJECT}:{key}") and allowed in p for p in err.value.problems), \
        err.value.problems


def test_budget_shows_in_the_plan_when_the_keys_are_set(tmp_path, capsys):
    stack_file = tmp_path / "Pulumi.budget.yaml"
    text = (plan.ROOT / "Pulumi.dev.yaml").read_text()
    stack_file.write_text(text + f"  verl-gke:billingAccount: {ACCOUNT}\n  verl-gke:budgetMonthly: 2000\n")
    assert plan.main(["--stack", "dev", "--config", str(stack_file), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\+ budget-budget \(gcp:billing/budget:Budget\)", out), out


def test_the_budget_reads_the_project_number_after_the_apis():
    """On an empty project Cloud Resource Manager is enabled by this very run: the budget's project
    lookup waits for it (as the storage lookup does), so at preview its number is not known yet."""
    raw = dict(BASE)
    raw.update({f"{config.PROJECT}:billingAccount": ACCOUNT, f"{config.PROJECT}:budgetMonthly": "5000"})
    from stacks.compose import program

    run = mocking.run(program, raw, "test", preview=True)
    assert run.one(BUDGET).inputs["budgetFilter"]["projects"] in (mocking.UNKNOWN, [mocking.UNKNOWN])
    # Once the APIs exist (an update), the lookup runs and names the project by number.
    done = mocking.run(program, raw, "test", preview=True, existing=frozenset({"gcp:projects/service:Service"}))
    assert done.one(BUDGET).inputs["budgetFilter"]["projects"] == [f"projects/{mocking.MOCK_PROJECT_NUMBER}"]


# --- quotas of what the network and the disks draw on (issue 24) ------------------------------------

def test_the_nat_addresses_and_disks_the_stack_creates_are_quota_checked():
    overrides = {"accelerator": "b200", "clusterMode": "standard", "capacity": "spot", "cpuNodesMax": "4"}
    run = run_config(overrides)
    by_id = {n.ref.quota_id: n for n in quota_check.needs(_cfg(overrides))}
    addresses = len(run.of_type("gcp:compute/address:Address"))
    assert addresses and by_id["STATIC-ADDRESSES-per-project-region"].needed == addresses
    assert by_id["IN-USE-ADDRESSES-per-project-region"].needed == addresses
    assert by_id["NETWORKS-per-project"].needed == len(run.of_type("gcp:compute/network:Network"))
    assert by_id["FIREWALLS-per-project"].needed == len(run.of_type("gcp:compute/firewall:Firewall"))
    cpu_pool = run.one(POOL, "gke-cpu-pool").inputs
    assert by_id["SSD-TOTAL-GB-per-project-region"].needed == 4 * cpu_pool["nodeConfig"]["diskSizeGb"]
    gpu_pool = run.one(POOL, "gke-gpu-pool").inputs
    ssds = gpu_pool["nodeConfig"]["ephemeralStorageLocalSsdConfig"]["localSsdCount"]
    local = by_id["PREEMPTIBLE-LOCAL-SSD-GB-per-project-region"]
    assert local.needed == 2 * ssds * quotas.LOCAL_SSD_DISK_GB and not local.fatal


def test_too_few_static_addresses_for_the_nat_is_refused_before_the_cluster():
    msg = _refused({"accelerator": "b200"}, {"STATIC-ADDRESSES-per-project-region": 1})
    assert "STATIC-ADDRESSES-per-project-region (region=us-central1) is 1, the stack needs 2" in msg


def test_a_short_local_ssd_quota_is_a_warning_only():
    run = run_config({"accelerator": "b200", "capacity": "spot"},
                     quotas={"PREEMPTIBLE-LOCAL-SSD-GB-per-project-region": 0})
    assert run.one(CLUSTER)


def test_the_gpu_pools_persistent_boot_disks_count_toward_the_same_ssd_quota():
    """The L4 pool's 200 GB boot disks are pd-balanced (GKE's default type) like the CPU pool's: both
    draw SSD-TOTAL-GB, so the need is their sum (two needs of one quota would each pass a quota that
    the two together exceed)."""
    overrides = {"accelerator": "l4", "clusterMode": "standard", "gpuNodes": "2", "cpuNodesMax": "3",
                 "cpuMachineType": "e2-standard-8", "rayHeadCpu": "2", "rayHeadMemoryGib": "8",
                 "model": "Qwen/Qwen2.5-0.5B-Instruct", "grpoGpuMemoryUtilization": "0.4"}  # as the dev stack
    run = run_config(overrides)
    cpu = run.one(POOL, "gke-cpu-pool").inputs
    gpu = run.one(POOL, "gke-gpu-pool").inputs
    ssd = [n for n in quota_check.needs(_cfg(overrides)) if n.ref.quota_id == "SSD-TOTAL-GB-per-project-region"]
    assert [n.needed for n in ssd] == [3 * cpu["nodeConfig"]["diskSizeGb"] + 2 * gpu["nodeConfig"]["diskSizeGb"]]
    # A4 and A3 Ultra boot from Hyperdisk (they support no Persistent Disk): not this quota.
    b200 = {"accelerator": "b200", "clusterMode": "standard", "cpuNodesMax": "3"}
    (only_cpu,) = [n for n in quota_check.needs(_cfg(b200)) if n.ref.quota_id == "SSD-TOTAL-GB-per-project-region"]
    assert only_cpu.needed == 3 * run_config(b200).one(POOL, "gke-cpu-pool").inputs["nodeConfig"]["diskSizeGb"]
