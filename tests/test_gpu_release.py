"""GPUs released when a run ends and brought back by the next submission, against a real Ray head.

The run supervisor scales the RayCluster's GPU group to 0 through the Kubernetes API with the head
pod's service account; the job provider scales it back before it waits for the GPUs. KubeRay and
the API server are stood in by tests/kuberay_fixture.py (real Ray worker nodes follow `replicas`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys

import pytest

from components.ray_job_provider import RayJobProvider
from tests.kuberay_fixture import FakeKubeRay
from tests.ray_fixtures import gpus_on, pem, wait_for, wait_status
from tests.test_supervise import MERGER, SUPERVISE, TRAINER, logs, submit

GPUS = 2
TOKEN = "sa-token-for-tests"
GROUP = "gpu-group"


@pytest.fixture(scope="module")
def head(zero_gpu_head):
    return zero_gpu_head


@pytest.fixture(scope="module")
def idle(head):
    """GPU worker nodes a test's RayCluster left running, for the next test's to take (a node start costs
    seconds and ~4 CPU-seconds here); stopped with the module."""
    nodes: list = []
    yield nodes
    for node in nodes:
        node.stop()


def service_account_dir(tmp_path, kube: FakeKubeRay):
    """What Kubernetes mounts into the head pod at /var/run/secrets/kubernetes.io/serviceaccount."""
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(TOKEN)
    (sa / "namespace").write_text(kube.namespace)
    (sa / "ca.crt").write_bytes(pem(kube.ca_cert))
    return sa


def released_run(head, kube: FakeKubeRay, tmp_path, run: str, gpus: int, steps: int, step_s: float,
                 options: str = "") -> str:
    """The supervisor around the stand-in trainer, releasing kube's group through the head pod's service account."""
    sa = service_account_dir(tmp_path, kube)
    py, ckpt = sys.executable, tmp_path / "ckpt"
    return (f"{py} {SUPERVISE} --run-id {run} --state {ckpt}/verl-gke-run.json --max-recoveries 3 "
            f"--expected-gpus {gpus} --dashboard {head.address} --checkpoint-dir {ckpt} {options}"
            f"--release-raycluster {kube.name} --release-group {GROUP} --k8s-api https://{kube.endpoint} "
            f"--k8s-sa-dir {sa} -- {py} {TRAINER} --ckpt {ckpt} --gpus {GPUS} --steps {steps} --step-s {step_s}")


@dataclasses.dataclass
class ReleaseCycle:
    """A supervised run that releases its GPUs, then the next submission, on one RayCluster stand-in."""

    status: str  # the supervised run's
    logs: str
    patches: list[list[dict]]  # the RayCluster patches, in order: the run's, then the next submission's
    group: dict  # the worker group as the run left it
    run_queries: list[str]  # the query string of each request to the RayCluster during the run
    next_queries: list[str]  # and during the next submission
    merged: bool  # the merged model's marker was written
    workers_left: bool  # the released worker nodes left Ray
    replicas_after_scale: int  # as the next submission's create returned
    gpus_after_scale: int
    next_status: str


@pytest.fixture(scope="module")
def cycle(head, idle, tmp_path_factory) -> ReleaseCycle:
    """Issue 22: after training the supervisor releases every GPU node but one, merges there, releases the last;
    the next `pulumi up` (a changed run, or a resubmission) scales the group back, waits for its GPUs, submits.
    One node then (the scale's `replicas`), which the stopped run's test takes."""
    tmp_path = tmp_path_factory.mktemp("release")
    with FakeKubeRay(head, TOKEN, name="rc", group=GROUP, replicas=2, gpus_per_worker=GPUS, idle=idle) as kube, \
            pytest.MonkeyPatch.context() as mp:
        wait_for(lambda: gpus_on(head.address) == 2 * GPUS, 600, "both GPU workers to join")
        merge = (f"--settle-s 120 --merge-to {tmp_path / 'merged'} --merge-on-worker --merge-timeout-s 600 "
                 f"--merge-cmd '{sys.executable} {MERGER} merge --backend fsdp' ")
        job = submit(head, released_run(head, kube, tmp_path, "run-r", 2 * GPUS, steps=2, step_s=0.2, options=merge))
        status = wait_status(head.address, job, {"SUCCEEDED", "FAILED"}, timeout=900)
        text, group = logs(head, job), copy.deepcopy(kube.obj["spec"]["workerGroupSpecs"][0])
        try:
            wait_for(lambda: gpus_on(head.address) == 0, 300, "the released workers to leave")
            left = True
        except AssertionError:
            left = False
        run_queries = list(kube.queries)
        mp.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", TOKEN)
        props = {"submission_id": "next-run", "entrypoint": "echo next", "expected_gpus": GPUS,
                 "ready_timeout_s": 600, "gke": kube.gke(),
                 "scale": {"namespace": kube.namespace, "name": "rc", "group": GROUP, "index": 0, "replicas": 1}}
        created = RayJobProvider().create(props)
        replicas, gpus = kube.replicas, gpus_on(head.address)
        next_status = wait_status(head.address, created.id, {"SUCCEEDED", "FAILED"}, timeout=300)
        return ReleaseCycle(status=status, logs=text, patches=copy.deepcopy(kube.patches), group=group,
                            run_queries=run_queries, next_queries=kube.queries[len(run_queries):],
                            merged=(tmp_path / "merged" / ".verl-gke-merged.json").exists(), workers_left=left,
                            replicas_after_scale=replicas, gpus_after_scale=gpus, next_status=next_status)


def test_every_gpu_node_but_one_is_released_before_the_merge(cycle):
    assert cycle.status == "SUCCEEDED", cycle.logs[-3000:]
    assert cycle.logs.index("scaled to 1") < cycle.logs.index("merging")
    assert cycle.patches[0][-1]["value"] == 1


def test_the_merge_runs_on_the_gpu_node_left_and_writes_its_marker(cycle):
    assert "on a GPU node" in cycle.logs and cycle.merged, cycle.logs[-3000:]


def test_the_last_gpu_node_is_released_after_the_merge(cycle):
    assert cycle.logs.index("merging") < cycle.logs.index("scaled to 0")
    assert "released the GPUs: rc/gpu-group scaled to 0" in cycle.logs
    assert [p[-1]["value"] for p in cycle.patches[:2]] == [1, 0]


def test_the_release_keeps_the_groups_bounds_around_zero(cycle):
    assert (cycle.group["replicas"], cycle.group["minReplicas"], cycle.group["maxReplicas"]) == (0, 0, 2)


def test_the_supervisor_patches_as_a_field_manager_of_its_own(cycle):
    """Not Pulumi's: Pulumi leaves the field alone (the RayCluster ignores the worker group's replicas)."""
    assert "fieldManager=verl-gke-supervisor" in cycle.run_queries


def test_the_released_workers_leave_ray(cycle):
    assert cycle.workers_left


def test_the_next_submission_scales_the_group_back_by_its_name(cycle):
    """A JSON patch that tests the group's name first: a group that moved is never scaled by position."""
    patch = cycle.patches[-1]
    assert patch[0] == {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": GROUP}
    assert cycle.replicas_after_scale == 1 and cycle.next_queries[-1] == "fieldManager=verl-gke-job"


def test_the_next_submission_waits_for_the_gpus_then_runs(cycle):
    assert cycle.gpus_after_scale == GPUS and cycle.next_status == "SUCCEEDED"


def test_a_group_that_moved_is_not_scaled_by_position(head, idle, tmp_path, monkeypatch):
    with FakeKubeRay(head, TOKEN, name="rc2", group="other-group", replicas=0, gpus_per_worker=GPUS,
                     idle=idle) as kube:
        monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", TOKEN)
        props = {"submission_id": "never", "entrypoint": "echo", "expected_gpus": GPUS, "ready_timeout_s": 30,
                 "gke": kube.gke(), "scale": {"namespace": kube.namespace, "name": "rc2", "group": GROUP,
                                              "index": 0, "replicas": 1}}
        with pytest.raises(Exception, match="could not scale RayCluster ray/rc2 group gpu-group") as err:
            RayJobProvider().create(props)
        assert "422" in str(err.value) and kube.replicas == 0 and json.dumps(kube.patches) == "[]"


def test_a_stopped_run_releases_the_gpus_too(head, idle, tmp_path):
    """`ray job stop`, as the provider's delete does when `pulumi up` replaces or stops the run."""
    with FakeKubeRay(head, TOKEN, name="rc3", group=GROUP, replicas=1, gpus_per_worker=GPUS, idle=idle) as kube:
        wait_for(lambda: gpus_on(head.address) == GPUS, 300, "the GPU worker to join")
        cmd = released_run(head, kube, tmp_path, "run-s", GPUS, steps=500, step_s=1)
        ckpt = tmp_path / "ckpt"
        job = submit(head, cmd)
        wait_for(lambda: (ckpt / "steps.log").exists(), 300, "the first step")
        RayJobProvider().delete(job, {"submission_id": job, "entrypoint": cmd, "address": head.address,
                                      "job_id": job, "stop_timeout_s": 120})
        assert kube.replicas == 0, logs(head, job)[-3000:]
        wait_for(lambda: gpus_on(head.address) == 0, 300, "the released worker to leave")
        state = json.loads((ckpt / "verl-gke-run.json").read_text())
        assert state["attempts"]["1"]["outcome"] == "STOPPED"
