"""ImageMirror: an Artifact Registry remote repository in front of Docker Hub.

GPU and CPU nodes pull the multi-GB verl image from the region instead of Docker Hub (no Docker Hub
rate limits, a cached copy after the first pull), and GKE image streaming can serve it. The image
reference itself is computed in catalog.images (a plain string, so callers keep validating it);
depend on this component so nothing pulls before the repository exists.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_gcp as gcp

from catalog import images

READER_ROLE = "roles/artifactregistry.reader"  # Artifact Registry "Access control with IAM": pull images


class ImageMirror(pulumi.ComponentResource):
    repository: gcp.artifactregistry.Repository
    repository_id: str

    def __init__(self, name: str, project: str, location: str, repository_id: str,
                 readers: Sequence[pulumi.Input[str]] = (), opts: pulumi.ResourceOptions | None = None):
        super().__init__("verl-gke:image_mirror:ImageMirror", name, None, opts)
        self.repository_id = repository_id
        # Fields: Artifact Registry remote repositories (mode REMOTE_REPOSITORY, public upstream DOCKER_HUB).
        self.repository = gcp.artifactregistry.Repository(
            f"{name}-repository", project=project, location=location, repository_id=repository_id,
            format="DOCKER", mode="REMOTE_REPOSITORY",
            description="Docker Hub, cached in the region for the verl-gke nodes",
            remote_repository_config=gcp.artifactregistry.RepositoryRemoteRepositoryConfigArgs(
                description="Docker Hub",
                docker_repository=gcp.artifactregistry.RepositoryRemoteRepositoryConfigDockerRepositoryArgs(
                    public_repository="DOCKER_HUB")),
            opts=pulumi.ResourceOptions(parent=self))
        # Read on this repository only (IAM members such as serviceAccount:<nodes>), not on every
        # repository of the project: "Configure roles and permissions" grants roles/artifactregistry.reader
        # at the repository level. Children of the component, not of the repository: a dependent of a
        # component waits for the component's own children and no deeper (pulumi sdk/python
        # lib/pulumi/runtime/rpc.py `_add_dependency`: "Cust4 because it is a child of a custom
        # resource" is left out), so a pod that pulls waits for its pull grant.
        self.grants = [gcp.artifactregistry.RepositoryIamMember(
            f"{name}-reader-{i}", project=project, location=location, repository=self.repository.repository_id,
            role=READER_ROLE, member=member, opts=pulumi.ResourceOptions(parent=self))
            for i, member in enumerate(readers)]
        self.location, self.project = location, project
        self.register_outputs({"repository": self.repository.name})

    def image(self, image: str) -> str:
        """`image` as the nodes pull it through this repository (other registries' images unchanged)."""
        return images.mirrored(image, self.location, self.project, self.repository_id)
