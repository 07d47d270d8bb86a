"""The real-engine tier's program: the project's RayJob, StackGuard and BucketKeeper, as a test describes them.

The test hands the program its spec as JSON in DYNAMIC_STACK_SPEC (what changes between two `up`s); the job's
secret comes from the stack's config (`pulumi config set --secret hfToken ...`), as a user's would.

    {"jobs": {name: RayJobArgs fields, and "follows": another job's name (its job_id becomes this job's
              cluster_uid: a property dependency, like the GRPO job's on its RayCluster)},
     "guard": StackGuard's `fixed`, "bucket": a bucket name for a BucketKeeper (kept),
     "provider": "module.Class" to register the jobs with (a provider class at another import path)}
"""

from __future__ import annotations

import importlib
import json
import os
from unittest import mock

import pulumi

SPEC_ENV = "DYNAMIC_STACK_SPEC"


def main() -> None:
    from components import ray_job
    from components.ray_job import RayJob, RayJobArgs
    from components.stack_guard import BucketKeeper, StackGuard

    spec = json.loads(os.environ[SPEC_ENV])
    if "guard" in spec:
        StackGuard("stack-guard", spec["guard"])
    if "bucket" in spec:
        BucketKeeper("bucket-keeper", spec["bucket"], kept=True, adopt_key="verl-gke:bucketName")
    token = pulumi.Config().require_secret("hfToken")
    module, _, name = (spec.get("provider") or "components.ray_job_provider.RayJobProvider").rpartition(".")
    provider = getattr(importlib.import_module(module), name)
    jobs: dict[str, RayJob] = {}
    for job_name, given in spec.get("jobs", {}).items():
        args = dict(given)
        follows = args.pop("follows", None)
        runtime_env = args.pop("runtime_env", {})
        args["runtime_env"] = {**runtime_env, "env_vars": {**runtime_env.get("env_vars", {}), "HF_TOKEN": token}}
        if follows:
            args["cluster_uid"] = jobs[follows].job_id
        # RayJob constructs the provider it is registered with by this module-level name.
        with mock.patch.object(ray_job, "RayJobProvider", provider):
            jobs[job_name] = RayJob(job_name, RayJobArgs(**args))
        pulumi.export(f"{job_name}Id", jobs[job_name].job_id)
