"""The components' args a config gives, built in one place for compose and for the gate.

`stacks.config.load()` checks each config key; a component checks its args again at construction
(`XArgs.problems()`, raised by components.problems.require). A value can pass the first and fail the
second (an uncatalogued model's file cache too large for the worker's disk; a model id `Qwen/..` that
makes the model folder leave the bucket mount), which used to end in a traceback halfway through
`pulumi up`. Compose builds each component's args with the functions below, from the derived values
(stacks.derived) and the outputs of the components it wires; `problems(cfg)` builds the same args
with stand-ins for those outputs and calls each component's own `problems()`, so a config the gate
accepts constructs every component, and a rule a component holds runs once in the gate, there (the
config's key rules check the keys themselves). Each problem names the config key it comes from.
Stand-ins are strings: the rules check a name's shape only where it is a plain string, and every
such name is a constant or derived from a key. `cfg` is a stacks.config.StackConfig, not imported
(stacks.config's gate imports this module).
"""

from __future__ import annotations

from typing import Any

import pulumi

from catalog.nics import additional_nics, interface_annotations
from catalog.problems import Problem
from components.budget import ProjectBudgetArgs
from components.cluster import CPU_POOL_NAME, CpuPool, GkeClusterArgs
from components.data_prep import DataPrepArgs
from components.network import AttachedNic, ClusterNetwork
from components.problems import located, value_at
from components.ray_cluster import RayClusterArgs
from components.storage import TrainingStorageArgs
from stacks import derived
from stacks.keys import full

STANDIN = "standin-name"  # an Output's stand-in: a valid DNS label, never a config value

Input = Any  # a plain value, or a pulumi.Output of one (compose); a stand-in string (the gate)


def gke_cluster_args(cfg, *, network: ClusterNetwork, min_version: Input,
                     node_service_account: Input = None) -> GkeClusterArgs:
    cl, d = cfg.cluster, derived.of(cfg)
    return GkeClusterArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, name=cfg.name("gke"), autopilot=cl.autopilot,
        accelerator=cfg.accelerator, gpu_nodes=cfg.gpu_nodes, network=network, min_version=min_version,
        release_channel=cl.release_channel, capacity=cfg.capacity,
        location=cfg.cluster_location if cl.zonal else None,
        cpu_pool=CpuPool(cl.cpu_machine_type, cl.cpu_nodes_min, cl.cpu_nodes_max, d.cpu_boot_disk_gb),
        deletion_protection=cl.deletion_protection, node_service_account=node_service_account,
        authorized_networks=cl.authorized_networks)


def storage_args(cfg, *, project_number: Input, hf_token: pulumi.Output[str] | None = None,
                 wandb_api_key: pulumi.Output[str] | None = None) -> TrainingStorageArgs:
    return TrainingStorageArgs(
        project_id=cfg.project, project_number=project_number, location=cfg.bucket_location,
        bucket_prefix=cfg.name("data"), namespace=cfg.namespace, ksa_name=cfg.name("ray"), hf_token=hf_token,
        delete_on_destroy=cfg.bucket_delete_on_destroy, existing_bucket=cfg.bucket_name,
        adopt_key=full("bucketName"), wandb_api_key=wandb_api_key, file_cache_mib=derived.of(cfg).cache_gib * 1024,
        soft_delete_days=cfg.bucket_soft_delete_days, checkpoint_ranks_per_pod=cfg.accelerator.gpus_per_node)


def data_prep_args(cfg, *, namespace: Input, service_account: Input, pvc_name: Input,
                   hf_secret_name: Input, hf_secret_key: str, bucket_name: Input,
                   task_check: dict | None) -> DataPrepArgs:
    d = derived.of(cfg)
    return DataPrepArgs(
        namespace=namespace, service_account=service_account, pvc_name=pvc_name, paths=d.paths,
        model_id=cfg.model, verl_version=cfg.verl_version, image=d.image, hf_secret_name=hf_secret_name,
        hf_secret_key=hf_secret_key, pod_annotations=d.staging_annotations, node_selector=d.cpu_selector,
        disk_budget=d.staging, bucket_name=bucket_name, extra_files=d.extra_files,
        stage_gsm8k=cfg.task is None, task_check=task_check)


def ray_cluster_args(cfg, *, namespace: Input, service_account: Input, pvc_name: Input,
                     writer_pvc_name: Input, checkpoint_pvc_name: Input, head_checkpoint_pvc_name: Input,
                     network_annotations: Any, gpu_pool_name: Input,
                     worker_secret_env: dict | None = None) -> RayClusterArgs:
    cl, acc, d = cfg.cluster, cfg.accelerator, derived.of(cfg)
    return RayClusterArgs(
        name=cfg.name("ray"), namespace=namespace, accelerator=acc, gpu_nodes=cfg.gpu_nodes,
        autopilot=cl.autopilot, image=d.image, ray_version=cfg.ray_version, service_account=service_account,
        pvc_name=pvc_name, network_annotations=network_annotations, paths=d.paths, writer_pvc_name=writer_pvc_name,
        checkpoint_pvc_name=checkpoint_pvc_name, head_checkpoint_pvc_name=head_checkpoint_pvc_name,
        file_cache_gib=d.cache_gib, checkpoint_buffer_gib=d.checkpoint_buffer_gib, capacity=cfg.capacity,
        cpu_pool_name=None if cl.autopilot else CPU_POOL_NAME,
        gpu_pool_name=gpu_pool_name, zone=cfg.zone if cl.autopilot else None,
        # One budget for "the cluster is up": pulumi-kubernetes waits this long for the head, the
        # job resource as long again for the GPUs.
        ready_timeout_s=cfg.job.ready_timeout_s, worker_secret_env=worker_secret_env or {},
        head_cpu=cl.head_cpu, head_memory_gib=cl.head_memory_gib,
        **({"worker_ephemeral_storage_gib": acc.worker_ephemeral_gib} if acc.worker_ephemeral_gib else {}))


def budget_args(cfg, *, project_number: Input) -> ProjectBudgetArgs:
    assert cfg.budget is not None
    return ProjectBudgetArgs(
        billing_account=cfg.budget.billing_account, project=cfg.project, project_number=project_number,
        monthly_amount=cfg.budget.monthly_amount, display_name=derived.of(cfg).budget_display_name)


# Which config key a component arg comes from ("" = the stack name); the first matching prefix wins,
# "accelerator" where none does (the accelerator's row sizes what is left).
_KEYS: dict[str, dict[str, str]] = {
    "RayClusterArgs": {"name": "namePrefix", "namespace": "namespace", "gpu_nodes": "gpuNodes",
                       "capacity.kind": "capacity", "capacity.reservation": "reservation",
                       "zone": "gcp:zone", "image": "image", "ray_version": "rayVersion",
                       "paths.checkpoint_dir": "", "paths": "model", "file_cache_gib": "model",
                       "checkpoint_buffer_gib": "model",
                       "worker_ephemeral_storage_gib": "accelerator", "head_cpu": "rayHeadCpu",
                       "head_memory_gib": "rayHeadMemoryGib", "ready_timeout_s": "jobReadyTimeoutMinutes",
                       "accelerator": "accelerator"},
    "DataPrepArgs": {"paths.verl_src": "verlVersion", "paths": "model", "model_id": "model", "image": "image",
                     "verl_version": "verlVersion", "namespace": "namespace", "service_account": "namePrefix"},
    "TrainingStorageArgs": {"project_id": "gcp:project", "location": "bucketLocation",
                            "bucket_prefix": "namePrefix", "existing_bucket": "bucketName",
                            "delete_on_destroy": "bucketDeleteOnDestroy",
                            "namespace": "namespace", "ksa_name": "namePrefix",
                            "soft_delete_days": "bucketSoftDeleteDays", "file_cache_mib": "model"},
    "GkeClusterArgs": {"capacity.kind": "capacity", "capacity.reservation": "reservation", "gpu_nodes": "gpuNodes",
                       "location": "zonalCluster", "network": "accelerator"},
    "ProjectBudgetArgs": {"billing_account": "billingAccount", "monthly_amount": "budgetMonthly",
                          "display_name": "namePrefix"},
}
# Args that hold a key's value as the user gave it: their problems read as that key's own.
_VERBATIM = {"capacity.kind", "capacity.reservation", "gpu_nodes", "namespace", "model_id", "verl_version",
             "ray_version", "project_id", "soft_delete_days", "billing_account", "monthly_amount", "head_cpu",
             "head_memory_gib"}


def _key_of(cls: str, path: str) -> str:
    table = _KEYS.get(cls, {})
    return next((k for prefix, k in table.items() if path == prefix or path.startswith(prefix + ".")),
                "accelerator")


def _problems(args: Any) -> list[Problem]:
    """The args' problems, each keyed by the config key it traces to."""
    cls = type(args).__name__
    secret = getattr(args, "SECRET_FIELDS", ())
    found = []
    for p in args.problems():
        key = _key_of(cls, p.key)
        if p.key in _VERBATIM and key:
            found.append(Problem(full(key), p.allowed, value_at(args, p.key)))
        else:
            found.append(Problem(full(key) if key else "the stack name", str(located(cls, args, p, secret))))
    return found


def gate_args(cfg) -> list[Any]:
    """Each checked component's args as compose builds them, with stand-ins for other components' outputs."""
    cl, acc = cfg.cluster, cfg.accelerator
    # As compose: TrainingStorage's namespace and KSA outputs, which RayCluster and DataPrep do not judge
    # (the namespace key and TrainingStorageArgs, which creates both, check those names once each).
    storage_outputs = dict(namespace=STANDIN, service_account=STANDIN)
    found: list[Any] = [
        ray_cluster_args(cfg, **storage_outputs, pvc_name=STANDIN, writer_pvc_name=STANDIN,
                         checkpoint_pvc_name=STANDIN, head_checkpoint_pvc_name=STANDIN,
                         network_annotations=interface_annotations(additional_nics(acc.rdma_nics)) if acc.rdma else {},
                         gpu_pool_name=None if cl.autopilot else STANDIN),
        data_prep_args(cfg, **storage_outputs, pvc_name=STANDIN, hf_secret_name=STANDIN,
                       hf_secret_key=TrainingStorageArgs.hf_secret_key, bucket_name=STANDIN,
                       task_check=derived.of(cfg).task_check),
        storage_args(cfg, project_number="1"),
        gke_cluster_args(cfg, network=ClusterNetwork(
            network=STANDIN, subnet=STANDIN, pods_range_name="pods", services_range_name="services",
            nics=tuple(AttachedNic(spec=spec, network=STANDIN, subnet=STANDIN)
                       for spec in additional_nics(acc.rdma_nics))), min_version=STANDIN),
    ]
    if cfg.budget is not None:
        found.append(budget_args(cfg, project_number="1"))
    return found


def problems(cfg) -> list[Problem]:
    """Every component rule the config breaks, once each (empty when every component accepts its args)."""
    return list({str(p): p for args in gate_args(cfg) for p in _problems(args)}.values())


__all__ = ["STANDIN", "budget_args", "data_prep_args", "gke_cluster_args", "problems",
           "ray_cluster_args", "storage_args"]
