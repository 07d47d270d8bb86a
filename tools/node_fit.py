"""The plan's node-fit table: each pod of the plan's rendered objects against its node pool's node.

The model is catalog.node_fit's, which the gate (stacks.node_fit) already refused a stack by; the plan
reads the same numbers from what it registered (each node pool's machine type, boot disk and local SSDs,
each pod's template) and shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from catalog.accelerators import ACCELERATORS
from catalog.node_fit import NodeShape, node_shape, pod_requests, short


@dataclass
class Fit:
    pod: str
    node: str
    need: dict[str, float]
    have: dict[str, float]
    problems: list[str] = field(default_factory=list)


def shape(pool: dict[str, Any]) -> NodeShape | None:
    node = pool["inputs"].get("nodeConfig") or {}
    ssds = int((node.get("ephemeralStorageLocalSsdConfig") or {}).get("localSsdCount") or 0)
    return node_shape(pool["name"], node.get("machineType", ""), int(node.get("diskSizeGb") or 0) or None, ssds)


def fits(plan: dict[str, Any], pod_templates: list[tuple[str, dict]]) -> list[Fit]:
    pools = {r["name"]: r for r in plan["resources"] if r["type"] == "gcp:container/nodePool:NodePool"}
    shapes = {name: s for name, r in pools.items() if (s := shape(r)) is not None}
    gpu_pool = next((s for s in shapes.values() if any(a.machine_type == s.machine_type
                                                       for a in ACCELERATORS.values())), None)
    cpu_pool = next((s for s in shapes.values() if s is not gpu_pool), None)
    out = []
    for label, template in pod_templates:
        need, gpu = pod_requests(template)
        node = gpu_pool if gpu else cpu_pool
        if node is None:
            continue
        out.append(Fit(label, node.label, need, node.room, list(short(label, need, node).values())))
    return out
