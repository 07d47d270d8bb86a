"""Where a stack's pods reach out to, and which path takes them there (pure).

The nodes are private: a destination outside Google goes through the region's Cloud NAT, Google's
APIs through Private Google Access on the cluster subnet (components.network). One row per thing
the stack fetches or sends; `routes()` says which apply to a configuration.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlparse

from catalog.images import docker_hub_path

NAT = "cloud-nat"
GOOGLE = "private-google-access"

HUGGING_FACE = "huggingface.co"  # the model weights and GSM8K (huggingface_hub / datasets, staging)
DOCKER_HUB = "registry-1.docker.io"  # the image without the mirror
WANDB = "api.wandb.ai"  # wandb's default base URL, when `wandb` is a logger
GCS = "storage.googleapis.com"  # the bucket (GCS FUSE, staging)


def routes(verl_repo: str, image: str, image_mirror: bool, loggers: Iterable[str]) -> dict[str, str]:
    """destination host -> the path it takes from a private node."""
    found = {HUGGING_FACE: NAT, urlparse(verl_repo).hostname or verl_repo: NAT, GCS: GOOGLE}
    if docker_hub_path(image) is not None:
        # Through the Artifact Registry remote repository, which fetches Docker Hub on Google's side.
        found[DOCKER_HUB if not image_mirror else "docker.pkg.dev"] = NAT if not image_mirror else GOOGLE
    if "wandb" in set(loggers):
        found[WANDB] = NAT
    return found
