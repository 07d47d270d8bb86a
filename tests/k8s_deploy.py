"""A shipped stack's Kubernetes layer deployed on a fresh control plane: kwok nodes shaped like the stack's
(tests/k8s_nodes.py), then the objects its components render (tests/k8s_layer.py), by server-side apply.
What the API server refused is recorded, not raised: the tier asserts on it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import k8s_cluster, k8s_layer, k8s_nodes
from tests.k8s_cluster import ApiError, ControlPlane, wait_for

RAY_NODE_TYPE = "ray.io/node-type"  # KubeRay's label on the pods it makes: head | worker
# Bounds for a loaded 2-core machine: the operator reconciles within seconds; the pods' kwok stages too.
SETTLE_S = 120


@dataclass
class Deployed:
    stack: str
    plan: dict
    objects: list[dict]
    cp: ControlPlane
    nodes: list[dict]
    rejected: list[str] = field(default_factory=list)

    @property
    def api(self) -> k8s_cluster.Api:
        return self.cp.api

    @property
    def ray(self) -> dict:
        return k8s_layer.ray_cluster(self.objects)

    @property
    def namespace(self) -> str:
        return self.ray["metadata"]["namespace"]

    def pods(self, selector: str = "") -> list[dict]:
        return self.api.list("v1", "Pod", self.namespace, selector)

    def ray_pods(self, node_type: str) -> list[dict]:
        return self.pods(f"ray.io/cluster={self.ray['metadata']['name']},{RAY_NODE_TYPE}={node_type}")

    def node(self, name: str) -> dict:
        return next(n for n in self.nodes if n["metadata"]["name"] == name)


def require_tier() -> None:
    """Skip (locally) or fail (CI) without the built tier: module fixtures run before conftest's autouse skip."""
    if why := k8s_cluster.missing():
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


def selectors(objects: list[dict]) -> list[dict[str, str]]:
    """The nodeSelector of every pod the layer makes (Autopilot makes a node for each)."""
    ray = k8s_layer.ray_cluster(objects)
    job = k8s_layer.of_kind(objects, "Job")
    head = ray["spec"]["headGroupSpec"]["template"]["spec"].get("nodeSelector") or {}
    group = ray["spec"]["workerGroupSpecs"][0]
    worker = group["template"]["spec"].get("nodeSelector") or {}
    staging = [j["spec"]["template"]["spec"].get("nodeSelector") or {} for j in job]
    return [head, *staging, *[worker] * int(group["replicas"])]


def _ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get("conditions", []))


@contextlib.contextmanager
def deployed_stack(stack: str, folder: Path) -> Iterator[Deployed]:
    require_tier()
    plan = k8s_layer.stack_plan(stack)
    objects = k8s_layer.objects(plan)
    cp = ControlPlane(folder)
    try:
        cp.start()
        print(f"\n{stack}: control plane started in {cp.start_s:.1f} s {cp.phases}")
        nodes = (k8s_nodes.autopilot_nodes(plan, selectors(objects))
                 if plan["outputs"]["clusterMode"] == "autopilot" else k8s_nodes.standard_nodes(plan))
        for node in nodes:
            cp.api.create(node)
        wait_for("every kwok node Ready", lambda: (live := cp.api.list("v1", "Node")) and len(live) == len(nodes)
                 and all(map(_ready, live)), SETTLE_S)
        d = Deployed(stack, plan, objects, cp, nodes)
        for obj in objects:
            try:
                cp.api.apply(obj)
            except ApiError as err:
                d.rejected.append(f"{obj['kind']} {obj['metadata']['name']}: {err}")
        yield d
    finally:
        left = cp.stop()
        assert left == [], f"processes left running after the control plane stopped: {left}"
