"""The order `pulumi destroy` deletes a plan's resources in, computed from the plan's graph.

Pulumi's semantics, which this module models and nothing more:
- A resource depends on its `dependsOn` (and property dependencies, which the plan folds into
  `dependsOn`), its parent, its provider and its `deletedWith` target (pulumi/pulumi
  pkg/resource/graph/dependency_graph.go, `DependenciesOf`).
- Deletes run in reverse dependency order: a resource is deleted only after every resource that
  depends on it is gone, so dependents before dependencies and children before parents. Resources
  with no path between them may be deleted in parallel: nothing orders them.
- `deletedWith`: "skip resource deletion if another resource is being deleted as well" (Pulumi docs,
  Resource option deletedWith). The step is a no-op, so the object really disappears only when its
  target does, and nothing that waited for the no-op waited for the object.
- `retainOnDelete`: the step removes the resource from the state and leaves the cloud object.

    python -m tools.destroy --stack b200   # print the delete order, one wave per line
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from functools import cached_property
from typing import Any


def provider_urn(reference: str) -> str:
    """A provider reference is `<provider urn>::<provider id>`."""
    return reference.rsplit("::", 1)[0] if reference else ""


class DestroyOrder:
    """The dependency graph of a plan (tools.plan output) as `pulumi destroy` walks it."""

    def __init__(self, plan: dict[str, Any]):
        self.resources = {r["urn"]: r for r in plan["resources"]}

    def dependencies(self, urn: str) -> set[str]:
        r = self.resources[urn]
        deps = set(r["dependsOn"]) | {r["parent"], provider_urn(r["provider"]), r["deletedWith"]}
        return {d for d in deps if d in self.resources and d != urn}

    @cached_property
    def _closure(self) -> dict[str, set[str]]:
        closure: dict[str, set[str]] = {}

        def visit(urn: str, stack: tuple[str, ...] = ()) -> set[str]:
            if urn in closure:
                return closure[urn]
            if urn in stack:
                raise ValueError(f"dependency cycle through {urn}")
            found: set[str] = set()
            for dep in self.dependencies(urn):
                found |= {dep} | visit(dep, (*stack, urn))
            closure[urn] = found
            return found

        for urn in self.resources:
            visit(urn)
        return closure

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

    def kept(self, urn: str) -> bool:
        """Left in the cloud by `pulumi destroy` (retainOnDelete)."""
        return bool(self.resources[urn]["retainOnDelete"])

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
        left, done, out = set(self.resources), set(), []
        while left:
            wave = sorted(u for u in left if dependents[u] <= done)
            if not wave:
                raise ValueError(f"dependency cycle among {sorted(left)}")
            out.append(wave)
            done |= set(wave)
            left -= set(wave)
        return out

    def of_type(self, *types: str) -> list[str]:
        return sorted(u for u, r in self.resources.items() if r["type"] in types)

    def where(self, predicate) -> list[str]:
        return sorted(u for u, r in self.resources.items() if predicate(r))


def describe(order: DestroyOrder, waves: Iterable[list[str]]) -> str:
    lines = []
    for i, wave in enumerate(waves, 1):
        names = []
        for urn in wave:
            r = order.resources[urn]
            flag = " (kept)" if order.kept(urn) else " (no-op: deletedWith)" if order.is_noop(urn) else ""
            names.append(f"{r['name']}{flag}")
        lines.append(f"{i:2}: " + ", ".join(names))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tools import plan as plan_tool

    parser = argparse.ArgumentParser(prog="python -m tools.destroy", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    args = parser.parse_args(argv)
    try:
        plan_tool.check_stack_name(args.stack)  # the name becomes a file name: never `../x`
    except plan_tool.UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = plan_tool.ROOT / f"Pulumi.{args.stack}.yaml"
    if not path.is_file():  # read_stack_file would take a missing file as an empty one
        print(f"error: {path.name}: no such stack file", file=sys.stderr)
        return 2
    # The plan's own refusals are exit 2 with their message here too, never a traceback.
    from stacks import config as stack_config
    from stacks.preflight import PreflightError
    from tools import stack_file

    try:
        raw, secret_keys = plan_tool.read_stack_file(path, args.stack)
        order = DestroyOrder(plan_tool.build_plan(args.stack, raw, secret_keys))
    except (stack_file.StackFileError, stack_config.ConfigError, PreflightError, OSError) as err:
        print(f"error: {path.name}: {err}", file=sys.stderr)
        return 2
    print(describe(order, order.waves()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
