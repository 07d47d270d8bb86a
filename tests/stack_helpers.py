"""Shared helpers: compose a stack under mocks exactly as `pulumi up` would run it."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

from recipe.job_spec import JobSpec
from stacks import compose, config, derived
from tests.session_files import session_shared
from tools import mocking, plan, stack_file

ROOT = Path(__file__).resolve().parent.parent
STACK_FILES = sorted(ROOT.glob("Pulumi.*.yaml"))
BASE = {"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}


program = compose.program  # what __main__.py runs

def run_config(overrides: dict[str, object] | None = None, stack: str = "test",
               secret_keys: list[str] | None = None, result: mocking.Run | None = None,
               quotas: dict[str, int | str] | None = None) -> mocking.Run:
    """Compose a stack whose config is BASE plus `overrides`, read as the CLI reads a stack file
    (tools.stack_file: declared defaults injected, declared types checked): a string is a value as `pulumi
    config set` stores it, anything else YAML data as a stack file holds it."""
    raw = stack_file.from_config({**BASE, **(overrides or {})}, stack, "run_config").values
    return mocking.run(program, raw, stack, secret_keys, result=result, quotas=quotas)


def job_spec(overrides: dict[str, object] | None = None, stack: str = "test") -> JobSpec:
    """The Ray job's command (recipe.job_spec) of the stack run_config(overrides) composes: what its RayJob's
    entrypoint is rendered from (tests/test_stack_graph.py checks the two agree)."""
    raw = stack_file.from_config({**BASE, **(overrides or {})}, stack, "run_config").values
    cfg = config.load(raw, stack)  # held: the derived values keep only a weak reference to it
    job = derived.of(cfg).job
    assert job is not None, "submitJob is off: no job"
    return job.spec


def run_stack_file(path: Path) -> mocking.Run:
    raw, secret_keys = plan.read_stack_file(path)
    raw["gcp:project"] = BASE["gcp:project"]  # the files ship a placeholder that `pulumi up` rejects
    return mocking.run(program, raw, path.stem.split(".", 1)[1], secret_keys)


def composed(overrides: dict[str, object] | None = None, secret_keys: list[str] | None = None) -> mocking.Run:
    """run_config(overrides, secret_keys=...), composed once per test session for each distinct config and
    shared by every module and xdist worker (each call returns a copy of its own): the same few configs were
    composed again and again by modules that only read them. Not for a test that patches anything the
    composition depends on (a function, an environment variable), nor one that reads the runtime's state after
    composing (Pulumi's settings, config, mocks): the copy may come from before the patch, from another
    process, and that state from another config. Use run_config. The overrides are JSON data (a tuple would
    arrive as a list and be accepted)."""
    key = json.dumps(overrides or {}, sort_keys=True)
    if json.loads(key) != (overrides or {}):
        raise TypeError(f"composed() takes JSON data only (use run_config), not {overrides}")
    return copy.deepcopy(_composed(key, tuple(secret_keys or ())))


@functools.cache
def _composed(overrides: str, secret_keys: tuple[str, ...]) -> mocking.Run:
    return session_shared(f"composed {overrides} {secret_keys}", lambda: run_config(
        json.loads(overrides), secret_keys=list(secret_keys) or None))


def composed_file(path: Path) -> mocking.Run:
    """run_stack_file(path), composed once per test session and shared as `composed` is (same caveat)."""
    return copy.deepcopy(_composed_file(Path(path).absolute()))  # not resolve(): the stack name is the file's


@functools.cache
def _composed_file(path: Path) -> mocking.Run:
    return session_shared(f"composed_file {path}", lambda: run_stack_file(path))


def shipped_plan(stack: str, other_mode: bool = False) -> dict:
    """`tools.plan`'s plan of a shipped stack (Pulumi.<stack>.yaml), or of the same stack in the other
    cluster mode: rendered once per test session and shared as `composed` is (same caveat; each call returns a
    copy of its own)."""
    return copy.deepcopy(_shipped_plan(stack, other_mode))


@functools.cache
def _shipped_plan(stack: str, other_mode: bool) -> dict:
    return session_shared(f"shipped_plan {stack} {other_mode}", lambda: _render_shipped_plan(stack, other_mode))


def _render_shipped_plan(stack: str, other_mode: bool) -> dict:
    raw, secret_keys = plan.read_stack_file(ROOT / f"Pulumi.{stack}.yaml")
    if other_mode:
        raw = plan.other_mode(raw, _shipped_plan(stack, False)["outputs"]["clusterMode"])
    return plan.build_plan(stack, raw, secret_keys)


def plan_command(*args: str) -> subprocess.CompletedProcess:
    """`python -m tools.plan ARGS` as a user runs it, for tests of the process boundary (its exit status,
    no traceback); a generous limit only turns a hang into a failure."""
    return subprocess.run([sys.executable, "-m", "tools.plan", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)


def plan_in_process(*args: str) -> subprocess.CompletedProcess:
    """`python -m tools.plan ARGS` run in this process (its exit code, stdout and stderr), for tests about
    what the plan says and writes: a fresh interpreter costs ~4 CPU-seconds of SDK imports a plan, the
    plan itself a fraction of that. What a real run would print on stderr besides the plan's own lines
    lands in stderr here too: log records (Python's last-resort handler prints WARNING and above) and
    warnings. A test about the process boundary (the exit code, no traceback) runs the real command: an
    uncaught exception here fails the test instead of printing a traceback."""
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            try:
                code = plan.main(list(args))
            except SystemExit as exit_:  # argparse's usage errors, as the interpreter turns them into a status
                code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
                if isinstance(exit_.code, str):
                    print(exit_.code, file=err)
    finally:
        root.removeHandler(handler)
    for w in caught:
        err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    return subprocess.CompletedProcess(["tools.plan", *args], code, out.getvalue(), err.getvalue())


def count_program_runs(monkeypatch, tmp_path: Path) -> list[int]:
    """Each mocked program run's resource count, appended as it runs (a refusal must leave it empty), with the
    plan's default output folder moved inside the test's folder."""
    registered: list[int] = []
    real_run = mocking.run

    def counting_run(*args, **kwargs):
        run = real_run(*args, **kwargs)
        registered.append(len(run.resources))
        return run

    monkeypatch.setattr(mocking, "run", counting_run)
    monkeypatch.setattr(plan, "PLAN_ROOT", tmp_path / "build" / "plan")
    return registered
