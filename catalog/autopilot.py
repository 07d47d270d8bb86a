"""GKE Autopilot admission: compute classes, their per-pod limits, and a pure check of a pod template.

Each limit carries its source. Autopilot validates a pod's requests against the limits of the compute
class (or hardware) the pod selects and rejects it when a request is above the maximum ("Resource
requests in Autopilot", cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests).
The GCS FUSE sidecar is part of the pod: its requests come from `catalog.gcsfuse.sidecar_resources`,
the webhook's own rule, so the check sees the pod Autopilot sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from catalog import gcsfuse

GiB = 1024**3
COMPUTE_CLASS_SELECTOR = "cloud.google.com/compute-class"
# Autopilot does not evict a pod with this annotation for node auto-upgrades or scale-down for up to 7 days
# ("Extend the run time of Autopilot Pods", cloud.google.com/kubernetes-engine/docs/how-to/extended-duration-pods).
# The Ray head carries it: the run supervisor runs there, and a drained head kills it before it can release
# the GPU group (Ray SIGKILLs the entrypoint when its job supervisor actor dies).
EXTENDED_DURATION = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
# Autopilot's default for a container without an ephemeral-storage request ("Resource requests in
# Autopilot", default requests: "all other containers: ephemeral storage 1 GiB").
DEFAULT_CONTAINER_EPHEMERAL_GIB = 1.0


@dataclass(frozen=True)
class ComputeClass:
    name: str
    selector: str | None  # value of cloud.google.com/compute-class; None = the default class
    max_pod_ephemeral_gib: float  # largest pod ephemeral-storage request known to be admitted
    source: str


GENERAL_PURPOSE = ComputeClass(
    "general-purpose", None, 10,
    "Autopilot caps a general-purpose pod at 10 GiB ephemeral storage (GKE release notes 2024-R27; "
    "'Resource requests in Autopilot' min/max table)")
# The documented Performance maximum is not in the stored copies of the doc page; the figure is a
# lower bound Google's own sample proves: AIHypercomputerSamples gpu/tuning/verl_rl_autopilot
# data-prep-job.yaml (@ddc521d3) runs a Performance pod with 50Gi in the container plus a 50Gi
# sidecar limit (request = limit by the webhook rule) = 100 GiB.
PERFORMANCE = ComputeClass(
    "Performance", "Performance", 100,
    "lower bound: Google's verl Autopilot data-prep Job admits 50Gi container + 50Gi sidecar in the "
    "Performance class (AIHypercomputerSamples verl_rl_autopilot/data-prep-job.yaml @ddc521d3)")
# GPU pods (accelerator selected by nodeSelector). Lower bound from the same sample's workers:
# ephemeral-storage 1000Gi on a4-highgpu-8g, whose local SSDs back ephemeral storage.
ACCELERATOR = ComputeClass(
    "Accelerator (GPU)", None, 1000,
    "lower bound: Google's verl Autopilot RayCluster workers request 1000Gi ephemeral storage on "
    "8-GPU A4 nodes (AIHypercomputerSamples gpu/tuning/verl_rl_autopilot ray-cluster worker @6f0d9b35)")

# GCS FUSE sidecar on Autopilot GPU nodes: at most 2 vCPU and 14 GiB memory (known issue in
# GoogleCloudPlatform/gcs-fuse-csi-driver docs/troubleshooting.md "Sidecar container resource
# allocation"; docs/known-issues.md links issue #35).
GPU_SIDECAR_MAX_CPU = 2.0
GPU_SIDECAR_MAX_MEMORY_GIB = 14.0
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass
class Verdict:
    mode: str  # "autopilot" | "standard"
    compute_class: str
    ephemeral_request_gib: float  # the whole pod, sidecar included
    ephemeral_limit_gib: float | None  # None: some container has no limit (unbounded on Standard)
    problems: list[str] = field(default_factory=list)

    @property
    def admitted(self) -> bool:
        return not self.problems


def _gib(q: str | None) -> float | None:
    from catalog.naming import quantity

    value = quantity(q) if q is not None else None
    return None if value is None else value / GiB


def compute_class_of(pod_spec: dict) -> ComputeClass:
    selector = (pod_spec.get("nodeSelector") or {})
    if selector.get(COMPUTE_CLASS_SELECTOR) == PERFORMANCE.selector:
        return PERFORMANCE
    containers = pod_spec.get("containers") or []
    if any(GPU_RESOURCE in ((c.get("resources") or {}).get("requests") or {}) for c in containers):
        return ACCELERATOR
    return GENERAL_PURPOSE


def verdict(pod_template: dict, autopilot: bool) -> Verdict:
    """What Autopilot (or Standard) does with this pod template once the GCS FUSE webhook has run."""
    meta, spec = pod_template.get("metadata") or {}, pod_template.get("spec") or {}
    annotations = meta.get("annotations") or {}
    cls = compute_class_of(spec) if autopilot else ComputeClass("standard node pool", None, float("inf"), "")
    problems: list[str] = []
    request = 0.0
    limit: float | None = 0.0
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        res = c.get("resources") or {}
        req = _gib((res.get("requests") or {}).get("ephemeral-storage"))
        lim = _gib((res.get("limits") or {}).get("ephemeral-storage"))
        if req is None:
            req = lim if lim is not None else (DEFAULT_CONTAINER_EPHEMERAL_GIB if autopilot else 0.0)
        request += req
        limit = None if lim is None or limit is None else limit + lim
    if annotations.get(gcsfuse.SIDECAR_ANNOTATION) == "true":
        sidecar = gcsfuse.sidecar_resources(annotations)
        if autopilot:
            zeros = sorted(k for k, v in annotations.items() if k.startswith("gke-gcsfuse/") and v == "0")
            if zeros:
                problems.append(f'{", ".join(zeros)} = "0": Autopilot refuses unset sidecar limits '
                                "(gcs-fuse-csi-driver docs/troubleshooting.md)")
        eph_req, eph_lim = sidecar["ephemeral-storage"]
        request += (eph_req or 0) / GiB
        limit = None if eph_lim is None or limit is None else limit + eph_lim / GiB
        if autopilot and cls is ACCELERATOR:
            cpu_req = sidecar["cpu"][0] or 0
            mem_req = (sidecar["memory"][0] or 0) / GiB
            if cpu_req > GPU_SIDECAR_MAX_CPU or mem_req > GPU_SIDECAR_MAX_MEMORY_GIB:
                problems.append(f"GCS FUSE sidecar {cpu_req:g} CPU / {mem_req:g} GiB on a GPU node: "
                                f"Autopilot allows at most {GPU_SIDECAR_MAX_CPU:g} CPU / "
                                f"{GPU_SIDECAR_MAX_MEMORY_GIB:g} GiB (gcs-fuse-csi-driver docs/troubleshooting.md)")
    if autopilot and request > cls.max_pod_ephemeral_gib:
        problems.append(f"pod ephemeral-storage request {request:g} GiB (sidecar included) exceeds the "
                        f"{cls.name} class maximum {cls.max_pod_ephemeral_gib:g} GiB ({cls.source})")
    return Verdict("autopilot" if autopilot else "standard", cls.name, request, limit, problems)
