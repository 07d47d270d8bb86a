"""Every path inside the training bucket, defined once.

The data-staging Job writes exactly here, the RayCluster mounts the bucket at MOUNT, and the
GRPO recipe reads from here. Nothing else spells these paths.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

MOUNT = "/data"
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
    merged_dir: str  # the Hugging Face folder the last checkpoint is merged into
    scripts_dir: str  # our scripts the Ray job runs (the run supervisor), shipped by the staging Job


def bucket_paths(stack: str, model_id: str, verl_version: str, dataset: str = "gsm8k") -> BucketPaths:
    """Paths for one stack. Versioned folders mean a version change never clobbers a running job."""
    dataset_dir = posixpath.join(MOUNT, "datasets", dataset)
    return BucketPaths(
        verl_src=posixpath.join(MOUNT, "verl", verl_version),
        model_dir=posixpath.join(MOUNT, "models", model_id),
        dataset_dir=dataset_dir,
        train_file=posixpath.join(dataset_dir, "train.parquet"),
        val_file=posixpath.join(dataset_dir, "test.parquet"),
        hf_home=posixpath.join(MOUNT, "huggingface_cache"),
        # Per model too: `resume_mode=auto` must never load another model's checkpoint.
        checkpoint_dir=posixpath.join(MOUNT, "checkpoints", stack, model_id),
        merged_dir=posixpath.join(MOUNT, "merged", stack, model_id),
        scripts_dir=posixpath.join(MOUNT, "scripts"),
    )


def gcs_uri(bucket: str, path: str) -> str:
    """gs:// URI of an in-pod path under MOUNT."""
    if path != MOUNT and not path.startswith(MOUNT + "/"):
        raise ValueError(f"{path!r} is not under the bucket mount {MOUNT}")
    return f"gs://{bucket}/{path[len(MOUNT) + 1:]}"
