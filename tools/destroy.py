"""The order `pulumi destroy` deletes a plan's resources in, computed from the plan's graph.

Pulumi's semantics, which this module models and nothing more:
- A resource depends on its `dependsOn` (and property dependencies, which the plan folds into
  `dependsOn`), its parent, its provider and its `deletedWith` target (tools.plan_graph).
- Deletes run in reverse dependency order: a resource is deleted only after every resource that
  depends on it is gone, so dependents before dependencies and children before parents. Resources
  with no path between them may be deleted in parallel: nothing orders them.
- `deletedWith`: "skip resource deletion if another resource is being deleted as well" (Pulumi docs,
  Resource option deletedWith). The step is a no-op, so the object really disappears only when its
  target does, and nothing that waited for the no-op waited for the object.
- `retainOnDelete`: the step removes the resource from the state and leaves the cloud object.
- A project API (gcp:projects/service:Service) with `disableOnDestroy` false: the provider's delete only
  forgets it and leaves the API enabled (hashicorp/terraform-provider-google
  google/services/resourcemanager/resource_google_project_service.go @1658bf8cabddd2c627988002c53c57b2177cbc51,
  resourceGoogleProjectServiceDelete; the attribute defaults to true).

    python -m tools.destroy --stack b200 [--config Pulumi.b200.yaml]   # the delete order, one wave per line
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path

from tools import plan_graph

PROJECT_SERVICE = "gcp:projects/service:Service"
API_KEPT = "project APIs with disableOnDestroy false"


class DestroyOrder(plan_graph.PlanGraph):
    """The dependency graph of a plan (tools.plan output) as `pulumi destroy` walks it."""

    def dependencies(self, urn: str) -> set[str]:
        return self.delete_dependencies(urn)

    @cached_property
    def _closure(self) -> dict[str, set[str]]:
        edges = self.relation(self.dependencies)
        found = {urn: plan_graph.closure(edges, urn) for urn in self.resources}
        if cycle := next((urn for urn, deps in found.items() if urn in deps), None):
            raise ValueError(f"dependency cycle through {cycle}")
        return found

    def depends_on(self, urn: str, other: str) -> bool:
        """Does `urn` depend on `other`, directly or transitively?"""
        return other in self._closure[urn]

    def effective(self, urn: str) -> str:
        """The resource whose delete step really removes `urn`: its deletedWith target (recursively)."""
        seen = {urn}
        while (target := self.resources[urn]["deletedWith"]) in self.resources and target not in seen:
            urn = target
            seen.add(urn)
        return urn

    def is_noop(self, urn: str) -> bool:
        return self.effective(urn) != urn

    def kept_because(self, urn: str) -> str | None:
        """Why `pulumi destroy` leaves `urn`'s cloud object in place (None: it is deleted)."""
        r = self.resources[urn]
        if r["retainOnDelete"]:
            return "retainOnDelete"
        if r["type"] == PROJECT_SERVICE and r["inputs"].get("disableOnDestroy") is False:
            return API_KEPT
        return None

    def kept(self, urn: str) -> bool:
        """Left in the cloud by `pulumi destroy`: only forgotten by the stack's state."""
        return self.kept_because(urn) is not None

    def deleted_before(self, urn: str, other: str) -> bool:
        """Is `urn` gone from the cloud before `other`'s delete starts, in every schedule Pulumi may run?"""
        mine, theirs = self.effective(urn), self.effective(other)
        return mine != theirs and self.depends_on(mine, theirs)

    def waves(self) -> list[list[str]]:
        """Delete steps grouped in waves: every resource of a wave may run in parallel once the earlier
        waves are done (dependents first)."""
        dependents: dict[str, set[str]] = {u: set() for u in self.resources}
        for urn in self.resources:
            for dep in self.dependencies(urn):
                dependents[dep].add(urn)
        return plan_graph.waves(dependents)


def describe(order: DestroyOrder, waves: Iterable[list[str]], stack: str = "") -> str:
    """The waves, one a line, under a header that says how to read them. A retained resource is marked
    "(kept)"; the project APIs that stay enabled are named once below instead of in a wave."""
    lines = [f"`pulumi destroy{f' --stack {stack}' if stack else ''}` deletes in this order, one wave a line:",
             "a wave starts when the waves above it are done; the resources of one wave go in parallel."]
    apis, n = [], 0
    for wave in waves:
        names = []
        for urn in wave:
            name, why = order.resources[urn]["name"], order.kept_because(urn)
            if why == API_KEPT:
                apis.append(name)
            else:
                names.append(f"{name}{' (kept)' if why else ' (no-op: deletedWith)' if order.is_noop(urn) else ''}")
        if names:
            n += 1
            lines.append(f"{n:2}: " + ", ".join(names))
    if any("(kept)" in line for line in lines):
        lines.append("(kept): left in the cloud (retainOnDelete), only removed from the stack's state")
    if apis:
        lines.append(f"not listed: {', '.join(apis)}: {API_KEPT}, so destroy leaves them enabled and only "
                     "removes them from the stack's state")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tools import plan as plan_tool

    parser = argparse.ArgumentParser(prog="python -m tools.destroy", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="stack name, e.g. b200")
    parser.add_argument("--config", type=Path, help="stack file (default: Pulumi.<stack>.yaml)")
    args = parser.parse_args(argv)
    try:
        path = plan_tool.stack_path(args.stack, args.config)
    except plan_tool.UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # The plan's own refusals are exit 2 with their message here too, never a traceback.
    from catalog.problems import ConfigError
    from tools import quota_source, stack_file

    try:
        raw, secret_keys = plan_tool.read_stack_file(path, args.stack)
        order = DestroyOrder(plan_tool.build_plan(args.stack, raw, secret_keys, quota_values=quota_source.UNCHECKED))
    except (stack_file.StackFileError, ConfigError, OSError) as err:
        print(f"error: {path.name}: {err}", file=sys.stderr)
        return 2
    print(describe(order, order.waves(), args.stack))
    return 0


if __name__ == "__main__":
    sys.exit(main())
