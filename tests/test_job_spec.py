"""The Ray job's command, typed (recipe.job_spec): rendered once, read back by its parts.

The shipped stacks' rendered entrypoints are pinned by the snapshots (tests/snapshots: each RayJob's
entrypoint and the submission id that hashes it); these tests pin what the spec says about the supervisor.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shlex

from components.run_supervisor import SCRIPT_FILE
from recipe.job_spec import JobSpec, Supervisor, Trainer

_SPEC = importlib.util.spec_from_file_location("supervise", SCRIPT_FILE)
supervise = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(supervise)

MINIMAL = Supervisor(script="/data/scripts/s/supervise.py", state="/checkpoints/run/verl-gke-run.json",
                     expected_gpus=0, checkpoint_dir="/checkpoints/run")
EVERY_OPTION = dataclasses.replace(
    MINIMAL, expected_gpus=16, keep=2, merge_to="/data/merged/run", merge_timeout_s=1800,
    release_raycluster="verl-b200-ray", release_group="gpu-group", nccl_check="--nodes 2 --gpus-per-node 8 --nics 8",
    dashboard="http://127.0.0.1:18265", settle_s=30, backoff_s=1, gpu_wait_s=300,
    merge_cmd="python3 merge.py merge --backend fsdp", k8s_api="https://127.0.0.1:6443", k8s_sa_dir="/tmp/no-sa")
TRAINER = Trainer(script="/data/scripts/s/verl_main.py", overrides=("trainer.nnodes=2", "+trainer.note='a b; $(x)'"))


def parsed(supervisor: Supervisor):
    """What supervise.py's own argument parser reads from the options the spec renders."""
    args, _ = supervise.parse(["--run-id", "r", "--max-recoveries", "3", *supervisor.options(), "--", "true"])
    return args


def test_every_option_the_spec_renders_reads_back_in_the_supervisor():
    args = parsed(EVERY_OPTION)
    assert (args.state, args.expected_gpus, args.checkpoint_dir, args.keep) == (
        EVERY_OPTION.state, 16, EVERY_OPTION.checkpoint_dir, 2)
    assert (args.merge_to, args.merge_on_worker, args.merge_timeout_s) == ("/data/merged/run", True, 1800)
    assert (args.release_raycluster, args.release_group) == ("verl-b200-ray", "gpu-group")
    assert args.nccl_check == "--nodes 2 --gpus-per-node 8 --nics 8"
    assert (args.dashboard, args.settle_s, args.backoff_s, args.gpu_wait_s) == ("http://127.0.0.1:18265", 30, 1, 300)
    assert (args.merge_cmd, args.k8s_api, args.k8s_sa_dir) == (
        EVERY_OPTION.merge_cmd, "https://127.0.0.1:6443", "/tmp/no-sa")


def test_an_option_left_empty_is_not_passed():
    assert MINIMAL.options() == ["--state", MINIMAL.state, "--expected-gpus", "0", "--checkpoint-dir",
                                 MINIMAL.checkpoint_dir]


def test_the_entrypoint_is_the_supervisor_then_the_trainer_each_word_one_shell_word():
    spec = JobSpec(supervisor=EVERY_OPTION, trainer=TRAINER)
    assert shlex.split(spec.entrypoint) == ["python3", EVERY_OPTION.script, *EVERY_OPTION.options(), "--",
                                            "python3", TRAINER.script, *TRAINER.overrides]


def test_another_interpreter_runs_both_the_supervisor_and_the_trainer():
    words = shlex.split(JobSpec(supervisor=MINIMAL, trainer=TRAINER, python="/venv/bin/python3").entrypoint)
    assert words[0] == "/venv/bin/python3" and words[words.index("--") + 1] == "/venv/bin/python3"


def test_the_trainer_s_values_are_its_overrides_by_key():
    trainer = Trainer(script="m.py", overrides=("data.train_files=/data/t.parquet", "a.b=[x,y]", "+c=1", "~d"))
    assert trainer.values() == {"data.train_files": "/data/t.parquet", "a.b": "[x,y]", "+c": "1"}


def test_the_spec_reads_back_from_the_plan_s_json():
    spec = JobSpec(supervisor=EVERY_OPTION, trainer=TRAINER)
    assert JobSpec.from_dict(json.loads(json.dumps(spec.as_dict()))) == spec
