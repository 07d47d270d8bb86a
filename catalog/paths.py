"""Every path inside the training bucket, defined once.

The data-staging Job writes exactly here, the RayCluster mounts the bucket at MOUNT, and the
GRPO recipe reads from here. Nothing else spells these paths.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

MOUNT = "/data"  # the bucket's data (verl source, weights, datasets): writer PV in staging, reader PV in Ray
# The bucket's `checkpoints/` folder, mounted on its own (catalog.gcsfuse.checkpoint_mount_options,
# only-dir=checkpoints): checkpoints never pass through the data mounts and their caches.
CHECKPOINT_MOUNT = "/checkpoints"
DATASETS_CACHE = "/tmp/hf-datasets"
TENSORBOARD_LOCAL = "/tmp/verl-gke-tensorboard"
# The staging lease object (created with ifGenerationMatch=0): one staging run per bucket at a time.
STAGING_LEASE = ".verl-gke/staging.lease"
# Written last into a staged folder; a folder without it is incomplete and is redone.
COMPLETE_MARKER = ".verl-gke-complete"


@dataclass(frozen=True)
class BucketPaths:
    """Absolute in-pod paths for one stack (bucket mounted at MOUNT)."""

    verl_src: str
    model_dir: str
    dataset_dir: str
    train_file: str
    val_file: str
    hf_home: str
    checkpoint_dir: str
    tensorboard_dir: str  # where TensorBoard reads the run's events: the bucket (components/scripts/verl_main.py)
    merged_dir: str  # the Hugging Face folder the last checkpoint is merged into
    scripts_dir: str  # our scripts the Ray job runs (the run supervisor), shipped by the staging Job
    # HF datasets' Arrow cache (HF_DATASETS_CACHE): on the pod's own disk (the workers' /tmp emptyDir),
    # never through GCS FUSE; verl's TaskRunner rebuilds it from the parquet files in seconds.
    datasets_cache: str = DATASETS_CACHE
    # verl's TENSORBOARD_DIR (verl/utils/tracking.py): the TaskRunner's pod disk (the workers' /tmp emptyDir),
    # copied to tensorboard_dir: on GCS FUSE each event record would be an upload of its own.
    tensorboard_local_dir: str = TENSORBOARD_LOCAL


def stack_segment(stack: str) -> str:
    """The stack name as one folder name. The CLI accepts `.` and `..` as stack names (tokens.ParseStackName
    takes [A-Za-z0-9_.-]+), which a path would resolve (`/checkpoints/../<model>` left the bucket for the
    pod's own disk); those two get a name of their own, every other stack keeps its name (its checkpoints
    stay where they are)."""
    if stack in ("", ".", ".."):
        return f"stack-{hashlib.sha256(stack.encode()).hexdigest()[:8]}"
    return stack


def bucket_paths(stack: str, model_id: str, verl_version: str, dataset: str = "gsm8k",
                 model_revision: str = "main", run: str = "") -> BucketPaths:
    """Paths for one stack. Every data folder is versioned (verl tag, model revision, the verl tag
    whose preprocessing script made the dataset): staging only ever writes a folder no completed
    run has read, so a reader's infinite metadata TTL and file cache never see a file change.

    `run` (recipe.grpo.run_key: what makes a checkpoint resumable) keys the checkpoints and the merged
    model: `resume_mode=auto` resumes only the same run; a changed one starts in a folder of its own."""
    dataset_dir = posixpath.join(MOUNT, "datasets", dataset, verl_version)
    stack = stack_segment(stack)
    return BucketPaths(
        verl_src=posixpath.join(MOUNT, "verl", verl_version),
        model_dir=posixpath.join(MOUNT, "models", model_id, model_revision),
        dataset_dir=dataset_dir,
        train_file=posixpath.join(dataset_dir, "train.parquet"),
        val_file=posixpath.join(dataset_dir, "test.parquet"),
        hf_home=posixpath.join(MOUNT, "huggingface_cache"),
        # Per model too: `resume_mode=auto` must never load another model's checkpoint.
        # bucket object prefix checkpoints/<stack>/<model>/, as before the checkpoint mount existed.
        checkpoint_dir=posixpath.join(CHECKPOINT_MOUNT, stack, model_id, *([run] if run else [])),
        # Per stack and model like the checkpoints, so curves of different runs never mix.
        tensorboard_dir=posixpath.join(MOUNT, "tensorboard", stack, model_id),
        merged_dir=posixpath.join(MOUNT, "merged", stack, model_id, *([run] if run else [])),
        scripts_dir=posixpath.join(MOUNT, "scripts"),
    )


TASKS_DIR = "tasks"  # a stack's own data and reward files, one folder per file content (sha256)


def task_file(sha256: str, file_name: str, in_pod: bool = True) -> str:
    """A user's task file in the bucket, content-addressed: tasks/<sha256>/<file name>. An unchanged
    file keeps its object (never uploaded twice) and a changed one gets a new folder, so a reader's
    cache never sees a file change. in_pod: the path under MOUNT; else the object name."""
    relative = posixpath.join(TASKS_DIR, sha256, file_name)
    return posixpath.join(MOUNT, relative) if in_pod else relative


def task_copy(source_url: str, file_name: str, in_pod: bool = True) -> str:
    """Where the staging Job copies a gs:// task file: tasks/gs-<sha256 of the URL and file name>/<file name>
    (one folder per copy, with its own marker, even when train and validation name one URL). The plan
    cannot read the object (no credentials offline), so the name is fixed by its URL: one URL is copied
    once, and new content needs a new object name (a reader's cache never sees a file change)."""
    digest = hashlib.sha256(f"{source_url}\n{file_name}".encode()).hexdigest()
    relative = posixpath.join(TASKS_DIR, f"gs-{digest}", file_name)
    return posixpath.join(MOUNT, relative) if in_pod else relative


def gs_url(bucket: str, in_pod_path: str) -> str:
    """The gs:// URL of an in-pod path: the whole bucket is mounted at MOUNT (no only-dir)."""
    relative = posixpath.relpath(in_pod_path, MOUNT)
    if relative.startswith(".."):
        raise ValueError(f"{in_pod_path!r} is not under the bucket mount {MOUNT}")
    return f"gs://{bucket}/{relative}"
