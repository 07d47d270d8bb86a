"""GPUs released when a run ends and brought back by the next submission, against a real Ray head.

The run supervisor scales the RayCluster's GPU group to 0 through the Kubernetes API with the head
pod's service account; the job provider scales it back before it waits for the GPUs. KubeRay and
the API server are stood in by tests/kuberay_fixture.py (real Ray worker nodes follow `replicas`).
"""

from __future__ import annotations

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


def test_run_end_releases_the_gpus_and_the_next_submission_brings_them_back(head, idle, tmp_path, monkeypatch):
    """Issue 22: after training, every GPU node but one is released before the merge, which runs there; at the
    run's end the last one too. The next `pulumi up` scales the group back and waits for its GPUs."""
    with FakeKubeRay(head, TOKEN, name="rc", group=GROUP, replicas=2, gpus_per_worker=GPUS, idle=idle) as kube:
        wait_for(lambda: gpus_on(head.address) == 2 * GPUS, 600, "both GPU workers to join")
        merge = (f"--settle-s 120 --merge-to {tmp_path / 'merged'} --merge-on-worker --merge-timeout-s 600 "
                 f"--merge-cmd '{sys.executable} {MERGER} merge --backend fsdp' ")
        job = submit(head, released_run(head, kube, tmp_path, "run-r", 2 * GPUS, steps=2, step_s=0.2, options=merge))
        assert wait_status(head.address, job, {"SUCCEEDED", "FAILED"}, timeout=900) == "SUCCEEDED", \
            logs(head, job)[-3000:]
        text = logs(head, job)
        assert text.index("scaled to 1") < text.index("merging") < text.index("scaled to 0")
        assert [p[-1]["value"] for p in kube.patches] == [1, 0]
        assert (tmp_path / "merged" / ".verl-gke-merged.json").exists()
        group = kube.obj["spec"]["workerGroupSpecs"][0]
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (0, 0, 2)
        assert "released the GPUs: rc/gpu-group scaled to 0" in text
        assert "fieldManager=verl-gke-supervisor" in kube.queries  # not Pulumi's: it leaves the field alone
        wait_for(lambda: gpus_on(head.address) == 0, 300, "the released workers to leave")

        # The next `pulumi up` (a changed run, or a resubmission): scale back, wait for the GPUs, submit. One
        # node here (the scale's `replicas`), which the stopped run's test takes.
        monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", TOKEN)
        props = {"submission_id": "next-run", "entrypoint": "echo next", "expected_gpus": GPUS,
                 "ready_timeout_s": 600, "gke": kube.gke(),
                 "scale": {"namespace": kube.namespace, "name": "rc", "group": GROUP, "index": 0, "replicas": 1}}
        created = RayJobProvider().create(props)
        assert kube.patches[-1][0] == {"op": "test", "path": "/spec/workerGroupSpecs/0/groupName", "value": GROUP}
        assert kube.replicas == 1 and gpus_on(head.address) == GPUS and kube.queries[-1] == "fieldManager=verl-gke-job"
        assert wait_status(head.address, created.id, {"SUCCEEDED", "FAILED"}, timeout=300) == "SUCCEEDED"


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
