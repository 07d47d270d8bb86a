"""What the stack derives from its config, computed once per config object (`derived.of(cfg)`).

Compose wires these into the components, the gate builds the components' args from them
(stacks.component_rules) and the offline plan prints them: one computation, so the three cannot drift.
Everything here is a function of the config alone (no Pulumi output); what depends on a resource
(a bucket's name, a pool's name) is wired by compose. `cfg` is a stacks.config.StackConfig, not imported:
the config's gate (stacks.component_rules) reads this module.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from catalog import egress, gke, images, naming
from catalog.autopilot import COMPUTE_CLASS_SELECTOR, PERFORMANCE
from catalog.gcsfuse import (
    HEAD_SIDECAR,
    DiskBudget,
    checkpoint_buffer_gib,
    file_cache_gib,
    staging_disk_budget,
    staging_sidecar,
)
from catalog.gcsfuse import pod_annotations as gcsfuse_pod_annotations
from catalog.models import GB_PER_GIB, largest_file_gib, model_spec, weights_gib
from catalog.nodes import cpu_boot_disk_gb
from catalog.paths import BucketPaths, bucket_paths, gs_url
from catalog.ray import HEAD_EPHEMERAL_GIB, JOB_STOP_WAIT_S, WORKER_GROUP
from catalog.versions import VERL_REPO
from components.cluster import CPU_POOL_NAME
from components.run_supervisor import main_path, nccl_check_args, script_path, shipped_files, state_path
from recipe import grpo
from recipe.job_spec import JobSpec
from stacks import checkpoints, dataset


@dataclass(frozen=True)
class GrpoJob:
    """What the Ray job runs: the supervised trainer, its env and the id that names this exact run."""

    spec: JobSpec  # the command, typed; `entrypoint` is its rendering
    runtime_env: dict
    submission_id: str
    release: tuple[str, str] | None  # (RayCluster name, worker group) the supervisor scales to 0 after a run
    worker_group: str
    # A stop ends within Ray's stop wait (the runtime env's RAY_JOB_STOP_WAIT_TIME_S, catalog.ray): the
    # provider's delete waits that long and a minute more before it calls the job still running.
    stop_timeout_s: int = JOB_STOP_WAIT_S + 60

    @property
    def entrypoint(self) -> str:
        return self.spec.entrypoint


@dataclass(frozen=True)
class Derived:
    paths: BucketPaths  # the stack's bucket paths, checkpoints and merged model keyed by the run
    staging: DiskBudget  # the staging Job's disk, from the model's largest weight file
    cache_gib: int  # each reading mount's file cache, from the weights
    checkpoint_buffer_gib: int  # the GPU worker's staging buffer: one node's share of a checkpoint
    weights_gb: float  # the weights to stage, in GB (the critical path's download)
    image: str  # what the pods pull: through the regional mirror when imageMirror is on (ImageMirror.image)
    cpu_selector: dict[str, str]  # where the staging Job runs (CPU capacity)
    staging_annotations: dict[str, str]  # the staging pod's GCS FUSE annotations, sized from `staging`
    cpu_boot_disk_gb: int  # the Standard CPU pool's boot disk: image + staging pod + head
    extra_files: dict[str, str]  # files staged with the data: the run supervisor the Ray job runs
    budget_display_name: str
    gke_version_prefix: str  # the engine-versions lookup's prefix for the gkeVersion pin
    egress: dict[str, str]  # destination host -> NAT or GOOGLE (catalog.egress)
    task_check: dict | None  # stacks.dataset.staging_check: gs:// task files the staging Job copies in
    task_source_buckets: tuple[str, ...]  # their buckets other than the stack's own (a read grant each)
    # The StackConfig `job` is derived from, held weakly: the values stay readable without keeping the
    # config (and every config a process loaded) alive.
    source: Callable[[], Any] = field(repr=False, compare=False)

    @functools.cached_property
    def job(self) -> GrpoJob | None:
        """The GRPO job (None when submitJob is off); derived when first read, by compose (not by the gate)."""
        cfg = self.source()
        if cfg is None:
            raise ReferenceError("the StackConfig these values were derived from is gone: use derived.of(cfg)")
        return _job(cfg, self.paths) if cfg.job.submit else None

    def egress_routes(self, nat: str) -> dict[str, str]:
        """What each download or upload from the private nodes goes through, in words."""
        return {host: (f"Cloud NAT {nat}" if via == egress.NAT else "Private Google Access")
                for host, via in self.egress.items()}

    def tensorboard_url(self, bucket: str) -> str:
        return gs_url(bucket, self.paths.tensorboard_dir)

    def merged_model_url(self, bucket: str) -> str:
        return gs_url(bucket, self.paths.merged_dir)


def run_paths(cfg) -> BucketPaths:
    """The stack's bucket paths, checkpoints and merged model keyed by the run (stacks.checkpoints)."""
    base = bucket_paths(cfg.stack, cfg.model, cfg.verl_version)
    identity = checkpoints.run_identity(cfg.grpo, model=cfg.model, nnodes=cfg.gpu_nodes,
                                        gpus_per_node=cfg.accelerator.gpus_per_node,
                                        dataset=checkpoints.dataset_identity(cfg.task, base.dataset_dir))
    return bucket_paths(cfg.stack, cfg.model, cfg.verl_version, run=checkpoints.run_key(identity))


def derive(cfg) -> Derived:
    """Every derived value of the stack; read it through `of(cfg)` (computed once per config)."""
    cl = cfg.cluster
    paths = run_paths(cfg)
    staging = staging_disk_budget(largest_file_gib(cfg.model))
    # Autopilot: the Performance class (general-purpose caps a pod at 10 GiB; Google's verl sample).
    # Standard: the CPU pool by its (constant) name, so the Job is created with the cluster and its pod
    # starts on the pool's first Ready node instead of after the pool operation (tools/critical_path).
    cpu_selector = ({COMPUTE_CLASS_SELECTOR: PERFORMANCE.selector} if cl.autopilot
                    else {"cloud.google.com/gke-nodepool": CPU_POOL_NAME})
    task_check, buckets = _task_sources(cfg)
    return Derived(
        paths=paths, staging=staging, cache_gib=file_cache_gib(weights_gib(cfg.model)),
        checkpoint_buffer_gib=checkpoint_buffer_gib(checkpoint_node_share_gb(cfg)),
        weights_gb=weights_gib(cfg.model) * GB_PER_GIB,
        image=images.mirrored(cfg.image, cfg.region, cfg.project, cfg.name("dockerhub"))
        if cfg.image_mirror else cfg.image,
        cpu_selector=cpu_selector,
        staging_annotations=gcsfuse_pod_annotations(cl.autopilot, staging_sidecar(staging)),
        cpu_boot_disk_gb=cpu_boot_disk_gb(staging.pod_gib, HEAD_EPHEMERAL_GIB + HEAD_SIDECAR.ephemeral_storage_gib),
        extra_files=shipped_files(paths),
        budget_display_name=f"{cfg.name('budget')} {cfg.project}"[:60],
        gke_version_prefix=gke.version_prefix(cl.gke_version),
        egress=egress.routes(VERL_REPO, cfg.image, cfg.image_mirror, cfg.grpo.logger),
        task_check=task_check, task_source_buckets=buckets,
        source=weakref.ref(cfg),
    )


def checkpoint_node_share_gb(cfg) -> float:
    """One node's share of a saved checkpoint (decimal GB): recipe.sizing's saved step over the GPU nodes. An
    uncatalogued model's parameters are estimated from its weights' size as bf16 (2 bytes each)."""
    from recipe.sizing import checkpoint_gb

    spec = model_spec(cfg.model)
    params = spec.params if spec else weights_gib(cfg.model) * GB_PER_GIB * 1e9 / 2
    return checkpoint_gb(cfg.grpo, params, cfg.accelerator, cfg.gpu_nodes) / cfg.gpu_nodes


def _task_sources(cfg) -> tuple[dict | None, tuple[str, ...]]:
    """gs:// task files: what the staging Job copies and checks, and the source buckets that are not this
    stack's own (whose name is only known once deployed: <namePrefix>-data-<8 hex>)."""
    if cfg.task is None:
        return None, ()
    spec = dataset.staging_check(cfg.task, train_batch_size=cfg.grpo.train_batch_size,
                                 max_prompt_length=cfg.grpo.max_prompt_length)
    if spec is None:
        return None, ()
    own = re.compile(re.escape(cfg.name("data")) + f"-[0-9a-f]{{{2 * naming.BUCKET_SUFFIX_BYTES}}}")
    return spec, tuple(dict.fromkeys(f.source_bucket for f in cfg.task.copies if not own.fullmatch(f.source_bucket)))


def _job(cfg, paths: BucketPaths) -> GrpoJob:
    acc = cfg.accelerator
    overrides = grpo.overrides(cfg.grpo, stack=cfg.stack, nnodes=cfg.gpu_nodes, gpus_per_node=acc.gpus_per_node,
                               paths=paths, task=cfg.task, nccl_timeout=checkpoints.nccl_timeout_for(cfg))
    # The RayCluster's name is compose's cfg.name("ray") (RayCluster.name is the args' name as given).
    release = (cfg.name("ray"), WORKER_GROUP) if cfg.job.release_gpus else None
    spec = grpo.job_spec(
        overrides, main_script=main_path(paths), script=script_path(paths), state=state_path(paths), paths=paths,
        expected_gpus=cfg.total_gpus, merge=cfg.job.merge_model, release=release,
        keep=cfg.grpo.max_checkpoints_to_keep, nccl_check=nccl_check_args(acc, cfg.gpu_nodes))
    runtime_env = grpo.runtime_env(acc, paths)
    return GrpoJob(spec=spec, runtime_env=runtime_env,
                   submission_id=grpo.submission_id(cfg.stack, spec, runtime_env, cfg.total_gpus),
                   release=release, worker_group=WORKER_GROUP)


def of(cfg) -> Derived:
    """`derive(cfg)`, computed once per config object and kept on it: the gate, compose and the plan share
    it, and it goes with its config (a frozen dataclass: set past its own __setattr__, not a field)."""
    found = cfg.__dict__.get("_derived")
    if found is None:
        found = derive(cfg)
        object.__setattr__(cfg, "_derived", found)
    return found
