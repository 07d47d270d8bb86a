"""Refresh, replace and destroy of the Ray job (issue 21), the provider's methods called with props as the engine
delivers them (tests.wire), against a real local Ray head behind a front that injects faults. The real engine runs
the same methods in tests/test_engine_dynamic.py.

Fault table of the job provider's remote calls (components.ray_presence):
  a 503 front (blip or lasting) ...... refresh fails / retries through a blip; delete fails; never GONE
  a stray 404 (not Ray's) ............ unknown: refresh and delete fail
  a slow answer (past the window) .... unknown
  a refused connection ............... unknown; the escape hatch env var takes it as gone
  Ray's 404 with a healthy dashboard . absent: GONE; delete succeeds
  RayCluster NotFound (API server) ... absent, even with the dashboard gone
  RayCluster present, no dashboard ... unknown
  a whole input unknown (engine) ..... diff replaces for a replace key, never crashes
  a foreign job under our id ......... create refuses to adopt it (no digest of ours), naming both entrypoints
  readiness timeout / failed submit .. the worker group goes back to 0 and the error says so
Window sizes are seconds here (inputs); the defaults are sized for a loaded machine. One behaviour a test: the
jobs that only get refreshed (or fail to be deleted) are shared; a test that stops or changes one makes its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import uuid

import pytest
import requests
from pulumi.runtime import rpc

from components.ray_client import GONE, RayJobError
from components.ray_job_provider import RayJobProvider
from components.ray_presence import UNREACHABLE_IS_GONE_ENV
from tests.fault_front import FaultFront
from tests.kuberay_fixture import FakeKubeRay
from tests.ray_fixtures import point_ray_env_nowhere, refused_address, wait_for, wait_status
from tests.wire import wire
from tools.local_ray import processes

WINDOW_S = 2  # probe window of a call that must end "unknown": a few polls (0.25, 0.5, 1 s apart), then a clear failure
ANSWER_WINDOW_S = 30  # every other call's: it ends at Ray's first answer, however loaded the machine
READY_S = 180


@pytest.fixture(scope="module", autouse=True)
def _environment():
    """For the whole module, its module-scoped jobs included: RAY_ADDRESS pointing nowhere (a provider call that
    followed it instead of its inputs would fail) and what the job provider sends the API server stand-in
    (gcloud's own token override)."""
    with pytest.MonkeyPatch.context() as mp:
        point_ray_env_nowhere(mp)
        mp.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
        yield


class Wired:
    """The job provider's methods, props in and out as the engine's gRPC round trip carries them."""

    def __init__(self):
        self.p = RayJobProvider()

    def create(self, props: dict) -> tuple[str, dict]:
        created = self.p.create(wire(props))
        return created.id, wire(created.outs)

    def read(self, id_: str, props: dict, timeout: float | None = None) -> tuple[str, dict, dict]:
        """`timeout`: fail the test if the read has not returned by then (it is left running in its thread)."""
        if timeout is None:
            read = self.p.read(id_, wire(props))
        else:
            box: list = []

            def call() -> None:
                try:
                    box.append(self.p.read(id_, wire(props)))
                except Exception as err:  # noqa: BLE001 - raised below, in the test's thread
                    box.append(err)

            worker = threading.Thread(target=call, daemon=True)
            worker.start()
            worker.join(timeout)
            assert box, f"read still running after {timeout}s"
            if isinstance(box[0], Exception):
                raise box[0]
            read = box[0]
        return read.id, wire(read.outs), wire(read.inputs)

    def delete(self, id_: str, props: dict) -> None:
        self.p.delete(id_, wire(props))

    def diff(self, id_: str, olds: dict, news: dict):
        return self.p.diff(id_, wire(olds, keep_unknowns=True), wire(news, keep_unknowns=True))


@pytest.fixture(scope="module")
def head(two_gpu_head):
    return two_gpu_head


@pytest.fixture(scope="module")
def server() -> Wired:
    return Wired()


@pytest.fixture
def front(head):
    with FaultFront(head.address) as f:
        yield f


def new_id(tag: str) -> str:
    return f"p-{tag}-{uuid.uuid4().hex[:8]}"


def props(address: str | None, tag: str, **overrides) -> dict:
    return {"submission_id": new_id(tag), "entrypoint": "sleep 600", "expected_gpus": 1,
            "ready_timeout_s": READY_S, "address": address, "probe_window_s": ANSWER_WINDOW_S, "stop_timeout_s": 60,
            **overrides}


def short(state: dict) -> dict:
    """The stored state with the short probe window, for a call that must end with no definite answer."""
    return {**state, "probe_window_s": WINDOW_S}


def status_on(head, job_id: str) -> str:
    return requests.get(f"{head.address}/api/jobs/{job_id}", timeout=10).json()["status"]


@contextlib.contextmanager
def job_running(head, server, front: FaultFront, tag: str):
    """(job id, outputs) of a job RUNNING on the head, created through the front; stopped afterwards
    whatever the test did."""
    job_id, outs = server.create(props(front.address, tag))
    wait_status(head.address, job_id, {"RUNNING"})
    try:
        yield job_id, outs
    finally:
        requests.post(f"{head.address}/api/jobs/{job_id}/stop", timeout=10)


@pytest.fixture
def running(head, front, server):
    with job_running(head, server, front, "run") as run:
        yield run


@pytest.fixture(scope="module")
def _shared_run(head, server):
    """One RUNNING job behind a front of its own, for the tests that only refresh it (each job costs a
    JobSupervisor and a driver process: ~2 CPU-seconds and seconds of waiting on a loaded machine)."""
    with FaultFront(head.address) as front, job_running(head, server, front, "shared") as run:
        yield front, run


@pytest.fixture
def refreshed_run(_shared_run):
    """(front, (job id, outputs)) of the shared RUNNING job, its front passing everything again; a test that
    uses it may fault the front, never stop or change the job."""
    front, run = _shared_run
    front.mode("pass")
    front.seen.clear()
    yield front, run
    front.mode("pass")


# ----------------------------------------------------------------------------- refresh: never GONE from a fault


FAULTS = ["503", "404", "slow", "refused"]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_during_refresh_fails_it_naming_the_address_and_the_escape_hatch(server, refreshed_run, fault):
    front, (job_id, outs) = refreshed_run
    front.mode(fault, delay_s=WINDOW_S + 3)
    with pytest.raises(RayJobError) as failed:
        server.read(job_id, short(outs))
    text = str(failed.value)
    assert "no definite answer" in text and front.address in text and UNREACHABLE_IS_GONE_ENV in text


@pytest.mark.parametrize("fault", FAULTS)
def test_the_refresh_after_a_faulted_one_finds_the_run_still_running(head, server, refreshed_run, fault):
    """The failed refresh changed nothing: the next `up` sees the old state, not GONE, and nothing to replace."""
    front, (job_id, outs) = refreshed_run
    front.mode(fault, delay_s=WINDOW_S + 3)
    with pytest.raises(RayJobError):
        server.read(job_id, short(outs))
    front.mode("pass")
    assert server.read(job_id, outs)[1]["status"] == "RUNNING"
    assert status_on(head, job_id) == "RUNNING"


def test_a_trickling_answer_never_holds_a_refresh_past_its_window(server, refreshed_run):
    """Each read comes quickly, the whole answer does not (1 byte every 0.5 s, ~5 min): requests' read timeout
    never fires. The job is seen; its log (a long run's log through the API server can be this slow) is cut at
    the window and the refresh returns what it knows instead of hanging (the test's limit: a bound, not a speed)."""
    front, (job_id, outs) = refreshed_run
    front.mode("drip", only="/logs", delay_s=0.5, pad=600)
    _, refreshed, _ = server.read(job_id, short(outs), timeout=120)
    assert refreshed["status"] == "RUNNING"
    assert ("GET", f"/api/jobs/{job_id}/logs", "drip") in front.seen


def test_a_short_503_blip_is_ridden_out(server, refreshed_run):
    front, (job_id, outs) = refreshed_run
    front.mode("503", count=2)
    _, refreshed, _ = server.read(job_id, outs)
    assert refreshed["status"] == "RUNNING"
    on_job = [f for _, path, f in front.seen if path == f"/api/jobs/{job_id}"]
    assert on_job[-3:] == ["503", "503", "pass"]


def never_submitted(address: str) -> dict:
    """The state of a job the head never had."""
    never = props(address, "never")
    return {**never, "job_id": never["submission_id"]}


def test_rays_own_404_on_a_healthy_dashboard_is_gone(front, server):
    state = never_submitted(front.address)
    _, outs, _ = server.read(state["job_id"], state)
    assert outs["status"] == GONE and "does not exist" in outs["message"]


def test_rays_404_with_its_health_endpoint_failing_is_no_answer(front, server):
    """The dashboard's 404 alone is not enough."""
    state = never_submitted(front.address)
    front.mode("503", only="gcs_healthz")
    with pytest.raises(RayJobError, match="no definite answer"):
        server.read(state["job_id"], short(state))


@pytest.fixture
def unreachable(monkeypatch) -> dict:
    """The state of a RUNNING job at an address that refuses connections, with the escape hatch set."""
    monkeypatch.setenv(UNREACHABLE_IS_GONE_ENV, "true")
    p = short(props(refused_address(), "hatch"))
    return {**p, "job_id": p["submission_id"], "status": "RUNNING"}


def test_the_escape_hatch_refreshes_an_unreachable_job_as_gone(server, unreachable):
    assert server.read(unreachable["job_id"], unreachable)[1]["status"] == GONE


def test_the_escape_hatch_forgets_an_unreachable_job_on_delete_saying_so(server, unreachable, capsys):
    server.delete(unreachable["job_id"], unreachable)
    assert "unreachable, forgotten without stopping it" in capsys.readouterr().err


# ----------------------------------------------------------------------------- delete: only when seen stopped


@pytest.mark.parametrize("fault", ["503", "404", "refused"])
def test_a_fault_during_delete_fails_it_and_leaves_the_job_running(head, server, refreshed_run, fault):
    """A failed delete changes nothing: the shared RUNNING job serves every fault."""
    front, (job_id, outs) = refreshed_run
    front.mode(fault)
    with pytest.raises(RayJobError, match="no definite answer") as failed:
        server.delete(job_id, short(outs))
    assert "stays in the state" in str(failed.value)
    assert status_on(head, job_id) == "RUNNING"


def test_delete_stops_a_running_job(head, server, running):
    job_id, outs = running
    server.delete(job_id, outs)
    assert status_on(head, job_id) == "STOPPED"


def test_a_stop_not_finished_by_the_deadline_fails_the_delete(head, front, server):
    """Half done: the stop was accepted, the job is not seen stopped in time. It ignores SIGTERM, and Ray would
    kill it only after its stop grace period (RAY_JOB_STOP_WAIT_TIME_S, read by the job's supervisor actor, which
    runs with the job's env vars: ray-project/ray, python/ray/dashboard/modules/job/job_supervisor.py, ray-2.60.0),
    here longer than the test: the delete's deadline, not the machine's speed, decides; the test then kills the job
    as Ray would. (A deadline shorter than the stop request's own answer takes, 0.5 s before, failed on a loaded
    machine as "after trying to stop it".)"""
    marker = f"sleep 600.{uuid.uuid4().int % 10**6}"  # finds this job's process
    job_id, outs = server.create(props(front.address, "stubborn", entrypoint=f"trap '' TERM; {marker}",
                                       runtime_env={"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "600"}}))
    try:
        # Ray says RUNNING before the shell has run `trap`; the sleep starts after it.
        wait_for(lambda: pids_of(marker), 120, f"the job's {marker!r}")
        with pytest.raises(RayJobError, match="after the stop request") as failed:
            server.delete(job_id, {**outs, "stop_timeout_s": 5})
        assert "stays in the state" in str(failed.value)
        assert status_on(head, job_id) == "RUNNING"  # Ray's Jobs API has no "stopping": running to the end
    finally:
        for pid in pids_of(marker):
            os.kill(pid, signal.SIGKILL)  # what Ray does once its grace period is over (and so never 600 s later)


def pids_of(cmdline: str) -> list[int]:
    """The processes whose command line is `cmdline` (a test's own job process, by a unique argument)."""
    return [pid for pid, (_, cmd) in processes().items() if cmd.replace(b"\0", b" ").strip() == cmdline.encode()]


# ----------------------------------------------------------------------------- the API server's word


class Kube(FakeKubeRay):
    """The API server with one RayCluster, no KubeRay reconciler (no worker nodes started), and a switch
    that makes the head service answer 503 (no endpoints) and the RayCluster NotFound."""

    def __init__(self, head, token: str, name: str):
        super().__init__(head, token, name=name, group="gpu-group", replicas=0, gpus_per_worker=1)
        self.raycluster_deleted = False
        self.service_down = False
        self.reject_submit = False

    def _reconcile_loop(self) -> None:
        self._stop.wait()

    def _handler(self):
        base = super()._handler()
        kube = self

        class Handler(base):
            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?", 1)[0]
                if kube.raycluster_deleted and path == kube.path:
                    kube.seen_paths.append(self.path)
                    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                            "message": f'rayclusters.ray.io "{kube.name}" not found', "code": 404,
                            "details": {"name": kube.name, "group": "ray.io", "kind": "rayclusters"}}
                    return self._reply(404, json.dumps(body).encode())
                if kube.service_down and path.startswith(kube.prefix):
                    return self._status(503, "ServiceUnavailable", "no endpoints available for service")
                super().do_GET()

            def do_POST(self) -> None:  # noqa: N802
                if kube.reject_submit and self.path.split("?", 1)[0] == kube.prefix + "/api/jobs/":
                    return self._status(500, "InternalError", "the dashboard failed the submission")
                self.do_GET() if kube.service_down else super().do_POST()

        return Handler


@pytest.fixture
def kube(head):
    """An API server with one RayCluster; the state of a job on it (its answers do not depend on the job)."""
    with Kube(head, "tok", name=f"rc{uuid.uuid4().hex[:6]}") as k:
        p = props(None, "kube", gke=k.gke())
        yield k, {**p, "job_id": p["submission_id"]}


@pytest.mark.parametrize("call", ["read", "delete"])
def test_a_raycluster_present_with_its_dashboard_gone_is_no_answer(server, kube, call):
    """The head is being recreated: no endpoints behind the service."""
    k, state = kube
    k.service_down = True
    with pytest.raises(RayJobError, match="no definite answer"):
        getattr(server, call)(state["job_id"], short(state))


def test_a_raycluster_the_api_server_says_is_deleted_refreshes_the_job_as_gone(server, kube):
    k, state = kube
    k.service_down = k.raycluster_deleted = True
    _, refreshed, _ = server.read(state["job_id"], state)
    assert refreshed["status"] == GONE and "API server says RayCluster" in refreshed["message"]


def test_a_job_whose_raycluster_the_api_server_says_is_deleted_is_deleted(server, kube):
    k, state = kube
    k.service_down = k.raycluster_deleted = True
    server.delete(state["job_id"], state)


def test_a_stray_404_from_the_api_server_is_not_a_deleted_raycluster(head, server):
    with Kube(head, "tok", name=f"rc{uuid.uuid4().hex[:6]}") as kube:
        # another RayCluster's service: the API server's 404s for it are generic, not a NotFound naming it
        p = short(props(None, "stray", gke=kube.gke(service="rc-elsewhere-head-svc")))
        with pytest.raises(RayJobError, match="no definite answer"):
            server.read(p["submission_id"], {**p, "job_id": p["submission_id"]})


# ----------------------------------------------------------------------------- create: whose job, all or nothing


def test_a_foreign_job_under_our_id_is_not_adopted_naming_both_entrypoints(head, front, server):
    p = props(front.address, "foreign", entrypoint="echo ours")
    requests.post(f"{head.address}/api/jobs/", json={"entrypoint": "echo theirs", "submission_id": p["submission_id"]},
                  timeout=30).raise_for_status()
    with pytest.raises(RayJobError) as refused:
        server.create(p)
    text = str(refused.value)
    assert "not this stack's run" in text and "'echo theirs'" in text and "'echo ours'" in text


def test_a_job_under_our_id_without_our_digest_is_not_adopted_even_with_our_entrypoint(head, front, server):
    p = props(front.address, "nodigest", entrypoint="echo ours")
    requests.post(f"{head.address}/api/jobs/", json={"entrypoint": "echo ours", "submission_id": p["submission_id"]},
                  timeout=30).raise_for_status()
    with pytest.raises(RayJobError, match="not this stack's run"):
        server.create(p)


def test_our_own_job_under_our_id_is_adopted(front, server):
    """Submitted by the provider: the digest in its metadata."""
    mine = props(front.address, "mine", entrypoint="echo mine")
    first, _ = server.create(mine)
    again, outs = server.create(mine)
    assert again == first and outs["attempt"] == 1


def scale(kube: Kube, replicas: int = 1) -> dict:
    return {"namespace": kube.namespace, "name": kube.name, "group": "gpu-group", "index": 0, "replicas": replicas}


def replicas_set(kube: Kube) -> list[int]:
    return [op["value"] for patch in kube.patches for op in patch if op["path"].endswith("/replicas")]


@pytest.fixture(scope="module")
def timed_out(head, server) -> tuple[str, list[int]]:
    """(the error, the replicas set) of a create whose cluster is not ready in time."""
    with Kube(head, "tok", name=f"rc{uuid.uuid4().hex[:6]}") as kube:
        p = props(None, "allornothing", gke=kube.gke(), scale=scale(kube), expected_gpus=1000, ready_timeout_s=4)
        with pytest.raises(RayJobError) as failed:
            server.create(p)
        return str(failed.value), replicas_set(kube)


def test_a_create_that_times_out_scales_the_gpus_back_to_zero(timed_out):
    assert timed_out[1] == [1, 0]


def test_a_create_that_times_out_says_it_scaled_the_gpus_back(timed_out):
    text = timed_out[0]
    assert "not ready after 4s" in text and "scaled RayCluster" in text and "back to 0 replicas" in text


@pytest.fixture(scope="module")
def refused_submission(head, server) -> tuple[str, list[int]]:
    """(the error, the replicas set) of a create whose submission the dashboard fails."""
    with Kube(head, "tok", name=f"rc{uuid.uuid4().hex[:6]}") as kube:
        kube.reject_submit = True
        p = props(None, "badsubmit", gke=kube.gke(), scale=scale(kube), expected_gpus=0)
        with pytest.raises(RayJobError) as failed:
            server.create(p)
        return str(failed.value), replicas_set(kube)


def test_a_failed_submission_scales_the_gpus_back_to_zero(refused_submission):
    assert refused_submission[1] == [1, 0]


def test_a_failed_submission_says_it_scaled_the_gpus_back(refused_submission):
    text = refused_submission[0]
    assert "submitting Ray job" in text and "back to 0 replicas" in text


# ----------------------------------------------------------------------------- diff: whole unknowns


OLD = {"submission_id": "s", "entrypoint": "e", "expected_gpus": 2, "job_id": "s", "attempt": 1,
       "status": "RUNNING", "cluster_uid": "uid-1",
       "gke": {"endpoint": "1.2.3.4", "ca_certificate": "A", "namespace": "ray", "service": "rc-head-svc",
               "port": 8265}}
NEW = {k: v for k, v in OLD.items() if k not in ("job_id", "attempt", "status")}


@pytest.mark.parametrize("key", sorted(NEW))
def test_an_input_wholly_unknown_is_a_change(server, key):
    """As the engine's dependents pass sends it."""
    assert server.diff("s", OLD, {**NEW, key: rpc.UNKNOWN}).changes is True


@pytest.mark.parametrize("key", ["gke", "cluster_uid"])
def test_a_replace_key_wholly_unknown_replaces(server, key):
    assert set(server.diff("s", OLD, {**NEW, key: rpc.UNKNOWN}).replaces) == {key}


def test_another_cluster_uid_replaces(server):
    assert set(server.diff("s", OLD, {**NEW, "cluster_uid": "uid-2"}).replaces) == {"cluster_uid"}


def test_a_rotated_ca_not_known_yet_is_no_other_cluster(server):
    ca_unknown = server.diff("s", OLD, {**NEW, "gke": {**NEW["gke"], "ca_certificate": rpc.UNKNOWN}})
    assert list(ca_unknown.replaces) == []


def test_the_same_inputs_are_no_change(server):
    same = server.diff("s", OLD, NEW)
    assert same.changes is False and list(same.replaces) == []


# ----------------------------------------------------------------------------- progress during the wait


def test_progress_lines_go_to_the_providers_stderr(head, front, server, capsys):
    """The engine shows a dynamic provider's stderr on the console (tests/test_engine_dynamic.py sees a provider's
    line there); these are the lines a wait for the GPUs prints."""
    with pytest.raises(RayJobError):
        server.create(props(front.address, "progress", expected_gpus=1000, ready_timeout_s=3, progress_every_s=1))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[verl-gke] waiting for Ray job")]
    assert lines and any("of 1000 GPUs" in ln for ln in lines)
