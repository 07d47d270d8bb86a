"""RayCluster: the KubeRay `ray.io/v1` RayCluster that runs the GRPO job: a CPU head and one GPU worker group.

Fixed from the tutorial's manifests: the name comes from the stack (never "b200" on H200); the head
runs on on-demand CPU capacity and takes no Ray tasks; workers request what the accelerator's node
can actually allocate on Standard and what Google's Autopilot sample requests on Autopilot (not a
fixed 220 CPU / 2800Gi); the driver and gIB host directories (the accelerator row's; none without
RDMA) are mounted read-only in both modes, as Google's Autopilot RDMA samples do; Autopilot workers
are pinned to the RoCE VPC's zone; verl comes from the bucket via PYTHONPATH (staged by the
data-prep Job), so there is no editable-install init container.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from catalog import naming
from catalog.accelerators import GPU_RESOURCE, Accelerator, foreign_accelerator_problem, nccl_env
from catalog.autopilot import ACCELERATOR, COMPUTE_CLASS_SELECTOR, EXTENDED_DURATION, PERFORMANCE
from catalog.capacity import FLEX_START, RESERVATION, SPOT, Capacity
from catalog.gcsfuse import (
    BUFFER_VOLUME,
    CACHE_VOLUME,
    HEAD_SIDECAR,
    STANDARD_SIDECAR_REQUEST,
    WORKER_SIDECAR,
    cache_volume_gib,
)
from catalog.gcsfuse import pod_annotations as gcsfuse_pod_annotations
from catalog.nics import DEFAULT_INTERFACE_ANNOTATION, INTERFACES_ANNOTATION, rdma_count_of
from catalog.paths import CHECKPOINT_MOUNT, MOUNT, BucketPaths
from catalog.problems import Problem
from catalog.ray import (
    API_VERSION,
    CLIENT_PORT,
    DASHBOARD_PORT,
    GCS_PORT,
    HEAD_CPU,
    HEAD_EPHEMERAL_GIB,
    HEAD_MEMORY_GIB,
    HEAD_READY_JSONPATH,
    MAX_CLUSTER_NAME,
    WORKER_CONTAINER,
    WORKER_GROUP,
    head_service,
)
from components.problems import require

# On the GPU nodes' local SSDs: /tmp, Ray spill, the GCS FUSE file caches. The whole pod, sidecar
# included, stays within what Autopilot is known to admit on an 8-GPU node (catalog.autopilot).
WORKER_EPHEMERAL_GIB = int(ACCELERATOR.max_pod_ephemeral_gib - WORKER_SIDECAR.ephemeral_storage_gib)
SHM_MAX_GIB = 256  # Ray's object store (capped at 200 GB by default) lives in /dev/shm, plus NCCL/vLLM
BUCKET_VOLUME = "training-bucket"
# pulumi-kubernetes awaits a custom resource only when told how (pulumi/pulumi-kubernetes@00658428
# provider/pkg/metadata/overrides.go ReadyCondition; since v4.18.0): `condition=<Type>[=<Status>]` or
# `jsonpath={<path>}[=<value>]` like `kubectl wait --for` (await/condition/). While waiting `pulumi up` shows
# the await's status line (for our path "Missing {path}", from v4.24.0 "{path} selected nothing") and the
# object's Warning events; the wait ends after `pulumi.com/timeoutSeconds`.
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
DEFAULT_READY_TIMEOUT_S = 3600
CHECKPOINT_VOLUME = "checkpoints"


def await_annotations(ready_timeout_s: int) -> dict[str, str]:
    """Make `pulumi up` wait for (and show) the head coming up: its Pod's address (catalog.ray), which
    still holds once the GPU workers are scaled to zero, so an update then does not wait for GPUs."""
    return {WAIT_FOR_ANNOTATION: f"jsonpath={HEAD_READY_JSONPATH}",
            TIMEOUT_ANNOTATION: str(int(ready_timeout_s))}


# Autopilot placement by node selector: the zone with the Kubernetes well-known label (GKE "Deploy
# Autopilot Pods in specific zones"), the driver with GKE's label (values default | latest; GKE "Deploy
# GPU workloads in Autopilot"), reservations with cloud.google.com/reservation-name (GKE "Consume
# reserved zonal resources": Autopilot takes specific reservations only, selected by name).
ZONE_LABEL = "topology.kubernetes.io/zone"
DRIVER_LABEL = "cloud.google.com/gke-gpu-driver-version"


def shm_gib(acc: Accelerator, autopilot: bool = False) -> int:
    """/dev/shm size: memory-backed, so it counts against the worker's memory limit."""
    return min(SHM_MAX_GIB, acc.worker_size(autopilot)[1] // 4)


def worker_cache_gib(file_cache_gib: int) -> int:
    """The worker's gke-gcsfuse-cache volume: larger than the reader mount's bounded file cache, the only
    cache it holds (the checkpoint mount has none: catalog.gcsfuse.checkpoint_mount_options)."""
    return cache_volume_gib(file_cache_gib)


def worker_node_selector(acc: Accelerator, autopilot: bool, capacity: Capacity,
                         gpu_pool_name: pulumi.Input[str] | None,
                         zone: str | None = None) -> dict[str, pulumi.Input[str]]:
    """Where GPU workers run. Standard: the GPU pool (which fixes machine, zone, driver and capacity).
    Autopilot: the accelerator, the RoCE VPC's zone, the driver and the capacity type, as strings."""
    if not autopilot:
        selector: dict[str, pulumi.Input[str]] = {"cloud.google.com/gke-nodepool": gpu_pool_name}
    else:
        selector = {
            "cloud.google.com/gke-accelerator": acc.accelerator_type,
            "cloud.google.com/gke-accelerator-count": str(acc.gpus_per_node),
            # The RoCE network profile is zonal (<zone>-vpc-roce): a node elsewhere has no RDMA NICs.
            ZONE_LABEL: str(zone),
        }
        if acc.gpu_driver != "DEFAULT":  # Autopilot's spelling of the pool's gpu_driver_version
            selector[DRIVER_LABEL] = acc.gpu_driver.lower()
        if capacity.kind == SPOT:
            selector["cloud.google.com/gke-spot"] = "true"
        elif capacity.kind == RESERVATION:
            selector["cloud.google.com/reservation-name"] = capacity.reservation
            selector["cloud.google.com/reservation-affinity"] = "specific"
    if capacity.kind == FLEX_START:
        # Flex-start nodes carry this label in both modes; GKE documents it as required on workloads.
        selector["cloud.google.com/gke-flex-start"] = "true"
    return selector


def head_node_selector(autopilot: bool,
                       cpu_pool_name: pulumi.Input[str] | None) -> dict[str, pulumi.Input[str]]:
    """The head holds the GCS: on Standard the on-demand CPU pool; on Autopilot the Performance
    compute class, on-demand (a spot preemption would take the whole Ray cluster). General-purpose
    caps a pod at 10 GiB ephemeral storage, below the head's 9 Gi plus its GCS FUSE sidecar
    (catalog.autopilot); Google's verl Autopilot sample runs its head in Performance too."""
    if autopilot:
        return {COMPUTE_CLASS_SELECTOR: PERFORMANCE.selector}
    return {"cloud.google.com/gke-nodepool": cpu_pool_name}


def _env(values: Mapping[str, pulumi.Input[str]]) -> list[dict[str, pulumi.Input[str]]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _resources(values: Mapping[str, str]) -> dict[str, dict[str, str]]:
    # requests = limits: Guaranteed QoS, and what Autopilot bills and enforces anyway.
    return {"requests": dict(values), "limits": dict(values)}


def _bucket_volume(pvc_name: pulumi.Input[str], name: str = BUCKET_VOLUME, read_only: bool = False) -> dict:
    claim: dict = {"claimName": pvc_name}
    if read_only:
        claim["readOnly"] = True
    return {"name": name, "persistentVolumeClaim": claim}


@dataclass
class RayClusterArgs:
    name: str  # RayCluster name, e.g. f"{prefix}-{stack}-ray"
    namespace: pulumi.Input[str]  # TrainingStorage.namespace
    accelerator: Accelerator
    gpu_nodes: int
    autopilot: bool
    image: str
    ray_version: str  # the Ray version inside `image`
    service_account: pulumi.Input[str]  # TrainingStorage.ksa_name (bound on the bucket)
    pvc_name: pulumi.Input[str]  # TrainingStorage.pvc_name: the reader mount (workers)
    # NetworkMapping.pod_annotations; empty for an accelerator without RDMA NICs (no NetworkMapping).
    network_annotations: Mapping[str, str]
    paths: BucketPaths
    # TrainingStorage.writer_pvc_name: the head reads verl's source through it, read-only (no file
    # cache: the head reads a few small files once).
    writer_pvc_name: pulumi.Input[str]
    checkpoint_pvc_name: pulumi.Input[str]  # TrainingStorage.checkpoint_pvc_name, at CHECKPOINT_MOUNT
    # TrainingStorage.head_checkpoint_pvc_name: the run supervisor (the job's driver, on the head) reads
    # the tracker file, keeps its recovery state and prunes there.
    head_checkpoint_pvc_name: pulumi.Input[str]
    file_cache_gib: int = 16  # per reading mount (the storage PVs' file-cache:max-size-mb)
    # The worker's gke-gcsfuse-buffer volume: what the checkpoint mount still stages on the node's disk
    # (catalog.gcsfuse.checkpoint_buffer_gib). 0 leaves the webhook's unsized default.
    checkpoint_buffer_gib: int = 0
    capacity: Capacity = field(default_factory=Capacity)
    cpu_pool_name: pulumi.Input[str] | None = None  # Standard only: the head's pool
    gpu_pool_name: pulumi.Input[str] | None = None  # Standard only: the workers' pool
    zone: str | None = None  # Autopilot only: the RoCE VPC's zone, where the workers must land
    worker_ephemeral_storage_gib: int = WORKER_EPHEMERAL_GIB
    # The head's request (= limit): the stack sizes it (rayHeadCpu / rayHeadMemoryGib) so a small CPU
    # node can hold it next to the staging Job.
    head_cpu: int = HEAD_CPU
    head_memory_gib: int = HEAD_MEMORY_GIB
    ready_timeout_s: int = DEFAULT_READY_TIMEOUT_S  # how long `pulumi up` waits for the head
    # Worker env from Secrets: variable -> (Secret name, key), e.g. WANDB_API_KEY for verl's tracker,
    # which runs in the TaskRunner on a worker (verl trainer/main_ppo.py: never on the head).
    worker_secret_env: Mapping[str, tuple[pulumi.Input[str], str]] = field(default_factory=dict)

    def problems(self) -> list[Problem]:
        found: list[Problem] = []

        def bad(field_name: str, allowed: str) -> None:
            found.append(Problem(field_name, allowed))

        acc = self.accelerator
        if problem := naming.dns_1035_label_problem(self.name, MAX_CLUSTER_NAME):
            bad("name", problem)
        if problem := foreign_accelerator_problem(str(self.name), acc.key):
            bad("name", problem)
        if isinstance(self.namespace, str) and (problem := naming.dns_label_problem(self.namespace)):
            bad("namespace", problem)
        if isinstance(self.gpu_nodes, bool) or not isinstance(self.gpu_nodes, int) or self.gpu_nodes < 1:
            bad("gpu_nodes", "must be an integer >= 1")
        found += [dataclasses.replace(p, key=f"capacity.{p.key}") for p in self.capacity.problems()]
        for field_name in ("cpu_pool_name", "gpu_pool_name"):
            given = getattr(self, field_name) is not None
            if self.autopilot and given:
                bad(field_name, "must be None on Autopilot (there are no node pools to select)")
            elif not self.autopilot and not given:
                bad(field_name, "is required on Standard (the node pool's name)")
        if self.autopilot and (problem := naming.zone_problem(str(self.zone))):
            bad("zone", f"is required on Autopilot (the RoCE VPC's zone): {problem}")
        for field_name, check in (("image", naming.image_ref_problem), ("ray_version", naming.ray_version_problem)):
            if problem := check(getattr(self, field_name)):
                bad(field_name, problem)
        missing = {DEFAULT_INTERFACE_ANNOTATION, INTERFACES_ANNOTATION} - set(self.network_annotations)
        if not acc.rdma:
            if self.network_annotations:
                bad("network_annotations", f"must be empty: {acc.key} has no RDMA NICs to attach")
        elif missing:
            bad("network_annotations", f"lacks {sorted(missing)}: pass NetworkMapping.pod_annotations")
        elif (nics := rdma_count_of(dict(self.network_annotations))) != acc.rdma_nics:
            bad("network_annotations", f"attaches {nics} RDMA networks; {acc.key} has {acc.rdma_nics} RDMA NICs")
        for field_name in ("verl_src", "hf_home"):
            if not getattr(self.paths, field_name).startswith(MOUNT + "/"):
                bad(f"paths.{field_name}", f"must be under the bucket mount {MOUNT}")
        if isinstance(self.checkpoint_buffer_gib, bool) or not isinstance(self.checkpoint_buffer_gib, int) \
                or self.checkpoint_buffer_gib < 0:
            bad("checkpoint_buffer_gib", "must be an integer >= 0 (0: the webhook's default buffer)")
        if not isinstance(self.worker_ephemeral_storage_gib, int) or self.worker_ephemeral_storage_gib < 1:
            bad("worker_ephemeral_storage_gib", "must be an integer >= 1")
        elif isinstance(self.file_cache_gib, int) and isinstance(self.checkpoint_buffer_gib, int) and \
                (volumes := worker_cache_gib(self.file_cache_gib) + self.checkpoint_buffer_gib) \
                >= self.worker_ephemeral_storage_gib:
            # emptyDirs count against the pod's ephemeral limit, i.e. the Ray container's.
            bad("file_cache_gib", f"the worker's file cache ({worker_cache_gib(self.file_cache_gib)} GiB) and "
                f"checkpoint buffer ({self.checkpoint_buffer_gib} GiB) volumes, {volumes} GiB, must leave room in "
                f"worker_ephemeral_storage_gib = {self.worker_ephemeral_storage_gib}")
        for field_name in ("head_cpu", "head_memory_gib"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                bad(field_name, "must be an integer >= 1")
        if isinstance(self.ready_timeout_s, bool) or not isinstance(self.ready_timeout_s, int) \
                or self.ready_timeout_s < 1:
            bad("ready_timeout_s", "must be an integer number of seconds >= 1")
        if clash := set(gcsfuse_pod_annotations(self.autopilot, WORKER_SIDECAR)) & set(self.network_annotations):
            bad("network_annotations", f"{sorted(clash)} collide with the GCS FUSE annotations")
        if clash := set(RayCluster._common_env(self)) & set(nccl_env(acc)):  # two owners: refuse, never pick one
            bad("accelerator", f"{acc.key}: {sorted(clash)} set by both the bucket paths and nccl_env()")
        if clash := set(self.worker_secret_env) & {*RayCluster._common_env(self), *nccl_env(acc)}:
            bad("worker_secret_env", f"{sorted(clash)} already set")
        for var, ref in self.worker_secret_env.items():
            if problem := naming.env_var_problem(var):
                bad("worker_secret_env", f"{var!r}: {problem}")
            if not (isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[1], str)):
                bad("worker_secret_env", f"{var!r}: values must be (secret name, key)")
        if not self.paths.checkpoint_dir.startswith(CHECKPOINT_MOUNT + "/"):
            bad("paths.checkpoint_dir", f"must be under the checkpoint mount {CHECKPOINT_MOUNT}")
        # The accelerator table promises the worker fits its node next to the sidecar: hold it to that.
        sidecar = WORKER_SIDECAR if self.autopilot else STANDARD_SIDECAR_REQUEST
        cpu, memory_gib = acc.worker_size(self.autopilot)
        if cpu + sidecar.cpu > acc.allocatable_cpu:
            bad("accelerator", f"{acc.key}: worker CPU {cpu} + GCS FUSE sidecar {sidecar.cpu} exceeds the "
                f"node's allocatable {acc.allocatable_cpu:.2f} CPU")
        if memory_gib + sidecar.memory_gib > acc.allocatable_memory_gib:
            bad("accelerator", f"{acc.key}: worker memory {memory_gib} GiB + GCS FUSE sidecar "
                f"{sidecar.memory_gib} exceeds the node's allocatable {acc.allocatable_memory_gib:.0f} GiB")
        return found


# ----------------------------------------------------------------------------- scaled at run time (issue 14)
# The run supervisor scales the GPU group to 0 when a run ends and the job provider back to
# gpuNodes before the next one, with JSON patches on replicas/minReplicas. Pulumi must neither
# reset that nor recreate the cluster for it (a replacement deletes the head and its running job).
# `workerGroupSpecs` has no x-kubernetes-list-type in KubeRay's CRD, so server-side apply treats the
# whole list as one atomic field, owned by whoever patched it last: Pulumi ignores the whole list
# (pulumi-kubernetes then leaves a field owned by another manager out of its apply: provider/pkg/await,
# "Drop the field from the inputs if it is present on the cluster and managed by another manager";
# a path into the list would not match: "TODO: ... support nested arrays"). What Pulumi still has to
# act on in the list, every worker group setting except the two replica counts, reaches it through
# a digest annotation: a changed template, image, size or group still recreates the cluster, since
# KubeRay does not roll existing pods when the template changes (same name: delete first).
WORKER_GROUPS_ANNOTATION = "verl-gke.io/worker-groups"
RUNTIME_FIELDS = ("replicas", "minReplicas")


def groups_digest(groups: list[dict]) -> str:
    """sha256 of resolved worker groups without the counts set at run time."""
    kept = [{k: v for k, v in g.items() if k not in RUNTIME_FIELDS} for g in groups]
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def worker_groups_digest(groups: list[dict]) -> pulumi.Output[str]:
    return pulumi.Output.from_input(groups).apply(groups_digest)


def runtime_scaled_options() -> dict:
    return {
        "ignore_changes": ["spec.workerGroupSpecs"],
        "replace_on_changes": ["spec", f'metadata.annotations["{WORKER_GROUPS_ANNOTATION}"]'],
        "delete_before_replace": True,
    }


class RayCluster(pulumi.ComponentResource):
    cluster: k8s.apiextensions.CustomResource
    name: str
    namespace: pulumi.Output[str]
    head_service: str  # headless, reachable inside the cluster or via the API server's service proxy
    dashboard_port: int
    expected_gpus: int  # GPUs Ray must report before the job can start
    uid: pulumi.Output[str]  # new with every replacement: a job that takes it as an input follows the cluster

    def __init__(self, name: str, args: RayClusterArgs, opts: pulumi.ResourceOptions | None = None):
        require("RayCluster", args)
        super().__init__("verl-gke:ray_cluster:RayCluster", name, None, opts)
        acc = args.accelerator
        spec = {
            "rayVersion": args.ray_version,
            "headGroupSpec": self.head_group(args),
            "workerGroupSpecs": [self.worker_group(args)],
        }
        self.cluster = k8s.apiextensions.CustomResource(
            f"{name}-raycluster", api_version=API_VERSION, kind="RayCluster",
            metadata={"name": args.name, "namespace": args.namespace,
                      "annotations": {**await_annotations(args.ready_timeout_s),
                                      WORKER_GROUPS_ANNOTATION: worker_groups_digest(spec["workerGroupSpecs"])}},
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self, **runtime_scaled_options()))
        self.name = args.name
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.head_service = head_service(args.name)
        self.dashboard_port = DASHBOARD_PORT
        self.expected_gpus = args.gpu_nodes * acc.gpus_per_node
        self.uid = self.cluster.metadata.apply(lambda m: (m or {}).get("uid") if isinstance(m, dict) else m.uid)
        self.register_outputs({
            "name": self.name, "namespace": self.namespace, "head_service": self.head_service,
            "dashboard_port": self.dashboard_port, "expected_gpus": self.expected_gpus,
        })

    @staticmethod
    def _common_env(args: RayClusterArgs) -> dict[str, str]:
        # Ray's worker processes inherit the raylet's environment: every actor imports verl from the bucket.
        return {"PYTHONPATH": args.paths.verl_src, "HF_HOME": args.paths.hf_home,
                # No __pycache__ written through GCS FUSE next to verl's source by every process.
                "PYTHONDONTWRITEBYTECODE": "1",
                # The datasets library's Arrow cache on the pod's own disk, not through the bucket.
                "HF_DATASETS_CACHE": args.paths.datasets_cache}

    @staticmethod
    def head_group(args: RayClusterArgs) -> dict:
        """The head group as registered: pure, so the gate sizes the pod it renders (stacks.node_fit)."""
        pod_spec: dict = {
            "serviceAccountName": args.service_account,
            "containers": [{
                "name": "ray-head",
                "image": args.image,
                "ports": [
                    {"containerPort": GCS_PORT, "name": "gcs-server"},
                    {"containerPort": DASHBOARD_PORT, "name": "dashboard"},
                    {"containerPort": CLIENT_PORT, "name": "client"},
                ],
                "env": _env(RayCluster._common_env(args)),
                "resources": _resources({"cpu": str(args.head_cpu), "memory": f"{args.head_memory_gib}Gi",
                                         "ephemeral-storage": f"{HEAD_EPHEMERAL_GIB}Gi"}),
                "volumeMounts": [
                    {"name": "ray-logs", "mountPath": "/tmp/ray"},
                    {"name": BUCKET_VOLUME, "mountPath": MOUNT, "readOnly": True},
                    # The job's driver (the run supervisor) runs here (Ray's job manager places it on
                    # the head: tools.placement): the tracker file, its recovery state, pruning.
                    {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT},
                ],
            }],
            "volumes": [{"name": "ray-logs", "emptyDir": {}},
                        _bucket_volume(args.writer_pvc_name, read_only=True),
                        _bucket_volume(args.head_checkpoint_pvc_name, CHECKPOINT_VOLUME)],
        }
        selector = head_node_selector(args.autopilot, args.cpu_pool_name)
        if selector:
            pod_spec["nodeSelector"] = selector
        return {
            # num-cpus 0: no task or actor is placed on the head. verl wants its TaskRunner off the
            # head, and a 12-CPU/32Gi pod that also holds the GCS must not run data loading.
            # The job's driver still runs here (Ray's job entrypoint needs no CPU by default).
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
            "template": {
                "metadata": {"annotations": {**gcsfuse_pod_annotations(args.autopilot, HEAD_SIDECAR),
                                             **(EXTENDED_DURATION if args.autopilot else {})}},
                "spec": pod_spec,
            },
        }

    @staticmethod
    def worker_group(args: RayClusterArgs) -> dict:
        """The GPU worker group as registered (pure, like head_group)."""
        acc = args.accelerator
        common = RayCluster._common_env(args)
        nccl = nccl_env(acc)
        gcsfuse = gcsfuse_pod_annotations(args.autopilot, WORKER_SIDECAR)
        mounts = [
            {"name": "shared-memory", "mountPath": "/dev/shm"},
            {"name": "ray-tmp", "mountPath": "/tmp"},
            {"name": BUCKET_VOLUME, "mountPath": MOUNT},
            {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT},
        ]
        volumes: list[dict] = [
            {"name": "shared-memory",
             "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib(acc, args.autopilot)}Gi"}},
            {"name": "ray-tmp", "emptyDir": {}},
            _bucket_volume(args.pvc_name),
            _bucket_volume(args.checkpoint_pvc_name, CHECKPOINT_VOLUME),
            # The GCS FUSE file caches of both mounts on the node's local SSDs (counted in the pod's
            # ephemeral storage), not in the sidecar's own limit (gcs-fuse-csi-driver
            # docs/troubleshooting.md: a default cache must fit the sidecar's ephemeral limit).
            {"name": CACHE_VOLUME, "emptyDir": {"sizeLimit": f"{worker_cache_gib(args.file_cache_gib)}Gi"}},
        ]
        if args.checkpoint_buffer_gib:
            # Where the sidecar stages what it does not stream (a rewritten shard), sized and on the same
            # disk, counted in the pod's ephemeral storage like the cache.
            volumes.append({"name": BUFFER_VOLUME, "emptyDir": {"sizeLimit": f"{args.checkpoint_buffer_gib}Gi"}})
        # The driver's libraries and the gIB NCCL plugin (catalog.accelerators.nccl_env), put there by the NCCL RDMA
        # installer, read-only in both modes. Standard: type Directory, so the pod waits for the
        # installer instead of mounting an empty directory. Autopilot: exactly the volume Google's
        # Autopilot RDMA sample declares (no type), the form its hostPath allow-list admits.
        for d in acc.host_dirs:
            mounts.append({"name": d.volume, "mountPath": d.mount_path, "readOnly": True})
            host_path = {"path": d.host_path} if args.autopilot else {"path": d.host_path, "type": "Directory"}
            volumes.append({"name": d.volume, "hostPath": host_path})
        cpu, memory_gib = acc.worker_size(args.autopilot)
        env = _env({**common, **nccl})
        env += [{"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
                for var, (secret, key) in args.worker_secret_env.items()]
        container = {
            "name": WORKER_CONTAINER,
            "image": args.image,
            "env": env,
            "resources": _resources({
                "cpu": str(cpu),
                "memory": f"{memory_gib}Gi",
                GPU_RESOURCE: str(acc.gpus_per_node),
                "ephemeral-storage": f"{args.worker_ephemeral_storage_gib}Gi",
            }),
            "volumeMounts": mounts,
        }
        return {
            "groupName": WORKER_GROUP,
            # The GRPO job needs every GPU node: no autoscaler. Set to 0 when a run ends and back
            # to gpuNodes by the next submission (see runtime_scaled_options).
            "replicas": args.gpu_nodes,
            "minReplicas": args.gpu_nodes,
            "maxReplicas": args.gpu_nodes,
            # Ray's CPU count = the pod's CPU request (GPUs and memory KubeRay derives from the limits).
            "rayStartParams": {"num-cpus": str(cpu)},
            "template": {
                "metadata": {"annotations": {**gcsfuse, **args.network_annotations}},
                "spec": {
                    "serviceAccountName": args.service_account,
                    "nodeSelector": worker_node_selector(acc, args.autopilot, args.capacity,
                                                         args.gpu_pool_name, args.zone),
                    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        }
