"""The provider <-> run supervisor protocol (components/scripts/verl_gke_protocol.py): one module, both sides.

Each side is driven as it runs: the supervisor as a process started from the folder the staging Job
fills (only the shipped files in it), the provider's helpers in-process, the watch's parsing.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.paths import BucketPaths, bucket_paths
from components import run_supervisor
from components.attempts import attempt_id, attempt_number, split_attempt
from components.ray_recovery import with_attempt_env
from components.scripts import verl_gke_protocol as protocol
from components.scripts.verl_gke_protocol import supervisor_note
from tools import watch


def run_paths_for_test(tmp_path: Path) -> BucketPaths:
    """A stack's paths with the scripts folder in `tmp_path` (the bucket as the head pod sees it)."""
    return dataclasses.replace(bucket_paths("dev", "Qwen/Qwen2.5-0.5B-Instruct", "v0.6.1"),
                               scripts_dir=str(tmp_path / "data" / "scripts"))


def test_attempt_ids_round_trip():
    for n in (1, 2, 7, 10, 123):
        assert attempt_number(attempt_id("s-abc", n), "s-abc") == n
        assert split_attempt(attempt_id("s-abc", n)) == ("s-abc", n)
    assert attempt_number("s-abc-r7", "s-abc") == 7
    for other in ("s-abc-r1", "s-abc-rx", "s-abc-r", "s-abcd", "x-s-abc", "s-abc-r07", None, ""):
        assert attempt_number(other, "s-abc") is None, other
    # digits of other scripts: Python's isdigit() took them and int() then raised on a stray job id
    for odd in ("s-abc-r²", "s-abc-r٣", "s-abc-r3\n"):
        assert attempt_number(odd, "s-abc") is None and split_attempt(odd) == (odd, 1)
    assert attempt_number("s-abc-r2-r3", "s-abc-r2") == 3 and attempt_number("s-abc-r2-r3", "s-abc") is None


def test_the_watch_reads_attempts_as_the_provider_writes_them():
    assert watch.attempt_of("verl-grpo-b200-abc") == ("verl-grpo-b200-abc", 1)
    assert watch.attempt_of(attempt_id("verl-grpo-b200-abc", 4)) == ("verl-grpo-b200-abc", 4)
    assert watch.newest_attempt(["b", "b-r2", "b-r10", "b-r²", "other-r99"], "b") == "b-r10"


def test_the_provider_reads_the_count_the_supervisor_prints():
    logs = "\n".join(["noise", protocol.line(f"starting the trainer (attempt 2, {protocol.tally(1, 3)}, ...)"),
                      protocol.line(protocol.recovery(2, 3, "1 GPU worker node(s) left the Ray cluster (abc)")),
                      "more noise"])
    assert supervisor_note(logs) == (2, "recovery 2 of 3: 1 GPU worker node(s) left the Ray cluster (abc)")
    assert supervisor_note("plain job output\n") == (None, "")


def test_the_worker_group_patch_tests_the_name_and_sets_both_counts():
    assert protocol.worker_group_patch(1.0, "gpu-group", 0) == [
        {"op": "test", "path": "/spec/workerGroupSpecs/1/groupName", "value": "gpu-group"},
        {"op": "replace", "path": "/spec/workerGroupSpecs/1/minReplicas", "value": 0},
        {"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas", "value": 0},
    ]


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    """The supervisor's folder as the staging Job leaves it in the bucket: only the shipped files."""
    paths = run_paths_for_test(tmp_path)
    files = run_supervisor.shipped_files(paths)
    for dest, text in files.items():
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        Path(dest).write_text(text)
    script = Path(run_supervisor.script_path(paths))
    assert script.is_file() and {Path(d).parent for d in files} == {script.parent}
    return script


def test_the_shipped_folder_runs_on_its_own_and_reads_the_attempt_env(shipped, tmp_path):
    """The supervisor started from the shipped folder alone (no repository on the path), with the runtime env
    the provider submits an attempt with: it imports the protocol next to it and reads the attempt from it."""
    env = with_attempt_env({"env_vars": {"PYTHONNOUSERSITE": "1"}}, "run-x", 3, 2, 4)["env_vars"]
    state = tmp_path / "state.json"
    done = subprocess.run(
        [sys.executable, "-I", str(shipped), "--state", str(state), "--expected-gpus", "0", "--dashboard",
         "http://127.0.0.1:9", "--", sys.executable, "-c", "pass"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    used, last = supervisor_note(done.stdout)
    # The last line: the outcome, then the exit and who releases the GPUs (none asked for here).
    assert used == 2 and last.startswith(f'run run-x attempt 3: SUCCEEDED, {protocol.tally(2, 4)}; exit "succeeded"')
    assert json.loads(state.read_text())["run"] == "run-x"


def test_a_change_to_the_protocol_is_a_new_supervisor_folder(tmp_path, monkeypatch):
    paths = run_paths_for_test(tmp_path)
    before = run_supervisor.script_path(paths)
    changed = tmp_path / "verl_gke_protocol.py"
    changed.write_text(run_supervisor.PROTOCOL_FILE.read_text() + "\n# changed\n")
    monkeypatch.setattr(run_supervisor, "SHIPPED", (run_supervisor.SCRIPT_FILE, changed))
    assert run_supervisor.script_path(paths) != before


def test_the_manual_release_command_is_the_protocols_patch():
    """When a failed create cannot scale the group back, the kubectl command it prints must hold the group at 0:
    minReplicas as well (replicas alone stays at minReplicas, which the provider's scale-up had raised)."""
    from components.ray_client import DashboardError
    from components.ray_job_input import JobInput
    from components.ray_job_provider import RayJobProvider

    class Unreachable:  # the API server refuses the patch; the head lists no job of this run
        url = "https://api/proxy"

        def jobs(self, deadline=None):
            return []

        def kube_send(self, method, path, body, content_type, deadline=None):
            raise DashboardError(method, path, None, "unreachable: refused")

    group = {"namespace": "verl", "name": "rc", "group": "gpu-group", "index": 1, "replicas": 2}
    job = JobInput(submission_id="s", entrypoint="e", gke={"namespace": "verl"}, scale=group)
    text = RayJobProvider._release(Unreachable(), job)
    assert "could NOT scale" in text and "kubectl -n verl patch raycluster rc --type json -p '" in text
    assert json.loads(text.rsplit(" -p '", 1)[1].rstrip("'")) == protocol.worker_group_patch(1, "gpu-group", 0)


def test_the_shipped_protocol_holds_only_what_the_supervisor_uses():
    """Every name the shipped (hashed) protocol module defines is used by the supervisor: anything else
    there would restart running jobs whenever it changes, for nothing the pod needs."""
    import ast
    from pathlib import Path

    scripts = Path(__file__).resolve().parent.parent / "components" / "scripts"
    tree = ast.parse((scripts / "verl_gke_protocol.py").read_text())
    public = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    public |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
               if isinstance(t, ast.Name) and not t.id.startswith("_")}
    supervisor = (scripts / "supervise.py").read_text()
    module = (scripts / "verl_gke_protocol.py").read_text()
    inside = {name for name in public if len(re.findall(rf"\b{name}\b", module)) > 1}  # used by the module itself
    # supervisor_note reads back the lines the supervisor writes (line/tally/recovery): the same format.
    unused = {name for name in public if name not in supervisor} - inside - {"supervisor_note"}
    assert not unused, f"in the shipped protocol but not used by the supervisor: {sorted(unused)}"
