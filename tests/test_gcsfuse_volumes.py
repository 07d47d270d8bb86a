"""Issue 43 items 6 and 10: what a GPU worker's GCS FUSE sidecar keeps on the node's disk, and how many files
it streams, in every shipped stack as composed.

Upstream rules: the volume under a file cache must be larger than the cache (gcs-fuse-csi-driver
docs/troubleshooting.md @5fcdc04a, "File cache issues"); a streamed file takes one write block and gcsfuse
has 4 in all off the machines it recognises (gcsfuse cfg/params.yaml @7b392927 write.global-max-blocks,
docs/semantics.md "Streaming Writes"); a write to a file that already has content is staged whole on disk
(internal/fs/inode/file.go @7b392927 areBufferedWritesSupported).
"""

from __future__ import annotations

import pytest

from catalog.naming import quantity
from recipe import sizing
from stacks import config
from tests.stack_helpers import STACK_FILES, composed_file
from tools import plan

GiB = 1024**3
GPU = "nvidia.com/gpu"
# The pod volumes the GCS FUSE webhook hands the sidecar as its file cache and its write buffer
# (gcs-fuse-csi-driver pkg/webhook/sidecar_spec.go @5fcdc04a).
CACHE_VOLUME, BUFFER_VOLUME = "gke-gcsfuse-cache", "gke-gcsfuse-buffer"
IDS = [f.stem.split(".", 1)[1] for f in STACK_FILES]


def _worker(run) -> dict:
    return run.one("kubernetes:ray.io/v1:RayCluster").inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]


def _mount_option(run, claim_volume: str, key: str) -> int | None:
    """`key`'s value among the mount options of the PV behind the worker's volume `claim_volume`."""
    spec = _worker(run)
    claim = next(v for v in spec["volumes"] if v["name"] == claim_volume)["persistentVolumeClaim"]["claimName"]
    pvc = next(r for r in run.of_type("kubernetes:core/v1:PersistentVolumeClaim")
               if r.inputs["metadata"]["name"] == claim)
    pv = next(r for r in run.of_type("kubernetes:core/v1:PersistentVolume")
              if r.inputs["metadata"]["name"] == pvc.inputs["spec"]["volumeName"])
    found = [o.rsplit(":", 1)[1] for o in pv.inputs["spec"]["mountOptions"] if o.rsplit(":", 1)[0] == key]
    return int(found[0]) if found else None


def _size_gib(spec: dict, volume: str) -> float | None:
    found = [v for v in spec["volumes"] if v["name"] == volume]
    return quantity(found[0]["emptyDir"]["sizeLimit"]) / GiB if found else None


@pytest.mark.parametrize("path", STACK_FILES, ids=IDS)
def test_the_file_cache_volume_is_larger_than_the_cache_it_holds(path):
    run = composed_file(path)
    cache_mib = _mount_option(run, "training-bucket", "file-cache:max-size-mb")
    volume_gib = _size_gib(_worker(run), CACHE_VOLUME)
    assert cache_mib and cache_mib > 0, "the reader mount keeps a bounded file cache"
    assert volume_gib is not None
    # Larger, not equal (the driver's rule), by a margin that is more than rounding.
    assert volume_gib * 1024 - cache_mib >= 1024, f"{volume_gib} GiB volume for a {cache_mib} MiB cache"


@pytest.mark.parametrize("path", STACK_FILES, ids=IDS)
def test_the_checkpoint_mount_streams_every_file_one_worker_saves_at_once(path):
    """Every rank of a pod writes one shard at a time, and the trainer its dataloader state and tracker."""
    run = composed_file(path)
    ranks = int(_worker(run)["containers"][0]["resources"]["limits"][GPU])
    blocks = _mount_option(run, "checkpoints", "write:global-max-blocks")
    assert blocks is not None, "left at gcsfuse's default of 4 blocks unless it recognises the machine"
    assert blocks >= ranks + 2


@pytest.mark.parametrize("path", STACK_FILES, ids=IDS)
def test_the_worker_stages_a_rewritten_checkpoint_share_on_a_sized_buffer(path):
    """A save resumed after a preemption rewrites the shards that had landed: staged whole, every rank of
    the node at once. The buffer holds the node's share of a checkpoint as the run's sizing counts it."""
    raw, _ = plan.read_stack_file(path)
    cfg = config.load({**raw, "gcp:project": "test-project-1"}, path.stem.split(".", 1)[1])
    share_gib = sizing.run_sizing(cfg).checkpoint_gb * 1e9 / cfg.gpu_nodes / GiB
    spec = _worker(composed_file(path))
    buffer_gib = _size_gib(spec, BUFFER_VOLUME)
    assert buffer_gib is not None, "the webhook's default buffer is an unsized emptyDir nobody budgets for"
    assert buffer_gib > share_gib
    # Both volumes are the pod's ephemeral storage, counted against the Ray container's request.
    request_gib = quantity(spec["containers"][0]["resources"]["requests"]["ephemeral-storage"]) / GiB
    assert _size_gib(spec, CACHE_VOLUME) + buffer_gib < request_gib
