"""Wires the components for one stack: the only place that knows the whole graph.

`program()` is the Pulumi program itself (load -> compose -> export): `__main__.py`, the offline
plan and the tests all run this one function.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pulumi
import pulumi_gcp as gcp

from catalog import egress, gke, naming
from catalog.autopilot import COMPUTE_CLASS_SELECTOR, PERFORMANCE
from catalog.gcsfuse import pod_annotations as gcsfuse_pod_annotations
from catalog.gcsfuse import staging_sidecar
from catalog.paths import BucketPaths, gs_url
from catalog.ray import WORKER_GROUP
from catalog.versions import VERL_REPO
from components.apis import ProjectApis
from components.budget import ProjectBudget, ProjectBudgetArgs
from components.cluster import CPU_POOL_NAME, CpuPool, GkeCluster, GkeClusterArgs
from components.data_prep import DataPrep, DataPrepArgs
from components.image_mirror import ImageMirror
from components.network import RdmaNetwork, RdmaNetworkArgs
from components.network_mapping import NetworkMapping
from components.node_identity import NodeServiceAccount
from components.ray_cluster import RayCluster, RayClusterArgs
from components.ray_job import RayJob, RayJobArgs
from components.run_supervisor import GpuReleaseAccess, GpuReleaseAccessArgs, script_path, shipped_files, state_path
from components.stack_guard import StackGuard
from components.storage import BUCKET_ROLE, TrainingStorage, TrainingStorageArgs
from components.task_files import (
    SOURCE_ROLE,
    TaskFiles,
    TaskFilesArgs,
    TaskSourceAccess,
    TaskSourceAccessArgs,
    TaskUpload,
    grant_name,
)
from recipe import grpo
from stacks import checkpoints, component_rules, config, cost, dataset, keys, preflight, quotas, singletons
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
    for warning in cfg.warnings:  # runs, but slower than it should (e.g. a KV cache too small for a batch)
        pulumi.log.warn(warning)
    secrets = pulumi.Config()
    outputs = build(cfg, hf_token=secrets.get_secret("hfToken"), wandb_api_key=secrets.get_secret("wandbApiKey"))
    for key, value in outputs.items():
        pulumi.export(key, value)


def build(cfg: StackConfig, hf_token: pulumi.Output[str] | None = None,
          wandb_api_key: pulumi.Output[str] | None = None) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs."""
    acc, cl, net = cfg.accelerator, cfg.cluster, cfg.network
    # Bucket paths; disk: the staging budget from the largest weight file, the readers' caches from
    # the weights. The gate derives them with the same function (stacks.component_rules).
    derived = component_rules.derive(cfg)
    paths, budget, cache_gib = derived.paths, derived.staging, derived.cache_gib

    # First: its check refuses a replace-forcing change of a named singleton before any other step.
    # Registration order alone does not order steps (registrations race); everything else waits on
    # the project APIs, and they wait on the guard.
    guard = StackGuard("stack-guard", singletons.fixed_values(cfg))
    apis = ProjectApis("apis", cfg.project, opts=pulumi.ResourceOptions(depends_on=[guard]))
    after_apis = pulumi.ResourceOptions(depends_on=[apis])
    network = RdmaNetwork("network", RdmaNetworkArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, prefix=cfg.prefix,
        primary_cidr=net.primary_cidr, pods_cidr=net.pods_cidr, services_cidr=net.services_cidr,
        gvnic_cidr=net.gvnic_cidr, rdma_cidrs=net.rdma_cidrs, mtu=net.mtu, migrations=cl.migrations),
        opts=after_apis)
    nodes = NodeServiceAccount("node-identity", cfg.project, cfg.name("nodes"), opts=after_apis)
    # Lookup checks (stacks.preflight) gate the cluster, the first billable resource.
    gke_version = _gke_version(cfg, apis)
    checks: list[pulumi.Output[list[preflight.Finding]]] = [gke_version.apply(lambda v: v.findings)]
    checks.append(quotas.check(cfg, apis))
    cluster = GkeCluster("gke", GkeClusterArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, name=cfg.name("gke"), autopilot=cl.autopilot,
        accelerator=acc, gpu_nodes=cfg.gpu_nodes, network=network.handle,
        min_version=preflight.gate(gke_version.apply(lambda v: v.version), checks),
        release_channel=cl.release_channel, capacity=cfg.capacity,
        location=cfg.cluster_location if cl.zonal else None,
        cpu_pool=CpuPool(cl.cpu_machine_type, cl.cpu_nodes_min, cl.cpu_nodes_max, quotas.cpu_boot_disk(cfg)),
        deletion_protection=cl.deletion_protection, node_service_account=nodes.email,
        authorized_networks=cl.authorized_networks, migrations=cl.migrations,
    ), opts=after_apis)
    in_cluster = pulumi.ResourceOptions(provider=cluster.provider)
    # Docker Hub through a regional remote repository; a digest stays a digest.
    image, image_deps = cfg.image, []
    if cfg.image_mirror:
        mirror = ImageMirror("image-mirror", cfg.project, cfg.region, cfg.name("dockerhub"),
                             readers=[nodes.email.apply(lambda e: f"serviceAccount:{e}")], opts=after_apis)
        image, image_deps = mirror.image(cfg.image), [mirror]

    # Pod networks only for NICs the GPU nodes have: none without RDMA (no objects, no annotations).
    mapping = NetworkMapping("network-mapping", network.handle.nics, opts=in_cluster) if network.handle.nics else None
    storage = TrainingStorage("storage", TrainingStorageArgs(
        project_id=cfg.project,
        project_number=gcp.organizations.get_project_output(
            project_id=cfg.project, opts=pulumi.InvokeOutputOptions(depends_on=[apis])).number,
        location=cfg.bucket_location, bucket_prefix=cfg.name("data"), namespace=cfg.namespace,
        ksa_name=cfg.name("ray"), hf_token=hf_token, delete_on_destroy=cfg.bucket_delete_on_destroy,
        existing_bucket=cfg.bucket_name, adopt_key=keys.full("bucketName"),
        wandb_api_key=wandb_api_key,
        file_cache_mib=cache_gib * 1024, soft_delete_days=cfg.bucket_soft_delete_days,
    ), opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[apis]))

    # CPU capacity and storage only: staging runs while the GPU pool is still scaling up. The node
    # selector (the CPU pool's name, an output) orders the Job after the CPU pool on Standard.
    # Autopilot: the Performance class (general-purpose caps a pod at 10 GiB; Google's verl sample).
    # Standard: the CPU pool by its (constant) name, so the Job is created with the cluster and its pod
    # starts on the pool's first Ready node instead of after the pool operation (tools/critical_path).
    cpu_selector = ({COMPUTE_CLASS_SELECTOR: PERFORMANCE.selector} if cl.autopilot
                    else {"cloud.google.com/gke-nodepool": CPU_POOL_NAME})
    task_check, source_access = _task_sources(cfg, storage)
    prep = DataPrep("data-prep", DataPrepArgs(
        namespace=storage.namespace, service_account=storage.ksa_name,
        pvc_name=storage.writer_pvc_name, paths=paths, model_id=cfg.model, verl_version=cfg.verl_version,
        verl_repo=VERL_REPO, image=image, hf_secret_name=storage.hf_secret_name,
        hf_secret_key=storage.hf_secret_key,
        pod_annotations=gcsfuse_pod_annotations(cl.autopilot, staging_sidecar(budget)),
        node_selector=cpu_selector, disk_budget=budget, bucket_name=storage.bucket_name,
        extra_files=shipped_files(paths),  # the run supervisor the Ray job runs
        stage_gsm8k=cfg.task is None, task_check=task_check,
    ), opts=pulumi.ResourceOptions(provider=cluster.provider,
                                   # Hugging Face and the git clone of verl go out through the region's NAT.
                                   depends_on=[storage, *image_deps, *network.handle.egress,
                                               *([source_access] if source_access else [])]))
    # The stack's own data and reward, checked offline by config.load, uploaded content-addressed.
    task_files = None if cfg.task is None else TaskFiles("task-files", TaskFilesArgs(
        bucket=storage.bucket_name,
        files=tuple(TaskUpload(role, Path(f.asset_path), f.object_name) for role, f in
                    (("train", cfg.task.train), ("val", cfg.task.val), ("reward", cfg.task.reward))
                    if f and not f.source)))

    ray = RayCluster("ray", RayClusterArgs(
        name=cfg.name("ray"), namespace=storage.namespace, accelerator=acc,
        gpu_nodes=cfg.gpu_nodes, autopilot=cl.autopilot, image=image, ray_version=cfg.ray_version,
        service_account=storage.ksa_name, pvc_name=storage.pvc_name,
        network_annotations=mapping.pod_annotations if mapping else {},
        paths=paths, writer_pvc_name=storage.writer_pvc_name, checkpoint_pvc_name=storage.checkpoint_pvc_name,
        head_checkpoint_pvc_name=storage.head_checkpoint_pvc_name,
        file_cache_gib=cache_gib, capacity=cfg.capacity, cpu_pool_name=None if cl.autopilot else CPU_POOL_NAME,
        gpu_pool_name=cluster.gpu_pool_name, zone=cfg.zone if cl.autopilot else None,
        # One budget for "the cluster is up": pulumi-kubernetes waits this long for the head, the
        # job resource as long again for the GPUs.
        ready_timeout_s=cfg.job.ready_timeout_s,
        worker_secret_env=_worker_secret_env(storage),
        head_cpu=cl.head_cpu, head_memory_gib=cl.head_memory_gib,
        **({"worker_ephemeral_storage_gib": acc.worker_ephemeral_gib} if acc.worker_ephemeral_gib else {}),
        # The GPU pool (through its name) and the installer, not the whole cluster component: the GPU
        # workers' scale-up must not wait for the CPU pool; the head pends until a CPU node is Ready.
    ), opts=pulumi.ResourceOptions(provider=cluster.provider,
                                   depends_on=[d for d in (mapping, storage, cluster.installer) if d] + image_deps))

    if cfg.budget is not None:
        ProjectBudget("budget", ProjectBudgetArgs(
            billing_account=cfg.budget.billing_account, project=cfg.project,
            # After the APIs, as the storage lookup: Cloud Resource Manager may be enabled by this very run.
            project_number=gcp.organizations.get_project_output(
                project_id=cfg.project, opts=pulumi.InvokeOutputOptions(depends_on=[apis])).number,
            monthly_amount=cfg.budget.monthly_amount, display_name=f"{cfg.name('budget')} {cfg.project}"[:60],
        ), opts=after_apis)
    price = cost.hourly(cfg)
    pulumi.log.info(cost.render_hourly(price))

    outputs: dict[str, Any] = {
        "clusterName": cluster.name,
        "clusterMode": cl.mode,
        "gkeVersion": _describe_version(gke_version, cfg),
        "nodeServiceAccount": nodes.email.apply(
            lambda e: e if isinstance(e, str) else f"{cfg.name('nodes')}@{cfg.project}.iam.gserviceaccount.com "
                                                  "(created by this run)", run_with_unknowns=True),
        "accelerator": acc.key,
        "gpus": cfg.total_gpus,
        "kubeconfig": cluster.kubeconfig,
        "getCredentials": cluster.name.apply(
            lambda n: f"gcloud container clusters get-credentials {n} --dns-endpoint "
                      f"--location {cfg.cluster_location} --project {cfg.project}"),
        **({"gvnicNetwork": network.gvnic_network, "rdmaNetwork": network.rdma_network,
            "rdmaSubnets": network.rdma_subnets} if acc.rdma else {}),
        "bucket": storage.bucket_name,
        "rayCluster": ray.name,
        "hourlyPrice": cost.summary(price),
        "namespace": storage.namespace,
        # Commands are plain commands (no `# ...`): they paste into a shell and run as `$(pulumi stack output X)`.
        "dashboardCommand": storage.namespace.apply(
            lambda ns: f"kubectl -n {ns} port-forward svc/{ray.head_service} {ray.dashboard_port}:"
                       f"{ray.dashboard_port}"),
        # TensorBoard reads gs:// through fsspec when gcsfs is installed (README "Watch, resume and stop").
        "tensorboardCommand": storage.bucket_name.apply(
            lambda b: f"tensorboard --logdir {gs_url(b, paths.tensorboard_dir)}"),
        # What `python -m tools.watch` needs to reach the Ray dashboard as the job provider does: the
        # API server's service proxy (no credential: the token is minted from the user's gcloud login).
        "rayDashboardProxy": {"endpoint": cluster.endpoint, "ca_certificate": cluster.ca_certificate,
                              "public_ca": True, "namespace": storage.namespace, "service": ray.head_service,
                              "port": ray.dashboard_port},
        "watchCommand": watch_command(cfg.stack),
        # The nodes are private: what each download or upload goes through (Cloud NAT or Google's APIs).
        "egress": network.nat.name.apply(lambda nat: {
            host: (f"Cloud NAT {nat}" if via == egress.NAT else "Private Google Access")
            for host, via in egress.routes(VERL_REPO, cfg.image, cfg.image_mirror, cfg.grpo.logger).items()}),
    }
    outputs["logsCommand"] = cloud_logging_command(cfg, cluster.name, storage.namespace, ray.name)
    if cfg.job.submit:
        outputs.update(_grpo_job(cfg, paths, cluster, storage, ray, prep, task_files))
    return outputs


def watch_command(stack: str) -> str:
    """`--stack=NAME` in one word: a stack named `-x` (the CLI accepts it) must not read as an option."""
    return f"venv/bin/python -m tools.watch --stack={shlex.quote(stack)}"


def cloud_logging_command(cfg: StackConfig, cluster_name: pulumi.Output[str], namespace: pulumi.Output[str],
                          raycluster: str) -> pulumi.Output[str]:
    """Reads the Ray pods' logs from Cloud Logging (the GKE Ray add-on's logging): they outlive the pods.

    Filter: GKE's k8s_container resource labels, and KubeRay's `ray.io/cluster` pod label as Cloud
    Logging names pod labels (`labels."k8s-pod/<key with . and / as _ and />"`).
    """
    def command(values: list[str]) -> str:
        name, ns = values
        query = (f'resource.type="k8s_container" AND resource.labels.cluster_name="{name}" '
                 f'AND resource.labels.namespace_name="{ns}" '
                 f'AND labels."k8s-pod/ray_io/cluster"="{raycluster}"')
        return (f"gcloud logging read '{query}' --project {cfg.project} --freshness 7d --order asc "
                "--format 'value(timestamp,resource.labels.pod_name,textPayload)'")

    return pulumi.Output.all(cluster_name, namespace).apply(command)


def _gke_version(cfg: StackConfig, apis: ProjectApis) -> pulumi.Output[preflight.GkeVersion]:
    """The channel lookup, run once the container API is on (ProjectApis may enable it in this very run).

    It is an output-based invoke that depends on the APIs: on an empty project it is unknown at
    preview (the gate then leaves the cluster's version unknown) and runs at `pulumi up` before the
    cluster is registered. The location is the cluster's own (its region, or its zone when zonal): a
    region may offer other versions than its zones (data source docs).
    """
    cl = cfg.cluster
    lookup = gcp.container.get_engine_versions_output(
        location=cfg.cluster_location, project=cfg.project, version_prefix=gke.version_prefix(cl.gke_version),
        opts=pulumi.InvokeOutputOptions(depends_on=[apis]))
    return lookup.apply(lambda found: preflight.resolve_gke_version(
        found, channel=cl.release_channel, pin=cl.gke_version, floors=cl.floors, location=cfg.cluster_location,
        pin_key=keys.full("gkeVersion"), channel_key=keys.full("releaseChannel")))


def _describe_version(version: pulumi.Output[preflight.GkeVersion], cfg: StackConfig) -> pulumi.Output[str]:
    """The version and where it came from; at preview on an empty project, plainly that it is not known yet."""
    channel = cfg.cluster.release_channel

    def say(v: Any) -> str:
        if isinstance(v, preflight.GkeVersion):
            return f"{v.version} ({v.basis})" if v.version else f"refused: {'; '.join(map(str, v.findings))}"
        text = (f"resolved at deploy time from the {channel} release channel in {cfg.region} (unknown at preview: "
                "the lookup waits for the container API, which this run enables)")
        pulumi.log.info(f"GKE version {text}")
        return text

    return version.apply(say, run_with_unknowns=True)


def _worker_secret_env(storage: TrainingStorage) -> dict[str, tuple[pulumi.Output[str], str]]:
    """W&B reads WANDB_API_KEY itself (wandb library; verl's tracking only calls wandb.init)."""
    if storage.wandb_secret_name is None:
        return {}
    return {"WANDB_API_KEY": (storage.wandb_secret_name, storage.wandb_secret_key)}


def _task_sources(cfg: StackConfig, storage: TrainingStorage) -> tuple[dict | None, TaskSourceAccess | None]:
    """gs:// task files: what the staging Job copies and checks, and a read grant on each source bucket
    that is not this stack's own (whose name is only known once deployed: <namePrefix>-data-<8 hex>)."""
    if cfg.task is None:
        return None, None
    spec = dataset.staging_check(cfg.task, train_batch_size=cfg.grpo.train_batch_size,
                                 max_prompt_length=cfg.grpo.max_prompt_length)
    if spec is None:
        return None, None
    own = re.compile(re.escape(cfg.name("data")) + f"-[0-9a-f]{{{2 * naming.BUCKET_SUFFIX_BYTES}}}")
    component = "task-source"
    buckets = tuple(dict.fromkeys(f.source_bucket for f in cfg.task.copies if not own.fullmatch(f.source_bucket)))
    for f in spec["files"]:
        bucket = f["source"].removeprefix("gs://").partition("/")[0]
        f["grant"] = (f"{BUCKET_ROLE} on this stack's own bucket gs://{bucket} (the storage component's grant)"
                      if bucket not in buckets else
                      f"{SOURCE_ROLE} on gs://{bucket} (Pulumi resource {grant_name(component, bucket)})")
    access = TaskSourceAccess(component, TaskSourceAccessArgs(
        buckets=buckets, member=storage.bucket_access.member)) if buckets else None
    return spec, access


def _grpo_job(cfg: StackConfig, paths: BucketPaths, cluster: GkeCluster, storage: TrainingStorage,
              ray: RayCluster, prep: DataPrep, task_files: TaskFiles | None = None) -> dict[str, Any]:
    acc = cfg.accelerator
    overrides = grpo.overrides(cfg.grpo, stack=cfg.stack, nnodes=cfg.gpu_nodes, gpus_per_node=acc.gpus_per_node,
                               paths=paths, task=cfg.task, nccl_timeout=checkpoints.nccl_timeout_for(cfg))
    release = None
    # The cluster component too: on destroy the job is stopped before any node pool goes.
    depends: list[pulumi.Resource] = [ray, prep, cluster, *([task_files] if task_files else [])]
    if cfg.job.release_gpus:
        depends.append(GpuReleaseAccess("gpu-release", GpuReleaseAccessArgs(
            namespace=storage.namespace, service_account=storage.ksa_name, raycluster=ray.name,
        ), opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[storage])))
        release = (ray.name, WORKER_GROUP)
    entrypoint = grpo.supervised(
        grpo.entrypoint(overrides), script=script_path(paths), state=state_path(paths), paths=paths,
        expected_gpus=cfg.total_gpus, merge=cfg.job.merge_model, release=release,
        keep=cfg.grpo.max_checkpoints_to_keep)
    runtime_env = grpo.runtime_env(acc, paths)
    logs_command = cloud_logging_command(cfg, cluster.name, storage.namespace, ray.name)
    job = RayJob("grpo", RayJobArgs(
        submission_id=grpo.submission_id(cfg.stack, entrypoint, runtime_env, cfg.total_gpus),
        entrypoint=entrypoint, runtime_env=runtime_env, expected_gpus=ray.expected_gpus,
        metadata={"stack": cfg.stack, "model": cfg.model},
        # The DNS endpoint, whose certificate a public CA signs (public_ca); the cluster CA still tells
        # the provider that a job moved from the IP endpoint is on the same cluster (ray_client.same_target).
        gke={"endpoint": cluster.endpoint, "ca_certificate": cluster.ca_certificate, "public_ca": True,
             "namespace": storage.namespace, "service": ray.head_service, "port": ray.dashboard_port},
        ready_timeout_s=cfg.job.ready_timeout_s, wait_for_completion=cfg.job.wait_for_completion,
        completion_timeout_s=cfg.job.completion_timeout_s, resubmit_on_failure=cfg.job.resubmit_on_failure,
        max_recoveries=cfg.job.max_recoveries, logs_hint=logs_command, cluster_uid=ray.uid,
        # The supervisor released the GPUs when the last run ended: the next submission brings them back.
        scale={"namespace": storage.namespace, "name": ray.name, "group": WORKER_GROUP, "index": 0,
               "replicas": cfg.gpu_nodes},
    ), opts=pulumi.ResourceOptions(depends_on=depends, aliases=[GRPO_JOB_ALIAS]))
    # Needs dashboardCommand's port-forward running; the watch command needs none.
    logs = job.job_id.apply(
        lambda job_id: f"ray job logs --follow --address http://localhost:{ray.dashboard_port} {job_id}")
    merged = storage.bucket_name.apply(lambda b: gs_url(b, paths.merged_dir)) if cfg.job.merge_model else None
    return {"jobId": job.job_id, "jobStatus": job.status, "jobMessage": job.message,
            "jobDashboardUrl": job.dashboard_url, "jobLogsCommand": logs, "jobRecoveries": job.recoveries,
            **({"mergedModel": merged} if merged is not None else {})}
