"""The deploy's critical path, computed from the plan's own graph with phase durations from catalog.phases.

A resource starts when everything it waits for has finished (tools.plan_graph create_waits: its
dependencies, which hold explicit depends_on and every resource whose outputs feed its inputs, its
provider, and all of the descendants of a component it depends on).
On top of the graph come the waits Pulumi does not see: a staging pod needs a CPU node, the GPU job
needs the GPU nodes the RayCluster's workers bring up. The floor is the cluster, then the longer of
GPU readiness and staging, with nothing else in the way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from catalog import phases
from catalog.phases import Phase
from tools.plan_graph import PlanGraph, closure

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
JOB = "kubernetes:batch/v1:Job"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
INSTALLER = "kubernetes:yaml/v2:ConfigFile"


@dataclass
class Step:
    name: str
    start: float
    finish: float
    why: list[str] = field(default_factory=list)  # the phases that make up its duration, with sources


@dataclass
class CriticalPath:
    steps: list[Step]  # the chain that ends last, in order
    total: float
    floor: float
    floor_why: str
    gpu_start: float = 0.0  # when the GPU nodes start to come up (and to bill): the RayCluster's start

    @property
    def ratio(self) -> float:
        return self.total / self.floor if self.floor else 1.0


def _streamed(plan: dict[str, Any], pool: str | None, autopilot: bool) -> bool:
    """Image streaming: Autopilot streams eligible images; a Standard pool needs gcfs_config."""
    if autopilot:
        return True
    for r in plan["resources"]:
        if r["type"] == NODE_POOL and r["inputs"].get("name") == pool:
            return bool(((r["inputs"].get("nodeConfig") or {}).get("gcfsConfig") or {}).get("enabled"))
    return False


def _mirrored(plan: dict[str, Any]) -> bool:
    return any(r["type"] == "gcp:artifactregistry/repository:Repository" for r in plan["resources"])


def _pull(plan: dict[str, Any], pool: str | None, autopilot: bool) -> Phase:
    # Streaming needs an eligible image: one in Artifact Registry (the Docker Hub mirror).
    return phases.IMAGE_PULL_STREAMED if _streamed(plan, pool, autopilot) and _mirrored(plan) else phases.IMAGE_PULL


def compute(plan: dict[str, Any], weights_gb: float, mb_per_s: float = phases.DOWNLOAD_MB_PER_S) -> CriticalPath:
    graph = PlanGraph(plan)
    resources = graph.resources
    autopilot = any(r["type"] == CLUSTER and r["inputs"].get("enableAutopilot") for r in resources.values())
    waits = graph.relation(graph.create_waits)

    staging = phases.staging(weights_gb, mb_per_s)
    finish: dict[str, float] = {}
    start: dict[str, float] = {}
    why: dict[str, list[str]] = {}
    came_from: dict[str, str | None] = {}

    def cpu_pool_urn() -> str | None:
        return next((u for u, r in resources.items() if r["type"] == NODE_POOL
                     and r["inputs"].get("name") == "cpu-pool"), None)

    def visit(urn: str, stack: tuple = ()) -> float:
        if urn in finish:
            return finish[urn]
        if urn in stack:
            raise ValueError(f"cycle through {urn}")
        r = resources[urn]
        before = [(visit(d, (*stack, urn)), d) for d in waits[urn]]
        t0, prev = max(before, default=(0.0, None))
        parts: list[tuple[str, Phase]] = []
        begin = t0
        if not r["custom"]:
            parts = []
        elif r["type"] == CLUSTER:
            parts = [("cluster", phases.CLUSTER_AUTOPILOT if autopilot else phases.CLUSTER_STANDARD)]
        elif r["type"] == NODE_POOL:
            parts = [("cpu pool", phases.CPU_POOL) if r["inputs"].get("name") == "cpu-pool"
                     else ("gpu pool", phases.GPU_POOL_EMPTY)]
        elif r["type"] == JOB:
            if autopilot:
                parts = [("node", phases.AUTOPILOT_CPU_NODE)]
            else:
                pool = cpu_pool_urn()
                waited_for_pool = pool is not None and pool in closure(waits, urn)
                if not waited_for_pool and pool is not None:
                    # The pod pends until the pool's first node is Ready, not the pool operation's end.
                    node_ready = visit(pool, (*stack, urn)) - phases.CPU_POOL.minutes + phases.CPU_NODE_READY.minutes
                    if node_ready > begin:
                        begin, prev = node_ready, pool
            parts += [("image pull", _pull(plan, "cpu-pool", autopilot)), ("staging", staging)]
        elif r["type"] == RAY_CLUSTER:
            # What the job waits for: the workers' GPU nodes brought up for the pending pods, and the image.
            parts = [("GPU nodes", phases.GPU_NODE), ("image pull", _pull(plan, "gpu-pool", autopilot))]
        elif r["type"] == INSTALLER:
            parts = [("installer", phases.INSTALLER)]
        elif r["type"].startswith(("gcp:", "kubernetes:")):
            parts = [("API call", phases.API_CALL)]
        start[urn] = begin
        finish[urn] = begin + sum(p.minutes for _, p in parts)
        why[urn] = [f"{label} {p.minutes:.1f} min ({p.source})" for label, p in parts]
        came_from[urn] = prev
        return finish[urn]

    for urn in resources:
        visit(urn)
    end = max(finish, key=lambda u: finish[u])
    chain, u = [], end
    while u is not None:
        if why[u]:
            chain.append(Step(resources[u]["name"], start[u], finish[u], why[u]))
        u = came_from[u]
    chain.reverse()

    cluster = next(u for u, r in resources.items() if r["type"] == CLUSTER)
    gpu = (0 if autopilot else phases.GPU_POOL_EMPTY.minutes) + phases.GPU_NODE.minutes \
        + _pull(plan, "gpu-pool", autopilot).minutes
    node = phases.AUTOPILOT_CPU_NODE if autopilot else phases.CPU_NODE_READY
    stage = node.minutes + _pull(plan, "cpu-pool", autopilot).minutes + staging.minutes
    floor = finish[cluster] + max(gpu, stage)
    floor_why = (f"cluster ready at {finish[cluster]:.1f} min, then max(GPU readiness {gpu:.1f}, "
                 f"staging {stage:.1f}) min")
    gpu_start = min((start[u] for u, r in resources.items() if r["type"] == RAY_CLUSTER), default=finish[cluster])
    return CriticalPath(chain, finish[end], floor, floor_why, gpu_start)


def text(cp: CriticalPath) -> str:
    lines = [f"critical path to the first training step (estimate): {cp.total:.1f} min; floor "
             f"{cp.floor:.1f} min ({cp.floor_why}); ratio {cp.ratio:.2f}"]
    for s in cp.steps:
        lines.append(f"  {s.start:6.1f} -> {s.finish:6.1f}  {s.name}: " + "; ".join(s.why))
    return "\n".join(lines)
