"""`pulumi destroy` as a tested property: the order is computed from each stack's plan graph
(tools.destroy models Pulumi's delete semantics: dependents first, children before parents,
deletedWith a no-op, retainOnDelete keeps the object)."""

from __future__ import annotations

import functools

import pytest

from tests.stack_helpers import BASE, STACK_FILES, shipped_plan
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
