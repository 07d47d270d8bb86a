"""tools.plan_graph: the one reading of a plan's graph that tools.destroy, tools.critical_path and tools.plan
share (issue 25). Small plans, each relation checked on its own."""

from __future__ import annotations

import pytest

from tools import plan_graph
from tools.plan_graph import PlanGraph


def _plan(*resources: dict) -> dict:
    base = {"dependsOn": [], "parent": "urn:stack", "provider": "", "deletedWith": "", "custom": True,
            "type": "t", "inputs": {}}
    return {"resources": [{**base, "name": r["urn"], **r} for r in resources]}


# A component `net` with a child `subnet` (and a grandchild `route`), a provider, a cluster that depends on
# the component and uses the provider, and a pool deleted with the cluster.
GRAPH = PlanGraph(_plan(
    {"urn": "net", "custom": False},
    {"urn": "subnet", "parent": "net"},
    {"urn": "route", "parent": "subnet"},
    {"urn": "prov", "type": "pulumi:providers:gcp"},
    {"urn": "cluster", "dependsOn": ["net", "gone-from-the-plan"], "provider": "prov::id-1"},
    {"urn": "pool", "dependsOn": ["cluster"], "deletedWith": "cluster"},
))


def test_a_parent_outside_the_plan_is_the_root():
    assert GRAPH.parent("net") == plan_graph.ROOT and GRAPH.parent("route") == "subnet"
    assert GRAPH.children[plan_graph.ROOT] == ["net", "prov", "cluster", "pool"]
    assert GRAPH.descendants("net") == {"subnet", "route"}
    assert GRAPH.top("route") == "net" and GRAPH.top("cluster") == "cluster"


def test_a_provider_reference_is_urn_and_id():
    assert plan_graph.provider_urn("urn:a::b::id-1") == "urn:a::b"
    assert plan_graph.provider_urn("") == ""
    assert GRAPH.provider("cluster") == "prov"


def test_a_create_waits_for_all_under_a_component_it_depends_on():
    """Pulumi waits for a component's children: depending on `net` is waiting for `subnet` and `route`."""
    assert GRAPH.create_waits("cluster") == {"net", "subnet", "route", "prov"}  # unknown URNs dropped
    assert GRAPH.create_waits("pool") == {"cluster"}  # deletedWith orders no create


def test_a_delete_also_counts_the_parent_and_the_deleted_with_target():
    assert GRAPH.delete_dependencies("route") == {"subnet"}
    assert GRAPH.delete_dependencies("pool") == {"cluster"}
    assert GRAPH.delete_dependencies("cluster") == {"net", "prov"}  # not the component's children


def test_closure_follows_edges_and_finds_the_start_only_through_a_cycle():
    edges = GRAPH.relation(GRAPH.create_waits)
    assert plan_graph.closure(edges, "pool") == {"cluster", "net", "subnet", "route", "prov"}
    assert "a" not in plan_graph.closure({"a": {"b"}, "b": set()}, "a")
    assert "a" in plan_graph.closure({"a": {"b"}, "b": {"a"}}, "a")


def test_waves_put_each_node_after_what_it_waits_for():
    assert plan_graph.waves({"a": set(), "b": {"a"}, "c": {"a"}, "d": {"b", "c"}}) == [["a"], ["b", "c"], ["d"]]
    assert plan_graph.waves({"a": {"not-a-node"}}) == [["a"]]
    with pytest.raises(ValueError, match=r"cycle among \['a', 'b'\]"):
        plan_graph.waves({"a": {"b"}, "b": {"a"}, "c": set()})


def test_type_and_predicate_lookups_are_sorted():
    assert GRAPH.of_type("pulumi:providers:gcp") == ["prov"]
    assert GRAPH.where(lambda r: r["custom"] and r["dependsOn"]) == ["cluster", "pool"]
