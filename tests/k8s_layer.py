"""A shipped stack's Kubernetes layer as the offline plan renders it, for the `k8s` tier to apply.

The objects are the inputs the stack's components register (tools.plan under Pulumi mocks: the same
component code `pulumi up` runs), sent straight to the API server by server-side apply, as the
pulumi-kubernetes provider applies them. The plan shows a secret as "[secret]": a Secret's data gets
stand-ins under the keys its pods read (secretKeyRef). An object the component leaves to Pulumi's
auto-naming has no name in its inputs: it gets the name the mocks gave it ("<resource>-mock"), the one
the objects that refer to it were composed with.

Not applied: the NCCL RDMA installer (`kubernetes:yaml/v2:ConfigFile` of Google's manifest, read at deploy
time) and every Google Cloud resource.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from components.ray_cluster import runtime_scaled_options
from tests.stack_helpers import ROOT
from tools import plan as plan_tool

STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
SECRETS = {"verl-gke:hfToken": "hf_K8sTierStandInToken", "verl-gke:wandbApiKey": "k8s-tier-stand-in-wandb-key"}
# Dependencies first, as the stack's component graph orders them (a namespace before what lives in it,
# a claim after its volume, the workloads last).
ORDER = ["Namespace", "GKENetworkParamSet", "Network", "ServiceAccount", "Secret", "ConfigMap", "Role",
         "RoleBinding", "PersistentVolume", "PersistentVolumeClaim", "Job", "RayCluster"]
NOT_APPLIED = {"kubernetes:yaml/v2:ConfigFile"}
REDACTED = "[secret]"  # tools.plan's stand-in for a secret value
RAY_TYPE = "kubernetes:ray.io/v1:RayCluster"


def stack_plan(stack: str) -> dict[str, Any]:
    """tools.plan's plan of Pulumi.<stack>.yaml, with the two secrets set (so their Secrets exist)."""
    raw, secret_keys = plan_tool.read_stack_file(ROOT / f"Pulumi.{stack}.yaml")
    raw.update(SECRETS)
    return plan_tool.build_plan(stack, raw, sorted({*secret_keys, *SECRETS}))


def _applied(plan: dict[str, Any]) -> list[dict]:
    return [r for r in plan["resources"] if r["type"].startswith("kubernetes:") and r["custom"]
            and r["type"] not in NOT_APPLIED]


def registrations(plan: dict[str, Any]) -> list[dict]:
    """Each object with what its component registered it with: type, name, the options a `pulumi up` acts
    on (ignoreChanges, replaceOnChanges, retainOnDelete, deleteBeforeReplace) and the other objects it
    depends on (by name), for tests/k8s_program.py."""
    applied = _applied(plan)
    names = {r["urn"]: r["name"] for r in applied}
    objs = objects(plan)
    out = []
    for r, obj in zip(sorted(applied, key=lambda r: ORDER.index(r["inputs"]["kind"])), objs, strict=True):
        out.append({"type": r["type"], "name": r["name"], "object": obj,
                    "ignoreChanges": r.get("ignoreChanges") or [], "replaceOnChanges": r.get("replaceOnChanges") or [],
                    "retainOnDelete": bool(r.get("retainOnDelete")),
                    # The mocks do not record it in the plan; the one component that sets it, as it sets it.
                    "deleteBeforeReplace": r["type"] == RAY_TYPE and runtime_scaled_options()[
                        "delete_before_replace"],
                    "dependsOn": [names[u] for u in r.get("dependsOn") or [] if u in names]})
    return out


def objects(plan: dict[str, Any]) -> list[dict]:
    """The plan's Kubernetes objects, in apply order, each named."""
    out = []
    for r in sorted(_applied(plan), key=lambda r: ORDER.index(r["inputs"]["kind"])):
        obj = copy.deepcopy(r["inputs"])
        obj.setdefault("metadata", {}).setdefault("name", f"{r['name']}-mock")
        out.append(obj)
    for secret in of_kind(out, "Secret"):
        if secret.get("stringData") == REDACTED:
            # The keys are the ones the pods read (secretKeyRef), the values stand-ins.
            keys = sorted(_secret_keys(out, secret["metadata"]["name"]))
            secret["stringData"] = {k: f"k8s-tier-stand-in-{k}" for k in keys}
    return out


def _secret_keys(objs: list[dict], name: str) -> set[str]:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("secretKeyRef")
            if isinstance(ref, dict) and ref.get("name") == name:
                found.add(ref["key"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(objs)
    return found


def of_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def ray_cluster(objs: list[dict]) -> dict:
    (ray,) = of_kind(objs, "RayCluster")
    return ray


def live_plan(plan: dict[str, Any], pods: dict[str, dict], pvs: list[dict], pvcs: list[dict]) -> dict[str, Any]:
    """The plan with the pods the cluster runs in place of the templates it rendered: `pods` maps
    "head", "workers" and "staging" to a live Pod. What tools.placement reads from it is then what the
    operator and the Job controller made, and the PVs and claims the API server holds."""
    live = copy.deepcopy(plan)
    for r in live["resources"]:
        if r["type"] == "kubernetes:batch/v1:Job" and "staging" in pods:
            r["inputs"]["spec"]["template"] = _template(pods["staging"])
        elif r["type"] == "kubernetes:ray.io/v1:RayCluster":
            spec = r["inputs"]["spec"]
            spec["headGroupSpec"]["template"] = _template(pods["head"])
            spec["workerGroupSpecs"][0]["template"] = _template(pods["workers"])
    by_type = {"kubernetes:core/v1:PersistentVolume": pvs, "kubernetes:core/v1:PersistentVolumeClaim": pvcs}
    for r in live["resources"]:
        if r["type"] in by_type:
            name = r["inputs"]["metadata"]["name"]
            (obj,) = [o for o in by_type[r["type"]] if o["metadata"]["name"] == name]
            r["inputs"] = json.loads(json.dumps(obj))
    return live


def _template(pod: dict) -> dict:
    return {"metadata": {k: v for k, v in pod["metadata"].items() if k in ("annotations", "labels")},
            "spec": pod["spec"]}
