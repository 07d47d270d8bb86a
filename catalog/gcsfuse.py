"""GCS FUSE CSI driver facts: the driver, mount options, volume attributes, sidecar annotations.

Sources: GoogleCloudPlatform/gcsfuse samples/gke-csi-yaml/gpu (mount options), the tutorial's PV,
GoogleCloudPlatform/gcs-fuse-csi-driver pkg/webhook (sidecar annotations; "0" = no limit, Standard only).
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.gke import GCSFUSE_CSI_RELEASES, Floor

CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
SIDECAR_ANNOTATION = "gke-gcsfuse/volumes"
CPU_LIMIT = "gke-gcsfuse/cpu-limit"
MEMORY_LIMIT = "gke-gcsfuse/memory-limit"
EPHEMERAL_STORAGE_LIMIT = "gke-gcsfuse/ephemeral-storage-limit"
UNLIMITED = "0"  # "no limit" for the sidecar annotations; accepted on Standard only
# The tutorial's options with upstream's corrections (GoogleCloudPlatform/gcsfuse samples/gke-csi-yaml/gpu):
# metadata ttl -1 (0 would make the prefetch on mount pointless); no implicit-dirs, which a
# hierarchical-namespace bucket does not need (its folders are real objects).
MOUNT_OPTIONS = (
    "metadata-cache:negative-ttl-secs:0",
    "metadata-cache:ttl-secs:-1",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-cache:max-size-mb:-1",
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
    "write:enable-streaming-writes:true",
    "write:global-max-blocks:200000",
)
VOLUME_ATTRIBUTES = {
    # Skip the driver's bucket probe before each mount: faster mounts; access comes from the KSA binding.
    "skipCSIBucketAccessCheck": "true",
    "gcsfuseMetadataPrefetchOnMount": "true",
}

# The GKE version from which the managed CSI driver supports an option or attribute we send
# (its docs/releases.md Requirements table); an older node mounts without it or fails the mount.
FEATURE_FLOORS: dict[str, Floor] = {
    "gcsfuseMetadataPrefetchOnMount": Floor("1.32.1-gke.1357001", "GCS FUSE metadata prefetch on mount",
                                            GCSFUSE_CSI_RELEASES),
    "write:enable-streaming-writes": Floor("1.32.1-gke.1753001", "GCS FUSE streaming writes", GCSFUSE_CSI_RELEASES),
    "read_ahead_kb": Floor("1.32.2-gke.1297001", "GCS FUSE kernel read-ahead (read_ahead_kb)", GCSFUSE_CSI_RELEASES),
}


def gke_floors(mount_options: tuple[str, ...] = MOUNT_OPTIONS,
               volume_attributes: dict[str, str] | None = None) -> tuple[Floor, ...]:
    """The floors of the features these options and attributes turn on ("false" turns nothing on)."""
    attrs = VOLUME_ATTRIBUTES if volume_attributes is None else volume_attributes
    # Options are "key=value" (kernel) or "section:key:value" (gcsfuse config).
    pairs = [o.split("=", 1) if "=" in o else o.rsplit(":", 1) for o in mount_options] + list(attrs.items())
    used = {key for key, value in pairs if value.lower() not in ("false", "0")}
    return tuple(f for feature, f in FEATURE_FLOORS.items() if feature in used)


@dataclass(frozen=True)
class SidecarResources:
    """GCS FUSE sidecar requests (= limits) for Autopilot, which rejects the "0" = unlimited form."""

    cpu: float
    memory_gib: float
    ephemeral_storage_gib: float

    @property
    def cpu_quantity(self) -> str:
        millis = round(self.cpu * 1000)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"

    @property
    def memory_quantity(self) -> str:
        return gib_quantity(self.memory_gib)

    @property
    def ephemeral_storage_quantity(self) -> str:
        return gib_quantity(self.ephemeral_storage_gib)


def gib_quantity(gib: float) -> str:
    mib = round(gib * 1024)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


# Sidecars on Autopilot (Standard lifts their limits): counted inside the pod, so the worker's must
# fit the headroom the accelerator table leaves next to the Ray container.
HEAD_SIDECAR = SidecarResources(cpu=1, memory_gib=4, ephemeral_storage_gib=5)
WORKER_SIDECAR = SidecarResources(cpu=2, memory_gib=16, ephemeral_storage_gib=10)
# GKE's sidecar default requests, which stay when Standard lifts the limits.
STANDARD_SIDECAR_REQUEST = SidecarResources(cpu=0.25, memory_gib=0.25, ephemeral_storage_gib=5)


def pod_annotations(autopilot: bool, sidecar: SidecarResources) -> dict[str, str]:
    """Annotations for a pod that mounts the bucket PVC.

    The sidecar's default 5Gi ephemeral-storage limit is added to the pod's total; with an unlimited
    file cache (kept in the sidecar's default emptyDir `gke-gcsfuse-cache` on the node's ephemeral
    storage) that gets the pod evicted. On Standard all sidecar limits are lifted ("0"), so the cache
    is bounded by the workload container's own ephemeral-storage limit, and the metadata-prefetch
    container is unthrottled too (annotation honoured from GKE 1.32.3-gke.1717000, ignored before).
    Autopilot rejects "0": there the sidecar gets `sidecar` as requests = limits, counted in the pod.
    """
    if not autopilot:
        return {
            SIDECAR_ANNOTATION: "true",
            CPU_LIMIT: UNLIMITED,
            MEMORY_LIMIT: UNLIMITED,
            EPHEMERAL_STORAGE_LIMIT: UNLIMITED,
            "gke-gcsfuse/metadata-prefetch-cpu-limit": UNLIMITED,
            "gke-gcsfuse/metadata-prefetch-memory-limit": UNLIMITED,
        }
    return {
        SIDECAR_ANNOTATION: "true",
        CPU_LIMIT: sidecar.cpu_quantity,
        MEMORY_LIMIT: sidecar.memory_quantity,
        EPHEMERAL_STORAGE_LIMIT: sidecar.ephemeral_storage_quantity,
    }
