"""`pulumi destroy` as a tested property: the order is computed from each stack's plan graph
(tools.destroy models Pulumi's delete semantics: dependents first, children before parents,
deletedWith a no-op, retainOnDelete keeps the object)."""

from __future__ import annotations

import functools

import pytest

from tests.stack_helpers import BASE, STACK_FILES, shipped_plan
from tools import destroy
from tools import plan as plan_tool
from tools.destroy import DestroyOrder

CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
NETWORKS = ("gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork")
BUCKET = "gcp:storage/bucket:Bucket"
MODES = [(acc, mode) for acc in ("b200", "h200") for mode in ("autopilot", "standard")]


@functools.cache
def stack_order(name: str) -> DestroyOrder:
    return DestroyOrder(shipped_plan(name))


@functools.cache
def config_order(**overrides: str) -> DestroyOrder:
    raw = dict(BASE) | {f"verl-gke:{k}": v for k, v in overrides.items()}
    return DestroyOrder(plan_tool.build_plan("test", raw, []))


def cases() -> list[tuple[str, DestroyOrder]]:
    shipped = [(p.stem.split(".", 1)[1], p.stem.split(".", 1)[1]) for p in STACK_FILES]
    return shipped + [(f"{a}-{m}", (a, m)) for a, m in MODES]


def order_of(case) -> DestroyOrder:
    if isinstance(case, str):
        return stack_order(case)
    acc, mode = case
    return config_order(accelerator=acc, clusterMode=mode)


CASES = cases()
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("case", [c[1] for c in CASES], ids=IDS)
def test_kubernetes_objects_are_deleted_before_the_cluster(case):
    order = order_of(case)
    (cluster,) = order.of_type(CLUSTER)
    objects = order.where(lambda r: r["type"].startswith("kubernetes:"))
    assert objects
    late = [order.resources[o]["name"] for o in objects if not order.deleted_before(o, cluster)]
    assert not late, f"deleted with or after the cluster: {late}"


@pytest.mark.parametrize("case", [c[1] for c in CASES], ids=IDS)
def test_node_pools_are_deleted_before_the_cluster(case):
    order = order_of(case)
    (cluster,) = order.of_type(CLUSTER)
    for pool in order.of_type(POOL):
        assert not order.is_noop(pool), "a deleted_with pool's delete is a no-op: nothing waits for its nodes"
        assert order.deleted_before(pool, cluster), order.resources[pool]["name"]


@pytest.mark.parametrize("case", [c[1] for c in CASES], ids=IDS)
def test_the_cluster_is_deleted_before_every_network_and_subnet(case):
    """Autopilot's nodes and every pool's instance templates use the gVNIC and RDMA subnets."""
    order = order_of(case)
    (cluster,) = order.of_type(CLUSTER)
    nets = order.of_type(*NETWORKS)
    # Primary VPC + subnet; with RDMA also the gVNIC VPC, its subnet and firewall, the RoCE VPC and 8 subnets.
    rdma = any(order.resources[n]["inputs"].get("networkProfile") for n in nets)
    assert len(nets) == (3 + 2 + 8 if rdma else 2)
    early = [order.resources[n]["name"] for n in nets if not order.deleted_before(cluster, n)]
    assert not early, f"may be deleted while the cluster still uses them: {early}"
    for pool in order.of_type(POOL):
        assert all(order.deleted_before(pool, n) for n in nets)


@pytest.mark.parametrize("case", [c[1] for c in CASES], ids=IDS)
def test_the_bucket_is_kept(case):
    order = order_of(case)
    (bucket,) = order.of_type(BUCKET)
    assert order.kept(bucket), "pulumi destroy must keep the bucket (weights, checkpoints) unless asked"


def test_the_bucket_goes_when_asked():
    order = config_order(bucketDeleteOnDestroy="true")
    (bucket,) = order.of_type(BUCKET)
    assert not order.kept(bucket)
    assert order.resources[bucket]["inputs"]["forceDestroy"] is True


def test_waves_put_dependents_first():
    order = stack_order("h200")
    position = {u: i for i, wave in enumerate(order.waves()) for u in wave}
    for urn in order.resources:
        for dep in order.dependencies(urn):
            assert position[urn] < position[dep]


def _plan(*resources: dict) -> dict:
    base = {"dependsOn": [], "parent": "", "provider": "", "deletedWith": "", "retainOnDelete": False}
    return {"resources": [{**base, "name": r["urn"], "type": "t", **r} for r in resources]}


def test_model_deleted_with_is_a_noop_that_orders_nothing():
    """The defect of issue 10 in miniature: a pool deleted_with the cluster, using a subnet."""
    order = DestroyOrder(_plan(
        {"urn": "subnet"}, {"urn": "cluster"},
        {"urn": "pool", "dependsOn": ["cluster", "subnet"], "deletedWith": "cluster"}))
    assert order.is_noop("pool")
    assert not order.deleted_before("pool", "cluster")
    assert not order.deleted_before("cluster", "subnet")  # nothing orders them: parallel deletes
    fixed = DestroyOrder(_plan(
        {"urn": "subnet"}, {"urn": "cluster", "dependsOn": ["subnet"]},
        {"urn": "pool", "dependsOn": ["cluster", "subnet"]}))
    assert fixed.deleted_before("pool", "cluster") and fixed.deleted_before("cluster", "subnet")


def test_model_children_before_parents_and_provider_users_before_the_provider():
    order = DestroyOrder(_plan(
        {"urn": "parent"}, {"urn": "child", "parent": "parent"},
        {"urn": "prov"}, {"urn": "obj", "provider": "prov::id-1"}))
    assert order.deleted_before("child", "parent") and order.deleted_before("obj", "prov")
    assert order.waves()[0] == ["child", "obj"]


def test_model_an_api_left_enabled_is_kept_and_one_disabled_on_destroy_is_not():
    """gcp:projects/service:Service deletes only disable the API when disableOnDestroy is true, its default
    (terraform-provider-google resource_google_project_service.go, resourceGoogleProjectServiceDelete)."""
    api = {"type": destroy.PROJECT_SERVICE}
    order = DestroyOrder(_plan({"urn": "kept", **api, "inputs": {"disableOnDestroy": False}},
                               {"urn": "disabled", **api, "inputs": {"disableOnDestroy": True}},
                               {"urn": "default", **api, "inputs": {}}))
    assert [u for u in order.resources if order.kept(u)] == ["kept"]


def test_the_listing_has_a_header_and_names_the_kept_apis_once_outside_the_waves():
    """Issue 25: the listing had no header and listed ten APIs that destroy never disables as a wave."""
    order = stack_order("dev")
    text = destroy.describe(order, order.waves(), "dev")
    header, *waves = text.splitlines()
    assert header.startswith("`pulumi destroy --stack dev` deletes in this order")
    apis = [order.resources[u]["name"] for u in order.of_type(destroy.PROJECT_SERVICE)]
    assert apis and all(order.kept(u) for u in order.of_type(destroy.PROJECT_SERVICE))
    numbered = [line for line in waves if line[:2].strip().isdigit()]
    assert not [line for line in numbered if any(api in line.split(": ", 1)[1].split(", ") for api in apis)]
    (note,) = [line for line in waves if line.startswith("not listed:")]
    assert all(api in note for api in apis) and "enabled" in note
    assert "storage-bucket (kept)" in text  # the bucket stays in the waves, marked


def test_the_tool_reads_a_stack_file_named_with_config(capsys):
    assert destroy.main(["--stack", "mine", "--config", str(plan_tool.ROOT / "Pulumi.dev.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("`pulumi destroy --stack mine`") and "gke-cluster" in out


def test_a_stack_without_a_file_is_named_with_the_stacks_that_have_one(capsys):
    """Issue 25: `tools.destroy --stack mine` without Pulumi.mine.yaml; the message names the file and
    lists the stacks there are."""
    assert destroy.main(["--stack", "mine"]) == 2
    err = capsys.readouterr().err
    assert "Pulumi.mine.yaml: no such stack file" in err and "Traceback" not in err
    shipped = ", ".join(sorted(p.stem.split(".", 1)[1] for p in STACK_FILES))
    assert f"stacks with a file: {shipped}" in err and "--config" in err


def test_a_stack_short_of_quota_still_gets_its_destroy_order(tmp_path, capsys):
    """h200 at 16 nodes exceeds the plan's sample GPU quota: the plan refuses it, destroy must not (what is
    deployed has to be destroyable whatever the quotas)."""
    stack = tmp_path / "Pulumi.big.yaml"
    stack.write_text((plan_tool.ROOT / "Pulumi.h200.yaml").read_text().replace("gpuNodes: 2", "gpuNodes: 16"))
    assert plan_tool.main(["--stack", "big", "--config", str(stack), "--out", str(tmp_path / "p"), "--quiet"]) == 2
    capsys.readouterr()
    assert destroy.main(["--stack", "big", "--config", str(stack)]) == 0
    assert "gke-cluster" in capsys.readouterr().out
