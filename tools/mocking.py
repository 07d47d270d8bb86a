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
import logging
import os
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pmocks
from pulumi.runtime import resource as presource
from pulumi.runtime import settings as psettings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from tools import engine_versions

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
# GKE's DNS-based endpoint has the form gke-<uid>-<project number>.<location>.gke.goog (API reference
# ControlPlaneEndpointsConfig.DNSEndpointConfig.endpoint: "Ex: uid.us-central1.gke.goog").
MOCK_DNS_ENDPOINT = "gke-0123456789abcdef-123456789012.{location}.gke.goog"
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
    ignore_changes: list[str]
    aliases: list[str]  # the type/name/parent a resource was known under before (aliasSpecs, as given)
    inputs: dict[str, Any]
    raw_inputs: dict[str, Any]  # deserialized (secret values unwrapped): for tests only, never written
    replace_on_changes: list[str] = field(default_factory=list)  # property paths whose change replaces
    import_id: str = ""  # ResourceOptions.import_: the cloud object adopted instead of created
    # ResourceOptions.delete_before_replace, None when not set (then the provider's Diff decides).
    delete_before_replace: bool | None = None


@dataclass
class Invoke:
    token: str
    args: dict[str, Any]
    after: int  # how many resources were registered before it ran


@dataclass
class Run:
    resources: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)
    invokes: list[Invoke] = field(default_factory=list)
    # What the program logged (pulumi.log), info and up: (level, message). Recorded, not printed: the plan
    # prints the config's warnings itself, once.
    logs: list[tuple[str, str]] = field(default_factory=list)

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registration:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise AssertionError(f"expected one {type_} {name or ''}, found {[r.name for r in found]}")
        return found[0]

    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.resources}


ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def engine_urn(stack: str, project: str, parent: str, type_: str, name: str) -> str:
    """The URN the engine gives a resource (pulumi/pulumi pkg/v3 v3.276.0 resource/deploy/deployment.go
    `generateURN`, sdk/v3 go/common/resource/urn/urn.go `New`): its type is prefixed with the parent's whole
    qualified type (`A$B$type` under a child of A), and with nothing under the root stack or no parent.
    The SDK's MockMonitor.make_urn keeps only the parent type's last segment and prefixes the root stack's
    type: its URNs name no resource of a real stack (`pulumi state delete`, `--target`)."""
    qualified = type_
    if parent:
        parent_type = parent.split("::")[2]  # urn:pulumi:<stack>::<project>::<qualified type>::<name>
        if parent_type != ROOT_STACK_TYPE:
            qualified = f"{parent_type}${type_}"
    return f"urn:pulumi:{stack}::{project}::{qualified}::{name}"


class RecordingMonitor(pmocks.MockMonitor):
    def __init__(self, mocks: pmocks.Mocks, run: Run):
        super().__init__(mocks)
        self.run = run

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        return engine_urn(psettings.get_stack(), psettings.get_project(), parent, type_, name)

    def Invoke(self, request):  # noqa: N802 - gRPC method name
        args = json_format.MessageToDict(request.args)
        self.run.invokes.append(Invoke(request.tok, args, len(self.run.resources)))
        return super().Invoke(request)

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
            ignore_changes=list(request.ignoreChanges),
            aliases=[json.dumps(json_format.MessageToDict(a), sort_keys=True) for a in request.aliases],
            inputs=plain(wire),
            raw_inputs=reveal(pulumi.runtime.rpc.deserialize_properties(request.object)),
            replace_on_changes=list(request.replaceOnChanges),
            import_id=request.importId,
            delete_before_replace=request.deleteBeforeReplace if request.deleteBeforeReplaceDefined else None,
        ))
        return response


GET_QUOTA_INFO = "gcp:cloudquota/getSQuotaInfo:getSQuotaInfo"
# A project that was granted GPU quota, in Cloud Quotas' QuotaInfo shape (pulumi-gcp
# GetSQuotaInfoResult wire names): quota_id -> [(dimensions, value or None = omitted, locations)].
# Omitted `details` is how the API reports 0 (proto3 JSON drops a zero int64; live dumps show
# `"details": {}` for families without a grant); the catch-all info carries no dimension key.
_REGIONS = ["us-central1", "us-east4", "europe-west1", "europe-west4"]
QuotaRow = tuple[dict[str, str], int | None, list[str]]  # (dimensions, value or None = omitted, applicableLocations)
MOCK_QUOTAS: dict[str, list[QuotaRow]] = {
    "GPUS-PER-GPU-FAMILY-per-project-region": [
        ({"gpu_family": "NVIDIA_B200"}, 16, _REGIONS), ({"gpu_family": "NVIDIA_H200"}, 16, _REGIONS),
        ({}, None, _REGIONS)],
    "PREEMPTIBLE-NVIDIA-B200-GPUS-per-project-region": [({}, 64, _REGIONS)],
    "PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region": [({}, 64, _REGIONS)],
    "NVIDIA-L4-GPUS-per-project-region": [({}, 16, _REGIONS)],
    "PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region": [({}, 16, _REGIONS)],
    "GPUS-ALL-REGIONS-per-project": [({}, 32, ["global"])],
    "CPUS-PER-VM-FAMILY-per-project-region": [({"vm_family": "C2"}, 200, _REGIONS), ({}, 24, _REGIONS)],
    "CPUS-ALL-REGIONS-per-project": [({}, 500, ["global"])],
    "STATIC-ADDRESSES-per-project-region": [({}, 8, _REGIONS)],
    "NETWORKS-per-project": [({}, 15, ["global"])],
    "FIREWALLS-per-project": [({}, 200, ["global"])],
    "IN-USE-ADDRESSES-per-project-region": [({}, 8, _REGIONS)],
    "SSD-TOTAL-GB-per-project-region": [({}, 2048, _REGIONS)],
    "HYPERDISK-BALANCED-TOTAL-GB-per-project-region": [({}, 4096, _REGIONS)],
    "LOCAL-SSD-TOTAL-GB-per-project-region": [({}, 100000, _REGIONS)],
    "PREEMPTIBLE-LOCAL-SSD-GB-per-project-region": [({}, 100000, _REGIONS)],
}


def quota_not_found(quota_id: str) -> str:
    """How the mocks fail the read of a quota they do not know (tools.quota_source reads the samples alike)."""
    return f"quota {quota_id} not found for service compute.googleapis.com"


def quota_info(project: str, quota_id: str, infos: list[QuotaRow]) -> dict:
    dims = sorted({k for d, _, _ in infos for k in d} | ({"region"} if "region" in quota_id else set()))
    return {
        "name": f"projects/{project}/locations/global/services/compute.googleapis.com/quotaInfos/{quota_id}",
        "quotaId": quota_id, "service": "compute.googleapis.com", "containerType": "PROJECT",
        "metric": "compute.googleapis.com/" + quota_id.split("-per-")[0].lower().replace("-", "_"),
        "dimensions": dims, "isPrecise": True, "isFixed": False, "isConcurrent": False, "metricUnit": "1",
        "dimensionsInfos": [{"dimensions": d, "details": [] if v is None else [{"value": str(v)}],
                             "applicableLocations": locs} for d, v, locs in infos],
    }


class ProgramMocks(pmocks.Mocks):
    """Plausible computed outputs per resource type, so every apply in the program runs.

    `server_config` is what GKE's getServerConfig answers (tools.engine_versions). At preview
    (`preview=True`) a resource is being created, so its id is unknown as the engine reports it,
    unless its type is in `existing` (already in the stack's state, e.g. APIs enabled by an earlier run).
    `quotas` overrides quota values: quota_id -> an int (that value everywhere, every dimension;
    0 is sent as an omitted value, as the API does), a list of rows in MOCK_QUOTAS' shape (a project's
    own dimensionsInfos: tools.quota_source) or a str (the read fails with that reason, e.g. a
    permission error). `unknown` (type -> output names) are the outputs of a resource in state that
    a preview of its update leaves unknown, as a provider's planned state may (truly unknown to the program:
    its applies on them do not run).
    """

    def __init__(self, project: str, server_config: dict[str, Any] | None = None, preview: bool = False,
                 existing: frozenset[str] = frozenset(), quotas: Mapping[str, int | str | list[QuotaRow]] | None = None,
                 unknown: Mapping[str, Collection[str]] | None = None):
        self.project = project
        self.server_config = engine_versions.CURRENT if server_config is None else server_config
        self.preview = preview
        self.existing = existing
        self.quotas = dict(quotas or {})
        self.unknown = dict(unknown or {})

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
            endpoints = dict(inputs.get("controlPlaneEndpointsConfig") or {})
            endpoints["dnsEndpointConfig"] = {**(endpoints.get("dnsEndpointConfig") or {}),
                                              "endpoint": MOCK_DNS_ENDPOINT.format(location=inputs.get("location"))}
            state.update(endpoint=MOCK_ENDPOINT, masterAuth={"clusterCaCertificate": MOCK_CA},
                         controlPlaneEndpointsConfig=endpoints,
                         selfLink=f"projects/{project}/locations/{inputs.get('location')}/clusters/{name}")
        elif t == "gcp:compute/address:Address":
            state["selfLink"] = (f"https://www.googleapis.com/compute/v1/projects/{project}/regions/"
                                 f"{inputs.get('region')}/addresses/{name}")
        elif t == "gcp:serviceaccount/account:Account":
            state.update(email=f"{inputs['accountId']}@{project}.iam.gserviceaccount.com",
                         member=f"serviceAccount:{inputs['accountId']}@{project}.iam.gserviceaccount.com")
        elif t == "gcp:storage/bucket:Bucket":
            state["url"] = f"gs://{name}"
        elif t == "random:index/randomId:RandomId":
            digest = hashlib.sha256(args.name.encode()).hexdigest()
            state.update(hex=digest[: 2 * int(inputs.get("byteLength", 4))], b64Url=digest[:8])
        elif t.startswith("kubernetes:"):
            meta = dict(inputs.get("metadata") or {})
            meta.setdefault("name", f"{args.name}-mock")
            # The API server assigns a uid at creation: unknown until then (a preview of a new object).
            meta.setdefault("uid", UNKNOWN if self.preview and t not in self.existing
                            else str(uuid.uuid5(uuid.NAMESPACE_URL, f"{t}/{args.name}")))
            state["metadata"] = meta
        elif t.startswith("pulumi-python:dynamic"):
            # What only the provider's create can know (which attempt, its status) is unknown in a
            # plan, as in `pulumi preview`: shown as UNKNOWN, never as a made-up value.
            state.update(job_id=UNKNOWN, status=UNKNOWN, message=UNKNOWN, attempt=UNKNOWN,
                         dashboard_url=UNKNOWN)
        being_created = self.preview and t not in self.existing
        if self.preview and not being_created:
            state.update(dict.fromkeys(self.unknown.get(t, ()), _UNKNOWN_VALUE))
        return ("" if being_created else f"{args.name}-id"), state

    def call(self, args: pmocks.MockCallArgs) -> tuple[dict, list | None]:
        if args.token == "gcp:organizations/getProject:getProject":
            pid = args.args.get("projectId") or self.project
            return {"projectId": pid, "number": MOCK_PROJECT_NUMBER, "name": pid}, []
        if args.token == "gcp:container/getEngineVersions:getEngineVersions":
            found = engine_versions.lookup(self.server_config, args.args.get("versionPrefix"))
            return {**found, "location": args.args.get("location"), "project": args.args.get("project"),
                    "id": f"{args.args.get('location')}-versions"}, []
        if args.token == "gcp:organizations/getClientConfig:getClientConfig":
            return {"project": self.project, "accessToken": "mock-token"}, []
        if args.token == GET_QUOTA_INFO:
            quota_id = args.args.get("quotaId", "")
            override = self.quotas.get(quota_id)
            if isinstance(override, str):
                return {}, [("parent", override)]
            if isinstance(override, list):
                infos = override
            elif override is not None:
                infos = [({}, override or None, ["global"] if "ALL-REGIONS" in quota_id else _REGIONS)]
            elif quota_id in MOCK_QUOTAS:
                infos = MOCK_QUOTAS[quota_id]
            else:
                return {}, [("quotaId", quota_not_found(quota_id))]
            return quota_info(self.project, quota_id, infos), []
        return dict(args.args), []


# The CLI's secrets-provider settings share the prefix but are not config (the SDK reads no key from them).
_NOT_CONFIG = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")


def shell_config_vars() -> list[str]:
    """The shell's variables the Python SDK would read as config (pulumi/runtime/config.py: PULUMI_CONFIG,
    PULUMI_CONFIG_<KEY>, PULUMI_CONFIG_SECRET_KEYS): a run under mocks takes its config from the stack only."""
    return sorted(k for k in os.environ if (k == "PULUMI_CONFIG" or k.startswith("PULUMI_CONFIG_"))
                  and k not in _NOT_CONFIG)


@contextmanager
def without_shell_config() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in shell_config_vars()}
    try:
        yield
    finally:
        os.environ.update(saved)


class _Recorder(logging.Handler):
    def __init__(self, result: Run):
        super().__init__()
        self.result = result

    def emit(self, record: logging.LogRecord) -> None:
        self.result.logs.append((record.levelname.lower(), record.getMessage()))


def _recording_logger(result: Run) -> logging.Logger:
    """The logger pulumi's MockEngine writes the program's pulumi.log messages to: into `result.logs` only.
    Info and above, what `pulumi up` shows without --debug: the SDK logs a few hundred debug lines per stack
    (each registration's steps), which nothing here reads."""
    logger = logging.getLogger(f"{__name__}.program")
    logger.handlers = [_Recorder(result)]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


@contextmanager
def without_stack_traces() -> Iterator[None]:
    """The SDK takes a traceback of every registration and turns each frame's file into a URI, for the
    engine's diagnostics (pulumi/runtime/resource.py `_get_stack_trace`, called by register_resource,
    pulumi 3.272.0); mocks keep none of it, and it is a tenth of a plan's own time. In its place the
    empty trace the SDK itself sends when it finds no user frame. Should an SDK no longer have the
    function, nothing is replaced and the plan is only slower."""
    original = getattr(presource, "_get_stack_trace", None)
    if original is None:
        yield
        return
    presource._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        presource._get_stack_trace = original


def run(program: Callable[[], None], config: dict[str, str], stack: str, secret_keys: list[str] | None = None,
        project: str = "verl-gke", result: Run | None = None, server_config: dict[str, Any] | None = None,
        preview: bool = False, existing: frozenset[str] = frozenset(),
        quotas: Mapping[str, int | str | list[QuotaRow]] | None = None,
        unknown: Mapping[str, Collection[str]] | None = None) -> Run:
    """Run `program` once under fresh mocks with `config`; return what it registered and exported.

    Pass `result` to see what was registered even when the program raises. `preview=True` runs it as
    `pulumi preview` on a project where only the resource types in `existing` are already in state.
    """
    result = result if result is not None else Run()
    # Pulumi's own Python host turns asyncio's logger off (pulumi/pulumi, sdk/python/cmd/
    # pulumi-language-python-exec, at 061aba8f117c80e30c05ffdba9eba1da11e44f1f): a failed apply leaves every output
    # downstream of it unobserved, and asyncio would log each one, traceback formatted, when the collector
    # reaches it (~800 for one preflight failure of a stack).
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    gcp_project = config.get("gcp:project", "mock-project")
    set_all_config(dict(config), list(secret_keys or []))
    psettings.ROOT.set(None)
    mocks = ProgramMocks(gcp_project, server_config, preview, existing, quotas, unknown)
    monitor = RecordingMonitor(mocks, result)
    pmocks.set_mocks(mocks, project=project, stack=stack, preview=preview, monitor=monitor,
                     logger=_recording_logger(result))
    psettings.SETTINGS.rpc_manager.clear()
    psettings.SETTINGS.outputs.clear()
    with without_shell_config(), without_stack_traces():
        _sync_await(run_pulumi_func(program))
        root = psettings.get_root_resource()
        for key, value in root.outputs.items():
            out = pulumi.Output.from_input(value)
            result.outputs[key] = _sync_await(out.future())
            if _sync_await(out.is_secret()):
                result.secret_outputs.add(key)
    return result
