"""Programs whose URNs the tests read from the real engine (tests/cli_host.py serves them) and compare with the
offline plan's.

`nested` runs both ways (mocks and the real CLI): components and dynamic resources (our StackGuard), three
levels deep, a component under a dynamic resource. `replay` registers a plan's resource tree again (`tree`,
from the file named by VERL_URN_TREE), parents first: a dynamic resource as a dynamic resource of the same type
(StackGuard's provider, which touches nothing), anything else as a component of the same type token. The
gcp, kubernetes and random provider plugins cannot run offline, and whether a resource is custom does not
enter its URN: the engine names every registration `generateURN(goal.Parent, goal.Type, goal.Name)`
(pulumi/pulumi pkg/v3 v3.276.0 resource/deploy/step_generator.go).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic as dyn

TREE_ENV = "VERL_URN_TREE"
DYNAMIC = "pulumi-python:dynamic"


def tree(plan: dict[str, Any]) -> list[dict[str, str]]:
    """The plan's resources as (urn, type, name, parent), each parent before its children."""
    nodes = {r["urn"]: {k: r[k] for k in ("urn", "type", "name", "parent")} for r in plan["resources"]}

    def depth(urn: str) -> int:
        return 0 if urn not in nodes else 1 + depth(nodes[urn]["parent"])

    return sorted(nodes.values(), key=lambda n: (depth(n["urn"]), n["urn"]))


def _dynamic_class(type_: str) -> type[dyn.Resource]:
    """A dynamic resource class whose type token is `type_` (pulumi-python:dynamic/<module>:<name>)."""
    module_part, _, name = type_.partition(":")[2].partition(":")
    module = module_part.partition("/")[2]
    return type(name, (dyn.Resource,), {}, module=module, name=name)


def nested() -> None:
    from components.stack_guard import StackGuard

    def under(parent: pulumi.Resource) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=parent)

    outer = pulumi.ComponentResource("verl-gke:urns:Outer", "outer")
    inner = pulumi.ComponentResource("verl-gke:urns:Inner", "inner", None, under(outer))
    StackGuard("top-guard", {})
    StackGuard("outer-guard", {}, under(outer))
    guard = StackGuard("inner-guard", {}, under(inner))
    below = pulumi.ComponentResource("verl-gke:urns:BelowCustom", "below", None, under(guard))
    StackGuard("below-guard", {}, under(below))


def replay() -> None:
    from components.stack_guard import StackGuardProvider

    made: dict[str, pulumi.Resource] = {}
    for node in json.loads(Path(os.environ[TREE_ENV]).read_text()):
        opts = pulumi.ResourceOptions(parent=made.get(node["parent"]))  # None: the root stack
        if node["type"].startswith(DYNAMIC):
            made[node["urn"]] = _dynamic_class(node["type"])(StackGuardProvider(), node["name"], {"fixed": {}},
                                                             opts)
        else:
            made[node["urn"]] = pulumi.ComponentResource(node["type"], node["name"], None, opts)


STAGE_ENV = "VERL_URN_STAGE"  # `moved`: before, aliased or unaliased


def moved() -> None:
    """A tree as released (`before`), then moved (`aliased`: with the aliases that keep every URN; `unaliased`:
    without): a component renamed and retyped (its child, named after it, inherits the move), a resource moved
    under the component from the root, one renamed."""
    from components.stack_guard import StackGuard

    stage = os.environ[STAGE_ENV]
    if stage == "before":
        app = pulumi.ComponentResource("verl-gke:urns:OldApp", "old-app")
        StackGuard("old-app-guard", {}, pulumi.ResourceOptions(parent=app))
        StackGuard("loose", {})
        StackGuard("renamed-before", {})
        return
    aliased = stage == "aliased"

    def aliases(*given: pulumi.Alias) -> list[pulumi.Alias] | None:
        return list(given) if aliased else None

    app = pulumi.ComponentResource("verl-gke:urns:App", "app", None, pulumi.ResourceOptions(
        aliases=aliases(pulumi.Alias(name="old-app", type_="verl-gke:urns:OldApp"))))
    StackGuard("app-guard", {}, pulumi.ResourceOptions(parent=app))
    StackGuard("loose", {}, pulumi.ResourceOptions(parent=app, aliases=aliases(pulumi.Alias(parent=None))))
    StackGuard("renamed-after", {}, pulumi.ResourceOptions(aliases=aliases(pulumi.Alias(name="renamed-before"))))
