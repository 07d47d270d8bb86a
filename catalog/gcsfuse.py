"""GCS FUSE CSI driver facts: the driver, mount options, volume attributes, sidecar annotations.

Sources: GoogleCloudPlatform/gcsfuse samples/gke-csi-yaml/gpu (mount options), the tutorial's PV,
GoogleCloudPlatform/gcs-fuse-csi-driver pkg/webhook (sidecar annotations; "0" = no limit, Standard only).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from catalog.gke import GCSFUSE_CSI_RELEASES, Floor

CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
SIDECAR_ANNOTATION = "gke-gcsfuse/volumes"
CPU_LIMIT = "gke-gcsfuse/cpu-limit"
MEMORY_LIMIT = "gke-gcsfuse/memory-limit"
EPHEMERAL_STORAGE_LIMIT = "gke-gcsfuse/ephemeral-storage-limit"
UNLIMITED = "0"  # "no limit" for the sidecar annotations; accepted on Standard only
# A pod volume of this name replaces the sidecar's file cache, and one of the other its buffer: where
# gcsfuse stages the writes it does not stream (pkg/webhook/sidecar_spec.go @5fcdc04a
# SidecarContainerCacheVolumeName, SidecarContainerBufferVolumeName; the webhook adds an unsized
# emptyDir for either the pod does not declare).
CACHE_VOLUME = "gke-gcsfuse-cache"
BUFFER_VOLUME = "gke-gcsfuse-buffer"

# The volume that holds a file cache must be larger than the cache: "Make sure the underlying storage
# volume for file cache is larger than the volume attribute `fileCacheCapacity`" (troubleshooting.md
# @5fcdc04a, "File cache issues"; for an emptyDir the kubelet enforces sizeLimit by evicting the pod).
# The guide names no margin. Ours covers what the cache's own count leaves out: the filesystem's
# per-file block rounding and metadata, the cache's directory tree, and a file still being written
# while the evicted ones are truncated (gcsfuse internal/cache/file/cache_handler.go @7b392927: the
# new entry is inserted, then the evicted ones are cleaned up). The buffer volume takes the same.
VOLUME_HEADROOM = 0.10  # of the content
VOLUME_MIN_HEADROOM_GIB = 2


def volume_gib(content_gib: float) -> int:
    """A cache or buffer volume for `content_gib` of files: strictly larger, with headroom."""
    content = math.ceil(content_gib)
    return content + max(VOLUME_MIN_HEADROOM_GIB, math.ceil(content * VOLUME_HEADROOM))


def cache_volume_gib(cache_gib: int) -> int:
    """The gke-gcsfuse-cache volume for file caches of `cache_gib` in total."""
    return volume_gib(cache_gib)


# --- mount option sets: one PV per kind of job (GoogleCloudPlatform/gcsfuse samples/gke-csi-yaml/gpu) ---
# All three: metadata prefetch needs ttl -1 to be worth anything, and no implicit-dirs, which a
# hierarchical-namespace bucket does not need (its folders are real objects).
_COMMON = ("metadata-cache:negative-ttl-secs:0", "metadata-cache:stat-cache-max-size-mb:-1",
           "metadata-cache:type-cache-max-size-mb:-1")
# Writer (staging Job; the head reads verl's source through it read-only): no file cache (the writer
# never reads back what it wrote), no prefetch, a short metadata TTL so a rerun sees what an
# interrupted run left. Streaming writes on (the default only from GKE 1.33.2-gke.4655000), with
# enough blocks for every file staging keeps open (one 32 MiB block per file, write.global-max-blocks
# default 4 off high-performance machines: gcsfuse cfg/params.yaml).
WRITER_TTL_SECS = 5


def writer_mount_options(open_files: int) -> tuple[str, ...]:
    return (*_COMMON, f"metadata-cache:ttl-secs:{WRITER_TTL_SECS}", "file-cache:max-size-mb:0",
            "write:enable-streaming-writes:true", f"write:global-max-blocks:{open_files}")


# Reader (training): the serving/training sample's options: infinite TTL + prefetch on mount (safe:
# data folders are versioned, nothing a reader cached is rewritten in place), a bounded file cache
# with parallel downloads, kernel read-ahead 1 MiB.
def reader_mount_options(cache_mib: int) -> tuple[str, ...]:
    return (*_COMMON, "metadata-cache:ttl-secs:-1", f"file-cache:max-size-mb:{cache_mib}",
            "file-cache:cache-file-for-range-read:true", "file-cache:enable-parallel-downloads:true",
            "read_ahead_kb=1024")


# Checkpoints: confined to the bucket's checkpoint folder (only-dir), written by every GPU worker and
# read back by the trainer, the supervisor and the merge, each in another pod. Streamed writes need a
# block per open file and gcsfuse has 4 in all unless it recognises the machine as high-performance
# (cfg/params.yaml @7b392927 write.global-max-blocks: default 4, 1600 for the "high-performance"
# group; docs/semantics.md: "One block is used per file ... writes will automatically fall back to
# legacy staged writes if more than 4 files are concurrently opened"). verl v0.6.1 has every rank
# write its model, optimizer and extra-state shards one after the other (utils/checkpoint/
# fsdp_checkpoint_manager.py save_checkpoint): one file per rank at a time, so the mount sets the
# count as the writer mount does, from the ranks of one pod. A finite metadata TTL:
# "if different clients access the same file ... these clients continue to read their cached
# version ... until their individual TTL settings invalidate them" (Cloud Storage FUSE "Caching
# overview", cloud.google.com/storage/docs/gcsfuse-cache, Considerations), and verl rewrites
# latest_checkpointed_iteration.txt in place, so an infinite TTL can resume from an older step. No
# file cache: each shard is read once (resume, merge) and a checkpoint (~393 GB for 32B) exceeds any
# cache ("make sure the whole dataset fits in the cache capacity" to avoid thrashing, same page).
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_TTL_SECS = 5
# Beyond one shard per rank: rank 0's Hugging Face config and tokenizer files, the trainer's dataloader
# state and tracker file (verl trainer/ppo/ray_trainer.py _save_checkpoint), and one spare.
CHECKPOINT_OTHER_OPEN_FILES = 4


def checkpoint_open_files(ranks_per_pod: int) -> int:
    """Files one GPU worker pod's sidecar streams at once during a save: a block each."""
    return ranks_per_pod + CHECKPOINT_OTHER_OPEN_FILES


def checkpoint_mount_options(open_files: int) -> tuple[str, ...]:
    """The GPU workers' checkpoint mount: streamed writes of the shards, a block for each file open at
    once (~96 MiB of sidecar memory each: docs/semantics.md), no file cache."""
    return (f"only-dir={CHECKPOINT_DIR}", *_COMMON, f"metadata-cache:ttl-secs:{CHECKPOINT_TTL_SECS}",
            "file-cache:max-size-mb:0", "write:enable-streaming-writes:true",
            f"write:global-max-blocks:{open_files}")


# What the checkpoint mount still stages in the buffer volume, whole, on the node's disk: a write to a
# file that already exists with content (gcsfuse internal/fs/inode/file.go @7b392927
# areBufferedWritesSupported: "Existing file ... will use legacy staged writes"; truncating one first
# downloads it, truncateUsingTempFile). verl writes its tracker file that way at every save, and a save
# resumed after a preemption mid-save rewrites the shards that had already landed in global_step_<N>
# (verl deletes no partial step folder before it saves: fsdp_checkpoint_manager.py). So the buffer holds
# one node's share of a checkpoint, every rank of the node rewriting at once.
def checkpoint_buffer_gib(node_share_gb: float) -> int:
    """The GPU worker's gke-gcsfuse-buffer volume for one node's share of a checkpoint (decimal GB)."""
    return volume_gib(node_share_gb * 1e9 / 1024**3)


def head_checkpoint_mount_options() -> tuple[str, ...]:
    """The head's checkpoint mount (the run supervisor: the tracker file, the recovery state, pruning):
    the same folder and TTL, no file cache (the head's sidecar has 2 GiB of disk), no prefetch."""
    return (f"only-dir={CHECKPOINT_DIR}", *_COMMON, f"metadata-cache:ttl-secs:{CHECKPOINT_TTL_SECS}",
            "file-cache:max-size-mb:0")


# The kubelet names a CSI volume "<driver>^<volumeHandle>" (kubernetes pkg/volume/csi/csi_plugin.go
# GetVolumeName) and keeps one entry per name with one spec per pod (pkg/kubelet/volumemanager/cache/
# desired_state_of_world.go AddPodToVolume @00661844: podsToMount[podName] is overwritten), so two
# PVs of one pod with the same driver and handle collapse: one of them is never mounted and the pod
# waits in ContainerCreating (the driver's e2e suite: "different PVs will be treated as the same
# volume", test/e2e/testsuites/multivolume.go @5fcdc04a). The driver drops a `:suffix` from the
# handle before it mounts (pkg/util/util.go ParseVolumeID, volumeIDRegEx `:.*$` @5fcdc04a), so
# `<bucket>:<role>` is the same bucket under another volume name.
HANDLE_SUFFIX = {"reader": "", "writer": "", "checkpoints": "ckpt", "head-checkpoints": "head-ckpt"}
HANDLE_SUFFIX_FLOOR = Floor("1.33.0-gke.1932000", "GCS FUSE: one bucket mounted twice in a pod through distinct "
                            "PersistentVolumes (volume handle <bucket>:<suffix>)", GCSFUSE_CSI_RELEASES)


def volume_handle(bucket: str, role: str) -> str:
    """The PV's csi.volumeHandle for a mount role: the bucket, with the role's suffix if it has one."""
    suffix = HANDLE_SUFFIX[role]
    return f"{bucket}:{suffix}" if suffix else bucket


def bucket_of_handle(handle: str) -> str:
    """What the driver mounts for a handle (its ParseVolumeID)."""
    return re.sub(r":.*$", "", handle)


# Kept for callers that want the tutorial's one-PV set (read + write, unbounded cache).
MOUNT_OPTIONS = reader_mount_options(-1) + ("write:enable-streaming-writes:true",)
VOLUME_ATTRIBUTES = {
    # Skip the driver's bucket probe before each mount: faster mounts; access comes from the KSA binding.
    "skipCSIBucketAccessCheck": "true",
    "gcsfuseMetadataPrefetchOnMount": "true",
}
WRITER_VOLUME_ATTRIBUTES = {"skipCSIBucketAccessCheck": "true"}  # no prefetch: the writer changes the tree
CHECKPOINT_VOLUME_ATTRIBUTES = {"skipCSIBucketAccessCheck": "true"}  # no prefetch: a finite TTL would drop it

# --- the webhook's request/limit rule (gcs-fuse-csi-driver pkg/webhook/config.go populateResource,
# prepareResourceList @5fcdc04a), modelled so tests see the sidecar the pod will really carry.
# GKE's managed webhook: requests 250m / 256Mi / 5Gi, no limits (GKE docs; the OSS deploy
# manifest passes --sidecar-*-limit=0 with the same requests).
WEBHOOK_DEFAULTS = {"cpu": ("250m", "0"), "memory": ("256Mi", "0"), "ephemeral-storage": ("5Gi", "0")}


def sidecar_resources(annotations: dict[str, str]) -> dict[str, tuple[float | None, float | None]]:
    """(request, limit) per resource in base units; None = left out of the container spec.

    Per resource, in config.go's order: neither annotated -> the defaults; limit "0" and no request ->
    request = default request; no request -> request = limit; no limit -> limit = request. A zero
    quantity is then omitted ("0" = unset).
    """
    from catalog.naming import quantity

    out: dict[str, tuple[float | None, float | None]] = {}
    for resource, (default_req, default_lim) in WEBHOOK_DEFAULTS.items():
        req = annotations.get(f"gke-gcsfuse/{resource}-request")
        lim = annotations.get(f"gke-gcsfuse/{resource}-limit")
        if req is None and lim is None:
            req, lim = default_req, default_lim
        elif req is None and quantity(lim) == 0:
            req = default_req
        elif req is None:
            req = lim
        elif lim is None:
            lim = req
        r, limit = quantity(req), quantity(lim)
        out[resource] = (r or None, limit or None)
    return out

# The GKE version from which the managed CSI driver supports an option or attribute we send
# (its docs/releases.md Requirements table); an older node mounts without it or fails the mount
# (gcsfuse fails on an option it does not know). Streaming writes also bring the gcsfuse 3.1 floor:
# every writing mount renames what it wrote into place (HF's `.incomplete` files, our markers,
# verl's checkpoint tracker), atomic on hierarchical-namespace buckets by default only from gcsfuse
# 3.1, which the CSI driver ships from 1.33.2-gke.4655000 (inferred from releases.md's perf-defaults
# row, gcsfuse v3.1.0+: catalog.gke.GCSFUSE_CSI_RELEASES).
FEATURE_FLOORS: dict[str, tuple[Floor, ...]] = {
    "gcsfuseMetadataPrefetchOnMount": (Floor("1.32.1-gke.1357001", "GCS FUSE metadata prefetch on mount",
                                             GCSFUSE_CSI_RELEASES),),
    "write:enable-streaming-writes": (
        Floor("1.32.1-gke.1753001", "GCS FUSE streaming writes", GCSFUSE_CSI_RELEASES),
        Floor("1.33.2-gke.4655000", "gcsfuse 3.1 (atomic renames on hierarchical-namespace buckets)",
              GCSFUSE_CSI_RELEASES + " (perf-defaults row, gcsfuse v3.1.0+)")),
    "read_ahead_kb": (Floor("1.32.2-gke.1297001", "GCS FUSE kernel read-ahead (read_ahead_kb)",
                            GCSFUSE_CSI_RELEASES),),
}


def mounts_in_use() -> list[tuple[tuple[str, ...], dict[str, str], str]]:
    """(mount options, volume attributes, role) of the PVs the storage component creates; the cache
    sizes do not change which features they turn on."""
    return [(writer_mount_options(8), WRITER_VOLUME_ATTRIBUTES, "writer"),
            (reader_mount_options(1024), VOLUME_ATTRIBUTES, "reader"),
            (checkpoint_mount_options(checkpoint_open_files(8)), CHECKPOINT_VOLUME_ATTRIBUTES, "checkpoints"),
            (head_checkpoint_mount_options(), CHECKPOINT_VOLUME_ATTRIBUTES, "head-checkpoints")]


def gke_floors(mount_options: tuple[str, ...] | None = None,
               volume_attributes: dict[str, str] | None = None, role: str | None = None) -> tuple[Floor, ...]:
    """The floors of the features these options and attributes turn on ("false" turns nothing on),
    and of a suffixed volume handle for the role; without arguments, of every mount the stack creates."""
    if mount_options is None and volume_attributes is None and role is None:
        found = {f for options, attrs, r in mounts_in_use() for f in gke_floors(options, attrs, r)}
        return tuple(sorted(found, key=lambda f: f.version))
    attrs = volume_attributes or {}
    # Options are "key=value" (kernel) or "section:key:value" (gcsfuse config).
    pairs = [o.split("=", 1) if "=" in o else o.rsplit(":", 1) for o in mount_options or ()] + list(attrs.items())
    used = {key for key, value in pairs if value.lower() not in ("false", "0")}
    floors = tuple(f for feature, floors in FEATURE_FLOORS.items() if feature in used for f in floors)
    return floors + ((HANDLE_SUFFIX_FLOOR,) if role and HANDLE_SUFFIX[role] else ())


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


# Sidecar profiles. Ephemeral storage is a real limit in both modes (a "0" on Standard adds
# nothing to the pod's limit, so the sidecar's disk use would go unbounded). Workers keep their
# file cache in a `gke-gcsfuse-cache` volume of their own, so the sidecar's own disk is small.
HEAD_SIDECAR = SidecarResources(cpu=1, memory_gib=4, ephemeral_storage_gib=2)
# Autopilot GPU nodes cap the sidecar at 2 vCPU / 14 GiB (catalog.autopilot.GPU_SIDECAR_MAX_*).
WORKER_SIDECAR = SidecarResources(cpu=2, memory_gib=14, ephemeral_storage_gib=10)
# GKE's sidecar default requests, which stay when Standard lifts the CPU/memory limits.
STANDARD_SIDECAR_REQUEST = SidecarResources(cpu=0.25, memory_gib=0.25, ephemeral_storage_gib=5)


def pod_annotations(autopilot: bool, sidecar: SidecarResources) -> dict[str, str]:
    """Annotations for a pod that mounts a bucket PVC.

    The ephemeral-storage limit is always explicit: without a request annotation the webhook makes
    the request equal to it (pkg/webhook/config.go), and it bounds what the sidecar may stage on the
    node's disk. On Standard the CPU/memory limits are lifted ("0": requests stay at GKE's defaults)
    and the metadata-prefetch container is unthrottled (honoured from GKE 1.32.3-gke.1717000).
    Autopilot rejects "0": there the sidecar gets `sidecar` as requests = limits, counted in the pod.
    """
    if not autopilot:
        return {
            SIDECAR_ANNOTATION: "true",
            CPU_LIMIT: UNLIMITED,
            MEMORY_LIMIT: UNLIMITED,
            EPHEMERAL_STORAGE_LIMIT: sidecar.ephemeral_storage_quantity,
            "gke-gcsfuse/metadata-prefetch-cpu-limit": UNLIMITED,
            "gke-gcsfuse/metadata-prefetch-memory-limit": UNLIMITED,
        }
    return {
        SIDECAR_ANNOTATION: "true",
        CPU_LIMIT: sidecar.cpu_quantity,
        MEMORY_LIMIT: sidecar.memory_quantity,
        EPHEMERAL_STORAGE_LIMIT: sidecar.ephemeral_storage_quantity,
    }


# --- the staging write path and its disk budget: computed here, once ---------------------------
# huggingface_hub with xet off downloads `max_workers` files at once, each in one sequential stream
# of 10 MiB chunks to a new `.incomplete` file (file_download.http_get), which gcsfuse streams. A
# resumed file (append to an existing object) or any out-of-order write falls back to staging the
# whole file in the buffer volume (gcsfuse docs/semantics.md): the worst case is every file in
# flight staged at once, so the buffer is sized for `parallel_files` x the largest file.
STAGING_PARALLEL_FILES = 4  # snapshot_download(max_workers=...): default 8 would double the buffer
STAGING_SCRATCH_GIB = 4  # emptyDir: temp verl clone, GSM8K preprocessing, HF datasets cache
STAGING_CONTAINER_GIB = 4  # the stage container's writable layer and logs, beyond the scratch
SIDECAR_OWN_GIB = 1  # the sidecar's logs and temp files next to the buffer


@dataclass(frozen=True)
class DiskBudget:
    largest_file_gib: float
    parallel_files: int
    buffer_gib: int  # the sidecar's ephemeral-storage limit: worst-case staged writes + its own
    container_gib: int  # the stage container's ephemeral limit (scratch included)

    @property
    def pod_gib(self) -> int:
        return self.buffer_gib + self.container_gib


def staging_disk_budget(largest_file_gib: float, parallel_files: int = STAGING_PARALLEL_FILES) -> DiskBudget:
    buffer = math.ceil(largest_file_gib * parallel_files) + SIDECAR_OWN_GIB
    return DiskBudget(largest_file_gib, parallel_files, buffer, STAGING_SCRATCH_GIB + STAGING_CONTAINER_GIB)


def staging_sidecar(budget: DiskBudget) -> SidecarResources:
    # CPU/memory: Google's verl data-prep Job (2 CPU / 4Gi sidecar); ~96 MiB RAM per streamed file.
    return SidecarResources(cpu=2, memory_gib=4, ephemeral_storage_gib=budget.buffer_gib)


def file_cache_gib(model_gib: float) -> int:
    """A worker's file cache for one mount: the weights once, with 25% headroom for range reads."""
    return max(16, math.ceil(model_gib * 1.25))
