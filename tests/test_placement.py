"""Issue 22: where each process of a run lands, and the mount that serves each path it uses.

The model (tools.placement) reads the plan's rendered objects. Every shipped stack, in each cluster
mode its accelerator allows, must have no path without its mount and no pod with two volumes the
kubelet would merge; the plan fails otherwise. The mutations below are the defects of issue 22 as
they were rendered before the fix (measured: the old b200 plan shows exactly these four problems).
"""

from __future__ import annotations

import copy
import json

import pytest

from recipe.job_spec import JobSpec
from tests.stack_helpers import plan_in_process
from tests.test_admission import STACKS, plans
from tools import placement


def modes():
    return [(s, m) for s in STACKS for m in ("standard", "autopilot")]


@pytest.mark.parametrize("stack,mode", modes())
def test_every_path_has_its_mount_in_the_pod_that_uses_it(stack, mode):
    if mode not in plans(stack):
        pytest.skip(f"{stack}: config refuses {mode} for its accelerator")
    rows, problems = placement.table(plans(stack)[mode])
    assert problems == []
    by_process = {(r.process, r.pod.split()[-1]) for r in rows}
    # Placements: the supervisor and main_ppo on the head; TaskRunner, FSDP workers and merge on the GPUs.
    assert ("job driver: run supervisor", "head") in by_process
    assert ("verl main_ppo (driver's child)", "head") in by_process
    assert ("verl TaskRunner", "gpu-group") in by_process
    assert ("model merge", "gpu-group") in by_process
    written = {(r.process, r.path): r for r in rows if r.access == "write"}
    state = next(r for (p, path), r in written.items() if p.startswith("job driver") and path.endswith(".json"))
    assert "head-ckpt" in state.mount and "read-only" not in state.mount  # on the bucket, writable
    cache = next(r for r in rows if r.path.endswith("hf-datasets"))
    assert "emptyDir" in cache.mount  # the datasets cache on the pod's disk


@pytest.mark.parametrize("stack,mode", modes())
def test_the_plan_s_job_spec_is_the_registered_entrypoint(stack, mode):
    """Placement reads the plan's `job` (the spec), not the RayJob's string: the two must be one command."""
    if mode not in plans(stack):
        pytest.skip(f"{stack}: config refuses {mode} for its accelerator")
    p = plans(stack)[mode]
    job = next(r for r in p["resources"] if r["type"].endswith(":RayJob"))
    assert JobSpec.from_dict(p["job"]).entrypoint == job["inputs"]["entrypoint"]


def _head(p: dict) -> dict:
    rc = next(r for r in p["resources"] if r["inputs"].get("kind") == "RayCluster")
    return rc["inputs"]["spec"]["headGroupSpec"]["template"]["spec"]


def _problems(p: dict) -> list[str]:
    return placement.table(p)[1]


@pytest.fixture(scope="module")
def b200() -> dict:
    return plans("b200")["standard"]


def test_two_pvs_with_one_handle_in_a_pod_fail(b200):
    p = copy.deepcopy(b200)
    for r in p["resources"]:
        if r["type"] == "kubernetes:core/v1:PersistentVolume":
            r["inputs"]["spec"]["csi"]["volumeHandle"] = "the-bucket"  # as before: the bare bucket for every PV
    problems = _problems(p)
    assert any("gpu-group" in x and "same CSI driver and volume handle 'the-bucket'" in x for x in problems)
    assert any("head" in x and "same CSI driver" in x for x in problems)


def test_a_head_without_the_checkpoint_mount_fails(b200):
    p = copy.deepcopy(b200)
    head = _head(p)
    head["containers"][0]["volumeMounts"] = [m for m in head["containers"][0]["volumeMounts"]
                                             if m["mountPath"] != "/checkpoints"]
    problems = _problems(p)
    assert any("run supervisor" in x and "--state" in x and "lost with the pod" in x for x in problems)


def test_a_written_path_on_a_read_only_mount_fails(b200):
    p = copy.deepcopy(b200)
    for m in _head(p)["containers"][0]["volumeMounts"]:
        if m["mountPath"] == "/checkpoints":
            m["readOnly"] = True
    assert any("--state" in x and "read-only" in x for x in _problems(p))


def test_the_datasets_cache_through_the_bucket_fails(b200):
    p = copy.deepcopy(b200)
    job = next(r for r in p["resources"] if r["type"].endswith(":RayJob"))
    job["inputs"]["runtime_env"]["env_vars"]["HF_DATASETS_CACHE"] = "/data/huggingface_cache/datasets"
    assert any("HF_DATASETS_CACHE" in x and "GCS FUSE" in x for x in _problems(p))


def test_a_state_file_off_the_bucket_fails(b200):
    p = copy.deepcopy(b200)
    p["job"]["supervisor"]["state"] = "/tmp/verl-gke-run.json"
    assert any("--state" in x and "/tmp/verl-gke-run.json" in x and "lost with the pod" in x for x in _problems(p))


def test_a_driver_with_entrypoint_resources_runs_on_the_workers(b200):
    p = copy.deepcopy(b200)
    job = next(r for r in p["resources"] if r["type"].endswith(":RayJob"))
    job["inputs"]["entrypoint_num_cpus"] = 1
    rows, _ = placement.table(p)
    assert {r.pod.split()[-1] for r in rows if r.process.startswith("job driver")} == {"gpu-group"}


def test_the_plan_fails_and_prints_the_table(tmp_path, monkeypatch):
    """The plan command itself refuses a stack whose placement has a problem (a stack file whose head
    mounts nothing at /checkpoints cannot be written, so the check runs on the real command's code path
    with a patched RayCluster component)."""
    import components.ray_cluster as rc

    orig = rc.RayCluster.head_group

    def head(args):
        h = orig(args)
        c = h["template"]["spec"]["containers"][0]
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != "/checkpoints"]
        return h

    monkeypatch.setattr(rc.RayCluster, "head_group", staticmethod(head))
    done = plan_in_process("--stack", "dev", "--quiet", "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "where things run" in done.stderr and "--state (recovery budget)" in done.stderr
    assert not (tmp_path / "out" / "plan.json").exists()


def test_the_plan_json_carries_the_table(tmp_path):
    out = tmp_path / "dev"
    done = plan_in_process("--stack", "dev", "--quiet", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads((out / "plan.json").read_text())["placement"]
    assert saved["problems"] == [] and saved["rows"]
    assert "where things run" in done.stdout


