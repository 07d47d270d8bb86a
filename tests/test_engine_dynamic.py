"""The dynamic providers under the real Pulumi engine (issue 42), against a real local Ray head with declared GPUs.

The real CLI (tests/pulumi_cli.py) runs tests/dynamic_stack's program, which registers the project's own RayJob,
StackGuard and BucketKeeper. The engine starts the dynamic-provider plugin as it would for a user: the SDK's
`pulumi-resource-pulumi-python` script, from the program's folder (a copy in a temporary folder: no project code
there), with PYTHONSAFEPATH=1 and no PYTHONPATH, in a venv that has the project installed the way
requirements.txt's `-e .` installs it (`project_venv`). So every `up` here also proves that the provider imports
the project from the venv, never from the working directory.

A KubeRay stand-in (tests/kuberay_fixture.py) serves the RayCluster whose worker group the job's create scales,
for the tests of what a cancelled, interrupted or killed `pulumi up` leaves requested.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pickletools
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests import pulumi_cli
from tests.kuberay_fixture import FakeKubeRay
from tests.ray_fixtures import BOGUS_RAY_ADDRESS, image_env, jobs_on, stop_running_jobs, wait_for, wait_status
from tools.local_ray import RayNode, processes

pytestmark = pytest.mark.cli

PROGRAM_DIR = pulumi_cli.ROOT / "tests" / "dynamic_stack"
PROGRAM = "tests.dynamic_stack.program:main"
HEAD_GPUS = 2
TOKEN = "hf_not_a_real_token_8c1f0e"  # the job's secret: never in the state in plain text
KUBE_TOKEN = "kube-token-for-tests"  # the bearer token the provider sends the API server (CLOUDSDK_AUTH_ACCESS_TOKEN)
JOB_URN_TAIL = "pulumi-python:dynamic/verl-gke:RayJob::job"
ACTIVE = {"PENDING", "RUNNING"}
# Release 0.1.0 on main (CHANGELOG.md, release/urns-0.1.0.json): its provider modules write the state an upgrade
# from the release reads.
BASE_COMMIT = "12a0af0ab8c85894509b05ad2551b1aea0158139"


# ----------------------------------------------------------------------------- the venv, the head, the stack


@pytest.fixture(scope="module")
def project_venv(tmp_path_factory) -> Path:
    """A venv where the project is installed as requirements.txt's `-e .` installs it, the shared venv's packages
    reused through a .pth (the shared venv itself is not installed into here)."""
    import sysconfig

    venv = tmp_path_factory.mktemp("project-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "shared-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                           "--no-deps", "-e", str(pulumi_cli.ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pip install -e . failed:\n{done.stdout}\n{done.stderr}"
    return venv


@pytest.fixture(scope="module")
def head():
    node = RayNode(gpus=HEAD_GPUS, env=image_env()).start(timeout=240)
    try:
        yield node
    finally:
        stop_running_jobs(node.address)
        node.stop()


class Stack:
    """One stack of the test program on its own file backend; `spec` is what the program registers."""

    def __init__(self, tmp_path: Path, venv: Path):
        self.project = tmp_path / "program"
        shutil.copytree(PROGRAM_DIR, self.project, ignore=shutil.ignore_patterns("__pycache__"))
        self.ws = pulumi_cli.Workspace(self.project, tmp_path / "scratch", env={
            "PULUMI_RUNTIME_VIRTUALENV": str(venv), "PYTHONSAFEPATH": "1",
            "RAY_ADDRESS": BOGUS_RAY_ADDRESS, "CLOUDSDK_AUTH_ACCESS_TOKEN": KUBE_TOKEN})
        self.ws.env.pop("PYTHONPATH", None)  # the provider process must find the project in the venv alone
        self.spec: dict = {}
        self.host_path: str | None = None  # code the program imports ahead of the checkout's (an older release)
        self.cli("stack", "init", "dev")
        self.cli("config", "set", "--secret", "hfToken", TOKEN)

    def cli(self, *args: str, ok: bool = True, timeout: float = pulumi_cli.COMMAND_TIMEOUT_S) -> pulumi_cli.Result:
        result = self.ws.run(*args, "--color=never", program=PROGRAM if self._runs_program(args) else None,
                             host_env=self._host_env(), timeout=timeout)
        if ok:
            assert result.code == 0, str(result)
        return result

    @staticmethod
    def _runs_program(args: tuple[str, ...]) -> bool:
        return args[0] in ("up", "preview", "refresh", "destroy")

    def _host_env(self) -> dict[str, str]:
        path = os.pathsep.join([*([self.host_path] if self.host_path else []), str(pulumi_cli.ROOT)])
        return {"DYNAMIC_STACK_SPEC": json.dumps(self.spec), "PYTHONPATH": path}

    def up(self, *extra: str, ok: bool = True) -> pulumi_cli.Result:
        return self.cli("up", "--yes", "--skip-preview", *extra, ok=ok)

    def start_up(self) -> subprocess.Popen:
        proc, host = self.ws.start("up", "--yes", "--skip-preview", "--color=never", program=PROGRAM,
                                   host_env=self._host_env())
        self._host = host
        return proc

    def finish(self, proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
        """The exit code and output of a command started with start_up, bounded."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"pulumi up still running {timeout}s on:\n{out}\n{err}") from None
        finally:
            pulumi_cli.stop_host(self._host[0])
        return proc.returncode, out + err

    def export(self, show_secrets: bool = False) -> dict:
        return json.loads(self.cli("stack", "export", *(["--show-secrets"] if show_secrets else [])).out)

    def resource(self, urn_tail: str = JOB_URN_TAIL, show_secrets: bool = False) -> dict:
        found = [r for r in self.export(show_secrets)["deployment"]["resources"] if r["urn"].endswith(urn_tail)]
        assert len(found) == 1, f"{urn_tail}: {len(found)} in the state"
        return found[0]

    def provider_processes(self) -> dict[int, bytes]:
        """The dynamic-provider processes the engine started for this stack (the sh wrapper and python),
        by their working directory: the program's folder."""
        found = {}
        for pid, (_, cmd) in processes().items():
            if b"pulumi.dynamic" in cmd or b"pulumi-resource-pulumi-python" in cmd:
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/cwd") == str(self.project):
                        found[pid] = cmd
        return found


@pytest.fixture
def stack(tmp_path, project_venv) -> Stack:
    made = Stack(tmp_path, project_venv)
    yield made
    for pid in made.provider_processes():  # a test that failed half-way may leave its provider waiting
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def new_id(tag: str) -> str:
    return f"e-{tag}-{uuid.uuid4().hex[:8]}"


def job(head: RayNode, sid: str, entrypoint: str = "sleep 600", **overrides) -> dict:
    return {"submission_id": sid, "entrypoint": entrypoint, "expected_gpus": HEAD_GPUS, "address": head.address,
            "ready_timeout_s": 180, "stop_timeout_s": 120, **overrides}


def active(head: RayNode, prefix: str) -> list[str]:
    return [j["submission_id"] for j in jobs_on(head.address, prefix) if j["status"] in ACTIVE]


def status_on(head: RayNode, sid: str) -> str:
    return requests.get(f"{head.address}/api/jobs/{sid}", timeout=10).json()["status"]


# ----------------------------------------------------------------------------- up, up, refresh


def test_up_submits_the_job_once(head, stack):
    sid = new_id("once")
    stack.spec = {"jobs": {"job": job(head, sid)}}
    stack.up()
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid]
    outs = stack.resource()["outputs"]
    assert (outs["job_id"], outs["attempt"]) == (sid, 1) and outs["status"] in ACTIVE


def test_a_second_up_with_the_same_inputs_changes_nothing(head, stack):
    sid = new_id("again")
    stack.spec = {"jobs": {"job": job(head, sid)}}
    stack.up()
    before = stack.resource()
    stack.up("--expect-no-changes")
    assert stack.resource()["modified"] == before["modified"]
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid]


def test_refresh_while_running_keeps_the_job_and_the_next_up_changes_nothing(head, stack):
    """Refresh reads the job (`read` also stores the attempt in the inputs): RUNNING, and the next `up` sees no
    change in that, nor resubmits."""
    sid = new_id("refresh")
    stack.spec = {"jobs": {"job": job(head, sid)}}
    stack.up()
    wait_status(head.address, sid, {"RUNNING"}, timeout=120)
    stack.cli("refresh", "--yes", "--skip-preview")
    refreshed = stack.resource()
    assert refreshed["outputs"]["status"] == "RUNNING" and refreshed["inputs"]["last_job_id"] == sid
    stack.up("--expect-no-changes")
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid] and status_on(head, sid) == "RUNNING"


# ----------------------------------------------------------------------------- an update or a replace, as the diff says


def test_a_changed_knob_updates_the_job_in_place(head, stack):
    sid = new_id("knob")
    stack.spec = {"jobs": {"job": job(head, sid)}}
    stack.up()
    wait_status(head.address, sid, {"RUNNING"}, timeout=120)
    stack.spec = {"jobs": {"job": job(head, sid, ready_timeout_s=240, metadata={"note": "changed"})}}
    result = stack.up()
    assert "1 updated" in result.out, str(result)
    state = stack.resource()
    assert state["inputs"]["ready_timeout_s"] == 240 and state["outputs"]["metadata"] == {"note": "changed"}
    assert active(head, sid) == [sid] and state["outputs"]["job_id"] == sid


def test_a_changed_entrypoint_replaces_the_job_stopping_the_old_one_first(head, stack):
    old, new = new_id("old"), new_id("new")
    stack.spec = {"jobs": {"job": job(head, old)}}
    stack.up()
    wait_status(head.address, old, {"RUNNING"}, timeout=120)
    stack.spec = {"jobs": {"job": job(head, new, entrypoint="sleep 601")}}
    result = stack.up()
    assert "1 replaced" in result.out, str(result)
    assert status_on(head, old) == "STOPPED" and active(head, old) == [] and active(head, new) == [new]
    jobs = {j["submission_id"]: j for j in jobs_on(head.address, "e-")}
    assert jobs[old]["end_time"] <= jobs[new]["start_time"]  # delete before replace: never two runs on the GPUs
    assert stack.resource()["outputs"]["job_id"] == new


def test_a_replaced_resource_behind_cluster_uid_replaces_the_job_in_the_same_up(head, stack):
    """The engine's dependents pass: a resource replaced delete-before-replace (here another RayJob standing in for
    the RayCluster) turns the job's `cluster_uid` unknown, and the job's diff replaces it in that same `up`."""
    cluster, run = new_id("cluster"), new_id("run")
    stack.spec = {"jobs": {"cluster": job(head, cluster, expected_gpus=0),
                           "job": job(head, run, expected_gpus=0, follows="cluster")}}
    stack.up()
    first = stack.resource()["outputs"]
    assert first["cluster_uid"] == cluster
    cluster2 = new_id("cluster2")
    stack.spec["jobs"]["cluster"] = job(head, cluster2, expected_gpus=0)
    result = stack.up()
    assert "2 replaced" in result.out, str(result)
    after = stack.resource()["outputs"]
    # Stopped, then submitted again: as the next attempt, since this head (unlike a recreated RayCluster's) still
    # lists the stopped one.
    assert after["cluster_uid"] == cluster2 and after["job_id"] == f"{run}-r2"
    assert status_on(head, run) == "STOPPED" and active(head, run) == [f"{run}-r2"]
    assert status_on(head, cluster) == "STOPPED" and active(head, cluster2) == [cluster2]


def test_refresh_after_the_job_failed_resubmits_it_as_the_next_attempt(head, stack, tmp_path):
    flag = tmp_path / "fail-now"
    sid = new_id("fails")
    # Fails on a sign from the test, and only once: the next attempt finds the sign gone and keeps running.
    entrypoint = f"sh -c 'while [ ! -e {flag} ]; do sleep 0.2; done; rm -f {flag}; exit 3'"
    stack.spec = {"jobs": {"job": job(head, sid, entrypoint=entrypoint)}}
    stack.up()
    wait_status(head.address, sid, {"RUNNING"}, timeout=120)
    flag.touch()
    wait_status(head.address, sid, {"FAILED"}, timeout=120)
    stack.cli("refresh", "--yes", "--skip-preview")
    assert stack.resource()["outputs"]["status"] == "FAILED"
    result = stack.up()
    assert "1 replaced" in result.out, str(result)
    outs = stack.resource()["outputs"]
    assert (outs["job_id"], outs["attempt"], outs["recoveries"]) == (f"{sid}-r2", 2, 1)
    assert sorted(j["submission_id"] for j in jobs_on(head.address, sid)) == [sid, f"{sid}-r2"]
    assert active(head, sid) == [f"{sid}-r2"]


# ----------------------------------------------------------------------------- the state


def _provider_class(resource: dict, part: str) -> str:
    """The class path in the job's pickled provider (a state exported with --show-secrets)."""
    blob = json.loads(resource[part]["__provider"]["plaintext"])
    names = [arg for op, arg, _ in pickletools.genops(base64.b64decode(blob)) if op.name == "SHORT_BINUNICODE"]
    return ".".join(names)


def test_the_state_holds_the_secret_encrypted_and_the_pickled_provider(head, stack):
    """After the create and after a refresh (read's outputs and inputs): the token only as ciphertext; the
    provider pickled by reference in the job's inputs and outputs (itself kept as a secret by the SDK)."""
    sid = new_id("secret")
    stack.spec = {"jobs": {"job": job(head, sid)}}
    stack.up()
    for step in ("up", "refresh"):
        if step == "refresh":
            stack.cli("refresh", "--yes", "--skip-preview")
        text = stack.cli("stack", "export").out
        assert TOKEN not in text, step
        resource = stack.resource()
        assert resource["outputs"]["runtime_env"]["env_vars"]["HF_TOKEN"]["ciphertext"], step
        assert set(resource["outputs"]["__provider"]) == {"4dabf18193072939515e22adb298388d", "ciphertext"}, step
    plain = stack.resource(show_secrets=True)
    assert _provider_class(plain, "inputs") == _provider_class(plain, "outputs") == \
        "components.ray_job_provider.RayJobProvider"
    assert plain["outputs"]["runtime_env"]["env_vars"]["HF_TOKEN"]["plaintext"] == json.dumps(TOKEN)


MOVED = """
from components.ray_job_provider import RayJobProvider as _Job
from components.stack_guard import BucketKeeperProvider as _Keeper, StackGuardProvider as _Guard


class RayJobProvider(_Job):
    pass


class StackGuardProvider(_Guard):
    pass


class BucketKeeperProvider(_Keeper):
    pass
"""
KINDS = {"RayJob": ("RayJobProvider", "components.ray_job_provider", "::job"),
         "StackGuard": ("StackGuardProvider", "components.stack_guard", "::stack-guard"),
         "BucketKeeper": ("BucketKeeperProvider", "components.stack_guard", "::bucket-keeper")}


def test_a_changed_provider_pickle_is_an_update_that_moves_the_state_on(head, stack, tmp_path):
    """State written by provider classes at another import path (as if they had moved): one `up` of today's code
    updates each resource in place (never a replace) and the outputs then hold today's classes, so refresh and
    destroy work once the old path is gone. The job's own diff says so; the guard's and the keeper's leave it to
    the engine's comparison of the inputs."""
    old_place = tmp_path / "old_place"
    old_place.mkdir()
    (old_place / "moved_providers.py").write_text(MOVED)
    sid = new_id("moved")
    stack.spec = {"jobs": {"job": job(head, sid)}, "guard": guard(**{"gcp:region": "us-central1"}),
                  "bucket": "verl-data-0a1b2c3d",
                  "providers": {kind: f"moved_providers.{cls}" for kind, (cls, _, _) in KINDS.items()}}
    stack.host_path, stack.ws.env["PYTHONPATH"] = str(old_place), str(old_place)
    stack.up()
    for cls, _, tail in KINDS.values():
        assert _provider_class(stack.resource(tail, show_secrets=True), "outputs") == f"moved_providers.{cls}"
    # today's code, and the old path gone for good
    stack.spec.pop("providers")
    stack.host_path = None
    stack.ws.env.pop("PYTHONPATH")
    shutil.rmtree(old_place)
    result = stack.up()
    assert "3 updated" in result.out, str(result)
    for cls, module, tail in KINDS.values():
        assert _provider_class(stack.resource(tail, show_secrets=True), "outputs") == f"{module}.{cls}"
    assert active(head, sid) == [sid]  # updated in place: the same job
    stack.cli("refresh", "--yes", "--skip-preview")
    stack.cli("destroy", "--yes", "--skip-preview")
    assert status_on(head, sid) == "STOPPED" and [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid]


def _base_provider_code(dest: Path) -> Path:
    if subprocess.run(["git", "-C", str(pulumi_cli.ROOT), "cat-file", "-e", f"{BASE_COMMIT}^{{commit}}"],
                      capture_output=True, timeout=60).returncode:
        pytest.skip(f"the provider code of {BASE_COMMIT} is not in this clone (a shallow clone?)")
    archive = subprocess.run(["git", "-C", str(pulumi_cli.ROOT), "archive", BASE_COMMIT, "components", "catalog"],
                             capture_output=True, timeout=120)
    assert archive.returncode == 0, f"git archive {BASE_COMMIT}: {archive.stderr.decode()}"
    dest.mkdir()
    with tarfile.open(fileobj=__import__("io").BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def test_state_written_by_the_base_commits_provider_is_read_by_todays(head, stack, tmp_path):
    """`up` with the provider modules of the last commit before this change (program and provider process both
    import them first), then today's: no change to the running job; refresh and destroy read that state."""
    base = _base_provider_code(tmp_path / "base")
    sid = new_id("upgrade")
    stack.spec = {"jobs": {"job": job(head, sid)}}
    stack.host_path, stack.ws.env["PYTHONPATH"] = str(base), str(base)
    stack.up()
    wait_status(head.address, sid, {"RUNNING"}, timeout=120)
    stack.host_path = None
    stack.ws.env.pop("PYTHONPATH")
    stack.up()
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid] and status_on(head, sid) == "RUNNING"
    stack.cli("refresh", "--yes", "--skip-preview")
    assert stack.resource()["outputs"]["status"] == "RUNNING"
    stack.cli("destroy", "--yes", "--skip-preview")
    assert status_on(head, sid) == "STOPPED"


# ----------------------------------------------------------------------------- the guard, the keeper, destroy


def guard(**values) -> dict:
    return {key: {"value": value, "replaces": f"the thing {key} names"} for key, value in values.items()}


def test_a_guarded_change_is_refused_at_preview_before_anything_changes(head, stack):
    sid = new_id("guarded")
    stack.spec = {"guard": guard(**{"verl-gke:clusterMode": "standard"}), "jobs": {"job": job(head, sid)}}
    stack.up()
    # the guarded value and the job's command change together: the refusal stops the job's replacement too
    stack.spec = {"guard": guard(**{"verl-gke:clusterMode": "autopilot"}),
                  "jobs": {"job": job(head, sid, entrypoint="sleep 602")}}
    refused = stack.cli("up", "--yes", ok=False)
    assert refused.code != 0
    assert "changing verl-gke:clusterMode from 'standard' to 'autopilot'" in refused.out, refused
    assert "pulumi config set verl-gke:clusterMode standard" in refused.out
    assert "property verl-gke:clusterMode value" not in refused.out  # a resource-level failure, named in the reason
    assert status_on(head, sid) in ACTIVE and stack.resource()["outputs"]["entrypoint"] == "sleep 600"
    # a newly guarded key is recorded, not refused
    stack.spec["guard"] = guard(**{"verl-gke:clusterMode": "standard", "gcp:region": "us-central1"})
    stack.spec["jobs"]["job"] = job(head, sid)
    stack.up()


def test_destroy_stops_the_job_and_prints_the_kept_bucket(head, stack):
    sid = new_id("destroy")
    stack.spec = {"bucket": "verl-data-0a1b2c3d", "guard": guard(**{"gcp:region": "us-central1"}),
                  "jobs": {"job": job(head, sid)}}
    stack.up()
    wait_status(head.address, sid, {"RUNNING"}, timeout=120)
    result = stack.cli("destroy", "--yes", "--skip-preview")
    assert status_on(head, sid) == "STOPPED" and active(head, sid) == []
    assert "[verl-gke] bucket verl-data-0a1b2c3d is kept" in result.out
    assert "pulumi config set verl-gke:bucketName verl-data-0a1b2c3d" in result.out
    assert [r["type"] for r in stack.export()["deployment"].get("resources") or []] == []


# ----------------------------------------------------------------------------- Ctrl-C, the engine's kill, pulumi killed


class Unschedulable(FakeKubeRay):
    """The API server with the RayCluster whose worker group create scales, and no GPU capacity: its pods never
    start, so the create waits (as for spot capacity that does not come) until something stops it."""

    def __init__(self, head: RayNode):
        super().__init__(head, KUBE_TOKEN, name=f"rc{uuid.uuid4().hex[:6]}", group="gpu-group", replicas=0,
                         gpus_per_worker=1)
        self.capacity = threading.Event()  # set: the pods start (a real Ray worker node per replica joins)

    def _reconcile_loop(self) -> None:
        while not self._stop.is_set():
            if self.capacity.wait(0.3):
                return super()._reconcile_loop()

    def scale(self, replicas: int = 1) -> dict:
        return {"namespace": self.namespace, "name": self.name, "group": "gpu-group", "index": 0, "replicas": replicas}

    def polls_since_scaled(self) -> int:
        """The dashboard polls through the service proxy since the last patch of the worker group."""
        return sum(1 for p in self.seen_paths[self._mark:] if "/api/v0/nodes" in p) if self.patches else 0

    def mark(self) -> None:
        self._mark = len(self.seen_paths)

    _mark = 0


@pytest.fixture
def kube(head):
    with Unschedulable(head) as stand_in:
        yield stand_in


def waiting_up(head: RayNode, stack: Stack, kube: Unschedulable, sid: str) -> subprocess.Popen:
    """A `pulumi up` whose create has scaled the worker group up and waits for GPUs that never come."""
    stack.spec = {"jobs": {"job": job(head, sid, address=None, gke=kube.gke(), scale=kube.scale(1),
                                      expected_gpus=HEAD_GPUS + 1, ready_timeout_s=600)}}
    proc = stack.start_up()

    def waiting() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"pulumi up ended before it waited: {proc.communicate()}")
        if kube.replicas == 1 and not kube.polls_since_scaled():
            kube.mark()
        return kube.replicas == 1 and kube.polls_since_scaled() >= 2

    wait_for(waiting, 120, "the create to scale the group up and wait for the GPUs")
    return proc


def released_within(kube: Unschedulable, seconds: float) -> float:
    """Seconds until the worker group is back at 0 replicas (fails after `seconds`)."""
    start = time.monotonic()
    wait_for(lambda: kube.replicas == 0, seconds, f"the worker group back at 0 within {seconds}s")
    return time.monotonic() - start


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_first_ctrl_c_or_sigterm_releases_the_gpus_and_fails_the_create(head, stack, kube, sig):
    """A first Ctrl-C (SIGTERM alike): the engine's Cancel reaches the provider, whose wait ends at once; create
    scales the group back to 0 and fails, so the engine records nothing and no operation is left pending."""
    sid = new_id("ctrlc")
    proc = waiting_up(head, stack, kube, sid)
    os.kill(proc.pid, sig)
    released_within(kube, 30)
    code, out = stack.finish(proc, timeout=60)
    assert code != 0
    assert "the engine cancelled the update" in out and f"scaled RayCluster ray/{kube.name} group gpu-group back to 0" \
        in out, out
    assert jobs_on(head.address, sid) == []
    deployment = stack.export()["deployment"]
    assert not deployment.get("pending_operations")
    assert not [r for r in deployment.get("resources") or [] if r["urn"].endswith(JOB_URN_TAIL)]


def test_the_engines_kill_signal_releases_the_gpus_within_its_grace(head, stack, kube):
    """The engine kills a plugin with SIGINT to its process group and SIGKILL 5 s later (a second Ctrl-C): sent
    here as the engine sends it, to the provider alone. The group is back at 0 and the process gone inside the 5 s."""
    proc = waiting_up(head, stack, kube, new_id("kill-signal"))
    (group,) = {os.getpgid(pid) for pid in stack.provider_processes()}
    os.killpg(group, signal.SIGINT)
    start = time.monotonic()
    assert released_within(kube, 5) < 5
    wait_for(lambda: not stack.provider_processes(), 5 - (time.monotonic() - start), "the provider to exit")
    code, _ = stack.finish(proc, timeout=60)
    assert code != 0  # the create's call ended with the server: a failed create, nothing pending
    assert not stack.export()["deployment"].get("pending_operations")


def test_ctrl_c_twice_releases_the_gpus_before_the_engine_kills_the_provider(head, stack, kube):
    proc = waiting_up(head, stack, kube, new_id("ctrlc2"))
    os.kill(proc.pid, signal.SIGINT)
    os.kill(proc.pid, signal.SIGINT)
    start = time.monotonic()
    released_within(kube, 5)
    wait_for(lambda: not stack.provider_processes(), 6 - (time.monotonic() - start), "the provider to exit")
    code, _ = stack.finish(proc, timeout=60)
    assert code != 0


def kill_a_waiting_up(head, stack, kube, sid: str) -> None:
    """`pulumi up` SIGKILLed while its create waits for the GPUs: the group is back at 0 within 30 s and the
    orphaned provider process has exited."""
    proc = waiting_up(head, stack, kube, sid)
    os.kill(proc.pid, signal.SIGKILL)
    released_within(kube, 30)
    wait_for(lambda: not stack.provider_processes(), 30, "the orphaned provider to exit")
    stack.finish(proc, timeout=30)


def test_a_killed_up_releases_the_gpus_and_its_provider_exits(head, stack, kube):
    """`pulumi` killed outright: nothing signals the provider, but the engine's end of its stdin closes. The group
    goes back to 0 and the provider process, which nobody will call again, exits."""
    sid = new_id("killed")
    kill_a_waiting_up(head, stack, kube, sid)
    assert jobs_on(head.address, sid) == []


def test_after_a_killed_up_cancel_up_and_refresh_leave_one_job_and_nothing_pending(head, stack, kube):
    """What README.md tells a user whose `pulumi up` was killed: the state keeps the interrupted create (pending) and
    the lock; `pulumi cancel` drops the lock; the next `up` warns of the pending create, names it, and submits the job
    once; `pulumi refresh --clear-pending-creates` drops the pending create, which nothing else clears."""
    sid = new_id("recover")
    kill_a_waiting_up(head, stack, kube, sid)
    pending = stack.export()["deployment"].get("pending_operations") or []
    assert [(op["type"], op["resource"]["urn"].endswith(JOB_URN_TAIL)) for op in pending] == [("creating", True)]
    kube.capacity.set()  # the GPUs can come now
    locked = stack.up(ok=False)
    assert locked.code != 0 and "the stack is currently locked" in locked.err and "pulumi cancel" in locked.err
    stack.cli("cancel", "--yes")
    result = stack.up()
    assert "1 pending operations" in result.out and "interrupted while creating" in result.out, str(result)
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid] and active(head, sid) == [sid]
    assert stack.export()["deployment"].get("pending_operations")  # the successful create did not clear it
    stack.cli("refresh", "--yes", "--skip-preview", "--clear-pending-creates")
    assert not stack.export()["deployment"].get("pending_operations")
    again = stack.up("--expect-no-changes")
    assert "pending operations" not in again.out
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid] and kube.replicas == 1
