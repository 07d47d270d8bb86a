"""The Ray job's input, typed: what a program gives RayJob (RayJobArgs) and what the provider reads (JobInput).

One description of each field, its default and its rules. The provider gets its props from the engine,
not from the program: numbers as doubles (16 comes back as 16.0), None dropped, engine keys such as
`__provider`, and values not known yet at preview. `JobInput.from_props` takes all of these; `problems()`
judges what is known, never a value that is not known yet, and raises nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Self, TypedDict

from catalog.problems import Problem
from catalog.ray import cluster_of_service
from components.ray_client import PROGRESS_EVERY_S, GkeDashboard
from components.ray_presence import PROBE_WINDOW_S

if TYPE_CHECKING:
    import pulumi

SUBMISSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class WorkerGroup(TypedDict, total=False):
    """The RayCluster worker group the provider scales back to `replicas` before waiting for the GPUs."""

    namespace: str
    name: str  # the RayCluster's name
    group: str  # the worker group's groupName
    index: int  # its position in spec.workerGroupSpecs (the patch tests the name there)
    replicas: int


@dataclass
class RayJobArgs:
    """What to run where. `submission_id` must change whenever the job should (hash the content)."""

    submission_id: pulumi.Input[str]
    entrypoint: pulumi.Input[str]
    expected_gpus: pulumi.Input[int] = 0  # wait until the Ray cluster has this many GPUs
    address: pulumi.Input[str] | None = None  # a dashboard URL (a port-forward, a local head)...
    gke: pulumi.Input[GkeDashboard] | None = None  # ... or the KubeRay head service behind GKE's API server
    runtime_env: pulumi.Input[dict[str, Any]] = field(default_factory=dict)
    metadata: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    ready_timeout_s: pulumi.Input[int] = 3600
    wait_for_completion: pulumi.Input[bool] = False
    completion_timeout_s: pulumi.Input[int] = 86400
    resubmit_on_failure: pulumi.Input[bool] = True
    log_tail_lines: pulumi.Input[int] = 50
    stop_timeout_s: pulumi.Input[int] = 120
    # One budget for resubmissions and the run supervisor's in-run restarts (components.ray_recovery).
    max_recoveries: pulumi.Input[int] = 3
    # The RayCluster worker group to scale back up before waiting for the GPUs (gke only).
    scale: pulumi.Input[WorkerGroup] | None = None
    logs_hint: pulumi.Input[str] = ""  # a command that reads the job's logs where they outlive the pods
    # The RayCluster's uid: a property dependency, so a replaced RayCluster replaces (resubmits) the job
    # in the same `up`.
    cluster_uid: pulumi.Input[str] | None = None

    SECRET_FIELDS = ("runtime_env",)  # its env_vars may carry a token: never shown in a problem

    def problems(self) -> list[Problem]:
        """Each bad value, by field; a value not known yet (an Output, a preview unknown) is not judged."""
        bad: list[Problem] = []
        known = {f.name: v for f in fields(self) if not _pending(v := getattr(self, f.name))}
        has_address, has_gke = _given(self.address), _given(self.gke)
        if has_address == has_gke:
            bad.append(Problem("address", "give exactly one of `address` (dashboard URL) and `gke` (service proxy)"))
        address = known.get("address")
        if isinstance(address, str) and not address.startswith(("http://", "https://")):
            bad.append(Problem("address", f"{address!r} is not an http(s):// URL"))
        if isinstance(self.gke, dict):  # field by field: at preview the endpoint and CA are often unknown
            bad += [Problem(f"gke.{key}", "required") for key in ("endpoint", "ca_certificate", "namespace", "service")
                    if not _given(self.gke.get(key))]
        bad += [Problem(key, "required") for key in ("submission_id", "entrypoint") if not _given(getattr(self, key))]
        sid = known.get("submission_id")
        if sid and not (isinstance(sid, str) and SUBMISSION_ID_RE.match(sid)):
            bad.append(Problem("submission_id", f"{sid!r} must match {SUBMISSION_ID_RE.pattern}"))
        entrypoint = known.get("entrypoint")
        if entrypoint and not (isinstance(entrypoint, str) and entrypoint.strip()):
            bad.append(Problem("entrypoint", "must be a non-empty shell command"))
        for key, value in known.items():
            if key in _COUNTS and not (isinstance(value, int) and value >= 0):
                bad.append(Problem(key, f"{value!r} must be an integer >= 0"))
            if key.endswith("_s") and not (isinstance(value, (int, float)) and value > 0):
                bad.append(Problem(key, f"{value!r} must be a number of seconds > 0"))
        scale = known.get("scale")
        if scale is not None:
            if not has_gke:
                bad.append(Problem("scale", "needs `gke`: the worker group is scaled through the Kubernetes API"))
            elif isinstance(scale, dict):
                bad += [Problem(f"scale.{key}", "required") for key in ("namespace", "name", "group", "replicas")
                        if scale.get(key) in (None, "")]
        metadata = known.get("metadata")
        if isinstance(metadata, dict) and not all(isinstance(v, str) or _pending(v) for v in metadata.values()):
            bad.append(Problem("metadata", "Ray job metadata values must be strings"))
        return bad


_COUNTS = ("expected_gpus", "log_tail_lines", "max_recoveries")  # whole numbers, 0 allowed


@dataclass
class JobInput(RayJobArgs):
    """The provider's typed view of its props: RayJobArgs, the provider's own knobs, and what state carries."""

    # How long refresh and delete keep asking before the answer is "unknown" (components.ray_presence).
    probe_window_s: float = PROBE_WINDOW_S
    progress_every_s: float = PROGRESS_EVERY_S  # a console line while waiting for the GPUs
    release_timeout_s: int = 60  # scaling the worker group back to 0 after a failed create
    # The newest attempt state knows of: `read` keeps it in the inputs, `check` carries it to the next
    # create, so a job whose cluster was recreated resumes as the next attempt, never attempt 1.
    last_job_id: str | None = None

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> Self:
        """The fields found in `props` (engine keys and outputs ignored), defaults for the others."""
        return cls(**_fields_of(cls, props, required=("submission_id", "entrypoint")))

    def props(self) -> dict[str, Any]:
        """Every field that has a value, defaults included: what create and update store as outputs."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @property
    def target(self) -> dict[str, Any]:
        """Where the dashboard is, as components.ray_client takes it."""
        return {"address": self.address} if self.address else {"gke": self.gke}

    @property
    def raycluster(self) -> tuple[str, str] | None:
        """(namespace, name) of the RayCluster behind a `gke` target, from `scale` or the head service's name."""
        if not isinstance(self.gke, dict):
            return None
        if isinstance(self.scale, dict) and self.scale.get("name") and self.scale.get("namespace"):
            return str(self.scale["namespace"]), str(self.scale["name"])
        name = cluster_of_service(str(self.gke.get("service") or ""))
        return (str(self.gke["namespace"]), name) if name and self.gke.get("namespace") else None


@dataclass
class JobOutputs:
    """What the provider reports about the job: create writes every field (props without one: its default)."""

    job_id: str | None = None
    attempt: int | None = None
    status: str | None = None
    message: str | None = None
    dashboard_url: str | None = None
    recoveries: int = 0  # of the run's recovery budget, as of the last create or refresh

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> Self:
        return cls(**_fields_of(cls, props))


LAST_JOB_KEY = "last_job_id"  # JobInput.last_job_id: state's, never the program's
# The program's inputs and the provider's knobs: a change to any of them is a change (an update at least).
INPUT_KEYS = tuple(f.name for f in fields(JobInput) if f.name != LAST_JOB_KEY)
OUTPUT_KEYS = tuple(f.name for f in fields(JobOutputs))


def _fields_of(cls: type, props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The dataclass's fields found in `props`, None dropped (the wire drops it too), whole numbers back
    to int where the field is an int (the wire has only doubles); a missing required field is None."""
    given = dict.fromkeys(required)
    for f in fields(cls):
        value = props.get(f.name)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer() and re.search(r"\bint\b", str(f.type)):
            value = int(value)
        given[f.name] = value
    return given


def is_unknown(value: Any) -> bool:
    """A value not known yet at preview, at any depth. The engine sends rpc.UNKNOWN, which the provider
    server turns into pulumi's `Unknown` object (deserialize_properties(..., keep_unknowns=True)); `check`
    hands the sentinel string back. Both forms are one answer: rpc.contains_unknowns sees only the object,
    and a nested sentinel string (an unknown `gke.endpoint`) would pass as a known value."""
    from pulumi.runtime import rpc

    if isinstance(value, str):
        return value == rpc.UNKNOWN
    if isinstance(value, dict):
        return any(is_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(is_unknown(v) for v in value)
    return rpc.contains_unknowns(value)


def _pending(value: Any) -> bool:
    """Not known here: unknown at preview, or a program's Output (the engine resolves it later)."""
    import inspect

    import pulumi

    return is_unknown(value) or isinstance(value, pulumi.Output) or inspect.isawaitable(value)


def _given(value: Any) -> bool:
    """Set: known and non-empty, or not known yet."""
    return _pending(value) or bool(value)
