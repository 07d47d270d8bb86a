"""The offline plan command end to end, as a user runs it."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.stack_helpers import ROOT, STACK_FILES, plan_command, plan_in_process
from tools import stack_file

PLAIN_TOKEN = "hf_PLAINtextTOKENshouldNEVERshow42"


@pytest.fixture(scope="module")
def b200(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "b200"
    proc = plan_command("--stack", "b200", "--out", str(out))  # the command as a user runs it
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_plan_writes_files(b200):
    out, proc = b200
    data = json.loads((out / "plan.json").read_text())
    assert data["project"] == "verl-gke" and data["stack"] == "b200"
    keys = {"urn", "type", "name", "custom", "parent", "dependsOn", "provider", "protect", "retainOnDelete",
            "deletedWith", "aliases", "ignoreChanges", "inputs"}
    optional = {"replaceOnChanges"}  # only where set
    assert all(keys <= set(r) <= keys | optional for r in data["resources"])
    types = {r["type"] for r in data["resources"]}
    assert {"gcp:container/cluster:Cluster", "gcp:compute/network:Network", "verl-gke:network:RdmaNetwork",
            "verl-gke:cluster:GkeCluster"} <= types
    cluster = next(r for r in data["resources"] if r["type"] == "gcp:container/cluster:Cluster")
    # dependsOn holds the resources whose outputs feed the inputs (the VPC feeds the cluster).
    assert any("primary-net" in u for u in cluster["dependsOn"])
    assert data["outputs"]["kubeconfig"] == "[secret]"
    graph = (out / "graph.mmd").read_text()
    assert graph.startswith("flowchart LR") and "network --> gke" in graph
    assert "verl-gke / b200:" in proc.stdout and "gke-cluster" in proc.stdout


def test_plan_manifests_are_kubernetes_objects(b200):
    out, _ = b200
    files = sorted((out / "manifests").glob("*.yaml"))
    assert files, "the plan writes the Kubernetes objects it would apply"
    for f in files:
        obj = yaml.safe_load(f.read_text())
        assert obj["apiVersion"] and obj["kind"], f.name


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_plan_every_stack(path, tmp_path):
    stack = path.stem.split(".", 1)[1]
    proc = plan_in_process("--stack", stack, "--out", str(tmp_path / "o"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o" / "plan.json").is_file()
    # --quiet leaves out the resource tree, never the memory and sizing to read before paying (issue 25).
    assert f"verl-gke / {stack}:" not in proc.stdout
    assert "GPU memory per GPU" in proc.stdout and "Run sizing" in proc.stdout and "GPU-hours" in proc.stdout


def test_plan_names_a_missing_stack_file_and_the_stacks_there_are(capsys):
    """Issue 25: `--stack h100` blamed --config (which the user never gave) and listed no stacks."""
    from tools import plan as plan_tool

    assert plan_tool.main(["--stack", "h100"]) == 2
    err = capsys.readouterr().err
    shipped = ", ".join(sorted(p.stem.split(".", 1)[1] for p in STACK_FILES))
    assert "error: Pulumi.h100.yaml: no such stack file" in err and "--config Pulumi" not in err
    assert f"stacks with a file: {shipped}" in err
    assert plan_tool.main(["--stack", "h100", "--config", "nowhere/Pulumi.h100.yaml"]) == 2
    assert "--config nowhere/Pulumi.h100.yaml: no such stack file" in capsys.readouterr().err


def _stack_doc(name: str) -> dict:
    """A shipped stack file as yaml.v3 reads it (edited below, written back as JSON: YAML that yaml.v3 reads back
    unchanged, every string quoted)."""
    return stack_file.load_yaml((ROOT / name).read_text(), name)


def test_plan_refuses_a_plain_secret_and_redacts_a_secure_one(tmp_path, capfd):
    doc = _stack_doc("Pulumi.dev.yaml")
    doc["config"]["verl-gke:hfToken"] = PLAIN_TOKEN
    plain_file = tmp_path / "Pulumi.plain.yaml"
    plain_file.write_text(json.dumps(doc))
    proc = plan_in_process("--stack", "plain", "--config", str(plain_file), "--out", str(tmp_path / "p"))
    assert proc.returncode == 2 and "verl-gke:hfToken is set in plain text" in proc.stderr, proc.stderr
    leaked = capfd.readouterr()  # anything written past the redirected streams (a logger holding the real one)
    assert PLAIN_TOKEN not in proc.stdout + proc.stderr + leaked.out + leaked.err
    assert not (tmp_path / "p").exists()

    doc["config"]["verl-gke:hfToken"] = {"secure": "v1:AAAAencryptedBLOB=="}
    secure_file = tmp_path / "Pulumi.secure.yaml"
    secure_file.write_text(json.dumps(doc))
    proc = plan_in_process("--stack", "secure", "--config", str(secure_file), "--out", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    written = "".join(p.read_text() for p in (tmp_path / "s").rglob("*") if p.is_file())
    assert stack_file.SECURE_PLACEHOLDER not in written and "encryptedBLOB" not in written


def _plan_changed(tmp_path, stack_file: str, key: str, value, run=plan_in_process):
    """Plan a shipped stack file with one key changed; (process, the --out folder it was given)."""
    doc = _stack_doc(stack_file)
    doc["config"][key] = value
    changed = tmp_path / "Pulumi.changed.yaml"
    changed.write_text(json.dumps(doc))
    out = tmp_path / "never"
    return run("--stack", "changed", "--config", str(changed), "--out", str(out)), out


def test_plan_bad_config_exits_2_and_writes_nothing(tmp_path):
    # The real command: its exit status and that it prints no traceback are the point.
    proc, out = _plan_changed(tmp_path, "Pulumi.b200.yaml", "verl-gke:gpuNodes", 0, run=plan_command)
    assert proc.returncode == 2
    assert "verl-gke:gpuNodes = 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_plan_shows_and_writes_the_memory_breakdown_and_sizing(b200):
    out, proc = b200
    data = json.loads((out / "plan.json").read_text())
    mem, size = data["memory"], data["sizing"]
    assert mem["fits"] is True and mem["gpu_gib"] > 0 and mem["kv_tokens"] > 0
    assert mem["settings"]["tensor_parallel_size"] == 2
    for key in ("total_steps", "gpu_hours", "est_step_seconds", "checkpoint_gb", "bucket_gb"):
        assert size[key] > 0, key  # the names the storage and cost work read
    assert data["warnings"] == []
    assert "GPU memory per GPU" in proc.stdout and "Run sizing" in proc.stdout
    assert "ESTIMATE" in proc.stdout and "GPU-hours" in proc.stdout


def test_plan_refuses_a_run_that_does_not_fit_with_exit_2(tmp_path):
    proc, out = _plan_changed(tmp_path, "Pulumi.h200.yaml", "verl-gke:grpoPpoMaxTokenLenPerGpu", 131072)
    assert proc.returncode == 2, proc.stderr
    assert "verl-gke:grpoPpoMaxTokenLenPerGpu = 131072: the actor update needs" in proc.stderr
    assert not out.exists()  # (in-process: an uncaught exception would have failed the test)
