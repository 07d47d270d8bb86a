"""The offline plan names every resource as the real engine does: a URN copied from plan.json into
`pulumi state delete` or `--target` names that resource.

Each test runs a program through `pulumi up` on a file backend, reads the engine's URNs back with
`pulumi stack export`, and compares them, each with its parent, with what the plan's mocks (tools.mocking)
give the same registrations.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import pulumi_cli, urn_replay
from tests.stack_helpers import shipped_plan
from tools import mocking

pytestmark = pytest.mark.cli

PROJECT = "verl-gke"  # tests/pulumi_cli.py program_workspace


def engine_parents(tmp_path: Path, stack: str, program: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """{URN: parent URN} of what `program` registered under the real engine, the stack and default providers
    left out (the plan holds neither)."""
    ws = pulumi_cli.program_workspace(tmp_path, env)
    created = ws.run("stack", "init", stack)
    assert created.code == 0, created
    up = ws.run("up", "--yes", "--skip-preview", program=program)
    assert up.code == 0, up
    exported = ws.run("stack", "export")
    assert exported.code == 0, exported
    return {r["urn"]: r.get("parent", "") for r in json.loads(exported.out)["deployment"]["resources"]
            if r["type"] != mocking.ROOT_STACK_TYPE and not r["urn"].endswith("::default")}


def test_nested_components_and_dynamic_resources_get_the_engines_urns(tmp_path: Path) -> None:
    stack = "urns"
    planned = mocking.run(urn_replay.nested, {}, stack, project=PROJECT)
    assert len(planned.resources) == 7
    assert {r.urn: r.parent for r in planned.resources} == engine_parents(tmp_path, stack, "tests.urn_replay:nested")


def test_every_urn_of_a_shipped_stacks_plan_is_the_engines(tmp_path: Path) -> None:
    """The tree of dev-b200 (every kind of nesting the product has: custom resources three levels down under
    a component, a dynamic resource in a component, a provider in a component) as the plan shows it."""
    stack = "dev-b200"
    plan = shipped_plan(stack)
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps(urn_replay.tree(plan)))
    engine = engine_parents(tmp_path, stack, "tests.urn_replay:replay", {urn_replay.TREE_ENV: str(tree)})
    assert {r["urn"]: r["parent"] for r in plan["resources"]} == engine
