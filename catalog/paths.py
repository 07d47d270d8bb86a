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
    tensorboard_dir: str  # verl's TENSORBOARD_DIR (verl/utils/tracking.py; default: inside the pod's CWD)


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
        # Per stack and model like the checkpoints, so curves of different runs never mix.
        tensorboard_dir=posixpath.join(MOUNT, "tensorboard", stack, model_id),
    )


def gs_url(bucket: str, in_pod_path: str) -> str:
    """The gs:// URL of an in-pod path: the whole bucket is mounted at MOUNT (no only-dir)."""
    relative = posixpath.relpath(in_pod_path, MOUNT)
    if relative.startswith(".."):
        raise ValueError(f"{in_pod_path!r} is not under the bucket mount {MOUNT}")
    return f"gs://{bucket}/{relative}"
