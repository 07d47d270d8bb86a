"""Config values whose change would replace a named singleton, for components.stack_guard.StackGuard.

Each names what a change replaces. Named objects collide with themselves on a create-before-delete
replacement (same name), a bucket's location cannot change, and a new cluster or GPU pool deletes
the old one with the running job and the nodes it paid to bring up.
"""

from __future__ import annotations

from typing import Any

from components.cluster import GPU_POOL_NAME
from stacks import keys
from stacks.config import StackConfig


def fixed_values(cfg: StackConfig) -> dict[str, dict[str, Any]]:
    cluster = f"the GKE cluster {cfg.name('gke')} (and the running job with it)"
    values: dict[str, tuple[Any, str]] = {
        "gcp:project": (cfg.project, "every resource of the stack"),
        "gcp:region": (cfg.region, f"the networks and {cluster}"),
        keys.full("clusterMode"): (cfg.cluster.mode, f"{cluster}: Autopilot and Standard are different clusters"),
        keys.full("zonalCluster"): (cfg.cluster.zonal, f"{cluster} (its location)"),
        keys.full("namePrefix"): (cfg.prefix, "every named resource (the cluster, networks, service accounts)"),
        keys.full("bucketLocation"): (cfg.bucket_location,
                                      "the kept bucket (a bucket's location cannot change)"),
        keys.full("bucketName"): (cfg.bucket_name, "the stack's bucket (another bucket, the old one forgotten)"),
    }
    if not cfg.cluster.autopilot:  # Autopilot has no named GPU pool: a new zone or GPU only recreates pods
        values["gcp:zone"] = (cfg.zone, f"the GPU node pool {GPU_POOL_NAME} (its node locations)")
        values[keys.full("accelerator")] = (cfg.accelerator.key,
                                            f"the GPU node pool {GPU_POOL_NAME} (its machine type)")
    return {key: {"value": value, "replaces": what} for key, (value, what) in values.items()}
