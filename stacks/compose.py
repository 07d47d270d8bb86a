"""Wires the components for one stack: the only place that knows the whole graph."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from components.apis import ProjectApis
from components.cluster import GkeCluster, GkeClusterArgs
from components.data_prep import DataPrep, DataPrepArgs
from components.network import RdmaNetwork, RdmaNetworkArgs
from components.network_mapping import NetworkMapping, NetworkMappingArgs
from components.ray_cluster import WORKER_SIDECAR, RayCluster, RayClusterArgs
from components.ray_job import GrpoJob, RayJobArgs
from components.storage import TrainingStorage, TrainingStorageArgs, gcsfuse_pod_annotations
from stacks import grpo
from stacks.config import StackConfig
from stacks.paths import bucket_paths
from stacks.versions import VERL_REPO


def build(cfg: StackConfig, hf_token: pulumi.Output[str] | None = None) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs."""
    acc, cl, net = cfg.accelerator, cfg.cluster, cfg.network
    paths = bucket_paths(cfg.stack, cfg.model, cfg.verl_version)

    apis = ProjectApis("apis", cfg.project)
    after_apis = pulumi.ResourceOptions(depends_on=apis.services)
    network = RdmaNetwork("network", RdmaNetworkArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, prefix=cfg.prefix,
        primary_cidr=net.primary_cidr, pods_cidr=net.pods_cidr, services_cidr=net.services_cidr,
        gvnic_cidr=net.gvnic_cidr, rdma_cidrs=net.rdma_cidrs, mtu=net.mtu), opts=after_apis)
    cluster = GkeCluster("gke", GkeClusterArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, name=cfg.name("gke"),
        autopilot=cl.autopilot, accelerator=acc, gpu_nodes=cfg.gpu_nodes,
        network=network.primary_network, subnetwork=network.primary_subnet,
        pods_range_name=network.pods_range_name, services_range_name=network.services_range_name,
        gvnic_network=network.gvnic_network, gvnic_subnet=network.gvnic_subnet,
        rdma_network=network.rdma_network, rdma_subnets=network.rdma_subnets,
        min_version=cl.min_version, release_channel=cl.release_channel,
        deletion_protection=cl.deletion_protection, capacity=cfg.capacity, reservation=cfg.reservation,
        cpu_machine_type=cl.cpu_machine_type, cpu_nodes_min=cl.cpu_nodes_min, cpu_nodes_max=cl.cpu_nodes_max,
    ), opts=after_apis)

    mapping = NetworkMapping("network-mapping", NetworkMappingArgs(
        provider=cluster.provider, gvnic_network=network.gvnic_network, gvnic_subnet=network.gvnic_subnet,
        rdma_network=network.rdma_network, rdma_subnets=network.rdma_subnets))
    storage = TrainingStorage("storage", TrainingStorageArgs(
        provider=cluster.provider, project_id=cfg.project,
        project_number=gcp.organizations.get_project_output(project_id=cfg.project).number,
        location=cfg.bucket_location, bucket_prefix=cfg.name("data"), namespace=cfg.namespace,
        ksa_name=cfg.name("ray"), hf_token=hf_token, delete_on_destroy=cfg.bucket_delete_on_destroy,
    ), opts=pulumi.ResourceOptions(depends_on=apis.services))

    cpu_selector = {} if cl.autopilot else {"cloud.google.com/gke-nodepool": cluster.cpu_pool_name}
    prep = DataPrep("data-prep", DataPrepArgs(
        provider=cluster.provider, namespace=storage.namespace, service_account=storage.ksa_name,
        pvc_name=storage.pvc_name, paths=paths, model_id=cfg.model, verl_version=cfg.verl_version,
        verl_repo=VERL_REPO, image=cfg.image, hf_secret_name=storage.hf_secret_name,
        hf_secret_key=storage.hf_secret_key, pod_annotations=gcsfuse_pod_annotations(cl.autopilot, WORKER_SIDECAR),
        node_selector=cpu_selector,
        # CPU capacity and storage only: staging runs while the GPU pool is still scaling up.
        depends_on=[*storage.resources, *([cluster.cpu_pool] if cluster.cpu_pool else [])],
    ))

    ray = RayCluster("ray", RayClusterArgs(
        provider=cluster.provider, name=cfg.name("ray"), namespace=storage.namespace, accelerator=acc,
        gpu_nodes=cfg.gpu_nodes, autopilot=cl.autopilot, image=cfg.image, ray_version=cfg.ray_version,
        service_account=storage.ksa_name, pvc_name=storage.pvc_name, network_annotations=mapping.pod_annotations,
        paths=paths, capacity=cfg.capacity, reservation=cfg.reservation,
        cpu_pool_name=cluster.cpu_pool_name, gpu_pool_name=cluster.gpu_pool_name,
        depends_on=[*mapping.resources, *storage.resources, cluster.nccl_installer,
                    *([cluster.gpu_pool] if cluster.gpu_pool else [])],
    ))

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


def _grpo_job(cfg: StackConfig, paths, cluster: GkeCluster, storage: TrainingStorage, ray: RayCluster,
              prep: DataPrep) -> dict[str, Any]:
    acc = cfg.accelerator
    overrides = grpo.overrides(cfg.grpo, stack=cfg.stack, nnodes=cfg.gpu_nodes, gpus_per_node=acc.gpus_per_node,
                               paths=paths)
    entrypoint = grpo.entrypoint(overrides)
    runtime_env = grpo.runtime_env(acc, paths)
    job = GrpoJob("grpo", RayJobArgs(
        submission_id=grpo.submission_id(cfg.stack, entrypoint, runtime_env, cfg.total_gpus),
        entrypoint=entrypoint, runtime_env=runtime_env, expected_gpus=ray.expected_gpus,
        metadata={"stack": cfg.stack, "model": cfg.model},
        gke={"endpoint": cluster.endpoint, "ca_certificate": cluster.ca_certificate,
             "namespace": storage.namespace, "service": ray.head_service, "port": ray.dashboard_port},
        ready_timeout_s=cfg.job.ready_timeout_s, wait_for_completion=cfg.job.wait_for_completion,
        completion_timeout_s=cfg.job.completion_timeout_s, resubmit_on_failure=cfg.job.resubmit_on_failure,
    ), opts=pulumi.ResourceOptions(depends_on=[ray.cluster, prep.job]))
    logs = pulumi.Output.all(storage.namespace, job.job_id).apply(
        lambda a: f"ray job logs --follow --address http://localhost:{ray.dashboard_port} {a[1]}"
                  f"   # with the dashboard port-forward running (namespace {a[0]})")
    return {"jobId": job.job_id, "jobStatus": job.status, "jobMessage": job.message,
            "jobDashboardUrl": job.dashboard_url, "jobLogsCommand": logs}
