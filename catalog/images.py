"""Container image references: Docker Hub images through an Artifact Registry remote repository.

Artifact Registry docs ("Remote repositories", Docker Hub upstream): an image `org/name:tag` is pulled
as `<location>-docker.pkg.dev/<project>/<repository>/org/name:tag`, an official image `name:tag` as
`.../library/name:tag`. A digest (`@sha256:...`) is kept as is: the same bytes whichever registry.
GKE image streaming serves images from Artifact Registry repositories, remote ones included
("Use Image streaming to pull container images", requirements).
"""

from __future__ import annotations

DOCKER_HUB_HOSTS = ("docker.io", "index.docker.io", "registry-1.docker.io")


def docker_hub_path(image: str) -> str | None:
    """The repository path of a Docker Hub image (`library/` added for official ones); None if
    the image names another registry (its first component has a dot or a port, or is localhost)."""
    first, _, rest = image.partition("/")
    if rest and (first in DOCKER_HUB_HOSTS):
        image, first, rest = rest, *rest.partition("/")[::2]
    elif rest and ("." in first or ":" in first or first == "localhost"):
        return None
    return image if "/" in image else f"library/{image}"


def mirrored(image: str, location: str, project: str, repository: str) -> str:
    """The image as pulled through the remote repository; other registries' images unchanged."""
    path = docker_hub_path(image)
    return image if path is None else f"{location}-docker.pkg.dev/{project}/{repository}/{path}"
