"""GPUs released when a run ends and brought back by the next submission, against a real Ray head.

The run supervisor scales the RayCluster's GPU group to 0 through the Kubernetes API with the head
pod's service account; the job provider scales it back before it waits for the GPUs. KubeRay and
the API server are stood in by tests/kuberay_fixture.py (real Ray worker nodes follow `replicas`).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import signal
import subprocess
import sys
import uuid

import pytest
import requests

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


def test_a_create_that_adopts_a_spent_run_scales_the_group_back_to_zero(head, idle, monkeypatch):
    """The provider scales the group up before it looks at the head; a run whose budget is spent is then
    adopted, not resubmitted, and no supervisor will ever release those GPUs: the create does."""
    run = f"spent-{uuid.uuid4().hex[:6]}"
    RayJobProvider().create({"submission_id": run, "entrypoint": "exit 1", "expected_gpus": 0, "address": head.address})
    assert wait_status(head.address, run, {"FAILED"}, timeout=120) == "FAILED"
    with FakeKubeRay(head, TOKEN, name="rc-spent", group=GROUP, replicas=0, gpus_per_worker=GPUS,
                     idle=idle) as kube:
        monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", TOKEN)
        props = {"submission_id": run, "entrypoint": "exit 1", "expected_gpus": GPUS, "ready_timeout_s": 600,
                 "max_recoveries": 0, "resubmit_on_failure": True, "gke": kube.gke(),
                 "scale": {"namespace": kube.namespace, "name": kube.name, "group": GROUP, "index": 0,
                           "replicas": 1}}
        adopted = RayJobProvider().create(props)
        assert (adopted.id, adopted.outs["status"]) == (run, "FAILED")
        assert "recovery budget spent" in adopted.outs["message"]
        assert "back to 0 replicas" in adopted.outs["message"]
        assert kube.replicas == 0


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


# --- issue 43: every exit of the supervisor releases the GPUs --------------------------------------------------

_spec = importlib.util.spec_from_file_location("supervise_exits", SUPERVISE)
supervise = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(supervise)
NEVER = 1000  # GPUs no cluster here has: every look for lost GPUs finds them missing
FAIL, SUCCEED = [sys.executable, "-c", "raise SystemExit(3)"], [sys.executable, "-c", "pass"]


def _state(tmp_path, content: str) -> None:
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    (tmp_path / "ckpt" / "state.json").write_text(content)


# Exit name -> (supervisor options, trainer, setup of the run's folder): one way to reach each exit.
EXIT_CASES = {
    "bad arguments": (["--attempt", "0"], SUCCEED, None),
    "refused before training": ([], SUCCEED, lambda t: _state(t, "{not json")),
    "budget spent before this attempt": (["--attempt", "3"], SUCCEED, lambda t: _state(
        t, json.dumps({"run": "run-x", "attempts": {"1": {"restarts": [{}, {}]}, "2": {}}}))),
    # the check itself cannot run (its arguments do not parse): a failed check to the supervisor
    "NCCL check failed": (["--nccl-check", "--gpus-per-node not-a-number --nics 8"], SUCCEED, None),
    "trainer failed, no node lost": ([], FAIL, None),
    "node lost, budget spent": (["--expected-gpus", str(NEVER), "--max-recoveries", "0"], FAIL, None),
    "GPUs did not return": (["--expected-gpus", str(NEVER), "--max-recoveries", "1"], FAIL, None),
    "merge failed": (["--merge-to", "{tmp}/merged"], SUCCEED, None),  # the trainer saved nothing to merge
    "succeeded": ([], SUCCEED, None),
    "stopped": ([], [sys.executable, "-c", "import time; time.sleep(600)"], None),
    "crashed": ([], ["/nonexistent/trainer"], None),  # Popen raises in the supervisor itself
}


def test_every_exit_of_the_supervisor_has_a_case_here():
    """The cases below are the supervisor's exits (EXITS), and every exit the code takes is one of them."""
    import ast

    assert set(EXIT_CASES) == set(supervise.EXITS)
    tree = ast.parse(SUPERVISE.read_text())
    taken = {node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", "") == "ending" and isinstance(node.args[0], ast.Constant)}
    assert taken == set(supervise.EXITS)
    # No other way out of a run: _supervise returns endings (or _train's), _train endings or None (trained).
    methods = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Supervisor").body
    allowed = {"_supervise": {"return failed"}, "_train": {"return None"}}
    for fn in (n for n in methods if isinstance(n, ast.FunctionDef) and n.name in allowed):
        for ret in (n for n in ast.walk(fn) if isinstance(n, ast.Return)):
            assert isinstance(ret.value, ast.Call) and getattr(ret.value.func, "id", "") == "ending" or \
                ast.unparse(ret) in allowed[fn.name], f"{fn.name}: {ast.unparse(ret)}"


@pytest.mark.parametrize("name", list(EXIT_CASES))
def test_each_exit_of_the_supervisor_releases_the_gpus(head, idle, tmp_path, name):
    """Issue 43: a spent budget or an unusable state file returned before the release; now every exit scales
    the group to 0 (one PATCH), against the API server stand-in, and its last line names the exit."""
    options, trainer, setup = EXIT_CASES[name]
    if setup:
        setup(tmp_path)
    with FakeKubeRay(head, TOKEN, name="rc-exits", group=GROUP, replicas=0, gpus_per_worker=GPUS, idle=idle) as kube:
        sa = service_account_dir(tmp_path, kube)
        cmd = [sys.executable, str(SUPERVISE), "--run-id", "run-x", "--max-recoveries", "3", "--state",
               str(tmp_path / "ckpt" / "state.json"), "--expected-gpus", "0", "--dashboard", head.address,
               "--settle-s", "0", "--backoff-s", "0", "--gpu-wait-s", "1", "--checkpoint-dir", str(tmp_path / "ckpt"),
               "--release-raycluster", kube.name, "--release-group", GROUP, "--k8s-api", f"https://{kube.endpoint}",
               "--k8s-sa-dir", str(sa), *(o.format(tmp=tmp_path) for o in options), "--", *trainer]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if name == "stopped":
            lines = []
            for line in proc.stdout:  # `ray job stop` once the trainer runs
                lines.append(line)
                if "starting the trainer" in line:
                    proc.send_signal(signal.SIGTERM)
                    break
            out = "".join(lines) + proc.communicate(timeout=300)[0]
        else:
            out = proc.communicate(timeout=300)[0]
        expected = supervise.EXITS[name] if supervise.EXITS[name] is not None else 3
        assert proc.returncode == expected, out[-3000:]
        assert f'exit "{name}" (code {expected}): the GPUs are released' in out, out[-3000:]
        assert kube.patches == [supervise.protocol.worker_group_patch(0, GROUP, 0)], out[-3000:]


def test_bad_arguments_without_readable_release_options_say_who_releases(tmp_path):
    """The one exit that cannot release: the release options themselves are broken. Its line says so."""
    done = subprocess.run([sys.executable, str(SUPERVISE), "--release-raycluster", "rc", "--release-group-index",
                           "x", "--state", str(tmp_path / "s.json"), "--expected-gpus", "0", "--", "true"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert 'exit "bad arguments" (code 2): the release options cannot be read either' in done.stdout, done


def test_a_stop_has_the_time_for_a_slow_release(head, idle, tmp_path):
    """Issue 43: Ray SIGKILLs a stopped job 3 s after its SIGTERM unless the job's runtime env says otherwise
    (RAY_JOB_STOP_WAIT_TIME_S, ray/dashboard/modules/job/job_supervisor.py). With the stack's runtime env the
    supervisor's release, slowed to 8 s by the API server, still lands and the stop is recorded."""
    from catalog.accelerators import ACCELERATORS
    from catalog.paths import bucket_paths
    from recipe import grpo

    rendered = grpo.runtime_env(ACCELERATORS["b200"], bucket_paths("b200", "Qwen/Qwen2.5-32B-Instruct", "v0.6.1"))
    wait = rendered["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]
    assert wait == str(int(wait)) and int(wait) >= supervise.STOP_RECORD_S + 3 * 8  # an integer string: Ray int()s it
    with FakeKubeRay(head, TOKEN, name="rc-slow", group=GROUP, replicas=0, gpus_per_worker=GPUS, idle=idle,
                     patch_delay_s=8) as kube:
        ckpt = tmp_path / "ckpt"
        cmd = released_run(head, kube, tmp_path, "run-slow", 0, steps=1, step_s=1).split(" -- ")[0] + \
            f" -- {sys.executable} -c 'import time; time.sleep(600)'"
        job_id = f"sup-slow-{uuid.uuid4().hex[:8]}"
        requests.post(f"{head.address}/api/jobs/", json={
            "entrypoint": cmd, "submission_id": job_id,
            "runtime_env": {"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": wait}}}, timeout=30).raise_for_status()
        wait_for(lambda: "starting the trainer" in logs(head, job_id), 300, "the trainer to start")
        RayJobProvider().delete(job_id, {"submission_id": job_id, "entrypoint": cmd, "address": head.address,
                                         "job_id": job_id, "stop_timeout_s": int(wait) + 60})
        text = logs(head, job_id)
        assert kube.patches == [supervise.protocol.worker_group_patch(0, GROUP, 0)], text[-3000:]
        assert 'exit "stopped" (code 143): the GPUs are released' in text, text[-3000:]
        assert json.loads((ckpt / "verl-gke-run.json").read_text())["attempts"]["1"]["outcome"] == "STOPPED"
