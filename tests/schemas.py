"""Validate generated Kubernetes objects against upstream schemas, offline.

Custom resources: the CRD's `openAPIV3Schema` from `$VERL_GKE_SCHEMAS` (default: `tests/data/schemas`,
unmodified upstream CRDs at a commit, listed in its README.md), checked with jsonschema. Core objects (PV, PVC, Secret,
ServiceAccount, Namespace): the `kubernetes-validate` package, which ships Kubernetes' own schemas.

CRD schemas are structural OpenAPI v3: the API server prunes unknown fields instead of rejecting
them, so a misspelt field would silently vanish. `strict()` turns that into an error by closing
every object that lists its properties; `x-kubernetes-int-or-string` becomes integer-or-string and
`nullable` admits null.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tools import mocking

REPO = Path(__file__).resolve().parent.parent
SCHEMAS_ENV = "VERL_GKE_SCHEMAS"
KUBERAY_RAYCLUSTER = "kuberay-v1.5.2/ray.io_rayclusters.yaml"
GKE_NETWORK_PARAM_SET = "gke-networking-api/networking.gke.io_gkenetworkparamsets.yaml"
GKE_NETWORK = "gke-networking-api/networking.gke.io_networks.yaml"
KUBERNETES_VERSION = "1.32.0"  # a version kubernetes-validate ships; GKE's supported range includes it

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the RayCluster CRD is ~900 KB


def schemas_dir() -> Path:
    return Path(os.environ.get(SCHEMAS_ENV) or REPO / "tests" / "data" / "schemas")


def schemas_missing_reason() -> str | None:
    """Why schema tests cannot run here, or None when they can."""
    folder = schemas_dir()
    needed = [folder / f for f in (KUBERAY_RAYCLUSTER, GKE_NETWORK_PARAM_SET, GKE_NETWORK)]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        return (f"upstream CRD schemas not found ({', '.join(missing)}); "
                f"set {SCHEMAS_ENV} to the schema folder")
    return None


@functools.cache
def crd_schema(relative: str, version: str = "v1") -> dict[str, Any]:
    """`openAPIV3Schema` of one served version of the CRD file `relative` (under `schemas_dir()`)."""
    path = schemas_dir() / relative
    with path.open() as f:
        crd = yaml.load(f, Loader=_Loader)
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return strict(entry["schema"]["openAPIV3Schema"])
    raise KeyError(f"{path}: no version {version!r} (has {[v['name'] for v in crd['spec']['versions']]})")


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A jsonschema-ready copy of a structural schema (see the module docstring)."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        if node.get("x-kubernetes-int-or-string") and "anyOf" not in node and "type" not in node:
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if node.pop("nullable", False) and "type" in node:
            node["type"] = [node["type"], "null"]
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for key, value in node.items():
            if key == "properties":
                for prop in value.values():
                    walk(prop)
            elif key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf", "not"):
                walk(value)

    walk(out)
    return out


def crd_errors(obj: dict[str, Any], relative: str, version: str = "v1") -> list[str]:
    """Every violation of the CRD's schema, as "path: message" lines (empty when valid)."""
    validator = jsonschema.Draft4Validator(crd_schema(relative, version))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]


def core_errors(obj: dict[str, Any], version: str = KUBERNETES_VERSION) -> list[str]:
    """Violations of Kubernetes' own schema for a core object (strict: unknown fields are errors)."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        return [f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"]
    return []


def manifest(reg: mocking.Registration, secret_values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The object a registration would send to the API server, from its registered inputs.

    Pulumi-only inputs are dropped. A field whose whole value is a secret shows up as "[secret]";
    `secret_values` puts a shape-preserving stand-in there (e.g. {"stringData": {"key": "x"}}).
    A deep copy: callers may mutate it.
    """
    inputs = {k: copy.deepcopy(v) for k, v in reg.inputs.items() if not k.startswith("__")}
    for field_name, stand_in in (secret_values or {}).items():
        if inputs.get(field_name) == mocking.SECRET:
            inputs[field_name] = stand_in
    return inputs
