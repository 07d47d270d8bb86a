"""The real-engine tier's program: the project's RayJob, StackGuard and BucketKeeper, as a test describes them.

The test hands the program its spec as JSON in DYNAMIC_STACK_SPEC (what changes between two `up`s); the job's
secret comes from the stack's config (`pulumi config set --secret hfToken ...`), as a user's would.

    {"jobs": {name: RayJobArgs fields, and "follows": another job's name (its job_id becomes this job's
              cluster_uid: a property dependency, like the GRPO job's on its RayCluster)},
     "guard": StackGuard's `fixed`, "bucket": a bucket name for a BucketKeeper (kept),
     "providers": {"RayJob" | "StackGuard" | "BucketKeeper": "module.Class"}: the provider class to register
                  those with (a class at another import path)}
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from unittest import mock

import pulumi

SPEC_ENV = "DYNAMIC_STACK_SPEC"


def main() -> None:
    from components import ray_job, stack_guard
    from components.ray_job import RayJob, RayJobArgs
    from components.stack_guard import BucketKeeper, StackGuard

    spec = json.loads(os.environ[SPEC_ENV])
    # Each resource class constructs its provider by a module-level name: patched while the resources register.
    with contextlib.ExitStack() as patches:
        for kind, (module, name) in {"RayJob": (ray_job, "RayJobProvider"),
                                     "StackGuard": (stack_guard, "StackGuardProvider"),
                                     "BucketKeeper": (stack_guard, "BucketKeeperProvider")}.items():
            if kind in spec.get("providers", {}):
                path, _, cls = spec["providers"][kind].rpartition(".")
                patches.enter_context(mock.patch.object(module, name, getattr(importlib.import_module(path), cls)))
        if "guard" in spec:
            StackGuard("stack-guard", spec["guard"])
        if "bucket" in spec:
            BucketKeeper("bucket-keeper", spec["bucket"], kept=True, adopt_key="verl-gke:bucketName")
        token = pulumi.Config().require_secret("hfToken")
        jobs: dict[str, RayJob] = {}
        for job_name, given in spec.get("jobs", {}).items():
            args = dict(given)
            follows = args.pop("follows", None)
            runtime_env = args.pop("runtime_env", {})
            args["runtime_env"] = {**runtime_env, "env_vars": {**runtime_env.get("env_vars", {}), "HF_TOKEN": token}}
            if follows:
                args["cluster_uid"] = jobs[follows].job_id
            jobs[job_name] = RayJob(job_name, RayJobArgs(**args))
            pulumi.export(f"{job_name}Id", jobs[job_name].job_id)
