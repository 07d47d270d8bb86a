"""RayJob: one Ray job on a Ray cluster as a Pulumi resource, run by RayJobProvider.

Generic: what runs (entrypoint, runtime env) and where (a dashboard address, or a KubeRay head
service behind GKE's API server) are its inputs. The GRPO run is one instance (stacks.compose).

This module is also the import path that state written before the split pickled the provider
under (`components.ray_job.RayJobProvider`): keep that name importable here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from components.ray_client import GkeDashboard
from components.ray_job_provider import DEFAULTS, OUTPUT_KEYS, RayJobProvider

__all__ = ["RayJob", "RayJobArgs", "RayJobProvider", "GkeDashboard"]


@dataclass
class RayJobArgs:
    """What to run where. `submission_id` must change whenever the job should (hash the content)."""

    submission_id: pulumi.Input[str]
    entrypoint: pulumi.Input[str]
    expected_gpus: pulumi.Input[int]
    address: pulumi.Input[str] | None = None
    gke: pulumi.Input[GkeDashboard] | None = None
    runtime_env: pulumi.Input[dict[str, Any]] = field(default_factory=dict)
    metadata: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    ready_timeout_s: pulumi.Input[int] = DEFAULTS["ready_timeout_s"]
    wait_for_completion: pulumi.Input[bool] = DEFAULTS["wait_for_completion"]
    completion_timeout_s: pulumi.Input[int] = DEFAULTS["completion_timeout_s"]
    resubmit_on_failure: pulumi.Input[bool] = DEFAULTS["resubmit_on_failure"]
    log_tail_lines: pulumi.Input[int] = DEFAULTS["log_tail_lines"]
    stop_timeout_s: pulumi.Input[int] = DEFAULTS["stop_timeout_s"]
    max_recoveries: pulumi.Input[int] = DEFAULTS["max_recoveries"]  # resubmissions + in-run restarts
    # The RayCluster worker group to scale back to `replicas` before waiting for the GPUs (gke only):
    # {namespace, name, group, index, replicas}.
    scale: pulumi.Input[dict[str, Any]] | None = None
    logs_hint: pulumi.Input[str] = DEFAULTS["logs_hint"]  # where the logs outlive the pods; in failures
    # The RayCluster's uid (a property dependency): a replaced RayCluster replaces the job in the same `up`.
    cluster_uid: pulumi.Input[str] | None = None


class RayJob(dyn.Resource, module="verl-gke", name="RayJob"):
    """A Ray job on a Ray cluster; replaced (stopped, resubmitted) when what it runs changes."""

    job_id: pulumi.Output[str]
    attempt: pulumi.Output[int]
    status: pulumi.Output[str]
    message: pulumi.Output[str]
    dashboard_url: pulumi.Output[str]
    recoveries: pulumi.Output[int]  # of the run's recovery budget, as of the last create or refresh

    def __init__(self, name: str, args: RayJobArgs, opts: pulumi.ResourceOptions | None = None):
        plain = {f.name: getattr(args, f.name) for f in fields(args)}
        if (plain["address"] is None) == (plain["gke"] is None):
            raise ValueError(f"RayJob {name!r}: give exactly one of `address` and `gke`")
        props = {**plain, **dict.fromkeys(OUTPUT_KEYS)}
        opts = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(delete_before_replace=True), opts)
        super().__init__(RayJobProvider(), name, props, opts)
