"""The Ray job provider against a real local Ray head (no fakes of Ray).

Provider methods get their props the way Pulumi's engine hands them over (`wire`): numbers as
doubles, None dropped. RAY_ADDRESS points nowhere in every test: the provider must not follow it.
One behaviour a test; the jobs a few tests read are created once by module-scoped fixtures (each job costs
a driver process on the head), and a test that stops or changes a job creates its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import uuid

import pulumi
import pulumi.dynamic as dyn
import pytest
import requests
from pulumi.output import Unknown
from pulumi.runtime import rpc

from catalog.problems import Problem
from components import ray_client
from components.ray_client import GONE, DashboardError, RayJobError, base_url, tail
from components.ray_job import RayJob, RayJobArgs, RayJobProvider
from components.ray_job_input import JobInput
from components.ray_job_provider import LAST_JOB_KEY, diff_inputs, pick_attempt
from components.ray_recovery import budget_left, with_attempt_env
from components.scripts.verl_gke_protocol import supervisor_note
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
    point_ray_env_nowhere,
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


def validate_inputs(props: dict) -> list[Problem]:
    return JobInput.from_props(props).problems()


def new_id(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module", autouse=True)
def _ray_env_nowhere():
    """RAY_ADDRESS pointing nowhere for the whole module, its module-scoped jobs included: a provider call that
    followed it instead of its inputs would fail, not find a local head."""
    with pytest.MonkeyPatch.context() as mp:
        point_ray_env_nowhere(mp)
        yield


@pytest.fixture(scope="module")
def head(two_gpu_head):
    return two_gpu_head


@pytest.fixture(scope="module")
def provider() -> RayJobProvider:
    return RayJobProvider()  # stateless: one for the module


def props(address: str | None, tag: str = "job", **overrides) -> dict:
    base = {
        "submission_id": new_id(tag),
        "entrypoint": "echo hello",
        "expected_gpus": 1,
        "ready_timeout_s": READY_S,
        "address": address,
    }
    return wire({**base, **overrides})


# ----------------------------------------------------------------------------- which attempt


def _job(sid: str, status: str) -> dict:
    return {"submission_id": sid, "status": status}


@pytest.mark.parametrize("remembered,expected", [("s-r3", ("s-r4", 4, None)), ("s", ("s-r2", 2, None))])
def test_the_attempt_after_the_one_state_remembers_follows_it_when_the_head_has_none(remembered, expected):
    # state knows the attempt; the head (a new cluster) knows nothing: the next one, never attempt 1
    assert pick_attempt([], "s", True, last_job_id=remembered) == expected


def test_the_head_s_newest_attempt_decides_when_it_has_the_one_state_remembers():
    running = _job("s-r3", "RUNNING")
    assert pick_attempt([running], "s", True, last_job_id="s-r3") == ("s-r3", 3, running)


def test_another_run_s_attempt_in_state_does_not_count():
    assert pick_attempt([], "s", True, last_job_id="other-r7") == ("s", 1, None)


def test_the_first_attempt_is_the_base_id():
    assert pick_attempt([], "b", True) == ("b", 1, None)


def test_another_run_s_job_on_the_head_does_not_count():
    assert pick_attempt([_job("other", "FAILED")], "b", True) == ("b", 1, None)


@pytest.mark.parametrize("live", ["PENDING", "RUNNING", "SUCCEEDED"])
def test_a_live_or_finished_newest_attempt_is_adopted(live):
    jobs = [_job("b", "FAILED"), _job("b-r2", live)]
    assert pick_attempt(jobs, "b", True) == ("b-r2", 2, jobs[1])


@pytest.mark.parametrize("dead", ["FAILED", "STOPPED"])
def test_a_dead_newest_attempt_is_followed_by_the_next(dead):
    jobs = [_job("b-r2", dead), _job("b", "FAILED"), _job("b-r10", dead)]
    assert pick_attempt(jobs, "b", True) == ("b-r11", 11, None)


@pytest.mark.parametrize("dead", ["FAILED", "STOPPED"])
def test_a_dead_newest_attempt_is_adopted_when_resubmission_is_off(dead):
    jobs = [_job("b-r2", dead), _job("b", "FAILED"), _job("b-r10", dead)]
    assert pick_attempt(jobs, "b", False) == ("b-r10", 10, jobs[2])


# ----------------------------------------------------------------------------- where and what


GKE = {"endpoint": "https://34.1.2.3", "ca_certificate": "x", "namespace": "ray", "service": "rc-head-svc"}


def test_a_plain_address_is_the_base_url_without_its_trailing_slash():
    assert base_url({"address": "http://10.0.0.2:8265/"}) == "http://10.0.0.2:8265"


def test_a_gke_target_is_the_api_server_s_proxy_for_the_head_service():
    assert base_url({"gke": GKE}) == "https://34.1.2.3/api/v1/namespaces/ray/services/rc-head-svc:8265/proxy"


def test_a_gke_target_s_port_from_the_wire_is_a_whole_number():
    assert base_url({"gke": {**GKE, "port": 9000.0}}).endswith("rc-head-svc:9000/proxy")


WIRED = wire({"expected_gpus": 16, "ready_timeout_s": 600, "address": None, "probe_window_s": 2, "attempt": 3,
              "__provider": "blob"})


def test_whole_numbers_from_the_wire_come_back_as_ints():
    job = JobInput.from_props(WIRED)
    assert (job.expected_gpus, job.ready_timeout_s) == (16, 600)
    assert type(job.expected_gpus) is int and type(job.ready_timeout_s) is int


def test_seconds_of_a_window_stay_a_float():
    assert isinstance(JobInput.from_props(WIRED).probe_window_s, float)  # a window may be a fraction


def test_engine_keys_and_outputs_are_not_inputs():
    kept = JobInput.from_props(WIRED).props()
    assert "__provider" not in kept and "attempt" not in kept and "address" not in kept


@pytest.mark.parametrize("given,bad", [
    pytest.param({"address": "http://h:8265"}, set(), id="a-good-one"),
    pytest.param({}, {"address"}, id="no-target"),
    pytest.param({"address": "h:8265"}, {"address"}, id="an-address-without-scheme"),
    pytest.param({"address": "http://h", "gke": {"endpoint": "e"}},
                 {"address", "gke.ca_certificate", "gke.namespace", "gke.service"}, id="both-targets"),
    pytest.param({"gke": {"endpoint": "e"}}, {"gke.ca_certificate", "gke.namespace", "gke.service"},
                 id="a-gke-target-without-its-parts"),
    pytest.param({"address": "http://h", "submission_id": "has space"}, {"submission_id"}, id="a-bad-submission-id"),
    pytest.param({"address": "http://h", "expected_gpus": -1, "stop_timeout_s": 0}, {"expected_gpus", "stop_timeout_s"},
                 id="a-negative-count-and-zero-seconds"),
    pytest.param({"address": "http://h", "max_recoveries": -1}, {"max_recoveries"}, id="a-negative-budget"),
    pytest.param({"address": "http://h", "scale": {"name": "rc"}}, {"scale"}, id="a-worker-group-without-gke"),
    pytest.param({"address": "http://h", "metadata": {"k": 1}}, {"metadata"}, id="metadata-not-strings"),
    pytest.param({"address": rpc.UNKNOWN, "expected_gpus": rpc.UNKNOWN}, set(), id="preview-unknowns"),
    pytest.param({"address": "http://h", "submission_id": None, "entrypoint": None}, {"submission_id", "entrypoint"},
                 id="no-id-no-entrypoint"),
])
def test_a_bad_input_is_named_by_its_property(given, bad):
    assert {p.key for p in validate_inputs({"submission_id": "s", "entrypoint": "e", **given})} == bad


def served_check(news: dict, olds: dict | None = None):
    """Check as the SDK's provider server runs it at preview: the request's unknown values as the server hands them
    over (pulumi.output.Unknown), the answer as it goes back on the wire. Returns (inputs, failures)."""
    result = RayJobProvider().check(wire(olds or {}, keep_unknowns=True), wire(news, keep_unknowns=True))
    return wire(result.inputs, keep_unknowns=True), {(f.property, f.reason) for f in result.failures}


PREVIEW = {"submission_id": rpc.UNKNOWN, "entrypoint": rpc.UNKNOWN, "expected_gpus": rpc.UNKNOWN,
           "ready_timeout_s": rpc.UNKNOWN, "gke": {"endpoint": rpc.UNKNOWN, "ca_certificate": rpc.UNKNOWN,
                                                    "namespace": "verl", "service": rpc.UNKNOWN}}


def test_values_not_known_at_preview_are_not_judged():
    assert served_check(PREVIEW)[1] == set()


def test_check_hands_values_not_known_yet_back_as_unknowns():
    inputs, _ = served_check(PREVIEW)
    assert all(isinstance(inputs[k], pulumi.output.Unknown) for k in ("submission_id", "expected_gpus"))
    assert isinstance(inputs["gke"]["endpoint"], pulumi.output.Unknown) and inputs["gke"]["namespace"] == "verl"


def test_known_values_beside_unknown_ones_are_still_judged():
    broken = {**PREVIEW, "expected_gpus": -1, "gke": {**PREVIEW["gke"], "namespace": ""}}
    assert {prop for prop, _ in served_check(broken)[1]} == {"expected_gpus", "gke.namespace"}


CHECKED = {"submission_id": "s", "entrypoint": "e", "address": "http://h:8265"}


def test_check_carries_the_last_attempt_from_state():
    inputs, failures = served_check(CHECKED, olds={**CHECKED, LAST_JOB_KEY: "s-r3"})
    assert failures == set() and inputs[LAST_JOB_KEY] == "s-r3"


def test_check_adds_no_attempt_without_one_in_state():
    assert LAST_JOB_KEY not in served_check(CHECKED)[0]


# ----------------------------------------------------------------------------- diff: replace, update or nothing


OLD_IN = {"submission_id": "s", "entrypoint": "e", "expected_gpus": 16, "address": "http://h:8265",
          "cluster_uid": "uid-1"}
OLDS = wire({**with_defaults(OLD_IN), "job_id": "s", "attempt": 1, "status": "RUNNING", "message": "",
             "recoveries": 0})
GKE_IN = {**OLD_IN, "address": None,
          "gke": {"endpoint": "gke-abc-123.us-central1.gke.goog", "ca_certificate": "A", "public_ca": True,
                  "namespace": "ray", "service": "svc", "port": 8265}}
GKE_OLDS = wire({**with_defaults(GKE_IN), "job_id": "s", "attempt": 1, "status": "RUNNING", "message": "",
                 "recoveries": 0})


def diff(status: str = "RUNNING", **news) -> dyn.DiffResult:
    return diff_inputs({**OLDS, "status": status}, wire({**OLD_IN, **news}))


def diff_gke(**gke) -> dyn.DiffResult:
    return diff_inputs(GKE_OLDS, wire({**GKE_IN, "gke": {**GKE_IN["gke"], **gke}}))


def test_unchanged_inputs_are_no_change():
    same = diff()
    assert not same.changes and same.replaces == []


@pytest.mark.parametrize("key,value", [
    ("entrypoint", "other"),
    ("runtime_env", {"env_vars": {"A": "1"}}),
    ("expected_gpus", 8),
    ("submission_id", "s2"),
    ("address", "http://other:8265"),
    ("cluster_uid", "uid-2"),  # its RayCluster was replaced
])
def test_a_change_to_what_runs_or_where_replaces_the_job_stopping_it_first(key, value):
    result = diff(**{key: value})
    assert result.changes and result.replaces == [key] and result.delete_before_replace


@pytest.mark.parametrize("key,value", [("ready_timeout_s", 10), ("wait_for_completion", True), ("log_tail_lines", 5)])
def test_a_changed_knob_updates_the_job_in_place(key, value):
    result = diff(**{key: value})
    assert result.changes and result.replaces == []


@pytest.mark.parametrize("dead", ["FAILED", "STOPPED", GONE])
def test_a_dead_job_is_resubmitted_on_up_after_a_refresh(dead):
    assert diff(status=dead).replaces == ["status"]


@pytest.mark.parametrize("dead", ["FAILED", "STOPPED", GONE])
def test_a_dead_job_is_kept_when_resubmission_is_off(dead):
    assert diff(status=dead, resubmit_on_failure=False).replaces == []


def test_a_succeeded_job_is_not_resubmitted():
    assert diff(status="SUCCEEDED").replaces == []


def test_moving_from_a_plain_address_to_a_service_proxy_replaces():
    assert diff_inputs(OLDS, wire(GKE_IN)).replaces == ["address", "gke"]


def test_a_rotated_ca_on_the_same_service_updates_in_place():
    rotated = diff_gke(ca_certificate="B")
    assert rotated.changes and rotated.replaces == []


def test_another_head_service_replaces():
    assert diff_gke(service="svc2").replaces == ["gke"]


def test_another_endpoint_replaces_even_with_the_same_ca():
    assert diff_gke(endpoint="gke-def-456.us-central1.gke.goog").replaces == ["gke"]


FAILED_OLDS = wire({**with_defaults(OLD_IN), "job_id": "s-r2", "attempt": 2, "status": "FAILED", "message": ""})


def test_a_failed_run_with_budget_left_is_resubmitted():
    assert diff_inputs({**FAILED_OLDS, "recoveries": 2}, wire({**OLD_IN, "max_recoveries": 3})).replaces == ["status"]


def test_a_failed_run_that_used_its_budget_is_not_resubmitted():
    assert diff_inputs({**FAILED_OLDS, "recoveries": 3}, wire({**OLD_IN, "max_recoveries": 3})).replaces == []


def test_the_budget_is_three_recoveries_by_default():
    assert diff_inputs({**FAILED_OLDS, "recoveries": 3}, wire(OLD_IN)).replaces == []
    assert diff_inputs({**FAILED_OLDS, "recoveries": 2}, wire(OLD_IN)).replaces == ["status"]


def test_a_changed_run_is_a_new_run_with_a_new_budget():
    spent = diff_inputs({**FAILED_OLDS, "recoveries": 3}, wire({**OLD_IN, "entrypoint": "f"}))
    assert spent.replaces == ["entrypoint"]


# Values not known yet at preview, by their path in the program's inputs (today's shape of a stack's job).
UNKNOWN_AT = (("submission_id",), ("gke",), ("gke", "endpoint"), ("gke", "service"), ("gke", "namespace"),
              ("gke", "ca_certificate"), ("runtime_env", "env_vars", "PYTHONPATH"), ("scale", "name"),
              ("cluster_uid",), ("max_recoveries",))
STACK_JOB = {**GKE_IN, "runtime_env": {"env_vars": {"PYTHONPATH": "/data/verl/v0.6.1"}}, "max_recoveries": 3,
             "scale": {"namespace": "ray", "name": "rc", "group": "gpu-group", "index": 0, "replicas": 2}}


def _unknown_at(path: tuple[str, ...], unknown: object) -> dict:
    """STACK_JOB as the engine hands it over, with the value at `path` not known yet."""
    props = wire(STACK_JOB)
    *parents, leaf = path
    node = props
    for key in parents:
        node = node[key]
    node[leaf] = unknown
    return props


def _answers(path: tuple[str, ...], unknown: object) -> tuple:
    olds = wire({**with_defaults(STACK_JOB), "job_id": "s", "attempt": 1, "status": "RUNNING", "message": "",
                 "recoveries": 0})
    news = _unknown_at(path, unknown)
    result = diff_inputs(olds, news)
    failures = RayJobProvider().check(wire(STACK_JOB), news).failures
    return result.changes, sorted(result.replaces), [(f.property, f.reason) for f in failures]


@pytest.mark.parametrize("path", UNKNOWN_AT, ids=".".join)
def test_a_value_not_known_yet_is_judged_the_same_in_either_form(path):
    """An unknown reaches the provider as pulumi's Unknown object (the provider server deserializes with
    keep_unknowns) or as the wire's sentinel string (what check hands back, what direct callers pass): at any
    depth check and diff answer the same for both."""
    assert _answers(path, rpc.UNKNOWN) == _answers(path, Unknown())


@pytest.mark.parametrize("path", UNKNOWN_AT, ids=".".join)
def test_a_value_not_known_yet_is_a_change_and_no_failure(path):
    changes, _, failures = _answers(path, Unknown())
    assert changes and failures == []


@pytest.mark.parametrize("path", [p for p in UNKNOWN_AT if p[0] == "gke" and p[-1] != "ca_certificate"],
                         ids=".".join)
def test_an_unknown_part_of_where_the_job_runs_replaces_it(path):
    assert "gke" in _answers(path, Unknown())[1]


def test_an_unknown_ca_alone_is_no_other_cluster():
    assert "gke" not in _answers(("gke", "ca_certificate"), Unknown())[1]


# ----------------------------------------------------------------------------- update, and the resource


UPDATE_OLDS = wire({"submission_id": "s", "entrypoint": "e", "address": "http://h:1", "job_id": "s-r2", "attempt": 2,
                    "status": "RUNNING", "message": "m", "dashboard_url": "http://h:1", "recoveries": 1})


def test_update_keeps_the_job_s_outputs():
    news = wire({"submission_id": "s", "entrypoint": "e", "address": "http://h:1", "ready_timeout_s": 5})
    outs = RayJobProvider().update("s-r2", UPDATE_OLDS, news).outs
    assert (outs["job_id"], outs["attempt"], outs["status"], outs["recoveries"]) == ("s-r2", 2, "RUNNING", 1)


def test_update_stores_the_new_knobs():
    news = wire({"submission_id": "s", "entrypoint": "e", "address": "http://h:1", "ready_timeout_s": 5})
    assert RayJobProvider().update("s-r2", UPDATE_OLDS, news).outs["ready_timeout_s"] == 5


@pytest.mark.parametrize("lines,expected", [(2, "b\nc"), (0, "")])
def test_tail_is_the_last_lines(lines, expected):
    assert tail("a\nb\nc\n", lines) == expected


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


def test_ray_job_registers_its_inputs_with_the_provider_and_reads_its_outputs():
    mocks, verified = _Mocks(), []
    pulumi.runtime.set_mocks(mocks, preview=False)

    @pulumi.runtime.test
    def check():
        job = RayJob("grpo", RayJobArgs(submission_id=pulumi.Output.from_input("s-1"), entrypoint="python3 -m x",
                                        expected_gpus=16, address="http://h:8265"))

        def verify(values):
            (args,) = [r for r in mocks.resources if r.name == "grpo"]
            assert args.typ == "pulumi-python:dynamic/verl-gke:RayJob"
            assert args.inputs["entrypoint"] == "python3 -m x" and args.inputs["expected_gpus"] == 16
            assert "__provider" in args.inputs
            assert values == ["s-1", "RUNNING"]
            verified.append(True)

        return pulumi.Output.all(job.job_id, job.status).apply(verify)

    check()
    assert verified  # the apply ran: not a vacuous pass


def test_ray_job_needs_exactly_one_target_at_construction():
    with pytest.raises(ValueError, match="exactly one"):
        RayJob("bad", RayJobArgs(submission_id="s", entrypoint="e", expected_gpus=1))


def test_ray_job_judges_a_known_value_at_construction_by_the_provider_s_rules():
    with pytest.raises(ValueError, match=r"RayJobArgs\.stop_timeout_s = 0: 0 must be a number of seconds > 0"):
        RayJob("bad", RayJobArgs(submission_id="s", entrypoint="e", address="http://h:8265", stop_timeout_s=0))


def test_ray_job_args_leave_outputs_to_the_provider_s_check():
    assert RayJobArgs(submission_id=pulumi.Output.from_input("has space"), entrypoint="e", address="http://h:8265",
                      metadata={"model": pulumi.Output.from_input("m")}).problems() == []


# ----------------------------------------------------------------------------- against a real head


@pytest.fixture(scope="module")
def submitted(head, provider):
    """A job created, then created again with wait_for_completion (a retried `up`, lost state): (props, the
    first create's result, the second's). Its entrypoint prints the runtime env's LD_LIBRARY_PATH as
    recipe.grpo.library_path_env renders it."""
    from catalog.accelerators import ACCELERATORS
    from catalog.paths import bucket_paths
    from recipe import grpo

    paths = bucket_paths("b200", "Qwen/Qwen2.5-32B-Instruct", "v0.6.1")
    rendered = grpo.runtime_env(ACCELERATORS["b200"], paths)["env_vars"]["LD_LIBRARY_PATH"]
    assert rendered.endswith(":${LD_LIBRARY_PATH}")
    p = props(head.address, "adopt", entrypoint='echo hello $GREETING; echo "LDPATH=$LD_LIBRARY_PATH"',
              runtime_env={"env_vars": {"GREETING": "from-runtime-env", "LD_LIBRARY_PATH": rendered}},
              metadata={"stack": "test"})
    first = provider.create(p)
    return p, first, provider.create({**p, "wait_for_completion": True})


def test_create_submits_the_job_as_its_first_attempt(head, submitted):
    p, first, _ = submitted
    assert first.id == first.outs["job_id"] == p["submission_id"] and first.outs["attempt"] == 1
    assert first.outs["status"] in ("PENDING", "RUNNING", "SUCCEEDED")
    assert first.outs["dashboard_url"] == head.address and first.outs["entrypoint"] == p["entrypoint"]


def test_a_second_create_adopts_the_job_instead_of_submitting_another(head, submitted):
    p, _, second = submitted
    sid = p["submission_id"]
    assert (second.id, second.outs["status"]) == (sid, "SUCCEEDED")
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [sid]


def test_the_runtime_env_s_variables_reach_the_job(head, submitted):
    assert "hello from-runtime-env" in job_logs(head.address, submitted[0]["submission_id"], timeout=30)


def test_the_library_path_extends_the_node_s_own(head, submitted):
    """Against a real Ray node, `${LD_LIBRARY_PATH}` in a runtime-env variable is the node's own value (the image's
    entries in a pod), neither replaced nor left literal. The driver runs on the head; tests/test_rehearsal.py
    checks the GPU workers."""
    p = submitted[0]
    rendered = p["runtime_env"]["env_vars"]["LD_LIBRARY_PATH"]
    logs = job_logs(head.address, p["submission_id"], timeout=30)
    assert f"LDPATH={rendered.replace('${LD_LIBRARY_PATH}', image_env()['LD_LIBRARY_PATH'])}\n" in logs, logs


def test_refresh_reads_the_job_s_status(provider, submitted):
    _, _, second = submitted
    assert provider.read(second.id, second.outs).outs["status"] == "SUCCEEDED"


def test_a_create_that_loses_the_race_to_another_adopts_its_job(head, provider, submitted, monkeypatch):
    """A concurrent create submitted between our listing of the jobs and our submit: Ray refuses ours as a
    duplicate, and that job is adopted, never a second one."""
    p = submitted[0]
    sid = p["submission_id"]
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
        wait_status(head.address, p["submission_id"], {"SUCCEEDED"}, timeout=120)
    finally:
        joiner.join()
        worker.stop()


def test_the_readiness_deadline_says_how_many_gpus_are_missing_and_where(head, provider):
    text = past_the_deadline(lambda s: provider.create(props(head.address, "deadline", expected_gpus=1000,
                                                             ready_timeout_s=s)))
    assert "of 1000 GPUs" in text and "found" in text and head.address in text
    assert "Kubernetes" not in text  # a plain address has no API server behind it: the message is the count alone


def test_an_unreachable_head_is_not_ready_naming_its_address(provider):
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
    """The head's dashboard agent runs submitted jobs: while it does not answer, the cluster is not ready; once
    it answers again, a create goes through."""
    agent = head.agent_pid()
    os.kill(agent, signal.SIGSTOP)
    try:
        text = past_the_deadline(lambda s: provider.create(props(head.address, "agent", ready_timeout_s=s)))
        assert "job agent" in text and head.address in text
    finally:
        os.kill(agent, signal.SIGCONT)
    assert provider.create(props(head.address, "agent-back")).outs["attempt"] == 1


# A job whose cluster was recreated: state says attempt 1 ran on this head, which has never heard of it. (Deleting a
# finished job from a live head is no stand-in: Ray's job monitor can write it back as FAILED moments later.)


@pytest.fixture(scope="module")
def gone(head, provider):
    """(props, the refresh of a job this head never had)."""
    p = props(head.address, "gone", wait_for_completion=True)
    sid = p["submission_id"]
    state = wire({**with_defaults(p), "job_id": sid, "attempt": 1, "status": "SUCCEEDED", "message": "",
                  "dashboard_url": head.address, "recoveries": 0})
    return p, provider.read(sid, state)


@pytest.fixture(scope="module")
def resubmitted(provider, gone):
    """(the next `up`'s check of the gone job's inputs, its create)."""
    p, refreshed = gone
    inputs, _ = served_check(p, olds=wire(refreshed.inputs))
    return inputs, provider.create(wire(inputs))


def test_a_job_the_head_does_not_have_refreshes_as_gone_remembering_its_attempt(gone):
    p, refreshed = gone
    assert refreshed.outs["status"] == GONE and refreshed.inputs[LAST_JOB_KEY] == p["submission_id"]


def test_the_next_up_replaces_a_gone_job(provider, gone):
    p, refreshed = gone
    inputs, failures = served_check(p, olds=wire(refreshed.inputs))
    assert failures == set() and inputs[LAST_JOB_KEY] == p["submission_id"]
    assert provider.diff(p["submission_id"], wire(refreshed.outs), inputs).replaces == ["status"]


def test_deleting_a_gone_job_has_nothing_to_stop(provider, gone):
    p, refreshed = gone
    provider.delete(p["submission_id"], wire(refreshed.outs))


def test_the_job_after_a_gone_one_is_its_next_attempt(head, gone, resubmitted):
    sid = gone[0]["submission_id"]
    _, second = resubmitted
    assert (second.id, second.outs["attempt"], second.outs["status"]) == (f"{sid}-r2", 2, "SUCCEEDED")
    assert second.outs[LAST_JOB_KEY] == sid  # the attempt it followed stays in state
    assert [j["submission_id"] for j in jobs_on(head.address, sid)] == [f"{sid}-r2"]


def test_the_attempt_after_a_gone_one_counts_the_resubmissions_so_far(head, provider):
    """State remembers attempt 2; the head has none of the run's jobs: attempt 3 has used 2 recoveries (its in-run
    restarts are unknown, the resubmissions are not), and is told so."""
    p = props(head.address, "gonecount", entrypoint='echo "used=$VERL_GKE_RECOVERIES_USED"', max_recoveries=3)
    sid = p["submission_id"]
    created = provider.create({**p, LAST_JOB_KEY: f"{sid}-r2"})
    assert (created.id, created.outs["attempt"], created.outs["recoveries"]) == (f"{sid}-r3", 3, 2)
    wait_status(head.address, created.id, {"SUCCEEDED"}, timeout=120)
    assert "used=2\n" in job_logs(head.address, created.id, timeout=30)


def test_a_gone_run_whose_resubmissions_spent_its_budget_is_not_submitted_again(head, provider):
    """State remembers attempt 2 (one resubmission) of a run with one recovery; the head has none of its jobs:
    its in-run restarts are unknown, its resubmission is not, and the budget is spent."""
    p = props(head.address, "gonespent", max_recoveries=1)
    sid = p["submission_id"]
    with pytest.raises(RayJobError, match=rf"Ray job {sid}-r2 is gone and the recovery budget spent \(1 of 1\)"):
        provider.create({**p, LAST_JOB_KEY: f"{sid}-r2"})
    assert jobs_on(head.address, sid) == []


def test_a_refresh_after_the_resubmission_remembers_the_new_attempt(provider, resubmitted):
    _, second = resubmitted
    again = provider.read(second.id, wire(second.outs))
    assert again.outs["status"] == "SUCCEEDED" and again.inputs[LAST_JOB_KEY] == second.id


def test_the_head_s_newest_attempt_is_adopted_by_the_next_create(head, provider, gone, resubmitted):
    p, _ = gone
    _, second = resubmitted
    again = provider.read(second.id, wire(second.outs))
    inputs, _ = served_check(p, olds=wire(again.inputs))
    assert provider.create(wire(inputs)).id == second.id
    assert [j["submission_id"] for j in jobs_on(head.address, p["submission_id"])] == [second.id]


FAILURE_HINT = "gcloud logging read 'resource.type=\"k8s_container\"'"


@pytest.fixture(scope="module")
def failure(head, provider) -> tuple[dict, str]:
    """(props, the error) of a job that prints 100 lines and fails, as a waiting `pulumi up` sees it."""
    script = "import sys; [print(f'line {i}') for i in range(100)]; sys.exit(3)"
    p = props(head.address, "fail", entrypoint=f'python -c "{script}"', wait_for_completion=True,
              completion_timeout_s=READY_S, log_tail_lines=5, logs_hint=FAILURE_HINT)
    with pytest.raises(RayJobError) as failed:
        provider.create(p)
    return p, str(failed.value)


ALL_LOGS = "\n--- all logs, also after the pods are gone ---\n"


def test_a_failed_job_s_error_names_it_and_its_status(failure):
    p, text = failure
    assert "FAILED" in text and p["submission_id"] in text


def test_a_failed_job_s_error_shows_its_last_log_lines(failure):
    tail_text = failure[1].split("--- last 5 log lines ---\n")[1]
    assert tail_text.split(ALL_LOGS)[0].splitlines() == [f"line {i}" for i in range(95, 100)]


def test_a_failed_job_s_error_ends_with_the_command_that_reads_all_its_logs(failure):
    assert failure[1].endswith(ALL_LOGS + FAILURE_HINT)


def test_a_job_never_submitted_refreshes_as_gone(head, provider):
    never = props(head.address, "never")
    outs = provider.read(never["submission_id"], {**never, "job_id": never["submission_id"]}).outs
    assert outs["status"] == GONE and outs["job_id"] == never["submission_id"]


@pytest.fixture(scope="module")
def vanished(head, provider):
    """A finished job deleted from the head: its create's result."""
    created = provider.create(props(head.address, "vanish", wait_for_completion=True))
    delete_job(head.address, created.id)
    return created


def test_a_job_deleted_from_the_head_refreshes_as_gone(provider, vanished):
    outs = provider.read(vanished.id, vanished.outs).outs
    assert outs["status"] == GONE and outs["job_id"] == vanished.id and "is gone" in outs["message"]


def test_deleting_a_job_deleted_from_the_head_succeeds(provider, vanished):
    provider.delete(vanished.id, vanished.outs)


@pytest.mark.parametrize("call", ["read", "delete"])
def test_no_answer_from_the_address_fails_refresh_and_delete(provider, call):
    """Nothing listens at the address: no answer is not "gone" (tests/test_ray_presence.py has every fault)."""
    p = props(refused_address(), "noanswer", probe_window_s=1)  # refused at once: one window of tries
    with pytest.raises(RayJobError, match="no definite answer"):
        getattr(provider, call)(p["submission_id"], {**p, "job_id": p["submission_id"]})


# ----------------------------------------------------------------------------- through the API server's proxy


TOKEN = "ya29.test-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def proxy(head):
    """The API server's service proxy in front of the head, taking TOKEN and only ever sent TOKEN (a test that
    sends another token or names another CA makes a proxy of its own)."""
    with ServiceProxy(head.address, TOKEN) as front:
        yield front


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", TOKEN)


@pytest.fixture(scope="module")
def proxied(head, provider, proxy):
    """(props, create's result) of a job created through the proxy, RUNNING until the module ends."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", TOKEN)
        p = props(None, "proxy", gke=proxy.gke(), entrypoint="sleep 600")
        created = provider.create(p)
    wait_status(head.address, created.id, {"RUNNING"}, timeout=120)
    return p, created


def test_the_service_proxy_gets_the_bearer_token(proxy, proxied):
    assert proxy.seen_auth and set(proxy.seen_auth) == {f"Bearer {TOKEN}"}


def test_no_output_of_a_job_created_through_the_proxy_holds_the_token(proxy, proxied):
    _, created = proxied
    assert created.outs["dashboard_url"] == f"https://{proxy.endpoint}{proxy.prefix}"
    assert TOKEN not in json.dumps(created.outs) and TOKEN not in repr(created.id)


def test_a_job_created_through_the_proxy_runs_on_the_head(head, proxied):
    _, created = proxied
    assert [j["submission_id"] for j in jobs_on(head.address, created.id)] == [created.id]


def test_refresh_through_the_proxy_reads_the_job_s_status(provider, proxied, token):
    _, created = proxied
    assert provider.read(created.id, wire(created.outs)).outs["status"] == "RUNNING"


def test_a_404_for_the_head_service_alone_is_no_answer(provider, proxy, proxied, token):
    """The API server's NotFound for the RayCluster is one (tests/test_ray_presence.py); a 404 for the head
    service is not: refresh fails."""
    _, created = proxied
    moved = wire({**created.outs, "gke": proxy.gke(service="deleted-svc"), "probe_window_s": 2})
    with pytest.raises(RayJobError, match="no definite answer"):
        provider.read(created.id, moved)


def test_delete_through_the_proxy_stops_the_running_job(head, provider, proxy, token):
    created = provider.create(props(None, "stop", gke=proxy.gke(), entrypoint="sleep 600"))
    wait_status(head.address, created.id, {"RUNNING"}, timeout=120)
    provider.delete(created.id, wire(created.outs))
    assert requests.get(f"{head.address}/api/jobs/{created.id}", timeout=30).json()["status"] == "STOPPED"
    assert provider.read(created.id, wire(created.outs)).outs["status"] == "STOPPED"


def test_deleting_a_stopped_job_sends_no_stop(head, provider, proxy, token):
    """Ray would answer 200 to a stop of a stopped job: the provider sees it stopped and asks nothing more."""
    created = provider.create(props(None, "stopped", gke=proxy.gke(), entrypoint="sleep 600"))
    wait_status(head.address, created.id, {"RUNNING"}, timeout=120)
    requests.post(f"{head.address}/api/jobs/{created.id}/stop", timeout=30).raise_for_status()
    wait_status(head.address, created.id, {"STOPPED"}, timeout=120)
    asked = len(proxy.seen_paths)
    provider.delete(created.id, wire(created.outs))
    assert not any("/stop" in path for path in proxy.seen_paths[asked:])


def test_a_rejected_token_fails_at_once_naming_the_status_and_the_url_never_the_token(head, provider, monkeypatch):
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "expired")
    with ServiceProxy(head.address, TOKEN) as front, pytest.raises(DashboardError) as denied:
        provider.create(props(None, "denied", gke=front.gke(), ready_timeout_s=600))
    assert "HTTP 401" in str(denied.value) and front.endpoint in str(denied.value)
    assert "expired" not in str(denied.value)


@pytest.fixture
def wrong_ca(head, monkeypatch):
    """(a proxy, props naming another cluster's CA for it)."""
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    with ServiceProxy(head.address, "tok") as front:
        _, other_ca = make_ca("some-other-cluster")
        yield front, props(None, "tls", gke=front.gke(ca_certificate=b64_pem(other_ca)), ready_timeout_s=600)


def test_a_wrong_cluster_ca_fails_the_create_on_tls_verification(provider, wrong_ca):
    front, p = wrong_ca
    with pytest.raises(RayJobError) as tls:
        provider.create(p)
    assert "TLS verification" in str(tls.value) and front.endpoint in str(tls.value)


def test_a_wrong_cluster_ca_fails_the_refresh_never_taken_for_a_vanished_job(provider, wrong_ca):
    _, p = wrong_ca
    with pytest.raises(RayJobError, match="TLS verification"):
        provider.read("x", {**p, "job_id": "x"})


def test_the_token_never_leaves_over_an_unverified_connection(provider, wrong_ca):
    front, p = wrong_ca
    with pytest.raises(RayJobError):
        provider.create(p)
    assert front.seen_auth == []


@pytest.fixture
def dns_endpoint(head, monkeypatch):
    """(a proxy, props for it with `public_ca`): GKE's DNS endpoint presents a certificate a public CA signs
    (gcloud writes no CA for it), so the provider verifies against the system store, never the cluster CA."""
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    with ServiceProxy(head.address, "tok") as front:
        yield front, props(None, "dns", gke=front.gke(public_ca=True), ready_timeout_s=600)


def test_a_dns_endpoint_is_not_trusted_on_the_cluster_ca(provider, dns_endpoint):
    front, p = dns_endpoint
    with pytest.raises(RayJobError, match="TLS verification"):
        provider.read("x", {**p, "job_id": "x"})
    assert front.seen_auth == []


def test_a_dns_endpoint_is_checked_against_the_system_trust_store(provider, dns_endpoint, monkeypatch, tmp_path):
    front, p = dns_endpoint
    bundle = tmp_path / "public-ca.pem"
    bundle.write_bytes(pem(front.ca_cert))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))  # requests' store trusts the signer now
    assert provider.read("x", {**p, "job_id": "x"}).outs["status"] == GONE
    assert front.seen_auth, "the token went out over the verified connection"


def test_missing_google_credentials_is_a_clear_error(head, provider, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with ServiceProxy(head.address, "tok") as front:
        with pytest.raises(RayJobError, match="no Google credentials") as err:
            provider.create(props(None, "adc", gke=front.gke()))
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


def test_describe_pods_says_when_every_pod_runs():
    ready = [p for p in PODS["items"] if p["metadata"]["name"] != PENDING]
    assert "all 2 Pods" in ray_client.describe_pods("rc", "ray", ready, EVENTS["items"])


def test_ready_deadline_through_the_proxy_reports_pending_pods(head, provider, monkeypatch):
    """The same deadline on a plain address: test_the_readiness_deadline_says_how_many_gpus_are_missing_and_where."""
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    objects = {"/api/v1/namespaces/ray/pods": PODS, "/api/v1/namespaces/ray/events": EVENTS}
    with ServiceProxy(head.address, "tok", objects=objects) as front:
        text = past_the_deadline(lambda s: provider.create(props(None, "pods", gke=front.gke(), expected_gpus=1000,
                                                                 ready_timeout_s=s)))
        assert "of 1000 GPUs" in text and PENDING in text and "GCE out of resources" in text
        assert "/api/v1/namespaces/ray/pods?labelSelector=ray.io/cluster%3Drc" in front.seen_paths


# ----------------------------------------------------------------------------- the recovery budget (issue 14)


SUPERVISOR_LOGS = ("noise\n[verl-gke] starting the trainer (attempt 2, recoveries used 1 of 3, ...)\n"
                   "[verl-gke] recovery 2 of 3: 1 GPU worker node(s) left the Ray cluster (abc)\nmore noise\n")


def test_the_supervisor_s_newest_line_gives_the_run_s_count():
    assert supervisor_note(SUPERVISOR_LOGS) == (2, "recovery 2 of 3: 1 GPU worker node(s) left the Ray cluster (abc)")


def test_a_job_without_supervisor_lines_gives_no_count():
    assert supervisor_note("plain job output\n") == (None, "")


@pytest.mark.parametrize("used,cap,left", [(2, 3, True), (3, 3, False), (0, 0, False), (0, 1, True)])
def test_a_recovery_is_left_while_fewer_than_the_cap_are_used(used, cap, left):
    assert budget_left(used, cap) is left


def test_each_attempt_learns_the_run_its_number_the_count_so_far_and_the_cap():
    env = with_attempt_env({"env_vars": {"A": "1"}}, "run", 3, 2, 4)
    assert env == {"env_vars": {"A": "1", "VERL_GKE_RUN": "run", "VERL_GKE_ATTEMPT": "3",
                                "VERL_GKE_RECOVERIES_USED": "2", "VERL_GKE_MAX_RECOVERIES": "4"}}


ECHO_BUDGET = 'echo "attempt=$VERL_GKE_ATTEMPT used=$VERL_GKE_RECOVERIES_USED of $VERL_GKE_MAX_RECOVERIES"; exit 1'


@pytest.fixture(scope="module")
def first_failed(head, provider):
    """A run with one recovery whose first attempt failed: (props, create's result)."""
    p = props(head.address, "budget", entrypoint=ECHO_BUDGET, max_recoveries=1, resubmit_on_failure=True)
    first = provider.create(p)
    wait_status(head.address, p["submission_id"], {"FAILED"}, timeout=120)
    return p, first


@pytest.fixture(scope="module")
def second_failed(head, provider, first_failed):
    """The same run's next `pulumi up --refresh`: delete is a no-op on a finished job, create resubmits; the
    second attempt failed too. Its create's result."""
    p, first = first_failed
    provider.delete(first.id, provider.read(first.id, first.outs).outs)
    second = provider.create(p)
    wait_status(head.address, second.id, {"FAILED"}, timeout=120)
    return second


def test_the_first_attempt_learns_its_number_and_the_budget(head, first_failed):
    p, _ = first_failed
    assert "attempt=1 used=0 of 1" in job_logs(head.address, p["submission_id"], timeout=30)


def test_a_failed_attempt_is_adopted_not_resubmitted_when_resubmission_is_off(head, provider):
    p = props(head.address, "noresubmit", entrypoint="exit 1", max_recoveries=1, resubmit_on_failure=False)
    provider.create(p)
    wait_status(head.address, p["submission_id"], {"FAILED"}, timeout=120)
    adopted = provider.create(p)
    assert (adopted.id, adopted.outs["status"], adopted.outs["attempt"]) == (p["submission_id"], "FAILED", 1)


def test_refresh_of_a_failed_attempt_with_budget_left_replaces_it(provider, first_failed):
    p, first = first_failed
    refreshed = provider.read(first.id, first.outs).outs
    assert refreshed["status"] == "FAILED" and provider.diff(first.id, refreshed, p).replaces == ["status"]


def test_the_resubmission_is_the_next_attempt_and_one_recovery(first_failed, second_failed):
    sid = first_failed[0]["submission_id"]
    assert (second_failed.id, second_failed.outs["attempt"], second_failed.outs["recoveries"]) == (f"{sid}-r2", 2, 1)


def test_the_resubmission_learns_the_recovery_it_used(head, second_failed):
    assert "attempt=2 used=1 of 1" in job_logs(head.address, second_failed.id, timeout=30)


def test_refresh_of_a_run_that_spent_its_budget_does_not_resubmit_it(provider, first_failed, second_failed):
    refreshed = provider.read(second_failed.id, second_failed.outs).outs
    assert refreshed["recoveries"] == 1 and refreshed["status"] == "FAILED"
    assert provider.diff(second_failed.id, refreshed, first_failed[0]).replaces == []


def test_a_create_on_a_spent_budget_adopts_the_dead_attempt(head, provider, first_failed, second_failed):
    p, _ = first_failed
    again = provider.create(p)  # never an attempt 3
    assert again.id == second_failed.id and "recovery budget spent (1 of 1)" in again.outs["message"]
    assert sorted(j["submission_id"] for j in jobs_on(head.address, p["submission_id"])) == [
        p["submission_id"], second_failed.id]


def test_in_run_recoveries_reported_by_the_supervisor_count_too(head, provider):
    line = "[verl-gke] run x attempt 1: FAILED, 1 GPU worker node(s) left; no recovery left (recoveries used 3 of 3)"
    p = props(head.address, "inrun", entrypoint=f"echo '{line}'; exit 1", max_recoveries=3)
    sid = p["submission_id"]
    provider.create(p)
    wait_status(head.address, sid, {"FAILED"}, timeout=120)
    adopted = provider.create(p)
    assert adopted.id == sid and adopted.outs["recoveries"] == 3
    assert adopted.outs["message"].startswith("recovery budget spent (3 of 3)")


def test_readiness_fails_when_a_gpu_workers_first_container_is_not_the_ray_one(head, monkeypatch):
    """Issue 43 item 11: once the GPUs have joined, the wait reads the worker pods through the API server; a
    pod whose GCS FUSE sidecar went first (its RDMA NICs with it) fails the wait with the pod named."""
    from tests.test_rdma_attach import NAMESPACE, worker_pod

    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "tok")
    pods = {"kind": "PodList", "items": [worker_pod("standard", "rc-gpu-group-worker-a", native_sidecar=False)]}
    with ServiceProxy(head.address, "tok", objects={f"/api/v1/namespaces/{NAMESPACE}/pods": pods}) as front, \
            ray_client.Dashboard({"gke": front.gke()}) as dash:
        with pytest.raises(RayJobError) as err:
            ray_client.wait_until_ready(dash, 2, 120)
    assert "GPU worker pod rc-gpu-group-worker-a: its first container is 'gke-gcsfuse-sidecar'" in str(err.value)
