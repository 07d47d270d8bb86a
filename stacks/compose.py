"""Wires the components for one stack: the only place that knows the whole graph.

`program()` is the Pulumi program itself (load -> compose -> export): `__main__.py`, the offline
plan and the tests all run this one function.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pulumi
import pulumi_gcp as gcp

from components.apis import ProjectApis
from components.budget import ProjectBudget
from components.cluster import GkeCluster
from components.data_prep import DataPrep
from components.image_mirror import ImageMirror
from components.network import RdmaNetwork, RdmaNetworkArgs
from components.network_mapping import NetworkMapping
from components.node_identity import NodeServiceAccount
from components.ray_cluster import RayCluster
from components.ray_job import RayJob, RayJobArgs
from components.run_supervisor import GpuReleaseAccess, GpuReleaseAccessArgs
from components.stack_guard import StackGuard
from components.storage import BUCKET_ROLE, TrainingStorage
from components.task_files import (
    SOURCE_ROLE,
    TaskFiles,
    TaskFilesArgs,
    TaskSourceAccess,
    TaskSourceAccessArgs,
    TaskUpload,
    grant_name,
)
from stacks import component_rules, config, cost, derived, keys, preflight, quotas, singletons
from stacks.config import StackConfig


def program(allow_placeholder_project: bool = False) -> None:
    """Load the stack's config (the one validation gate), compose the stack, export its outputs.

    The offline plan allows the stack files' placeholder project; `pulumi up` never does.
    """
    try:
        cfg = config.from_pulumi(pulumi.get_stack(), allow_placeholder_project)
    except config.ConfigError as err:
        # RunError prints the message alone: every problem, each naming its config key.
        raise pulumi.RunError(str(err)) from None
    pulumi.log.info(accepted(cfg))
    for warning in cfg.warnings:  # runs, but slower than it should (e.g. a KV cache too small for a batch)
        pulumi.log.warn(warning)
    secrets = pulumi.Config()
    outputs = build(cfg, hf_token=secrets.get_secret("hfToken"), wandb_api_key=secrets.get_secret("wandbApiKey"))
    for key, value in outputs.items():
        pulumi.export(key, value)


def accepted(cfg: StackConfig) -> str:
    """The gate's verdict, first of what the program prints: what this config deploys, in one line."""
    mode = f"{'zonal ' if cfg.cluster.zonal else ''}{cfg.cluster.mode}"
    return (f"config of stack {cfg.stack} accepted: {cfg.gpu_nodes} x {cfg.accelerator.machine_type} "
            f"({cfg.total_gpus} {cfg.accelerator.key} GPUs, {cfg.capacity.kind}) on a GKE {mode} cluster in "
            f"{cfg.cluster_location}, training {cfg.model}")


def build(cfg: StackConfig, hf_token: pulumi.Output[str] | None = None,
          wandb_api_key: pulumi.Output[str] | None = None) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs.

    It wires: every value it passes is the config's, a derived value computed once per config
    (stacks.derived: paths, budgets, caches, selectors, the job) or another component's output."""
    acc, cl, net = cfg.accelerator, cfg.cluster, cfg.network
    d = derived.of(cfg)

    # First: its check refuses a replace-forcing change of a named singleton before any other step.
    # Registration order alone does not order steps (registrations race); everything else waits on
    # the project APIs, and they wait on the guard.
    guard = StackGuard("stack-guard", singletons.fixed_values(cfg))
    apis = ProjectApis("apis", cfg.project, opts=pulumi.ResourceOptions(depends_on=[guard]))
    after_apis = pulumi.ResourceOptions(depends_on=[apis])
    # Lookup checks (stacks.preflight): nothing that bills is registered before they pass (the
    # cluster, the NAT's reserved addresses, the image mirror, the bucket); what is free goes ahead.
    gke_version = _gke_version(cfg, d, apis)
    checks: list[preflight.Check] = [gke_version.apply(lambda v: v.problems)]
    checks.append(quotas.check(cfg, apis))
    gate = preflight.Gate(checks)
    after_gate = pulumi.ResourceOptions(depends_on=[gate.after(apis)])
    network = RdmaNetwork("network", RdmaNetworkArgs(
        project=cfg.project, region=cfg.region, zone=cfg.zone, prefix=cfg.prefix,
        primary_cidr=net.primary_cidr, pods_cidr=net.pods_cidr, services_cidr=net.services_cidr,
        gvnic_cidr=net.gvnic_cidr, rdma_cidrs=net.rdma_cidrs, mtu=net.mtu,
        addresses_after=(gate.after(apis),)), opts=after_apis)
    nodes = NodeServiceAccount("node-identity", cfg.project, cfg.name("nodes"), opts=after_apis)
    cluster = GkeCluster("gke", component_rules.gke_cluster_args(
        cfg, network=network.handle, min_version=gate.value(gke_version.apply(lambda v: v.version)),
        node_service_account=nodes.email), opts=after_apis)
    in_cluster = pulumi.ResourceOptions(provider=cluster.provider)
    # Docker Hub through a regional remote repository (d.image: what the pods pull); a digest stays a digest.
    image_deps = []
    if cfg.image_mirror:
        image_deps = [ImageMirror("image-mirror", cfg.project, cfg.region, cfg.name("dockerhub"),
                                  readers=[nodes.email.apply(lambda e: f"serviceAccount:{e}")], opts=after_gate)]

    # Pod networks only for NICs the GPU nodes have: none without RDMA (no objects, no annotations).
    mapping = NetworkMapping("network-mapping", network.handle.nics, opts=in_cluster) if network.handle.nics else None
    storage = TrainingStorage("storage", component_rules.storage_args(
        cfg, project_number=_project_number(cfg, apis), hf_token=hf_token, wandb_api_key=wandb_api_key,
    ), opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[gate.after(apis)]))

    # CPU capacity and storage only: staging runs while the GPU pool is still scaling up. The node
    # selector (d.cpu_selector) names the CPU pool by its constant name on Standard, so the Job need
    # not wait for the pool resource.
    task_check, source_access = _task_sources(d, storage)
    # The stack's own data and reward, checked offline by config.load, uploaded content-addressed.
    task_files = None if cfg.task is None else TaskFiles("task-files", TaskFilesArgs(
        bucket=storage.bucket_name,
        files=tuple(TaskUpload(role, Path(f.asset_path), f.object_name) for role, f in
                    (("train", cfg.task.train), ("val", cfg.task.val), ("reward", cfg.task.reward))
                    if f and not f.source)))
    # The reward's smoke test reads the uploaded reward and rows: staging waits for the uploads.
    uploads = [task_files] if task_files and task_check and task_check.get("reward") else []
    prep = DataPrep("data-prep", component_rules.data_prep_args(
        cfg, namespace=storage.namespace, service_account=storage.ksa_name, pvc_name=storage.writer_pvc_name,
        hf_secret_name=storage.hf_secret_name, hf_secret_key=storage.hf_secret_key,
        bucket_name=storage.bucket_name, task_check=task_check,
    ), opts=pulumi.ResourceOptions(provider=cluster.provider,
                                   # Hugging Face and the git clone of verl go out through the region's NAT.
                                   depends_on=[storage, *image_deps, *network.handle.egress, *uploads,
                                               *([source_access] if source_access else [])]))

    ray = RayCluster("ray", component_rules.ray_cluster_args(
        cfg, namespace=storage.namespace, service_account=storage.ksa_name, pvc_name=storage.pvc_name,
        writer_pvc_name=storage.writer_pvc_name, checkpoint_pvc_name=storage.checkpoint_pvc_name,
        head_checkpoint_pvc_name=storage.head_checkpoint_pvc_name,
        network_annotations=mapping.pod_annotations if mapping else {},
        gpu_pool_name=cluster.gpu_pool_name, worker_secret_env=_worker_secret_env(storage),
        # The GPU pool (through its name) and the installer, not the whole cluster component: the GPU
        # workers' scale-up must not wait for the CPU pool; the head pends until a CPU node is Ready.
    ), opts=pulumi.ResourceOptions(provider=cluster.provider,
                                   depends_on=[r for r in (mapping, storage, cluster.installer) if r] + image_deps))

    if cfg.budget is not None:
        # After the APIs, as the storage lookup: Cloud Resource Manager may be enabled by this very run.
        ProjectBudget("budget", component_rules.budget_args(cfg, project_number=_project_number(cfg, apis)),
                      opts=after_apis)
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
        "tensorboardCommand": storage.bucket_name.apply(lambda b: f"tensorboard --logdir {d.tensorboard_url(b)}"),
        # What `python -m tools.watch` needs to reach the Ray dashboard as the job provider does: the
        # API server's service proxy (no credential: the token is minted from the user's gcloud login).
        "rayDashboardProxy": {"endpoint": cluster.endpoint, "ca_certificate": cluster.ca_certificate,
                              "public_ca": True, "namespace": storage.namespace, "service": ray.head_service,
                              "port": ray.dashboard_port},
        "watchCommand": watch_command(cfg.stack),
        # The nodes are private: what each download or upload goes through (Cloud NAT or Google's APIs).
        "egress": network.nat.name.apply(d.egress_routes),
    }
    outputs["logsCommand"] = cloud_logging_command(cfg, cluster.name, storage.namespace, ray.name)
    if d.job is not None:
        outputs.update(_grpo_job(cfg, d, cluster, storage, ray, prep, task_files))
    return outputs


def _project_number(cfg: StackConfig, apis: ProjectApis) -> pulumi.Output[str]:
    """The project's number, looked up after the APIs (Cloud Resource Manager may be enabled by this run)."""
    return gcp.organizations.get_project_output(
        project_id=cfg.project, opts=pulumi.InvokeOutputOptions(depends_on=[apis])).number


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


def _gke_version(cfg: StackConfig, d: derived.Derived, apis: ProjectApis) -> pulumi.Output[preflight.GkeVersion]:
    """The channel lookup, run once the container API is on (ProjectApis may enable it in this very run).

    It is an output-based invoke that depends on the APIs: on an empty project it is unknown at
    preview (the gate then leaves the cluster's version unknown) and runs at `pulumi up` before the
    cluster is registered. The location is the cluster's own (its region, or its zone when zonal): a
    region may offer other versions than its zones (data source docs).
    """
    cl = cfg.cluster
    lookup = gcp.container.get_engine_versions_output(
        location=cfg.cluster_location, project=cfg.project, version_prefix=d.gke_version_prefix,
        opts=pulumi.InvokeOutputOptions(depends_on=[apis]))
    return lookup.apply(lambda found: preflight.resolve_gke_version(
        found, channel=cl.release_channel, pin=cl.gke_version, floors=cl.floors, location=cfg.cluster_location,
        pin_key=keys.full("gkeVersion"), channel_key=keys.full("releaseChannel")))


def _describe_version(version: pulumi.Output[preflight.GkeVersion], cfg: StackConfig) -> pulumi.Output[str]:
    """The version and where it came from; at preview on an empty project, plainly that it is not known yet."""
    channel = cfg.cluster.release_channel

    def say(v: Any) -> str:
        if isinstance(v, preflight.GkeVersion):
            return f"{v.version} ({v.basis})" if v.version else f"refused: {'; '.join(map(str, v.problems))}"
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


def _task_sources(d: derived.Derived, storage: TrainingStorage) -> tuple[dict | None, TaskSourceAccess | None]:
    """gs:// task files: what the staging Job copies and checks, each file naming the read grant it
    needs, and that grant on each source bucket that is not this stack's own (stacks.derived)."""
    if d.task_check is None:
        return None, None
    component, buckets = "task-source", d.task_source_buckets

    def grant(f: dict) -> str:
        bucket = f["source"].removeprefix("gs://").partition("/")[0]
        return (f"{BUCKET_ROLE} on this stack's own bucket gs://{bucket} (the storage component's grant)"
                if bucket not in buckets else
                f"{SOURCE_ROLE} on gs://{bucket} (Pulumi resource {grant_name(component, bucket)})")

    spec = {**d.task_check, "files": [{**f, "grant": grant(f)} for f in d.task_check["files"]]}
    access = TaskSourceAccess(component, TaskSourceAccessArgs(
        buckets=buckets, member=storage.bucket_access.member)) if buckets else None
    return spec, access


def _grpo_job(cfg: StackConfig, d: derived.Derived, cluster: GkeCluster, storage: TrainingStorage,
              ray: RayCluster, prep: DataPrep, task_files: TaskFiles | None = None) -> dict[str, Any]:
    job = d.job
    assert job is not None
    # The cluster component too: on destroy the job is stopped before any node pool goes.
    depends: list[pulumi.Resource] = [ray, prep, cluster, *([task_files] if task_files else [])]
    if job.release is not None:
        depends.append(GpuReleaseAccess("gpu-release", GpuReleaseAccessArgs(
            namespace=storage.namespace, service_account=storage.ksa_name, raycluster=ray.name,
        ), opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[storage])))
    logs_command = cloud_logging_command(cfg, cluster.name, storage.namespace, ray.name)
    ray_job = RayJob("grpo", RayJobArgs(
        submission_id=job.submission_id, entrypoint=job.entrypoint, runtime_env=job.runtime_env,
        expected_gpus=ray.expected_gpus, metadata={"stack": cfg.stack, "model": cfg.model},
        # The DNS endpoint, whose certificate a public CA signs (public_ca): TLS is checked against the
        # system store, not the cluster CA (components.ray_client.GkeDashboard).
        gke={"endpoint": cluster.endpoint, "ca_certificate": cluster.ca_certificate, "public_ca": True,
             "namespace": storage.namespace, "service": ray.head_service, "port": ray.dashboard_port},
        ready_timeout_s=cfg.job.ready_timeout_s, wait_for_completion=cfg.job.wait_for_completion,
        completion_timeout_s=cfg.job.completion_timeout_s, resubmit_on_failure=cfg.job.resubmit_on_failure,
        max_recoveries=cfg.job.max_recoveries, logs_hint=logs_command, cluster_uid=ray.uid,
        stop_timeout_s=job.stop_timeout_s,
        # The supervisor released the GPUs when the last run ended: the next submission brings them back.
        scale={"namespace": storage.namespace, "name": ray.name, "group": job.worker_group, "index": 0,
               "replicas": cfg.gpu_nodes},
    ), opts=pulumi.ResourceOptions(depends_on=depends))
    # Needs dashboardCommand's port-forward running; the watch command needs none.
    logs = ray_job.job_id.apply(
        lambda job_id: f"ray job logs --follow --address http://localhost:{ray.dashboard_port} {job_id}")
    merged = storage.bucket_name.apply(d.merged_model_url) if cfg.job.merge_model else None
    return {"jobId": ray_job.job_id, "jobStatus": ray_job.status, "jobMessage": ray_job.message,
            "jobDashboardUrl": ray_job.dashboard_url, "jobLogsCommand": logs, "jobRecoveries": ray_job.recoveries,
            **({"mergedModel": merged} if merged is not None else {})}
