"""GKE facts: version floors and how a version compares with them; the nodes' IAM roles (pure).

A floor is the minimum version for something the stack uses (an accelerator, a capacity type, a
GCS FUSE option), never a pin (DESIGN.md): the version itself comes from the release channel at
deploy time (stacks.preflight), because GKE answers 400 "Master version ... is unsupported" for a
patch its channel no longer offers (terraform-provider-google #2149). Each floor names its source;
the accelerator, capacity and GCS FUSE modules each hold their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from catalog.naming import gke_minor as minor
from catalog.naming import gke_version_key as version_key

__all__ = ["NODE_OAUTH_SCOPES", "NODE_ROLES", "Floor", "highest", "minor", "unmet", "unmet_by_minor",
           "version_key", "version_prefix"]

# Google, "Create a custom AI-optimized GKE cluster which uses A4 or A3 Ultra": the page that documents
# the A4/A3 Ultra and flex-start minimums.
AI_CLUSTER_DOC = 'GKE docs "Create a custom AI-optimized GKE cluster which uses A4 or A3 Ultra"'
# The CSI driver's feature/version table: GoogleCloudPlatform/gcs-fuse-csi-driver docs/releases.md.
GCSFUSE_CSI_RELEASES = "gcs-fuse-csi-driver docs/releases.md @5fcdc04a, Requirements"

# GKE docs "Configure GKE node service accounts": nodes need at minimum
# roles/container.defaultNodeServiceAccount on the project (logging, monitoring and metadata writes).
# Image pulls need roles/artifactregistry.reader (Artifact Registry docs "Deploying to GKE"), granted on
# the mirror repository alone (components.image_mirror), not on every repository of the project.
NODE_ROLES = ("roles/container.defaultNodeServiceAccount",)
# Google recommends the cloud-platform scope with a least-privilege account and lets IAM decide
# (gcloud reference, "compute instances set-service-account": "As a best practice, grant the
# cloud-platform access scope ... then grant only the required IAM roles"). Scopes limit only the
# node account's own tokens; Workload Identity pods never receive those, and a narrower list would
# only hide a missing role behind an opaque scope error.
NODE_OAUTH_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


@dataclass(frozen=True)
class Floor:
    """The lowest GKE version that supports `needed_for`, as `source` documents it."""

    version: str
    needed_for: str
    source: str

    def __post_init__(self) -> None:
        if version_key(self.version) is None:
            raise ValueError(f"Floor {self.version!r} is not a full GKE version such as 1.32.2-gke.1475000")

    def __str__(self) -> str:
        return f"{self.version} ({self.needed_for}; {self.source})"


def version_prefix(pin: str) -> str | None:
    """The lookup's filter for a minor pin ("1.33" -> "1.33."); None for a full version or no pin.

    With a prefix, the data source keeps only matching versions, and its channel-latest map holds the
    newest matching version of each channel (terraform-provider-google
    data_source_google_container_engine_versions.go @0262be69)."""
    return f"{pin}." if pin and version_key(pin) is None and minor(pin) is not None else None


def unmet(version: str, floors: Iterable[Floor]) -> list[Floor]:
    """The floors a full version is below, highest first."""
    key = version_key(version)
    if key is None:
        raise ValueError(f"{version!r} is not a full GKE version")
    return sorted((f for f in floors if key < version_key(f.version)),
                  key=lambda f: version_key(f.version), reverse=True)


def unmet_by_minor(pin: str, floors: Iterable[Floor]) -> list[Floor]:
    """The floors no patch of a minor pin ("1.31") can meet: their minor is above it. A floor in the
    same minor is decided by the channel's patch, at deploy time."""
    m = minor(pin)
    if m is None:
        raise ValueError(f"{pin!r} is not a GKE minor such as 1.33")
    return sorted((f for f in floors if m < minor(f.version)), key=lambda f: version_key(f.version), reverse=True)


def highest(floors: Iterable[Floor]) -> Floor | None:
    return max(floors, key=lambda f: version_key(f.version), default=None)
