"""The components' own validation, run by the gate on the args a stack would give them.

`stacks.config.load()` checks each config key; a component checks its args again at construction
(RayClusterArgs.validate, GkeCluster's and DataPrep's _validate, TrainingStorageArgs.validate,
ProjectBudgetArgs.validate). A value can pass the first and fail the second (an uncatalogued model's
file cache too large for the worker's disk; a model id `Qwen/..` that makes the model folder leave
the bucket mount), which used to end in a traceback halfway through `pulumi up`. `problems(cfg)`
builds each component's args from the StackConfig with the same derivations as stacks.compose
(tests/test_hostile_input.py holds the two to the same values) and calls the component's own
function, so a config the gate accepts constructs every component. Each problem names the config
key it comes from. Outputs (resource names, ids) are stand-in strings: the validators check their
shape only where they are plain strings, and every such name is a constant or derived from a key.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from catalog import images
from catalog.autopilot import COMPUTE_CLASS_SELECTOR, PERFORMANCE
from catalog.gcsfuse import DiskBudget, file_cache_gib, staging_disk_budget, staging_sidecar
from catalog.gcsfuse import pod_annotations as gcsfuse_pod_annotations
from catalog.models import largest_file_gib, weights_gib
from catalog.nics import additional_nics, interface_annotations
from catalog.paths import BucketPaths, bucket_paths
from catalog.versions import VERL_REPO
from components import cluster as cluster_component
from components import data_prep as data_prep_component
from components.budget import ProjectBudgetArgs
from components.network import AttachedNic, ClusterNetwork
from components.ray_cluster import RayClusterArgs
from components.run_supervisor import shipped_files
from components.storage import TrainingStorageArgs
from stacks import checkpoints
from stacks.keys import full

STANDIN = "standin-name"  # an Output's stand-in: a valid DNS label, never a config value


@dataclass(frozen=True)
class Derived:
    """What compose derives from the config before it builds any component (one place)."""

    paths: BucketPaths
    staging: DiskBudget
    cache_gib: int
    image: str  # what the pods pull: through the regional mirror when imageMirror is on (ImageMirror.image)


def run_paths(cfg) -> BucketPaths:
    """The stack's bucket paths, checkpoints and merged model keyed by the run (stacks.checkpoints)."""
    base = bucket_paths(cfg.stack, cfg.model, cfg.verl_version)
    identity = checkpoints.run_identity(cfg.grpo, model=cfg.model, nnodes=cfg.gpu_nodes,
                                        gpus_per_node=cfg.accelerator.gpus_per_node,
                                        dataset=checkpoints.dataset_identity(cfg.task, base.dataset_dir))
    return bucket_paths(cfg.stack, cfg.model, cfg.verl_version, run=checkpoints.run_key(identity))


def derive(cfg) -> Derived:
    """Bucket paths, the staging disk budget (largest weight file) and the readers' cache (weights)."""
    return Derived(paths=run_paths(cfg),
                   staging=staging_disk_budget(largest_file_gib(cfg.model)),
                   cache_gib=file_cache_gib(weights_gib(cfg.model)),
                   image=images.mirrored(cfg.image, cfg.region, cfg.project, cfg.name("dockerhub"))
                   if cfg.image_mirror else cfg.image)


# Which config key a component arg comes from ("" = the stack name); the first matching prefix wins.
_KEYS: dict[str, dict[str, str]] = {
    "RayClusterArgs": {"name": "namePrefix", "namespace": "namespace", "gpu_nodes": "gpuNodes",
                       "capacity": "capacity", "zone": "gcp:zone", "image": "image", "ray_version": "rayVersion",
                       "paths.checkpoint_dir": "", "paths": "model", "file_cache_gib": "model",
                       "worker_ephemeral_storage_gib": "accelerator", "head_cpu": "rayHeadCpu",
                       "head_memory_gib": "rayHeadMemoryGib", "ready_timeout_s": "jobReadyTimeoutMinutes",
                       "accelerator": "accelerator"},
    "DataPrepArgs": {"paths.verl_src": "verlVersion", "paths": "model", "model_id": "model", "image": "image",
                     "verl_version": "verlVersion", "namespace": "namespace", "service_account": "namePrefix"},
    "TrainingStorageArgs": {"project_id": "gcp:project", "location": "bucketLocation",
                            "bucket_prefix": "namePrefix", "namespace": "namespace", "ksa_name": "namePrefix",
                            "soft_delete_days": "bucketSoftDeleteDays", "file_cache_mib": "model"},
    "GkeClusterArgs": {"capacity": "capacity", "gpu_nodes": "gpuNodes", "location": "zonalCluster",
                       "network": "accelerator"},
    "ProjectBudgetArgs": {"billing_account": "billingAccount", "monthly_amount": "budgetMonthly",
                          "display_name": "namePrefix"},
}
_FIELD = re.compile(r"(?P<cls>[A-Za-z]+Args)\.(?P<field>[\w.]+)")


def _key_of(line: str, default_cls: str) -> str:
    m = _FIELD.search(line)
    cls, field = (m["cls"], m["field"]) if m else (default_cls, "")
    table = _KEYS.get(cls, {})
    key = next((k for prefix, k in table.items() if field == prefix or field.startswith(prefix + ".")),
               "accelerator")
    return "the stack name" if key == "" else full(key)


def _run(cls: str, check: Callable[[], object]) -> list[str]:
    """The component's problems, one per line, each prefixed with the config key it traces to."""
    try:
        check()
    except ValueError as err:
        lines = [ln.strip().removeprefix("- ") for ln in str(err).splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("invalid ")]
        return [f"{_key_of(ln, cls)}: {ln}" for ln in lines]
    return []


def problems(cfg) -> list[str]:
    """Every component rule the config breaks (empty when every component accepts its args)."""
    d = derive(cfg)
    cl, acc = cfg.cluster, cfg.accelerator
    found: list[str] = []
    found += _run("RayClusterArgs", RayClusterArgs(
        name=cfg.name("ray"), namespace=cfg.namespace, accelerator=acc, gpu_nodes=cfg.gpu_nodes,
        autopilot=cl.autopilot, image=d.image, ray_version=cfg.ray_version, service_account=cfg.name("ray"),
        pvc_name=STANDIN, network_annotations=interface_annotations(additional_nics(acc.rdma_nics))
        if acc.rdma else {}, paths=d.paths, writer_pvc_name=STANDIN, checkpoint_pvc_name=STANDIN,
        head_checkpoint_pvc_name=STANDIN,
        file_cache_gib=d.cache_gib, capacity=cfg.capacity, cpu_pool_name=None if cl.autopilot else STANDIN,
        gpu_pool_name=None if cl.autopilot else STANDIN, zone=cfg.zone if cl.autopilot else None,
        ready_timeout_s=cfg.job.ready_timeout_s, head_cpu=cl.head_cpu, head_memory_gib=cl.head_memory_gib,
        **({"worker_ephemeral_storage_gib": acc.worker_ephemeral_gib} if acc.worker_ephemeral_gib else {}),
    ).validate)
    selector = ({COMPUTE_CLASS_SELECTOR: PERFORMANCE.selector} if cl.autopilot
                else {"cloud.google.com/gke-nodepool": cluster_component.CPU_POOL_NAME})
    found += _run("DataPrepArgs", lambda: data_prep_component._validate("data-prep", data_prep_component.DataPrepArgs(
        namespace=cfg.namespace, service_account=cfg.name("ray"), pvc_name=STANDIN, paths=d.paths,
        model_id=cfg.model, verl_version=cfg.verl_version, verl_repo=VERL_REPO, image=d.image,
        hf_secret_name=STANDIN, pod_annotations=gcsfuse_pod_annotations(cl.autopilot, staging_sidecar(d.staging)),
        node_selector=selector, disk_budget=d.staging, bucket_name=STANDIN,
        extra_files=shipped_files(d.paths))))
    found += _run("TrainingStorageArgs", TrainingStorageArgs(
        project_id=cfg.project, project_number="1", location=cfg.bucket_location, bucket_prefix=cfg.name("data"),
        namespace=cfg.namespace, ksa_name=cfg.name("ray"), delete_on_destroy=cfg.bucket_delete_on_destroy,
        existing_bucket=cfg.bucket_name, adopt_key=full("bucketName"),
        file_cache_mib=d.cache_gib * 1024, soft_delete_days=cfg.bucket_soft_delete_days).validate)
    network = ClusterNetwork(network=STANDIN, subnet=STANDIN, pods_range_name="pods", services_range_name="services",
                             nics=tuple(_standin_nics(acc.rdma_nics)))
    found += _run("GkeClusterArgs", lambda: cluster_component._validate(cluster_component.GkeClusterArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, name=cfg.name("gke"), autopilot=cl.autopilot,
        accelerator=acc, gpu_nodes=cfg.gpu_nodes, network=network, min_version=STANDIN,
        release_channel=cl.release_channel, capacity=cfg.capacity,
        location=cfg.cluster_location if cl.zonal else None)))
    if cfg.budget is not None:
        found += _run("ProjectBudgetArgs", ProjectBudgetArgs(
            billing_account=cfg.budget.billing_account, project=cfg.project, project_number="1",
            monthly_amount=cfg.budget.monthly_amount, display_name=f"{cfg.name('budget')} {cfg.project}"[:60],
        ).validate)
    return found


def _standin_nics(rdma: int) -> list[AttachedNic]:
    """NICs with the accelerator's RDMA count, for GkeClusterArgs.network's NIC-count rule."""
    return [AttachedNic(spec=spec, network=STANDIN, subnet=STANDIN) for spec in additional_nics(rdma)]
