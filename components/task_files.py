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


class TaskFiles(pulumi.ComponentResource):
    objects: dict[str, gcp.storage.BucketObject]

    def __init__(self, name: str, args: TaskFilesArgs, opts: pulumi.ResourceOptions | None = None):
        roles = [f.role for f in args.files]
        for f in args.files:
            if not _OBJECT.match(f.object_name):
                raise ValueError(f"TaskFilesArgs.files: object name {f.object_name!r} must be tasks/<sha256>/<file>")
            if not f.local.is_file():
                raise ValueError(f"TaskFilesArgs.files: {f.local} is not a file")
            if not re.fullmatch(r"[a-z][a-z0-9-]*", f.role) or roles.count(f.role) > 1:
                raise ValueError(f"TaskFilesArgs.files: role {f.role!r} must be a unique lowercase name")
        super().__init__("verl-gke:task_files:TaskFiles", name, None, opts)
        self.objects = {
            f.role: gcp.storage.BucketObject(
                f"{name}-{f.role}", bucket=args.bucket, name=f.object_name,
                source=pulumi.FileAsset(str(f.local)), opts=pulumi.ResourceOptions(parent=self))
            for f in args.files
        }
        self.register_outputs({"objects": {role: o.name for role, o in self.objects.items()}})
