"""A shipped stack's Kubernetes layer deployed on a fresh control plane: kwok nodes shaped like the stack's
(tests/k8s_nodes.py), then the objects its components render (tests/k8s_layer.py), either by `pulumi up`
through the real CLI, engine and pulumi-kubernetes provider (tests/k8s_program.py; `engine=True`) or by
server-side apply straight to the API server. What failed is recorded, not raised: the tier asserts on it."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import k8s_cluster, k8s_layer, k8s_nodes, pulumi_cli
from tests.k8s_cluster import ApiError, ControlPlane, wait_for
from tests.k8s_program import KUBECONFIG_ENV, OBJECTS_ENV

RAY_NODE_TYPE = "ray.io/node-type"  # KubeRay's label on the pods it makes: head | worker
# Bounds for a loaded 2-core machine: the operator reconciles within seconds; the pods' kwok stages too.
SETTLE_S = 120
PROGRAM = "tests.k8s_program:program"
UP_TIMEOUT_S = 600  # a loaded 2-core machine: the provider binary alone is ~300 MB


@dataclass
class Deployed:
    stack: str
    plan: dict
    objects: list[dict]
    cp: ControlPlane
    nodes: list[dict]
    rejected: list[str] = field(default_factory=list)
    workspace: pulumi_cli.Workspace | None = None  # the real CLI's project, when deployed by `pulumi up`
    up: pulumi_cli.Result | None = None

    def pulumi(self, *args: str) -> pulumi_cli.Result:
        """A CLI command on the stack's project, with the program served."""
        ws = self.workspace
        env = {OBJECTS_ENV: str(ws.project / "objects.json"), KUBECONFIG_ENV: str(ws.project / "kubeconfig")}
        return ws.run(*args, program=PROGRAM, host_env=env, timeout=UP_TIMEOUT_S)

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


def require_tier(engine: bool = False) -> None:
    """Skip (locally) or fail (CI) without the built tier (and, for `engine`, the CLI and the provider):
    module fixtures run before conftest's autouse skip."""
    why = k8s_cluster.missing()
    if engine and not why:
        why = None if pulumi_cli.available() else pulumi_cli.MISSING
    if why:
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
def deployed_stack(stack: str, folder: Path, engine: bool = False) -> Iterator[Deployed]:
    """The control plane with the stack's nodes and its objects, by `pulumi up` with `engine`."""
    require_tier(engine)
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
        if engine:
            d.workspace = _workspace(d, folder / "project")
            d.up = d.pulumi("up", "--yes", "--skip-preview")
            if d.up.code:
                d.rejected.append(str(d.up))
        else:
            for obj in objects:
                try:
                    cp.api.apply(obj)
                except ApiError as err:
                    d.rejected.append(f"{obj['kind']} {obj['metadata']['name']}: {err}")
        yield d
    finally:
        left = cp.stop()
        assert left == [], f"processes left running after the control plane stopped: {left}"


def _workspace(d: Deployed, folder: Path) -> pulumi_cli.Workspace:
    """A project of its own for tests/k8s_program.py, with a file backend and a stack named after the stack."""
    folder.mkdir(parents=True)
    (folder / "Pulumi.yaml").write_text("name: k8s-tier\nruntime: python\n")
    (folder / "objects.json").write_text(json.dumps(k8s_layer.registrations(d.plan)))
    d.cp.kubeconfig(folder / "kubeconfig")
    # The provider plugin is found on PATH (an ambient plugin: no download, no plugin folder).
    path = os.pathsep.join([str(pulumi_cli.BIN), str(k8s_cluster.BIN), os.environ.get("PATH", "")])
    ws = pulumi_cli.Workspace(folder, folder / "scratch", env={"PATH": path})
    result = ws.run("stack", "init", d.stack)
    if result.code:
        raise AssertionError(str(result))
    return ws
