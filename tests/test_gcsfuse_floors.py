"""Issue 11, finding 4: the GKE versions the mount options need (gcs-fuse-csi-driver docs/releases.md)."""

from __future__ import annotations

import pytest

from catalog import gcsfuse, gke
from stacks import config
from tests.stack_helpers import BASE, STACK_FILES
from tools import plan


def test_every_feature_we_send_has_a_floor_with_a_source():
    needed = set(gcsfuse.gke_floors())
    assert needed == {f for floors in gcsfuse.FEATURE_FLOORS.values() for f in floors} | \
        {gcsfuse.HANDLE_SUFFIX_FLOOR}  # all are relied on
    assert all("releases.md" in f.source for f in needed)
    # The documented values (docs/releases.md Requirements table @5fcdc04a); 1.33.0-gke.1932000: one
    # bucket through two PVs of one pod (the workers' and the head's `<bucket>:<suffix>` handles).
    assert {f.version for f in needed} == {"1.32.1-gke.1357001", "1.32.1-gke.1753001", "1.32.2-gke.1297001",
                                           "1.33.0-gke.1932000", "1.33.2-gke.4655000"}
    assert gke.highest(needed).version == "1.33.2-gke.4655000"


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_no_stack_accepts_a_version_below_the_mount_floor(path):
    raw, _ = plan.read_stack_file(path)
    cfg = config.load({**raw, **BASE}, path.stem.split(".", 1)[1])
    mount_floor = gke.highest(gcsfuse.gke_floors())
    assert mount_floor in cfg.cluster.floors
    assert gke.version_key(gke.highest(cfg.cluster.floors).version) >= gke.version_key(mount_floor.version)
