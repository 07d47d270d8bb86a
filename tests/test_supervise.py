"""The run supervisor (components/scripts/supervise.py) as the entrypoint of a real Ray job.

A real local Ray head (no GPUs, like the KubeRay head) and a worker node that declares GPUs; the
stand-in trainer (tests/standins/trainer.py) runs its steps on the worker and checkpoints in verl's
layout. Killing the worker node mid-run is a spot preemption; starting another is KubeRay's replacement
pod. Where the rehearsal runs (tests/test_rehearsal.py), its lost-node run, submitted by the job provider
with the rendered job, covers that case in the pods' own mounts, and the one here skips.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import uuid
from pathlib import Path

import pytest
import requests

from components.ray_client import TERMINAL
from components.ray_job_provider import RayJobProvider
from tests.ray_fixtures import (
    REPO,
    RayNode,
    file_json,
    file_text,
    gpus_on,
    job_logs,
    no_mount_namespace,
    stop_running_jobs,
    wait_for,
    wait_for_line,
    wait_for_no_gpu_workers,
    wait_status,
)

SUPERVISE = REPO / "components" / "scripts" / "supervise.py"
TRAINER = REPO / "tests" / "standins" / "trainer.py"
MERGER = REPO / "tests" / "standins" / "merge.py"
GPUS = 2
# Generous: this machine is small and shared; nothing here is a timing assertion.
JOB_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def head(zero_gpu_head):
    return zero_gpu_head


@pytest.fixture(scope="module")
def _kept(head):
    """The GPU worker node a test left running, for the next test (a node start costs seconds and ~5
    CPU-seconds here); stopped with the module."""
    kept: list[RayNode] = []
    yield kept
    for node in kept:
        node.stop()


@pytest.fixture
def worker(head, _kept):
    """A list holding one running GPU worker node with GPUS GPUs, the only one on the head. A test may stop
    it and append its replacement (a lost node); the running one is kept for the next test."""
    nodes = list(_kept)  # a kept node is running: only _kept's own teardown stops it
    _kept.clear()
    keep = False
    try:
        if not nodes:
            wait_for_no_gpu_workers(head)  # a worker killed before its raylet said goodbye stays ALIVE a while
            nodes.append(RayNode(gpus=GPUS, cpus=1, join=head).start(timeout=180))
        # An earlier test's stopped worker has left: the run counts exactly this node's GPUs and takes only
        # a node that leaves while it watches for a lost one.
        wait_for(lambda: gpus_on(head.address) == head.gpus + GPUS, 180, "exactly one GPU worker on the head")
        yield nodes
        keep = stop_running_jobs(head.address)
    finally:
        for node in nodes:
            if keep and node.pgid is not None and not _kept:
                _kept.append(node)
            else:
                node.stop()


def supervise_cmd(head: RayNode, tmp: Path, run_id: str, trainer_args: list[str], *, merge_fail: bool = False,
                  settle_s: int = 120, extra: tuple[str, ...] = (), on_worker: bool = False) -> str:
    py = sys.executable
    merge_cmd = f"{py} {MERGER}{' --fail' if merge_fail else ''} merge --backend fsdp"
    sup = [py, str(SUPERVISE), "--run-id", run_id, "--state", str(tmp / "ckpt" / "verl-gke-run.json"),
           "--max-recoveries", "3", "--expected-gpus", str(GPUS), "--dashboard", head.address,
           "--settle-s", str(settle_s), "--backoff-s", "1", "--gpu-wait-s", "600",
           "--checkpoint-dir", str(tmp / "ckpt"), "--merge-to", str(tmp / "merged"),
           "--merge-cmd", merge_cmd, *(["--merge-on-worker"] if on_worker else []), *extra]
    trainer = [py, str(TRAINER), "--ckpt", str(tmp / "ckpt"), "--gpus", str(GPUS), *trainer_args]
    return shlex.join([*sup, "--", *trainer])


def submit(head: RayNode, entrypoint: str) -> str:
    job_id = f"sup-{uuid.uuid4().hex[:8]}"
    resp = requests.post(f"{head.address}/api/jobs/", json={"entrypoint": entrypoint, "submission_id": job_id},
                         timeout=30)
    resp.raise_for_status()
    return job_id


def logs(head: RayNode, job_id: str) -> str:
    return job_logs(head.address, job_id)


def steps_run(tmp: Path) -> list[int]:
    path = tmp / "ckpt" / "steps.log"
    return [int(s) for s in path.read_text().split()] if path.exists() else []


@dataclasses.dataclass
class LostNodeRun:
    """A supervised run whose GPU worker node was lost mid-run, as it ended."""

    status: str
    logs: str
    refreshed: dict  # the provider's read after the run (`pulumi refresh`)
    recoveries_seen_while_running: bool  # a refresh during the resumed run already reported the recovery
    state: dict  # the supervisor's recovery state file
    steps: list[int]  # every step the trainer ran, in order
    merged_marker: dict | None
    merged_model: str


# Where the rehearsal runs (root and a mount namespace per pod), its lost-node run covers these through the
# rendered job (tests/test_rehearsal.py); elsewhere the rehearsal skips, and these keep the recovery tested.
needs_no_rehearsal = pytest.mark.skipif(no_mount_namespace() is None,
                                        reason="the rehearsal's lost-node run covers it here")


@pytest.fixture(scope="module")
def lost_node_run(head, _kept, tmp_path_factory) -> LostNodeRun:
    """Submitted by the job provider, as `pulumi up` does: the run id and the cap reach the supervisor through the
    attempt's runtime env, not its command line. The worker node is stopped after two checkpointed steps (a spot
    VM gone, its GPUs with it); KubeRay's replacement pod comes once the supervisor has seen the loss."""
    tmp = tmp_path_factory.mktemp("lost-node")
    for node in _kept:  # the run counts exactly its own node's GPUs
        node.stop()
    _kept.clear()
    wait_for_no_gpu_workers(head)
    worker = RayNode(gpus=GPUS, cpus=1, join=head).start(timeout=180)
    replacement = None
    try:
        wait_for(lambda: gpus_on(head.address) == head.gpus + GPUS, 180, "exactly one GPU worker on the head")
        steps = ["--steps", "8", "--step-s", "2", "--resumed-step-s", "0.2"]
        cmd = supervise_cmd(head, tmp, "ignored", steps, on_worker=True)
        cmd = cmd.replace(" --run-id ignored", "").replace(" --max-recoveries 3", "")
        provider = RayJobProvider()
        created = provider.create({"submission_id": "run-a", "entrypoint": cmd, "expected_gpus": GPUS,
                                   "address": head.address, "ready_timeout_s": 300, "max_recoveries": 3})
        job = created.id
        wait_for(lambda: len(steps_run(tmp)) >= 2, JOB_TIMEOUT_S, "two checkpointed steps")
        worker.stop()
        wait_for_line(head.address, job, "recovery 1 of 3", JOB_TIMEOUT_S)
        replacement = RayNode(gpus=GPUS, cpus=1, join=head).start(timeout=180)
        try:
            wait_for(lambda: provider.read(job, created.outs).outs["recoveries"] == 1, JOB_TIMEOUT_S, "the recovery")
            seen = True
        except AssertionError:
            seen = False
        status = wait_status(head.address, job, TERMINAL, timeout=JOB_TIMEOUT_S)
        return LostNodeRun(
            status=status, logs=logs(head, job), refreshed=provider.read(job, created.outs).outs,
            recoveries_seen_while_running=seen, state=json.loads((tmp / "ckpt" / "verl-gke-run.json").read_text()),
            steps=steps_run(tmp), merged_marker=file_json(tmp / "merged" / ".verl-gke-merged.json"),
            merged_model=file_text(tmp / "merged" / "model.safetensors"))
    finally:
        stop_running_jobs(head.address)
        for node in (worker, replacement):
            if node is not None:
                node.stop()


@needs_no_rehearsal
def test_a_run_that_loses_its_gpu_node_succeeds_after_one_recovery(lost_node_run):
    run = lost_node_run
    assert run.status == "SUCCEEDED", run.logs[-4000:]
    assert "recovery 1 of 3" in run.logs and "SUCCEEDED, recoveries used 1 of 3" in run.logs


@needs_no_rehearsal
def test_the_recovery_state_records_the_lost_node(lost_node_run):
    state = lost_node_run.state
    restarts = state["attempts"]["1"]["restarts"]
    assert len(restarts) == 1 and "left the Ray cluster" in restarts[0]["reason"], state
    assert state["used"] == 1 and state["attempts"]["1"]["outcome"] == "SUCCEEDED"


@needs_no_rehearsal
def test_refresh_reports_the_recovery_while_the_run_goes_on_and_after(lost_node_run):
    """`pulumi refresh` during the resumed run, or just after it: jobRecoveries and jobMessage."""
    refreshed = lost_node_run.refreshed
    assert lost_node_run.recoveries_seen_while_running
    assert refreshed["status"] == "SUCCEEDED" and refreshed["recoveries"] == 1
    assert refreshed["message"].startswith("run run-a attempt 1: SUCCEEDED, recoveries used 1 of 3")


@needs_no_rehearsal
def test_the_trainer_resumes_after_the_last_checkpoint(lost_node_run):
    """After the loss the trainer continued after its last checkpoint: it did not start again at step 1."""
    run = lost_node_run
    assert run.steps[-1] == 8 and run.steps.count(1) == 1, run.steps
    resumed_at = run.state["attempts"]["1"]["restarts"][0]["from_step"] + 1
    assert f"standin: starting at step {resumed_at}" in run.logs


@needs_no_rehearsal
def test_the_last_checkpoint_is_merged_on_a_gpu_node(lost_node_run):
    run = lost_node_run
    assert "on a GPU node" in run.logs and "standin merge: 1 shard(s)" in run.logs
    assert run.merged_marker is not None and run.merged_marker["step"] == 8
    assert run.merged_model == "weights after step 8\n"


def test_deterministic_failure_is_not_retried(head, worker, tmp_path):
    # No node is lost here: the settle window (how long Ray may take to report a lost node) is waited out
    # in full before "not retried", whatever its length.
    cmd = supervise_cmd(head, tmp_path, "run-b", ["--steps", "5", "--step-s", "0.5", "--fail-at-step", "3"],
                        settle_s=3)
    job = submit(head, cmd)
    status = wait_status(head.address, job, TERMINAL, timeout=JOB_TIMEOUT_S)
    text = logs(head, job)
    assert status == "FAILED", text[-4000:]
    assert text.count("starting the trainer") == 1, text[-4000:]
    assert "no GPU node was lost" in text and "not retried" in text
    state = json.loads((tmp_path / "ckpt" / "verl-gke-run.json").read_text())
    assert state["attempts"]["1"]["restarts"] == [] and state["used"] == 0
    assert not (tmp_path / "merged").exists()


def test_failed_merge_fails_the_job_with_the_reason(head, worker, tmp_path):
    job = submit(head, supervise_cmd(head, tmp_path, "run-c", ["--steps", "2", "--step-s", "0.2"], merge_fail=True))
    status = wait_status(head.address, job, TERMINAL, timeout=JOB_TIMEOUT_S)
    text = logs(head, job)
    assert status == "FAILED", text[-4000:]
    assert "model merge of global_step_2 failed" in text and "CUDA out of memory" in text
    assert "FAILED" in json.loads((tmp_path / "ckpt" / "verl-gke-run.json").read_text())["attempts"]["1"]["outcome"]


def test_budget_spent_by_earlier_attempts_stops_at_once(head, worker, tmp_path):
    state = tmp_path / "ckpt" / "verl-gke-run.json"
    state.parent.mkdir(parents=True)
    # Attempt 3 of a run whose first attempt already restarted twice: 2 resubmissions + 2 restarts > 3.
    state.write_text(json.dumps({"run": "run-d", "attempts": {"1": {"restarts": [{}, {}]}, "2": {"restarts": []}}}))
    cmd = supervise_cmd(head, tmp_path, "run-d", ["--steps", "2"], extra=("--attempt", "3"))
    job = submit(head, cmd)
    status = wait_status(head.address, job, TERMINAL, timeout=JOB_TIMEOUT_S)
    text = logs(head, job)
    assert status == "FAILED" and "recovery budget spent (recoveries used 4 of 3)" in text, text[-3000:]
    assert "starting the trainer" not in text
