"""Issue 11, finding 4: the GKE versions the mount options need (gcs-fuse-csi-driver docs/releases.md)."""

from __future__ import annotations

import pytest

from catalog import gcsfuse
from catalog.naming import gke_version
from stacks import config
from tests.stack_helpers import BASE, STACK_FILES
from tools import plan


def test_every_feature_we_send_has_a_floor_with_a_source():
    sets = [(gcsfuse.writer_mount_options(8), gcsfuse.WRITER_VOLUME_ATTRIBUTES),
            (gcsfuse.reader_mount_options(1024), gcsfuse.VOLUME_ATTRIBUTES),
            (gcsfuse.checkpoint_mount_options(1024), gcsfuse.VOLUME_ATTRIBUTES)]
    needed = {f for options, attrs in sets for f in gcsfuse.floors_needed(options, attrs)}
    assert needed == set(gcsfuse.FEATURE_FLOORS)  # every documented floor is one we rely on
    for f in needed:
        assert gke_version(f.gke_version) and "releases.md" in f.source
    # The documented values (docs/releases.md Requirements table @5fcdc04a).
    assert {f.gke_version for f in needed} == {"1.32.1-gke.1357001", "1.32.1-gke.1753001",
                                               "1.32.2-gke.1297001", "1.33.2-gke.4655000"}
    assert gcsfuse.mount_floor().gke_version == "1.33.2-gke.4655000"


@pytest.mark.xfail(strict=True, reason="the GCS FUSE floors are fed into the version floors with issue 9's "
                                       "floor table at merge; remove this marker then")
@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_no_stack_accepts_a_version_below_the_mount_floor(path):
    raw, _ = plan.read_stack_file(path)
    cfg = config.load({**raw, **BASE}, path.stem.split(".", 1)[1])
    assert gke_version(cfg.cluster.min_version) >= gke_version(gcsfuse.mount_floor().gke_version)
