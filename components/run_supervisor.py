"""The run supervisor (scripts/supervise.py): where it lives in the bucket, and what it may do.

The Ray job's entrypoint runs it on the head; it runs the trainer, recovers from lost GPU nodes,
merges the last checkpoint and finally scales the RayCluster's GPU group to zero. It reaches the
head pod through the bucket (the staging Job copies it there, DataPrepArgs.extra_files), not through
the RayCluster spec, so changing it never recreates the cluster. It ships with the module of what it
shares with the job provider (scripts/verl_gke_protocol.py) and the trainer's entry (scripts/verl_main.py:
verl's main_ppo, TensorBoard's events copied to the bucket), in one folder named by a hash of the
files: a running job's copy is never overwritten, and a change to either is a changed run.

GpuReleaseAccess lets the head pod's service account get and patch that one RayCluster (a
namespaced Role): all the supervisor needs to set the worker group's replicas.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from catalog import naming
from catalog.accelerators import Accelerator
from catalog.paths import BucketPaths
from catalog.problems import Problem
from components.problems import require

SCRIPT_FILE = Path(__file__).resolve().parent / "scripts" / "supervise.py"
PROTOCOL_FILE = SCRIPT_FILE.with_name("verl_gke_protocol.py")  # supervise.py imports it from its own folder
NCCL_CHECK_FILE = SCRIPT_FILE.with_name("nccl_check.py")  # run by supervise.py before each trainer start
# The trainer the supervisor runs: verl's main_ppo with TensorBoard's events copied to the bucket.
MAIN_FILE = SCRIPT_FILE.with_name("verl_main.py")
SHIPPED = (SCRIPT_FILE, PROTOCOL_FILE, MAIN_FILE, NCCL_CHECK_FILE)
NCCL_CHECK_NODES = 2  # two nodes cross the RDMA NICs; more would only lengthen the check
STATE_FILE = "verl-gke-run.json"  # the recovery budget, next to the checkpoints (see supervise.Budget)


def _folder(paths: BucketPaths) -> str:
    """The in-pod folder of this supervisor in the bucket: named by a hash of every file shipped in it."""
    texts = [[f.name, f.read_text()] for f in SHIPPED]
    digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:12]
    return posixpath.join(paths.scripts_dir, f"supervisor-{digest}")


def script_path(paths: BucketPaths) -> str:
    """The supervisor's in-pod path in the bucket (the entrypoint runs it): content-addressed."""
    return posixpath.join(_folder(paths), SCRIPT_FILE.name)


def main_path(paths: BucketPaths) -> str:
    """The trainer's entry script (scripts/verl_main.py), in the same content-addressed folder."""
    return posixpath.join(_folder(paths), MAIN_FILE.name)


def shipped_files(paths: BucketPaths) -> dict[str, str]:
    """In-pod path -> text of each file the supervisor needs, for the staging Job (DataPrepArgs.extra_files)."""
    folder = _folder(paths)
    return {posixpath.join(folder, f.name): f.read_text() for f in SHIPPED}


def nccl_check_args(acc: Accelerator, gpu_nodes: int) -> str:
    """The supervisor's `--nccl-check` arguments: an all-reduce over two nodes' GPUs that must run on
    NCCL_NET (gIB) with every RDMA NIC; empty where nothing crosses an RDMA NIC (no NICs, one node)."""
    if not acc.rdma or gpu_nodes < NCCL_CHECK_NODES:
        return ""
    return f"--nodes {NCCL_CHECK_NODES} --gpus-per-node {acc.gpus_per_node} --nics {acc.rdma_nics}"


def state_path(paths: BucketPaths) -> str:
    return posixpath.join(paths.checkpoint_dir, STATE_FILE)


@dataclass
class GpuReleaseAccessArgs:
    namespace: pulumi.Input[str]
    service_account: pulumi.Input[str]  # the head pod's (TrainingStorage.ksa_name)
    raycluster: str  # the RayCluster's name

    def problems(self) -> list[Problem]:
        return [Problem("raycluster", problem)] if (problem := naming.dns_subdomain_problem(self.raycluster)) else []


class GpuReleaseAccess(pulumi.ComponentResource):
    """Role + RoleBinding: the head pod's service account may get and patch one RayCluster."""

    role: k8s.rbac.v1.Role
    binding: k8s.rbac.v1.RoleBinding

    def __init__(self, name: str, args: GpuReleaseAccessArgs, opts: pulumi.ResourceOptions | None = None):
        require("GpuReleaseAccess", args)
        super().__init__("verl-gke:run_supervisor:GpuReleaseAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = {"app.kubernetes.io/part-of": "verl-gke", "app.kubernetes.io/component": "gpu-release"}
        self.role = k8s.rbac.v1.Role(
            f"{name}-role",
            metadata={"namespace": args.namespace, "labels": labels},
            # Only what the JSON patch of supervise.release_gpus needs, on this one object.
            rules=[{"apiGroups": ["ray.io"], "resources": ["rayclusters"],
                    "resourceNames": [args.raycluster], "verbs": ["get", "patch"]}],
            opts=child,
        )
        self.binding = k8s.rbac.v1.RoleBinding(
            f"{name}-binding",
            metadata={"namespace": args.namespace, "labels": labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": self.role.metadata.name},
            subjects=[{"kind": "ServiceAccount", "name": args.service_account, "namespace": args.namespace}],
            opts=child,
        )
        self.register_outputs({"role": self.role.metadata.name})
