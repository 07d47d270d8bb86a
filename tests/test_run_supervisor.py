"""Issue 14 under mocks and without Ray: Pulumi vs. the run-time replica counts, the release access,
the merge command against verl's own parser, the recovery budget's arithmetic, the config key."""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import shlex
import sys
from pathlib import Path

import pytest

from components.ray_cluster import WORKER_GROUPS_ANNOTATION, groups_digest
from components.run_supervisor import SCRIPT_FILE
from stacks import config
from tests.stack_helpers import job_spec, run_config

RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"


@pytest.fixture(scope="module")
def run():
    return run_config()


@pytest.fixture(scope="module")
def supervise():
    spec = importlib.util.spec_from_file_location("supervise", SCRIPT_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- Pulumi and the replica drift


def _get(doc, path: list):
    for part in path:
        doc = doc[part]
    return doc


def _parse(path: str) -> list:
    """A Pulumi property path (a.b[0].c, a["k/x"]) as keys and indexes."""
    parts: list = []
    for token in __import__("re").findall(r'\["([^"]+)"\]|\[(\d+)\]|([^.\[\]]+)', path):
        key, index, name = token
        parts.append(key or (int(index) if index else name))
    return parts


def _changed(old, new, prefix=()) -> list[tuple]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [p for k in old.keys() | new.keys() for p in _changed(old.get(k), new.get(k), (*prefix, k))]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [p for i, (a, b) in enumerate(zip(old, new, strict=True)) for p in _changed(a, b, (*prefix, i))]
    return [] if old == new else [prefix]


def engine_diff(old: dict, new: dict, ignore: list[str], replace_on: list[str]) -> str:
    """Pulumi's engine: ignored paths take their old value, then a change under a replaceOnChanges
    path replaces, any other change updates in place."""
    new = copy.deepcopy(new)
    for path in ignore:
        *parent, leaf = _parse(path)
        _get(new, parent)[leaf] = copy.deepcopy(_get(old, parent)[leaf])
    changes = _changed(old, new)
    if any(tuple(_parse(r)) == c[: len(_parse(r))] for c in changes for r in replace_on):
        return "replace"
    return "update" if changes else "same"


def test_replica_drift_is_neither_reset_nor_a_replacement(run):
    cr = run.one(RAYCLUSTER)
    # The options as registered with the engine.
    assert cr.ignore_changes == ["spec.workerGroupSpecs"]
    assert cr.replace_on_changes == ["spec", f'metadata.annotations["{WORKER_GROUPS_ANNOTATION}"]']
    inputs = cr.inputs
    # What the state holds after the supervisor scaled the group to 0 (and `pulumi refresh` read it).
    drifted = copy.deepcopy(inputs)
    drifted["spec"]["workerGroupSpecs"][0].update(replicas=0, minReplicas=0)
    ignore, replace_on = cr.ignore_changes, cr.replace_on_changes
    assert engine_diff(drifted, inputs, ignore, replace_on) == "same"  # no reset, no replacement
    # A label change updates in place; Pulumi leaves the list (another manager's) out of its apply.
    relabelled = copy.deepcopy(inputs)
    relabelled["metadata"]["labels"] = {"team": "rl"}
    assert engine_diff(drifted, relabelled, ignore, replace_on) == "update"
    # Without the options (the old code: replace_on_changes=["spec"]) the drift replaced the cluster.
    assert engine_diff(drifted, inputs, [], ["spec"]) == "replace"


def test_a_changed_worker_template_still_replaces(run):
    inputs = run.one(RAYCLUSTER).inputs
    groups = inputs["spec"]["workerGroupSpecs"]
    assert inputs["metadata"]["annotations"][WORKER_GROUPS_ANNOTATION] == groups_digest(groups)
    scaled = copy.deepcopy(groups)
    scaled[0].update(replicas=0, minReplicas=0)
    assert groups_digest(scaled) == groups_digest(groups)
    for change in ({"maxReplicas": 3}, {"groupName": "other"}, {"rayStartParams": {"num-cpus": "1"}}):
        assert groups_digest([{**groups[0], **change}]) != groups_digest(groups), change
    new_image = copy.deepcopy(groups)
    new_image[0]["template"]["spec"]["containers"][0]["image"] = "other:1"
    assert groups_digest(new_image) != groups_digest(groups)
    cr = run.one(RAYCLUSTER)
    old = copy.deepcopy(inputs)
    new = copy.deepcopy(inputs)
    new["metadata"]["annotations"][WORKER_GROUPS_ANNOTATION] = groups_digest(new_image)
    new["spec"]["workerGroupSpecs"] = new_image
    assert engine_diff(old, new, cr.ignore_changes, cr.replace_on_changes) == "replace"


def test_release_access_is_one_raycluster_get_and_patch(run):
    role = run.one("kubernetes:rbac.authorization.k8s.io/v1:Role").inputs
    binding = run.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding").inputs
    cluster_name = run.one(RAYCLUSTER).inputs["metadata"]["name"]
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayclusters"],
                              "resourceNames": [cluster_name], "verbs": ["get", "patch"]}]
    head_sa = run.one(RAYCLUSTER).inputs["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": head_sa,
                                    "namespace": role["metadata"]["namespace"]}]
    assert binding["roleRef"]["kind"] == "Role"
    off = run_config({"jobReleaseGpus": False})
    assert not off.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
    assert job_spec({"jobReleaseGpus": False}).supervisor.release_raycluster == ""


def test_merge_off_has_no_merged_model_output():
    off = run_config({"jobMergeModel": False})
    assert job_spec({"jobMergeModel": False}).supervisor.merge_to == "" and "mergedModel" not in off.outputs


def test_job_max_recoveries_is_checked_by_the_gate():
    with pytest.raises(config.ConfigError, match="verl-gke:jobMaxRecoveries = -1: must be an integer >= 0"):
        config.load({"gcp:project": "p-1234", "gcp:region": "us-central1", "gcp:zone": "us-central1-b",
                     "verl-gke:jobMaxRecoveries": "-1"}, "test")


# ----------------------------------------------------------------------------- the merge, per verl's parser


def verl_merger_parser():
    """verl 0.6.1's own `parse_args` (verl/model_merger/base_model_merger.py), without its torch imports."""
    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl (requirements-verl-test.txt) is not installed")
    source = Path(spec.origin).parent / "model_merger" / "base_model_merger.py"
    tree = ast.parse(source.read_text())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args")
    namespace = {"argparse": __import__("argparse")}
    exec(compile(ast.Module(body=[func], type_ignores=[]), str(source), "exec"), namespace)  # noqa: S102
    return namespace["parse_args"]


def test_merge_command_is_one_verl_accepts(supervise, monkeypatch, tmp_path):
    args, _ = supervise.parse(["--run-id", "r", "--max-recoveries", "1", "--state", "s", "--expected-gpus", "8",
                               "--checkpoint-dir", "/data/ck", "--merge-to", "/data/merged/x", "--", "t"])
    cmd = [*shlex.split(args.merge_cmd), "--local_dir", "/data/ck/global_step_7/actor", "--target_dir", "/out"]
    assert cmd[:3] == ["python3", "-m", "verl.model_merger"]
    monkeypatch.setattr(sys, "argv", ["verl.model_merger", *cmd[3:]])
    parsed = verl_merger_parser()()
    assert (parsed.operation, parsed.backend) == ("merge", "fsdp")
    assert (parsed.local_dir, parsed.target_dir) == ("/data/ck/global_step_7/actor", "/out")


# ----------------------------------------------------------------------------- the budget's arithmetic


def test_budget_counts_attempts_and_restarts_and_resets_for_a_new_run(supervise, tmp_path):
    state = str(tmp_path / "run.json")
    first = supervise.Budget(state, "run-1", attempt=1, floor=0, limit=3)
    first.restarts.append({"reason": "node lost"})
    first.record(outcome="FAILED")
    assert first.used == 1
    second = supervise.Budget(state, "run-1", attempt=2, floor=0, limit=3)  # the provider's -r2
    assert second.used == 2 and second.tally() == "recoveries used 2 of 3"
    assert supervise.Budget(state, "run-1", attempt=2, floor=3, limit=3).used == 3  # the provider knows more
    second.record(outcome="RUNNING")
    other = supervise.Budget(state, "run-2", attempt=1, floor=0, limit=3)  # changed inputs: a new run
    assert other.used == 0
    assert json.loads(Path(state).read_text())["run"] == "run-1"  # untouched until the new run records
