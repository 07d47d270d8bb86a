"""The job provider's typed input reads every shape a state already holds, and diffs it as before.

Stored shapes: each shipped stack's job inputs as the last release wrote them (tests/data/release_state.json,
f611a47) and as the release before wrote them (tests/data/live_state, 7746758), and the older shapes the
program registered on the way (tests/data/job_input_shapes.json: no scale/budget/logs hint, the DNS endpoint
before cluster_uid, cluster_uid before the DNS endpoint). The state's outputs of each are what create
returned then: the inputs with defaults, plus the job's outputs (no `recoveries` before the budget).

tests/data/job_diff_before_typing.json holds what `diff_inputs` answered for each (shape, change) at
commit 2b0d8fe, before the typed input (the untyped `with_defaults` dicts): the typed code must answer
the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pulumi.output import Unknown
from pulumi.runtime import rpc

from components.ray_job_input import JobInput, JobOutputs
from components.ray_job_provider import RayJobProvider, diff_inputs
from tests.wire import wire

DATA = Path(__file__).parent / "data"
BEFORE = DATA / "job_diff_before_typing.json"
DNS = "gke-0123456789abcdef-123456789012.us-central1.gke.goog"


def stored_shapes() -> dict[str, dict]:
    shapes = {}
    release = json.loads((DATA / "release_state.json").read_text())["stacks"]
    for stack, data in sorted(release.items()):
        if data["job_inputs"]:
            shapes[f"release-f611a47-{stack}"] = data["job_inputs"]
    for path in sorted((DATA / "live_state").glob("*.json")):
        for r in json.loads(path.read_text())["resources"]:
            if r["type"] == "pulumi-python:dynamic/verl-gke:RayJob":
                shapes[f"live-7746758-{path.stem}"] = r["inputs"]
    for shape in json.loads((DATA / "job_input_shapes.json").read_text())["shapes"]:
        shapes[f"history-{shape['commit'][:7]}-{shape['stack']}"] = shape["inputs"]
    return shapes


SHAPES = stored_shapes()


def outputs_of(inputs: dict, status: str = "RUNNING", **extra) -> dict:
    """A state's outputs for these inputs as create returned them then: inputs, the job's outputs, and
    `recoveries` only where the run had a budget (max_recoveries)."""
    outs = {**inputs, "job_id": inputs["submission_id"], "attempt": 1, "status": status, "message": "",
            "dashboard_url": "https://x/proxy"}
    if "max_recoveries" in inputs:
        outs["recoveries"] = 0
    return wire({**outs, **extra})


def _today(inputs: dict) -> dict:
    """The same job in the shape today's program registers: the DNS endpoint (same CA), the RayCluster's
    uid, the worker group, the budget and the logs hint."""
    scale = {"namespace": "verl", "name": "verl-dev-ray", "group": "gpu-group", "index": 0, "replicas": 1}
    return {"scale": scale, "max_recoveries": 3, "logs_hint": "gcloud logging read x", **inputs,
            "gke": {**inputs["gke"], "endpoint": DNS, "public_ca": True}, "cluster_uid": "uid-1"}


# (olds, news) for one change of a stored shape; olds are the state's outputs, news the program's inputs.
CHANGES: dict[str, Callable[[dict], tuple[dict, dict]]] = {
    "nothing": lambda s: (outputs_of(s), wire(s)),
    "today's shape": lambda s: (outputs_of(s), wire(_today(s))),
    "a knob": lambda s: (outputs_of(s), wire({**s, "ready_timeout_s": 7200, "metadata": {"stack": "x"}})),
    "the entrypoint": lambda s: (outputs_of(s), wire({**s, "entrypoint": s["entrypoint"] + " x=1"})),
    "another cluster": lambda s: (outputs_of(s), wire({**s, "gke": {**s["gke"], "endpoint": DNS,
                                                                      "ca_certificate": "T1RIRVI="}})),
    "its RayCluster replaced": lambda s: (outputs_of(s, cluster_uid="uid-0"), wire({**s, "cluster_uid": "uid-1"})),
    "found FAILED": lambda s: (outputs_of(s, "FAILED"), wire(s)),
    "FAILED, budget spent": lambda s: (outputs_of(s, "FAILED", recoveries=3, attempt=4), wire(s)),
    "found GONE after a read": lambda s: (outputs_of(s, "GONE", last_job_id=s["submission_id"]),
                                          wire({**s, "last_job_id": s["submission_id"]})),
    "preview: id unknown": lambda s: (outputs_of(s), {**wire(s), "submission_id": rpc.UNKNOWN}),
    "preview: gke unknown": lambda s: (outputs_of(s), {**wire(s), "gke": rpc.UNKNOWN}),
    "preview: CA unknown": lambda s: (outputs_of(s), {**wire(s), "gke": {**s["gke"], "ca_certificate": rpc.UNKNOWN}}),
}


def answer(shape: str, change: str) -> dict:
    olds, news = CHANGES[change](SHAPES[shape])
    result = diff_inputs(olds, news)
    return {"changes": result.changes, "replaces": list(result.replaces),
            "delete_before_replace": result.delete_before_replace}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_stored_shape_parses_as_a_valid_typed_input(shape):
    """As the program registered it, and as the engine hands the state's outputs back (doubles, no None)."""
    stored = SHAPES[shape]
    for props in (stored, outputs_of(stored)):
        job = JobInput.from_props(props)
        assert job.problems() == [], props
        assert (job.submission_id, job.entrypoint) == (stored["submission_id"], stored["entrypoint"])
        assert type(job.expected_gpus) is int and type(job.stop_timeout_s) is int and type(job.max_recoveries) is int
        assert job.cluster_uid == stored.get("cluster_uid") and job.scale == stored.get("scale")
        assert job.max_recoveries == stored.get("max_recoveries", 3) and job.logs_hint == stored.get("logs_hint", "")
        assert job.raycluster == ("verl", stored["gke"]["service"].removesuffix("-head-svc"))
        assert "__provider" not in job.props() and job.props()["submission_id"] == stored["submission_id"]
    state = JobOutputs.from_props(outputs_of(stored))
    assert (state.job_id, state.attempt, state.status) == (stored["submission_id"], 1, "RUNNING")
    assert type(state.attempt) is int and state.recoveries == (0 if "max_recoveries" in stored else None)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_stored_shape_updates_in_place_keeping_the_job(shape):
    """A knob changed on a stored shape: update keeps the job's outputs and fills today's defaults."""
    olds, news = CHANGES["a knob"](SHAPES[shape])
    outs = RayJobProvider().update(olds["job_id"], olds, news).outs
    assert (outs["job_id"], outs["attempt"], outs["status"]) == (olds["job_id"], 1, "RUNNING")
    assert outs["ready_timeout_s"] == 7200 and outs["max_recoveries"] == SHAPES[shape].get("max_recoveries", 3)
    assert outs["dashboard_url"].endswith(f"/services/{SHAPES[shape]['gke']['service']}:8265/proxy")


def test_every_stored_shape_and_change_is_recorded():
    recorded = json.loads(BEFORE.read_text())["answers"]
    assert sorted(recorded) == sorted(SHAPES) and all(sorted(v) == sorted(CHANGES) for v in recorded.values())


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_stored_shape_diffs_as_before(shape):
    recorded = json.loads(BEFORE.read_text())["answers"][shape]
    assert {change: answer(shape, change) for change in CHANGES} == recorded


# Values not known yet at preview, by their path in the program's inputs.
UNKNOWN_AT = (("submission_id",), ("gke",), ("gke", "endpoint"), ("gke", "service"), ("gke", "namespace"),
              ("gke", "ca_certificate"), ("runtime_env", "env_vars", "PYTHONPATH"), ("scale", "name"),
              ("cluster_uid",), ("max_recoveries",))


def _unknown_at(props: dict, path: tuple[str, ...], unknown: object) -> dict | None:
    """`props` with the value at `path` not known yet; None when the shape has no such value."""
    props = json.loads(json.dumps(props))
    *parents, leaf = path
    node = props
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node:
        return None
    node[leaf] = unknown
    return props


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_value_not_known_yet_is_judged_the_same_in_either_form(shape):
    """An unknown reaches the provider as pulumi's Unknown object (the provider server deserializes with
    keep_unknowns) or as the wire's sentinel string (what check hands back, what direct callers pass): at any
    depth check and diff answer the same for both, and an unknown part of where the job runs (other than the
    CA) replaces it, as a wholly unknown `gke` does."""
    stored = SHAPES[shape]
    olds = outputs_of(stored)
    for path in UNKNOWN_AT:
        answers = []
        for unknown in (rpc.UNKNOWN, Unknown()):
            news = _unknown_at(wire(stored), path, unknown)
            if news is None:
                break
            result = diff_inputs(olds, news)
            failures = RayJobProvider().check(wire(stored), news).failures
            answers.append((result.changes, list(result.replaces), result.delete_before_replace,
                            [(f.property, f.reason) for f in failures]))
        if not answers:
            continue
        assert answers[0] == answers[1], path
        changes, replaces, _, failures = answers[0]
        assert changes and failures == [], path
        if path[0] == "gke" and path[-1] != "ca_certificate":
            assert "gke" in replaces, path


if __name__ == "__main__":  # records the answers of the code at hand (done once, before the typed input)
    import subprocess

    commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
    BEFORE.write_text(json.dumps({
        "source": f"components.ray_job_provider.diff_inputs at commit {commit}, before the typed input "
                  "(python -m tests.test_job_input)",
        "answers": {s: {c: answer(s, c) for c in CHANGES} for s in sorted(SHAPES)}}, indent=1) + "\n")
