"""Run the Pulumi program in-process under mocks and record every registration.

Used by the offline plan and by the tests. Pulumi's MockMonitor hands mocks only the inputs;
we subclass it to keep the whole RegisterResource request (parent, dependencies, provider,
protect, retainOnDelete, deletedWith) and read inputs from the wire form, where secrets are
still marked, so nothing secret can leak out as plain text.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pmocks
from pulumi.runtime import settings as psettings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

SECRET = "[secret]"
UNKNOWN = "[unknown]"
_SIG = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
_OUTPUT_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"
_UNKNOWN_VALUE = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# A syntactically valid but meaningless CA, so kubeconfig code paths run as for real.
MOCK_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMOCK\n-----END CERTIFICATE-----\n").decode()
MOCK_ENDPOINT = "203.0.113.10"
MOCK_PROJECT_NUMBER = "123456789012"


def plain(value: Any) -> Any:
    """Wire-form property value -> JSON-able value with secrets and unknowns replaced."""
    if isinstance(value, dict):
        sig = value.get(_SIG)
        if sig == _SECRET_SIG:
            return SECRET
        if sig == _RESOURCE_SIG:
            return value.get("urn", "")
        if sig == _OUTPUT_SIG:
            if value.get("secret"):
                return SECRET
            return plain(value["value"]) if "value" in value else UNKNOWN
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if value == _UNKNOWN_VALUE:
        return UNKNOWN
    # The wire form (protobuf Struct) carries every number as a double.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def reveal(value: Any) -> Any:
    """Unwrap secret markers left in deserialized inputs (tests only: never for written output)."""
    if isinstance(value, dict):
        if value.get(_SIG) == _SECRET_SIG:
            return reveal(value.get("value"))
        return {k: reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [reveal(v) for v in value]
    return value


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    provider: str
    depends_on: list[str]
    property_dependencies: dict[str, list[str]]
    protect: bool
    retain_on_delete: bool
    deleted_with: str
    aliases: list[str]  # the type/name/parent a resource was known under before (aliasSpecs, as given)
    inputs: dict[str, Any]
    raw_inputs: dict[str, Any]  # deserialized (secret values unwrapped): for tests only, never written
    ignore_changes: list[str] = field(default_factory=list)  # property paths the engine leaves alone
    replace_on_changes: list[str] = field(default_factory=list)  # property paths whose change replaces


@dataclass
class Run:
    resources: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registration:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise AssertionError(f"expected one {type_} {name or ''}, found {[r.name for r in found]}")
        return found[0]

    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.resources}


class RecordingMonitor(pmocks.MockMonitor):
    def __init__(self, mocks: pmocks.Mocks, run: Run):
        super().__init__(mocks)
        self.run = run

    def RegisterResource(self, request):  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        wire = json_format.MessageToDict(request.object)
        self.run.resources.append(Registration(
            urn=response.urn,
            type=request.type,
            name=request.name,
            custom=bool(request.custom),
            parent=request.parent,
            provider=request.provider,
            depends_on=list(request.dependencies),
            property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
            protect=bool(request.protect),
            retain_on_delete=bool(request.retainOnDelete),
            deleted_with=request.deletedWith,
            aliases=[json.dumps(json_format.MessageToDict(a), sort_keys=True) for a in request.aliases],
            inputs=plain(wire),
            raw_inputs=reveal(pulumi.runtime.rpc.deserialize_properties(request.object)),
            ignore_changes=list(request.ignoreChanges),
            replace_on_changes=list(request.replaceOnChanges),
        ))
        return response


class ProgramMocks(pmocks.Mocks):
    """Plausible computed outputs per resource type, so every apply in the program runs."""

    def __init__(self, project: str):
        self.project = project

    def new_resource(self, args: pmocks.MockResourceArgs) -> tuple[str, dict]:
        inputs = dict(args.inputs)
        name = inputs.get("name") or args.name
        state: dict[str, Any] = {**inputs, "name": name}
        project = inputs.get("project") or self.project
        t = args.typ
        if t == "gcp:compute/network:Network":
            state["selfLink"] = f"https://www.googleapis.com/compute/v1/projects/{project}/global/networks/{name}"
            state["id"] = f"projects/{project}/global/networks/{name}"
        elif t == "gcp:compute/subnetwork:Subnetwork":
            region = inputs.get("region", "region")
            state["selfLink"] = (f"https://www.googleapis.com/compute/v1/projects/{project}/regions/{region}"
                                 f"/subnetworks/{name}")
        elif t == "gcp:container/cluster:Cluster":
            state.update(endpoint=MOCK_ENDPOINT, masterAuth={"clusterCaCertificate": MOCK_CA},
                         selfLink=f"projects/{project}/locations/{inputs.get('location')}/clusters/{name}")
        elif t == "gcp:storage/bucket:Bucket":
            state["url"] = f"gs://{name}"
        elif t == "random:index/randomId:RandomId":
            digest = hashlib.sha256(args.name.encode()).hexdigest()
            state.update(hex=digest[: 2 * int(inputs.get("byteLength", 4))], b64Url=digest[:8])
        elif t.startswith("kubernetes:"):
            meta = dict(inputs.get("metadata") or {})
            meta.setdefault("name", f"{args.name}-mock")
            state["metadata"] = meta
        elif t.startswith("pulumi-python:dynamic"):
            state.update(job_id=inputs.get("submission_id"), status="PENDING", message="", attempt=1,
                         dashboard_url=inputs.get("address") or "")
        return f"{args.name}-id", state

    def call(self, args: pmocks.MockCallArgs) -> tuple[dict, list | None]:
        if args.token == "gcp:organizations/getProject:getProject":
            pid = args.args.get("projectId") or self.project
            return {"projectId": pid, "number": MOCK_PROJECT_NUMBER, "name": pid}, []
        if args.token == "gcp:organizations/getClientConfig:getClientConfig":
            return {"project": self.project, "accessToken": "mock-token"}, []
        return dict(args.args), []


def run(program: Callable[[], None], config: dict[str, str], stack: str, secret_keys: list[str] | None = None,
        project: str = "verl-gke", result: Run | None = None) -> Run:
    """Run `program` once under fresh mocks with `config`; return what it registered and exported.

    Pass `result` to see what was registered even when the program raises.
    """
    result = result if result is not None else Run()
    gcp_project = config.get("gcp:project", "mock-project")
    set_all_config(dict(config), list(secret_keys or []))
    psettings.ROOT.set(None)
    mocks = ProgramMocks(gcp_project)
    monitor = RecordingMonitor(mocks, result)
    pmocks.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor)
    psettings.SETTINGS.rpc_manager.clear()
    psettings.SETTINGS.outputs.clear()
    _sync_await(run_pulumi_func(program))
    root = psettings.get_root_resource()
    for key, value in root.outputs.items():
        out = pulumi.Output.from_input(value)
        result.outputs[key] = _sync_await(out.future())
        if _sync_await(out.is_secret()):
            result.secret_outputs.add(key)
    return result
