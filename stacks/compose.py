"""Wires the components for one stack: the only place that knows the whole graph.

`program()` is the Pulumi program itself (load -> compose -> export): `__main__.py`, the offline
plan and the tests all run this one function.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from catalog.autopilot import COMPUTE_CLASS_SELECTOR, PERFORMANCE
from catalog.gcsfuse import HEAD_SIDECAR, file_cache_gib, staging_disk_budget, staging_sidecar
from catalog.gcsfuse import pod_annotations as gcsfuse_pod_annotations
from catalog.models import largest_file_gib, weights_gib
from catalog.nodes import cpu_boot_disk_gb
from catalog.paths import BucketPaths, bucket_paths
from catalog.ray import HEAD_EPHEMERAL_GIB
from catalog.versions import VERL_REPO
from components.apis import ProjectApis
from components.cluster import CPU_POOL_NAME, CpuPool, GkeCluster, GkeClusterArgs
from components.data_prep import DataPrep, DataPrepArgs
from components.image_mirror import ImageMirror
from components.network import RdmaNetwork, RdmaNetworkArgs
from components.network_mapping import NetworkMapping
from components.ray_cluster import RayCluster, RayClusterArgs
from components.ray_job import RayJob, RayJobArgs
from components.storage import TrainingStorage, TrainingStorageArgs
from stacks import config, grpo, preflight
from stacks.config import StackConfig

# The GRPO job's type before the job resource became the generic RayJob: keeps existing stacks' URN.
GRPO_JOB_ALIAS = pulumi.Alias(type_="pulumi-python:dynamic/verl-gke:GrpoJob")


def program(allow_placeholder_project: bool = False) -> None:
    """Load the stack's config (the one validation gate), compose the stack, export its outputs.

    The offline plan allows the stack files' placeholder project; `pulumi up` never does.
    """
    try:
        cfg = config.from_pulumi(pulumi.get_stack(), allow_placeholder_project)
    except config.ConfigError as err:
        # RunError prints the message alone: every problem, each naming its config key.
        raise pulumi.RunError(str(err)) from None
    for key, value in build(cfg, hf_token=pulumi.Config().get_secret("hfToken")).items():
        pulumi.export(key, value)


def build(cfg: StackConfig, hf_token: pulumi.Output[str] | None = None) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs."""
    acc, cl, net = cfg.accelerator, cfg.cluster, cfg.network
    paths = bucket_paths(cfg.stack, cfg.model, cfg.verl_version)
    # Disk: the staging budget from the largest weight file; the readers' caches from the weights.
    budget = staging_disk_budget(largest_file_gib(cfg.model))
    cache_gib = file_cache_gib(weights_gib(cfg.model))

    apis = ProjectApis("apis", cfg.project)
    after_apis = pulumi.ResourceOptions(depends_on=[apis])
    network = RdmaNetwork("network", RdmaNetworkArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, prefix=cfg.prefix,
        primary_cidr=net.primary_cidr, pods_cidr=net.pods_cidr, services_cidr=net.services_cidr,
        gvnic_cidr=net.gvnic_cidr, rdma_cidrs=net.rdma_cidrs, mtu=net.mtu), opts=after_apis)
    # Lookup checks (stacks.preflight) gate the cluster, the first billable resource.
    checks: list[pulumi.Output[list[preflight.Finding]]] = []
    cluster = GkeCluster("gke", GkeClusterArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, name=cfg.name("gke"), autopilot=cl.autopilot,
        accelerator=acc, gpu_nodes=cfg.gpu_nodes, network=network.handle,
        min_version=preflight.gate(cl.min_version, checks),
        release_channel=cl.release_channel, capacity=cfg.capacity,
        cpu_pool=CpuPool(cl.cpu_machine_type, cl.cpu_nodes_min, cl.cpu_nodes_max, cpu_boot_disk_gb(
            budget.pod_gib, HEAD_EPHEMERAL_GIB + HEAD_SIDECAR.ephemeral_storage_gib)),
        deletion_protection=cl.deletion_protection,
    ), opts=after_apis)
    in_cluster = pulumi.ResourceOptions(provider=cluster.provider)
    # Docker Hub through a regional remote repository; a digest stays a digest.
    image, image_deps = cfg.image, []
    if cfg.image_mirror:
        mirror = ImageMirror("image-mirror", cfg.project, cfg.region, cfg.name("dockerhub"), opts=after_apis)
        image, image_deps = mirror.image(cfg.image), [mirror]

    mapping = NetworkMapping("network-mapping", network.handle.nics, opts=in_cluster)
    storage = TrainingStorage("storage", TrainingStorageArgs(
        project_id=cfg.project,
        project_number=gcp.organizations.get_project_output(project_id=cfg.project).number,
        location=cfg.bucket_location, bucket_prefix=cfg.name("data"), namespace=cfg.namespace,
        ksa_name=cfg.name("ray"), hf_token=hf_token, delete_on_destroy=cfg.bucket_delete_on_destroy,
        file_cache_mib=cache_gib * 1024, soft_delete_days=cfg.bucket_soft_delete_days,
    ), opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[apis]))

    # CPU capacity and storage only: staging runs while the GPU pool is still scaling up. The node
    # selector (the CPU pool's name, an output) orders the Job after the CPU pool on Standard.
    # Autopilot: the Performance class (general-purpose caps a pod at 10 GiB; Google's verl sample).
    # Standard: the CPU pool by its (constant) name, so the Job is created with the cluster and its pod
    # starts on the pool's first Ready node instead of after the pool operation (tools/critical_path).
    cpu_selector = ({COMPUTE_CLASS_SELECTOR: PERFORMANCE.selector} if cl.autopilot
                    else {"cloud.google.com/gke-nodepool": CPU_POOL_NAME})
    prep = DataPrep("data-prep", DataPrepArgs(
        namespace=storage.namespace, service_account=storage.ksa_name,
        pvc_name=storage.writer_pvc_name, paths=paths, model_id=cfg.model, verl_version=cfg.verl_version,
        verl_repo=VERL_REPO, image=image, hf_secret_name=storage.hf_secret_name,
        hf_secret_key=storage.hf_secret_key,
        pod_annotations=gcsfuse_pod_annotations(cl.autopilot, staging_sidecar(budget)),
        node_selector=cpu_selector, disk_budget=budget, bucket_name=storage.bucket_name,
    ), opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[storage, *image_deps]))

    ray = RayCluster("ray", RayClusterArgs(
        name=cfg.name("ray"), namespace=storage.namespace, accelerator=acc,
        gpu_nodes=cfg.gpu_nodes, autopilot=cl.autopilot, image=image, ray_version=cfg.ray_version,
        service_account=storage.ksa_name, pvc_name=storage.pvc_name, network_annotations=mapping.pod_annotations,
        paths=paths, writer_pvc_name=storage.writer_pvc_name, checkpoint_pvc_name=storage.checkpoint_pvc_name,
        file_cache_gib=cache_gib, capacity=cfg.capacity, cpu_pool_name=None if cl.autopilot else CPU_POOL_NAME,
        gpu_pool_name=cluster.gpu_pool_name,
        # The GPU pool (through its name) and the installer, not the whole cluster component: the GPU
        # workers' scale-up must not wait for the CPU pool; the head pends until a CPU node is Ready.
    ), opts=pulumi.ResourceOptions(provider=cluster.provider,
                                   depends_on=[mapping, storage, cluster.installer, *image_deps]))

    outputs: dict[str, Any] = {
        "clusterName": cluster.name,
        "clusterMode": cl.mode,
        "accelerator": acc.key,
        "gpus": cfg.total_gpus,
        "kubeconfig": cluster.kubeconfig,
        "getCredentials": cluster.name.apply(
            lambda n: f"gcloud container clusters get-credentials {n} --location {cfg.region} "
                      f"--project {cfg.project}"),
        "gvnicNetwork": network.gvnic_network,
        "rdmaNetwork": network.rdma_network,
        "rdmaSubnets": network.rdma_subnets,
        "bucket": storage.bucket_name,
        "rayCluster": ray.name,
        "namespace": storage.namespace,
        "dashboardCommand": storage.namespace.apply(
            lambda ns: f"kubectl -n {ns} port-forward svc/{ray.head_service} {ray.dashboard_port}:"
                       f"{ray.dashboard_port}   # then open http://localhost:{ray.dashboard_port}"),
    }
    if cfg.job.submit:
        outputs.update(_grpo_job(cfg, paths, cluster, storage, ray, prep))
    return outputs


def _grpo_job(cfg: StackConfig, paths: BucketPaths, cluster: GkeCluster, storage: TrainingStorage,
              ray: RayCluster, prep: DataPrep) -> dict[str, Any]:
    acc = cfg.accelerator
    overrides = grpo.overrides(cfg.grpo, stack=cfg.stack, nnodes=cfg.gpu_nodes, gpus_per_node=acc.gpus_per_node,
                               paths=paths)
    entrypoint = grpo.entrypoint(overrides)
    runtime_env = grpo.runtime_env(acc, paths)
    job = RayJob("grpo", RayJobArgs(
        submission_id=grpo.submission_id(cfg.stack, entrypoint, runtime_env, cfg.total_gpus),
        entrypoint=entrypoint, runtime_env=runtime_env, expected_gpus=ray.expected_gpus,
        metadata={"stack": cfg.stack, "model": cfg.model},
        gke={"endpoint": cluster.endpoint, "ca_certificate": cluster.ca_certificate,
             "namespace": storage.namespace, "service": ray.head_service, "port": ray.dashboard_port},
        ready_timeout_s=cfg.job.ready_timeout_s, wait_for_completion=cfg.job.wait_for_completion,
        completion_timeout_s=cfg.job.completion_timeout_s, resubmit_on_failure=cfg.job.resubmit_on_failure,
        # The cluster component too: on destroy the job is stopped before any node pool goes.
    ), opts=pulumi.ResourceOptions(depends_on=[ray, prep, cluster], aliases=[GRPO_JOB_ALIAS]))
    logs = pulumi.Output.all(storage.namespace, job.job_id).apply(
        lambda a: f"ray job logs --follow --address http://localhost:{ray.dashboard_port} {a[1]}"
                  f"   # with the dashboard port-forward running (namespace {a[0]})")
    return {"jobId": job.job_id, "jobStatus": job.status, "jobMessage": job.message,
            "jobDashboardUrl": job.dashboard_url, "jobLogsCommand": logs}
