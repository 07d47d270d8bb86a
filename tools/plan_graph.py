"""A plan's resources (tools.plan's plan.json) as a graph: the one place the tools walk it.

What a resource waits for depends on the operation, as in the Pulumi engine (pulumi/pulumi
pkg/resource/graph/dependency_graph.go `DependenciesOf`, and pkg/resource/deploy/step_generator.go):
- a create waits for its `dependsOn` (the plan folds property dependencies into it), its provider, and,
  for a dependency that is a component, everything under that component (Pulumi waits for a
  component's children): `create_waits`;
- a delete runs only after every resource that depends on it is gone, where "depends" also counts the
  parent and the `deletedWith` target: `delete_dependencies`.

tools.destroy (the delete order), tools.critical_path (the deploy's longest chain) and tools.plan (the
printed tree and graph.mmd) read the plan through this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from typing import Any

ROOT = ""  # the parent of a top-level resource (its parent is the stack, or nothing the plan holds)


def provider_urn(reference: str) -> str:
    """A provider reference is `<provider urn>::<provider id>`."""
    return reference.rsplit("::", 1)[0] if reference else ""


def closure(edges: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """Every node reachable from `start` along `edges` (start itself only through a cycle)."""
    seen: set[str] = set()
    todo = list(edges.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += edges.get(node, ())
    return seen


def waves(after: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Nodes in waves: a node comes in the first wave after every node of `after[node]`; the nodes of one
    wave have no order between them. ValueError names the nodes of a cycle."""
    left = set(after)
    waiting = {n: set(after[n]) & left for n in left}
    done: set[str] = set()
    out: list[list[str]] = []
    while left:
        wave = sorted(n for n in left if waiting[n] <= done)
        if not wave:
            raise ValueError(f"dependency cycle among {sorted(left)}")
        out.append(wave)
        done |= set(wave)
        left -= set(wave)
    return out


class PlanGraph:
    """The resources of one plan, by URN, with the relations the tools follow."""

    def __init__(self, plan: dict[str, Any]):
        self.resources: dict[str, dict[str, Any]] = {r["urn"]: r for r in plan["resources"]}

    def parent(self, urn: str) -> str:
        """The parent's URN, or ROOT when the plan does not hold it (the stack itself)."""
        parent = self.resources[urn]["parent"]
        return parent if parent in self.resources else ROOT

    @cached_property
    def children(self) -> dict[str, list[str]]:
        """Parent URN (ROOT for the top level) -> its children's URNs, in plan order."""
        out: dict[str, list[str]] = {}
        for urn in self.resources:
            out.setdefault(self.parent(urn), []).append(urn)
        return out

    def descendants(self, urn: str) -> set[str]:
        return closure(self.children, urn)

    def top(self, urn: str) -> str:
        """The top-level resource `urn` sits under (itself when it is top-level)."""
        while (parent := self.parent(urn)) != ROOT:
            urn = parent
        return urn

    def provider(self, urn: str) -> str:
        return provider_urn(self.resources[urn]["provider"])

    def is_component(self, urn: str) -> bool:
        return not self.resources[urn]["custom"]

    def _known(self, urn: str, found: Iterable[str]) -> set[str]:
        return {d for d in found if d in self.resources and d != urn}

    def create_waits(self, urn: str) -> set[str]:
        """What `urn`'s create waits for: dependsOn, the provider, and all under a component it depends on."""
        deps = self._known(urn, [*self.resources[urn]["dependsOn"], self.provider(urn)])
        for d in [d for d in deps if self.is_component(d)]:
            deps |= self.descendants(d)
        return deps - {urn}

    def delete_dependencies(self, urn: str) -> set[str]:
        """What `urn` depends on for Pulumi's delete order: dependsOn, parent, provider, deletedWith."""
        r = self.resources[urn]
        return self._known(urn, [*r["dependsOn"], r["parent"], self.provider(urn), r["deletedWith"]])

    def relation(self, edges: Callable[[str], set[str]]) -> dict[str, set[str]]:
        """`edges` evaluated for every resource (e.g. `graph.relation(graph.create_waits)`)."""
        return {urn: edges(urn) for urn in self.resources}

    def of_type(self, *types: str) -> list[str]:
        return sorted(u for u, r in self.resources.items() if r["type"] in types)

    def where(self, predicate: Callable[[dict[str, Any]], bool]) -> list[str]:
        return sorted(u for u, r in self.resources.items() if predicate(r))
