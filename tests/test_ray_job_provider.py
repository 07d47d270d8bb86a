"""The Ray job provider against a real local Ray head (no fakes of Ray).

Provider methods get their props the way Pulumi's engine hands them over (`wire`): numbers as
doubles, None dropped. RAY_ADDRESS points nowhere in every test: the provider must not follow it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import uuid

import pulumi
import pytest
import requests
from pulumi.runtime import rpc

from components import ray_client
from components.ray_client import GONE, DashboardError, RayJobError, base_url, tail
from components.ray_job import RayJob, RayJobArgs, RayJobProvider
from components.ray_job_input import JobInput
from components.ray_job_provider import LAST_JOB_KEY, diff_inputs, pick_attempt
from tests.ray_fixtures import (
    REPO,
    RayNode,
    ServiceProxy,
    b64_pem,
    delete_job,
    gpus_on,
    image_env,
    job_logs,
    jobs_on,
    make_ca,
    pem,
    refused_address,
    wait_status,
)
from tests.wire import wire

READY_S = 180  # a head's job agent can take a minute to register on a loaded 2-core machine
# Tests that wait for a readiness deadline to pass and then read what the last answered poll found: one poll
# of a head that is already up (gcs_healthz, then the state API's node list) must answer within it. It does in
# well under a second on an idle machine, but took more than 8 s while the other xdist workers loaded the 2 cores
# with Ray heads of their own (7860419). So the deadline starts short and doubles only when no poll answered.
DEADLINE_LADDER_S = (4, 8, 16, 32)
# What wait_until_ready says when no poll of the health check and the node list answered before the deadline
# (components/ray_client.py): nothing was asked yet, or the last of those calls failed: cut short by the deadline
# or refused by a loaded head ("HTTP 503: Health check failed: RPC error: Deadline Exceeded", seen under load).
NO_POLL_ANSWERED = re.compile(r"not ready after \d+s: (nothing polled yet|dashboard not ready; last error: "
                              r"GET \S+/api/(gcs_healthz|v0/nodes)\S* -> )")


def past_the_deadline(create) -> str:
    """The message of the RayJobError `create(ready_timeout_s)` raises once its deadline passed after at least
    one answered poll (the shortest deadline in DEADLINE_LADDER_S that got one)."""
    for deadline_s in DEADLINE_LADDER_S:
        with pytest.raises(RayJobError) as late:
            create(deadline_s)
        text = str(late.value)
        if not NO_POLL_ANSWERED.search(text):
            return text
    raise AssertionError(f"no readiness poll answered within {DEADLINE_LADDER_S[-1]}s: {text}")


def with_defaults(props: dict) -> dict:
    """The inputs as create stores them: every field, defaults filled."""
    return JobInput.from_props(props).props()


def validate_inputs(props: dict) -> list[tuple[str, str]]:
    return JobInput.from_props(props).problems()


def new_id(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:8]}"


pytestmark = pytest.mark.usefixtures("bogus_ray_address")


@pytest.fixture(scope="module")
def head(two_gpu_head):
    return two_gpu_head


@pytest.fixture
def provider() -> RayJobProvider:
    return RayJobProvider()


def props(address: str | None, tag: str = "job", **overrides) -> dict:
    base = {
        "submission_id": new_id(tag),
        "entrypoint": "echo hello",
        "expected_gpus": 1,
        "ready_timeout_s": READY_S,
        "address": address,
    }
    return wire({**base, **overrides})


# ----------------------------------------------------------------------------- pure decisions


def test_pick_attempt_after_a_vanished_attempt():
    # state knows attempt 3; the head (a new cluster) knows nothing: attempt 4, never attempt 1
    assert pick_attempt([], "s", True, last_job_id="s-r3") == ("s-r4", 4, None)
    assert pick_attempt([], "s", True, last_job_id="s") == ("s-r2", 2, None)
    # the head still has the newest attempt: it decides, as before
    running = {"submission_id": "s-r3", "status": "RUNNING"}
    assert pick_attempt([running], "s", True, last_job_id="s-r3") == ("s-r3", 3, running)
    # another job's id in state does not count
    assert pick_attempt([], "s", True, last_job_id="other-r7") == ("s", 1, None)


def test_pick_attempt():
    def job(sid, status):
        return {"submission_id": sid, "status": status}

    assert pick_attempt([], "b", True) == ("b", 1, None)
    assert pick_attempt([job("other", "FAILED")], "b", True) == ("b", 1, None)
    for live in ("PENDING", "RUNNING", "SUCCEEDED"):
        jobs = [job("b", "FAILED"), job("b-r2", live)]
        assert pick_attempt(jobs, "b", True) == ("b-r2", 2, jobs[1])
    for dead in ("FAILED", "STOPPED"):
        jobs = [job("b-r2", dead), job("b", "FAILED"), job("b-r10", dead)]
        assert pick_attempt(jobs, "b", True) == ("b-r11", 11, None)
        assert pick_attempt(jobs, "b", False) == ("b-r10", 10, jobs[2])


def test_base_url_plain_and_service_proxy():
    assert base_url({"address": "http://10.0.0.2:8265/"}) == "http://10.0.0.2:8265"
    gke = {
        "endpoint": "https://34.1.2.3",
        "ca_certificate": "x",
        "namespace": "ray",
        "service": "rc-head-svc",
    }
    assert base_url({"gke": gke}) == "https://34.1.2.3/api/v1/namespaces/ray/services/rc-head-svc:8265/proxy"
    assert base_url({"gke": {**gke, "port": 9000.0}}).endswith("rc-head-svc:9000/proxy")


def test_wire_numbers_come_back_as_ints():
    job = JobInput.from_props(wire({"expected_gpus": 16, "ready_timeout_s": 600, "address": None,
                                    "probe_window_s": 2, "attempt": 3, "__provider": "blob"}))
    assert job.expected_gpus == 16 and isinstance(job.expected_gpus, int) and isinstance(job.ready_timeout_s, int)
    assert job.address is None and isinstance(job.probe_window_s, float)  # seconds of a window may be fractions
    assert "__provider" not in job.props() and "attempt" not in job.props()  # engine keys and outputs are not inputs


def test_validate_inputs_names_the_property():
    def bad(**kw):
        return {prop for prop, _ in validate_inputs({"submission_id": "s", "entrypoint": "e", **kw})}

    assert bad(address="http://h:8265") == set()
    assert bad() == {"address"}
    assert bad(address="h:8265") == {"address"}
    assert "address" in bad(address="http://h", gke={"endpoint": "e"})
    assert bad(gke={"endpoint": "e"}) == {"gke.ca_certificate", "gke.namespace", "gke.service"}
    assert bad(address="http://h", submission_id="has space") == {"submission_id"}
    assert bad(address="http://h", expected_gpus=-1, stop_timeout_s=0) == {"expected_gpus", "stop_timeout_s"}
    assert bad(address="http://h", metadata={"k": 1}) == {"metadata"}
    assert bad(address=rpc.UNKNOWN, expected_gpus=rpc.UNKNOWN) == set()  # preview: not known yet
    assert {p for p, _ in validate_inputs({"address": "http://h"})} == {"submission_id", "entrypoint"}


def served_check(news: dict, olds: dict | None = None):
    """Check as the SDK's provider server runs it at preview: the request's unknown values as the server hands them
    over (pulumi.output.Unknown), the answer as it goes back on the wire. Returns (inputs, failures)."""
    result = RayJobProvider().check(wire(olds or {}, keep_unknowns=True), wire(news, keep_unknowns=True))
    return wire(result.inputs, keep_unknowns=True), {(f.property, f.reason) for f in result.failures}


def test_preview_unknowns_are_not_judged():
    unknown = rpc.UNKNOWN
    news = {"submission_id": unknown, "entrypoint": unknown, "expected_gpus": unknown,
            "ready_timeout_s": unknown, "gke": {"endpoint": unknown, "ca_certificate": unknown,
                                               "namespace": "verl", "service": unknown}}
    inputs, failures = served_check(news)
    assert failures == set()
    assert all(isinstance(inputs[k], pulumi.output.Unknown) for k in ("submission_id", "expected_gpus"))
    assert isinstance(inputs["gke"]["endpoint"], pulumi.output.Unknown) and inputs["gke"]["namespace"] == "verl"
    # known values next to unknown ones are still judged: the check is not simply skipped
    broken = {**news, "expected_gpus": -1, "gke": {**news["gke"], "namespace": ""}}
    _, failures = served_check(broken)
    assert {prop for prop, _ in failures} == {"expected_gpus", "gke.namespace"}


def test_check_carries_the_last_attempt_from_state():
    news = {"submission_id": "s", "entrypoint": "e", "address": "http://h:8265"}
    inputs, failures = served_check(news, olds={**news, LAST_JOB_KEY: "s-r3"})
    assert failures == set() and inputs[LAST_JOB_KEY] == "s-r3"
    inputs, _ = served_check(news)
    assert LAST_JOB_KEY not in inputs


def test_diff_decisions():
    old_in = {"submission_id": "s", "entrypoint": "e", "expected_gpus": 16, "address": "http://h:8265"}
    olds = wire({**with_defaults(old_in), "job_id": "s", "attempt": 1, "status": "RUNNING", "message": ""})

    def diff(status="RUNNING", **news):
        return diff_inputs({**olds, "status": status}, wire({**old_in, **news}))

    same = diff()
    assert not same.changes and same.replaces == []
    for key, value in [
        ("entrypoint", "other"),
        ("runtime_env", {"env_vars": {"A": "1"}}),
        ("expected_gpus", 8),
        ("submission_id", "s2"),
        ("address", "http://other:8265"),
    ]:
        result = diff(**{key: value})
        assert result.changes and result.replaces == [key] and result.delete_before_replace, key
    for key, value in [("ready_timeout_s", 10), ("wait_for_completion", True), ("log_tail_lines", 5)]:
        result = diff(**{key: value})
        assert result.changes and result.replaces == [], key
    # a dead job is resubmitted on `up --refresh`, unless resubmission is off
    for dead in ("FAILED", "STOPPED", GONE):
        assert diff(status=dead).replaces == ["status"]
        assert diff(status=dead, resubmit_on_failure=False).replaces == []
    assert diff(status="SUCCEEDED").replaces == []
    # moving between target kinds replaces; a CA rotation on the same service does not
    gke = {"endpoint": "1.2.3.4", "ca_certificate": "A", "namespace": "ray", "service": "svc", "port": 8265}
    gke_olds = {**olds, "address": None, "gke": gke}
    assert diff_inputs(olds, wire({**old_in, "address": None, "gke": gke})).replaces == ["address", "gke"]
    rotated = diff_inputs(gke_olds, wire({**old_in, "address": None, "gke": {**gke, "ca_certificate": "B"}}))
    assert rotated.changes and rotated.replaces == []
    moved = diff_inputs(gke_olds, wire({**old_in, "address": None, "gke": {**gke, "service": "svc2"}}))
    assert moved.replaces == ["gke"]
    # the same cluster reached by its DNS endpoint instead of its IP (same CA): updated, never resubmitted
    dns = {**gke, "endpoint": "gke-abc-123.us-central1.gke.goog", "public_ca": True}
    switched = diff_inputs(gke_olds, wire({**old_in, "address": None, "gke": dns}))
    assert switched.changes and switched.replaces == []
    # another endpoint AND another CA: another cluster, whose head does not have our job
    other = diff_inputs(gke_olds, wire({**old_in, "address": None, "gke": {**dns, "ca_certificate": "B"}}))
    assert other.replaces == ["gke"]


def test_update_keeps_the_job(provider):
    olds = wire(
        {
            "submission_id": "s",
            "entrypoint": "e",
            "address": "http://h:1",
            "job_id": "s-r2",
            "attempt": 2,
            "status": "RUNNING",
            "message": "m",
            "dashboard_url": "http://h:1",
        }
    )
    news = wire({"submission_id": "s", "entrypoint": "e", "address": "http://h:1", "ready_timeout_s": 5})
    outs = provider.update("s-r2", olds, news).outs
    kept = (outs["job_id"], outs["attempt"], outs["status"])
    assert kept == ("s-r2", 2, "RUNNING") and outs["ready_timeout_s"] == 5


def test_tail():
    assert tail("a\nb\nc\n", 2) == "b\nc"
    assert tail("a\nb", 0) == ""


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self):
        self.resources = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.resources.append(args)
        return [
            f"{args.name}-id",
            {**args.inputs, "status": "RUNNING", "job_id": args.inputs["submission_id"]},
        ]

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def test_ray_job_resource_under_mocks():
    mocks, verified = _Mocks(), []
    pulumi.runtime.set_mocks(mocks, preview=False)

    @pulumi.runtime.test
    def check():
        job = RayJob(
            "grpo",
            RayJobArgs(
                submission_id=pulumi.Output.from_input("s-1"),
                entrypoint="python3 -m x",
                expected_gpus=16,
                address="http://h:8265",
            ),
        )

        def verify(values):
            job_id, status = values
            (args,) = [r for r in mocks.resources if r.name == "grpo"]
            assert args.typ == "pulumi-python:dynamic/verl-gke:RayJob"
            assert args.inputs["entrypoint"] == "python3 -m x" and args.inputs["expected_gpus"] == 16
            assert "__provider" in args.inputs
            assert (job_id, status) == ("s-1", "RUNNING")
            verified.append(True)

        return pulumi.Output.all(job.job_id, job.status).apply(verify)

    check()
    assert verified  # the apply ran: not a vacuous pass
    with pytest.raises(ValueError, match="exactly one"):
        RayJob("bad", RayJobArgs(submission_id="s", entrypoint="e", expected_gpus=1))
    # what is known at construction is judged there, by the provider's own rules; Outputs are not judged yet
    with pytest.raises(ValueError, match=r"RayJobArgs\.stop_timeout_s = 0: 0 must be a number of seconds > 0"):
        RayJob("bad", RayJobArgs(submission_id="s", entrypoint="e", address="http://h:8265", stop_timeout_s=0))
    assert RayJobArgs(submission_id=pulumi.Output.from_input("has space"), entrypoint="e", address="http://h:8265",
                      metadata={"model": pulumi.Output.from_input("m")}).problems() == []


# ----------------------------------------------------------------------------- against a real head


def test_create_submits_then_adopts(head, provider, monkeypatch):
    """The job also prints its LD_LIBRARY_PATH, set as recipe.grpo.library_path_env renders it: against a real
    Ray node, `${LD_LIBRARY_PATH}` in a runtime-env variable is the node's own value (the image's entries in a
    pod), neither replaced nor left literal. Its driver runs on the head; tests/test_rehearsal.py checks the
    GPU workers."""
    from catalog.accelerators import ACCELERATORS
    from catalog.paths import bucket_paths
    from recipe import grpo

    paths = bucket_paths("b200", "Qwen/Qwen2.5-32B-Instruct", "v0.6.1")
    rendered = grpo.runtime_env(ACCELERATORS["b200"], paths)["env_vars"]["LD_LIBRARY_PATH"]
    assert rendered.endswith(":${LD_LIBRARY_PATH}")
    p = props(
        head.address,
        "adopt",
        entrypoint='echo hello $GREETING; echo "LDPATH=$LD_LIBRARY_PATH"',
        runtime_env={"env_vars": {"GREETING": "from-runtime-env", "LD_LIBRARY_PATH": rendered}},
        metadata={"stack": "test"},
    )
    first = provider.create(p)
    sid = p["submission_id"]
    assert first.id == sid
    assert first.outs["job_id"] == sid and first.outs["attempt"] == 1
    assert first.outs["status"] in ("PENDING", "RUNNING", "SUCCEEDED")
    assert first.outs["dashboard_url"] == head.address
    assert first.outs["entrypoint"] == p["entrypoint"]
    # a second create (a retried `up`, lost state) adopts: never a second job
    second = provider.create({**p, "wait_for_completion": True})
    assert second.id == sid and second.outs["status"] == "SUCCEEDED"
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid]
    logs = job_logs(head.address, sid, timeout=10)
    assert "hello from-runtime-env" in logs
    node_own = image_env()["LD_LIBRARY_PATH"]
    assert f"LDPATH={rendered.replace('${LD_LIBRARY_PATH}', node_own)}\n" in logs, logs
    assert provider.read(sid, second.outs).outs["status"] == "SUCCEEDED"
    # A concurrent create submitted between our listing of the jobs and our submit: Ray refuses ours as a
    # duplicate, and that job is adopted, never a second one.
    monkeypatch.setattr(ray_client.Dashboard, "jobs", lambda _self, deadline=None: [])
    third = provider.create(p)
    assert (third.id, third.outs["attempt"], third.outs["status"]) == (sid, 1, "SUCCEEDED")
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid]


def test_create_waits_for_gpus_that_join_later(head, provider):
    have = int(gpus_on(head.address))
    worker = RayNode(gpus=8, cpus=0, join=head)
    joiner = threading.Thread(target=lambda: (threading.Event().wait(2), worker.start()))
    joiner.start()
    try:
        p = props(head.address, "gpus", expected_gpus=have + 8, ready_timeout_s=READY_S)
        created = provider.create(p)
        joiner.join()
        assert gpus_on(head.address) >= have + 8
        assert created.outs["job_id"] == p["submission_id"]
        assert len(jobs_on(head.address, p["submission_id"])) == 1
        wait_status(head.address, p["submission_id"], {"SUCCEEDED"})
    finally:
        joiner.join()
        worker.stop()


def test_deadline_says_what_is_missing_and_where(head, provider):
    text = past_the_deadline(lambda s: provider.create(props(head.address, "deadline", expected_gpus=1000,
                                                             ready_timeout_s=s)))
    assert "of 1000 GPUs" in text and "found" in text and head.address in text
    assert "Kubernetes" not in text  # a plain address has no API server behind it: the message is the count alone
    dead = refused_address()
    with pytest.raises(RayJobError) as unreachable:
        provider.create(props(dead, "nohead", ready_timeout_s=2))
    text = str(unreachable.value)
    assert dead in text and "unreachable" in text and "not ready" in text


def test_every_call_is_capped_to_the_deadline(provider, monkeypatch):
    """A dashboard that accepts connections and never answers: no call may wait past ready_timeout_s."""
    import socket

    asked: list[tuple[float, float]] = []
    request = requests.Session.request

    def recording(self, method, url, **kw):
        asked.append(kw["timeout"])
        return request(self, method, url, **kw)

    monkeypatch.setattr(requests.Session, "request", recording)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes the handshake; nobody ever reads or answers
        address = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(RayJobError, match=r"not ready after 1\.5s"):
            provider.create(props(address, "silent", ready_timeout_s=1.5))
    assert asked and all(connect <= 1.5 and read <= 1.5 for connect, read in asked), asked


def test_readiness_waits_for_the_job_agent(head, provider):
    """The head's dashboard agent runs submitted jobs: while it does not answer, the cluster is not ready."""
    agent = head.agent_pid()
    os.kill(agent, signal.SIGSTOP)
    try:
        text = past_the_deadline(lambda s: provider.create(props(head.address, "agent", ready_timeout_s=s)))
        assert "job agent" in text and head.address in text
    finally:
        os.kill(agent, signal.SIGCONT)
    created = provider.create(props(head.address, "agent-back"))
    assert created.outs["attempt"] == 1


def test_gone_job_resubmits_as_the_next_attempt(head, provider):
    """`pulumi up --refresh` after the job vanished (its cluster was recreated): attempt k+1, not 1.

    State says attempt 1 ran on this head, which has never heard of it: exactly what a recreated
    cluster looks like. (Deleting a finished job from a live head is no stand-in: Ray's job monitor
    can write it back as FAILED moments later.)
    """
    p = props(head.address, "gone", wait_for_completion=True)
    sid = p["submission_id"]
    state = wire({**with_defaults(p), "job_id": sid, "attempt": 1, "status": "SUCCEEDED", "message": "",
                  "dashboard_url": head.address})
    refreshed = provider.read(sid, state)
    assert refreshed.outs["status"] == GONE and refreshed.inputs[LAST_JOB_KEY] == sid
    inputs, failures = served_check(p, olds=wire(refreshed.inputs))
    assert failures == set() and inputs[LAST_JOB_KEY] == sid
    assert provider.diff(sid, wire(refreshed.outs), inputs).replaces == ["status"]
    provider.delete(sid, wire(refreshed.outs))  # nothing left to stop
    second = provider.create(wire(inputs))
    assert (second.id, second.outs["attempt"], second.outs["status"]) == (f"{sid}-r2", 2, "SUCCEEDED")
    assert second.outs[LAST_JOB_KEY] == sid  # the attempt it followed stays in state
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [f"{sid}-r2"]
    # the next refresh remembers attempt 2; the head has it, so it decides as before (adopt, no new job)
    again = provider.read(second.id, wire(second.outs))
    assert again.outs["status"] == "SUCCEEDED" and again.inputs[LAST_JOB_KEY] == f"{sid}-r2"
    inputs, _ = served_check(p, olds=wire(again.inputs))
    assert provider.create(wire(inputs)).id == f"{sid}-r2"
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [f"{sid}-r2"]


def test_failing_job_surfaces_its_log_tail(head, provider):
    """A failure seen by a waiting `pulumi up`: the log's tail, then the command that reads all of it after
    the pods are gone."""
    script = "import sys; [print(f'line {i}') for i in range(100)]; sys.exit(3)"
    hint = "gcloud logging read 'resource.type=\"k8s_container\"'"
    p = props(
        head.address,
        "fail",
        entrypoint=f'python -c "{script}"',
        wait_for_completion=True,
        completion_timeout_s=READY_S,
        log_tail_lines=5,
        logs_hint=hint,
    )
    with pytest.raises(RayJobError) as failed:
        provider.create(p)
    text = str(failed.value)
    assert "FAILED" in text and p["submission_id"] in text
    tail, header = text.split("--- last 5 log lines ---\n")[1], "\n--- all logs, also after the pods are gone ---\n"
    assert header in tail, text
    logs, kept = tail.split(header)
    assert logs.splitlines() == [f"line {i}" for i in range(95, 100)]
    assert kept == hint


def test_read_and_delete_when_the_job_or_cluster_is_gone(head, provider):
    never = props(head.address, "never")
    outs = provider.read(never["submission_id"], {**never, "job_id": never["submission_id"]}).outs
    assert outs["status"] == GONE and outs["job_id"] == never["submission_id"]
    # a job deleted from the head
    created = provider.create(props(head.address, "vanish", wait_for_completion=True))
    delete_job(head.address, created.id)
    outs = provider.read(created.id, created.outs).outs
    assert outs["status"] == GONE and outs["job_id"] == created.id and "is gone" in outs["message"]
    provider.delete(created.id, created.outs)
    # nothing listens at the address any more: no answer is not "gone" (tests/test_ray_presence.py)
    dead = {**created.outs, "address": refused_address(), "probe_window_s": 1}  # refused at once: one window of tries
    with pytest.raises(RayJobError, match="no definite answer"):
        provider.read(created.id, dead)
    with pytest.raises(RayJobError, match="no definite answer"):
        provider.delete(created.id, dead)


def test_service_proxy_with_bearer_token(head, provider, monkeypatch):
    token = "ya29.test-" + uuid.uuid4().hex
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", token)
    with ServiceProxy(head.address, token) as proxy:
        p = props(None, "proxy", gke=proxy.gke(), entrypoint="sleep 600")
        created = provider.create(p)
        assert proxy.seen_auth and set(proxy.seen_auth) == {f"Bearer {token}"}
        assert created.outs["dashboard_url"] == f"https://{proxy.endpoint}{proxy.prefix}"
        assert token not in json.dumps(created.outs) and token not in repr(created.id)
        assert [j["submission_id"] for j in jobs_on(head.address, created.id)] == [created.id]
        wait_status(head.address, created.id, {"RUNNING"})
        assert provider.read(created.id, wire(created.outs)).outs["status"] == "RUNNING"
        # a 404 for the head service alone is no proof: unknown, refresh fails (the API server's NotFound
        # for the RayCluster is: tests/test_ray_presence.py)
        moved = wire({**created.outs, "gke": proxy.gke(service="deleted-svc"), "probe_window_s": 2})
        with pytest.raises(RayJobError, match="no definite answer"):
            provider.read(created.id, moved)
        # delete stops the running job and sees it stopped; the next delete has nothing to do
        provider.delete(created.id, wire(created.outs))
        assert requests.get(f"{head.address}/api/jobs/{created.id}", timeout=10).json()["status"] == "STOPPED"
        assert provider.read(created.id, wire(created.outs)).outs["status"] == "STOPPED"
        asked = len(proxy.seen_paths)
        provider.delete(created.id, wire(created.outs))
        assert not any("/stop" in path for path in proxy.seen_paths[asked:])  # Ray would answer 200 to one
        # a rejected token fails at once (waiting would not help), naming the status and the URL
        monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "expired")
        with pytest.raises(DashboardError) as denied:
            provider.create(props(None, "denied", gke=proxy.gke(), ready_timeout_s=600))
        assert "HTTP 401" in str(denied.value) and proxy.endpoint in str(denied.value)
        assert "expired" not in str(denied.value)


def test_wrong_cluster_ca_fails_tls_verification(head, provider, monkeypatch):
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    with ServiceProxy(head.address, "tok") as proxy:
        _, other_ca = make_ca("some-other-cluster")
        p = props(None, "tls", gke=proxy.gke(ca_certificate=b64_pem(other_ca)), ready_timeout_s=600)
        with pytest.raises(RayJobError) as tls:
            provider.create(p)
        assert "TLS verification" in str(tls.value) and proxy.endpoint in str(tls.value)
        # refresh must not mistake a TLS failure for a vanished job
        with pytest.raises(RayJobError, match="TLS verification"):
            provider.read("x", {**p, "job_id": "x"})
    assert proxy.seen_auth == []  # the token never left over an unverified connection


def test_dns_endpoint_is_checked_against_the_system_trust_store(head, provider, monkeypatch, tmp_path):
    """GKE's DNS endpoint presents a certificate a public CA signs (gcloud writes no CA for it), so with
    `public_ca` the provider verifies against the system store, never the cluster CA it was given."""
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    with ServiceProxy(head.address, "tok") as proxy:
        p = props(None, "dns", gke=proxy.gke(public_ca=True), ready_timeout_s=600)
        # The proxy's CA is only the cluster CA here: not trusted for a DNS endpoint.
        with pytest.raises(RayJobError, match="TLS verification"):
            provider.read("x", {**p, "job_id": "x"})
        assert proxy.seen_auth == []
        # Once the system store trusts the signer (requests reads REQUESTS_CA_BUNDLE), the call goes through.
        bundle = tmp_path / "public-ca.pem"
        bundle.write_bytes(pem(proxy.ca_cert))
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
        assert provider.read("x", {**p, "job_id": "x"}).outs["status"] == GONE
        assert proxy.seen_auth, "the token went out over the verified connection"


def test_missing_google_credentials_is_a_clear_error(head, provider, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with ServiceProxy(head.address, "tok") as proxy:
        with pytest.raises(RayJobError, match="no Google credentials") as err:
            provider.create(props(None, "adc", gke=proxy.gke()))
    assert "CLOUDSDK_AUTH_ACCESS_TOKEN" in str(err.value)


# ----------------------------------------------------------------------------- why GPUs are missing

PODS = json.loads((REPO / "tests" / "data" / "k8s_pods_pending_worker.json").read_text())
EVENTS = json.loads((REPO / "tests" / "data" / "k8s_events_pending_worker.json").read_text())
PENDING = "rc-gpu-group-worker-9lw5d"


def test_describe_pods_names_the_pending_worker_and_its_newest_events():
    text = ray_client.describe_pods("rc", "ray", PODS["items"], EVENTS["items"])
    assert text.startswith("Kubernetes: 1 of 3 Pods of RayCluster rc in ray are not running and ready:")
    assert f"{PENDING} (worker): Pending, unscheduled (Unschedulable: 0/4 nodes are available: " in text
    lines = text.splitlines()
    events = [ln.strip() for ln in lines[lines.index(next(ln for ln in lines if PENDING in ln)) + 1:]]
    assert events == [
        "Normal TriggeredScaleUp: " + EVENTS["items"][2]["message"],
        "Warning FailedScaleUp x3: " + EVENTS["items"][3]["message"],  # quota
        "Warning FailedScaleUp x12: " + EVENTS["items"][4]["message"],  # stockout, newest last
    ]
    assert "rc-head-7xk2p" not in text and "some-other-pod" not in text
    ready = [p for p in PODS["items"] if p["metadata"]["name"] != PENDING]
    assert "all 2 Pods" in ray_client.describe_pods("rc", "ray", ready, EVENTS["items"])


def test_ready_deadline_through_the_proxy_reports_pending_pods(head, provider, monkeypatch):
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    objects = {"/api/v1/namespaces/ray/pods": PODS, "/api/v1/namespaces/ray/events": EVENTS}
    with ServiceProxy(head.address, "tok", objects=objects) as proxy:
        text = past_the_deadline(lambda s: provider.create(props(None, "pods", gke=proxy.gke(), expected_gpus=1000,
                                                                 ready_timeout_s=s)))
        assert "of 1000 GPUs" in text and PENDING in text and "GCE out of resources" in text
        assert "/api/v1/namespaces/ray/pods?labelSelector=ray.io/cluster%3Drc" in proxy.seen_paths
    # the same deadline on a plain address: test_deadline_says_what_is_missing_and_where


# ----------------------------------------------------------------------------- the recovery budget (issue 14)


def test_supervisor_note_and_budget_rules():
    from components.ray_recovery import budget_left, with_attempt_env
    from components.scripts.verl_gke_protocol import supervisor_note

    logs = ("noise\n[verl-gke] starting the trainer (attempt 2, recoveries used 1 of 3, ...)\n"
            "[verl-gke] recovery 2 of 3: 1 GPU worker node(s) left the Ray cluster (abc)\nmore noise\n")
    assert supervisor_note(logs) == (2, "recovery 2 of 3: 1 GPU worker node(s) left the Ray cluster (abc)")
    assert supervisor_note("plain job output\n") == (None, "")
    assert budget_left(2, 3, 3) and not budget_left(3, 1, 3)
    assert budget_left(None, 3, 3) and not budget_left(None, 4, 3)  # state from before the counter
    env = with_attempt_env({"env_vars": {"A": "1"}}, "run", 3, 2, 4)
    assert env == {"env_vars": {"A": "1", "VERL_GKE_RUN": "run", "VERL_GKE_ATTEMPT": "3",
                                "VERL_GKE_RECOVERIES_USED": "2", "VERL_GKE_MAX_RECOVERIES": "4"}}


def test_diff_does_not_resubmit_a_run_that_used_its_budget():
    old_in = {"submission_id": "s", "entrypoint": "e", "expected_gpus": 16, "address": "http://h:8265"}
    olds = wire({**with_defaults(old_in), "job_id": "s-r2", "attempt": 2, "status": "FAILED", "message": ""})
    assert diff_inputs({**olds, "recoveries": 2}, wire({**old_in, "max_recoveries": 3})).replaces == ["status"]
    assert diff_inputs({**olds, "recoveries": 3}, wire({**old_in, "max_recoveries": 3})).replaces == []
    assert diff_inputs({**olds, "recoveries": 3}, wire(old_in)).replaces == []  # default cap 3
    # a changed run is a new run with a new budget
    assert diff_inputs({**olds, "recoveries": 3}, wire({**old_in, "entrypoint": "f"})).replaces == ["entrypoint"]
    assert {p for p, _ in validate_inputs({**old_in, "max_recoveries": -1})} == {"max_recoveries"}
    assert {p for p, _ in validate_inputs({**old_in, "scale": {"name": "rc"}})} == {"scale"}  # needs gke


def test_resubmissions_count_against_the_budget_and_stop_when_spent(head, provider):
    """A failed attempt is resubmitted as the next one while the recovery budget lasts (one here), through
    `pulumi up --refresh`'s calls; the spent run is adopted, never submitted a third time. One run for both:
    each attempt costs a job on the head."""
    echo = 'echo "attempt=$VERL_GKE_ATTEMPT used=$VERL_GKE_RECOVERIES_USED of $VERL_GKE_MAX_RECOVERIES"; exit 1'
    p = props(head.address, "budget", entrypoint=echo, max_recoveries=1, resubmit_on_failure=True)
    sid = p["submission_id"]
    first = provider.create(p)
    wait_status(head.address, sid, {"FAILED"})
    assert "attempt=1 used=0 of 1" in job_logs(head.address, sid, timeout=10)
    # without resubmission the failed attempt is adopted and reported, not resubmitted, though budget is left
    adopted = provider.create({**p, "resubmit_on_failure": False})
    assert (adopted.id, adopted.outs["status"], adopted.outs["attempt"]) == (sid, "FAILED", 1)
    refreshed = provider.read(first.id, first.outs).outs
    assert refreshed["status"] == "FAILED"
    # `pulumi up --refresh`: diff replaces, delete is a no-op on a finished job, create resubmits
    assert provider.diff(first.id, refreshed, p).replaces == ["status"]
    provider.delete(first.id, refreshed)
    second = provider.create(p)  # the one recovery allowed
    assert (second.id, second.outs["attempt"], second.outs["recoveries"]) == (f"{sid}-r2", 2, 1)
    wait_status(head.address, f"{sid}-r2", {"FAILED"})
    logs = job_logs(head.address, f"{sid}-r2", timeout=10)
    assert "attempt=2 used=1 of 1" in logs
    refreshed = provider.read(second.id, second.outs).outs
    assert refreshed["recoveries"] == 1 and refreshed["status"] == "FAILED"
    assert provider.diff(second.id, refreshed, p).replaces == []  # spent: not resubmitted
    again = provider.create(p)  # even a create adopts the spent run instead of submitting attempt 3
    assert again.id == f"{sid}-r2" and "recovery budget spent (1 of 1)" in again.outs["message"]
    assert sorted(j["submission_id"] for j in jobs_on(head.address, sid)) == [sid, f"{sid}-r2"]


def test_in_run_recoveries_reported_by_the_supervisor_count_too(head, provider):
    line = "[verl-gke] run x attempt 1: FAILED, 1 GPU worker node(s) left; no recovery left (recoveries used 3 of 3)"
    p = props(head.address, "inrun", entrypoint=f"echo '{line}'; exit 1", max_recoveries=3)
    sid = p["submission_id"]
    provider.create(p)
    wait_status(head.address, sid, {"FAILED"})
    adopted = provider.create(p)
    assert adopted.id == sid and adopted.outs["recoveries"] == 3
    assert adopted.outs["message"].startswith("recovery budget spent (3 of 3)")
    # the logs hint after a failure seen by a waiting `pulumi up`: test_failing_job_surfaces_its_log_tail


def test_readiness_fails_when_a_gpu_workers_first_container_is_not_the_ray_one(head, monkeypatch):
    """Issue 43 item 11: once the GPUs have joined, the wait reads the worker pods through the API server; a
    pod whose GCS FUSE sidecar went first (its RDMA NICs with it) fails the wait with the pod named."""
    from tests.test_rdma_attach import NAMESPACE, worker_pod

    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    pods = {"kind": "PodList", "items": [worker_pod("standard", "rc-gpu-group-worker-a", native_sidecar=False)]}
    with ServiceProxy(head.address, "tok", objects={f"/api/v1/namespaces/{NAMESPACE}/pods": pods}) as proxy, \
            ray_client.Dashboard({"gke": proxy.gke()}) as dash:
        with pytest.raises(RayJobError) as err:
            ray_client.wait_until_ready(dash, 2, 120)
    assert "GPU worker pod rc-gpu-group-worker-a: its first container is 'gke-gcsfuse-sidecar'" in str(err.value)
