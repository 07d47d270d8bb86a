"""Issue 22: Standard nodes' allocatable (GKE's published formulas) and every pod fitting its node."""

from __future__ import annotations

import copy

import pytest

from catalog import nodes
from catalog.accelerators import ACCELERATORS
from tests.test_admission import STACKS, plans
from tools import node_fit, plan

GiB = 1024**3


def test_boot_disk_allocatable_reproduces_the_gke_sizing_page_sample():
    """"About GKE node sizing" shows a node with a 100 GB boot disk: capacity 98831908Ki, allocatable
    ephemeral-storage 47060071478 and cpu 3920m of 4."""
    assert nodes.boot_disk_allocatable_gib(100) == pytest.approx(47060071478 / GiB, abs=0.01)
    assert nodes.allocatable(4, 16)[0] == pytest.approx(3.92)


def test_issue_figures_for_a_200_gb_boot_disk():
    # Reserved min(50 %, 6 GiB + 35 %, 100 GiB) = 76 GiB, eviction 10 % of the filesystem: ~94 GiB left.
    assert 90 < nodes.boot_disk_allocatable_gib(200) < 96


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_fits_its_standard_node(stack):
    p = plans(stack)["standard"]
    fits = node_fit.fits(p, plan.pod_templates(p))
    assert len(fits) == 3
    for f in fits:
        assert not f.problems, f.problems


def test_the_old_dev_worker_request_does_not_fit():
    """The dev worker asked 100 Gi + the sidecar's 10 Gi of a 200 GB boot disk: Pending for ever."""
    p = copy.deepcopy(plans("dev")["standard"])
    rc = next(r for r in p["resources"] if r["inputs"].get("kind") == "RayCluster")
    (container,) = rc["inputs"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    for part in ("requests", "limits"):
        container["resources"][part]["ephemeral-storage"] = "100Gi"
    (worker,) = [f for f in node_fit.fits(p, plan.pod_templates(p)) if "gpu-group" in f.pod]
    assert any("110.00 GiB ephemeral storage" in x for x in worker.problems)


def test_the_dev_stack_fits_by_its_request_not_a_bigger_disk():
    assert ACCELERATORS["l4"].boot_disk_gb == 200  # unchanged: a new size would replace the GPU pool
    assert ACCELERATORS["l4"].worker_ephemeral_gib + 10 <= nodes.boot_disk_allocatable_gib(200) - \
        nodes.DAEMON_EPHEMERAL_GIB
