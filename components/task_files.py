"""TaskFiles: a stack's own data and reward files, uploaded into its bucket by `pulumi up`.

Each file becomes one bucket object named by its content (catalog.paths.task_file: tasks/<sha256>/<name>),
so an unchanged file is never uploaded again (same name, same asset hash: no diff), and a changed
one is a new object that readers with an infinite metadata cache have never seen. The pods read it
through the data mount (MOUNT/tasks/...), where verl wants a local path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_gcp as gcp

from catalog.problems import Problem
from components.problems import require

_OBJECT = re.compile(r"^tasks/[0-9a-f]{64}/[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class TaskUpload:
    role: str  # train / val / reward: the child's name
    local: Path  # the file on the machine that runs pulumi (relative: to the program's working directory)
    object_name: str  # tasks/<sha256>/<file name>


@dataclass
class TaskFilesArgs:
    bucket: pulumi.Input[str]
    files: tuple[TaskUpload, ...]

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        roles = [f.role for f in self.files]
        for f in self.files:
            if not _OBJECT.match(f.object_name):
                found.append(Problem("files", f"object name {f.object_name!r} must be tasks/<sha256>/<file>"))
            if not f.local.is_file():
                found.append(Problem("files", f"{f.local} is not a file"))
            if not re.fullmatch(r"[a-z][a-z0-9-]*", f.role) or roles.count(f.role) > 1:
                found.append(Problem("files", f"role {f.role!r} must be a unique lowercase name"))
        return found


class TaskFiles(pulumi.ComponentResource):
    objects: dict[str, gcp.storage.BucketObject]

    def __init__(self, name: str, args: TaskFilesArgs, opts: pulumi.ResourceOptions | None = None):
        require("TaskFiles", args)
        super().__init__("verl-gke:task_files:TaskFiles", name, None, opts)
        self.objects = {
            f.role: gcp.storage.BucketObject(
                f"{name}-{f.role}", bucket=args.bucket, name=f.object_name,
                source=pulumi.FileAsset(str(f.local)), opts=pulumi.ResourceOptions(parent=self))
            for f in args.files
        }
        self.register_outputs({"objects": {role: o.name for role, o in self.objects.items()}})


# What the staging identity needs on a gs:// task file's bucket: read objects (storage.objects.get), no more.
SOURCE_ROLE = "roles/storage.objectViewer"


@dataclass
class TaskSourceAccessArgs:
    buckets: tuple[str, ...]  # the gs:// task files' buckets, other than the stack's own
    member: pulumi.Input[str]  # the pods' Workload Identity principal (components.storage)

    def problems(self) -> list[Problem]:
        return [Problem("buckets", f"{bucket!r} must be a unique bucket name") for bucket in self.buckets
                if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]", bucket) or self.buckets.count(bucket) > 1]


class TaskSourceAccess(pulumi.ComponentResource):
    """A read grant on each bucket a gs:// task file comes from, for the staging identity (the pods'
    Kubernetes service account): the Job copies the files into the stack's bucket, since verl reads
    local paths only and the pods' mount is the stack's bucket. Member-level (BucketIAMMember): the
    bucket's other bindings are left alone, and `pulumi destroy` removes only this one."""

    grants: dict[str, gcp.storage.BucketIAMMember]

    def __init__(self, name: str, args: TaskSourceAccessArgs, opts: pulumi.ResourceOptions | None = None):
        require("TaskSourceAccess", args)
        super().__init__("verl-gke:task_files:TaskSourceAccess", name, None, opts)
        self.grants = {
            bucket: gcp.storage.BucketIAMMember(
                grant_name(name, bucket), bucket=bucket, role=SOURCE_ROLE, member=args.member,
                opts=pulumi.ResourceOptions(parent=self))
            for bucket in args.buckets
        }
        self.register_outputs({"buckets": list(self.grants)})


def grant_name(component: str, bucket: str) -> str:
    """The grant's resource name, which the staging Job's permission-denied message names."""
    return f"{component}-{bucket}"
