"""The README a newcomer reads first (issue 44): short, every command on it run by a test, every figure the
plan computes copied from the plan, and each claim about a command what the command does. The Python commands
of the README and docs/ run from a fresh clone as written (issue 25: `python bench/job_submit.py` needed
`venv/bin/python`)."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests import docs
from tools import readme_plan

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {p: p.read_text() for p in docs.FILES}
# `python3 -m venv venv` makes the venv; anything else runs inside it.
COMMAND = re.compile(r"(?P<interp>(?:venv/bin/)?python3?(?:\.\d+)?) +(?:-m +(?P<module>[A-Za-z_.]+)|(?P<flag>-c)\b"
                     r"|(?P<script>[A-Za-z_/]+\.py))")
EXTERNAL = {"venv", "pytest"}  # modules of Python or of requirements-dev.txt, not of this repository
MAX_LINES = 300


def _commands() -> list[tuple[Path, str, re.Match]]:
    found = [(path, text, m) for path, text in DOCS.items() for m in COMMAND.finditer(text)]
    assert len(found) > 10, "the pattern no longer finds the README's commands"
    return found


def _where(path: Path, text: str, m: re.Match) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"


def test_every_python_command_runs_through_the_venv():
    loose = [_where(*c) for c in _commands() if c[2].group("interp") != "venv/bin/python"
             and c[2].group("module") != "venv"]
    assert not loose, loose


def test_every_module_and_script_the_readme_runs_is_in_the_repository():
    missing = []
    for path, text, m in _commands():
        if (mod := m.group("module")) and mod not in EXTERNAL:
            target = ROOT / mod.replace(".", "/")
            if not (target.with_suffix(".py").is_file() or (target / "__main__.py").is_file()):
                missing.append(_where(path, text, m))
        elif (script := m.group("script")) and not (ROOT / script).is_file():
            missing.append(_where(path, text, m))
    assert not missing, missing


def test_the_front_page_is_at_most_300_lines():
    assert README.count("\n") <= MAX_LINES, "move what a newcomer does not need first into docs/"


# --- every command on the front page is run by a test -----------------------------------------------------------

# What a reader is told to run: every line of a ```sh block, and inline code that runs this repository's tools.
# (The prerequisites' own setup, `gcloud auth login` and the like, is named inline and is not ours to run.)
# A fenced block opens with ``` or ~~~ and closes with the same (CommonMark); an indented one is refused below.
FENCE = re.compile(r"^(?P<fence>```|~~~)(?P<lang>[^\n]*)\n(?P<body>.*?)^(?P=fence)$", re.M | re.S)
INLINE = re.compile(r"`(venv/bin/python -m [^`]+|pulumi config set [^`]+)`")
# A command and the test that runs it: a test function ("file::name"), or `.ci/run` for the setup and the suite
# it runs itself. `pulumi up` and `pulumi destroy` need Google Cloud: the real CLI runs the program offline as
# far as it gets (`pulumi preview` of each shipped stack, to the Google provider plugin), and destroy's order
# is the one the engine computes from the plan's graph.
RUN_BY = [
    (r"python3 -m venv venv", ".ci/run"),
    (r"venv/bin/pip install (--no-deps )?-r requirements(-dev|-verl-test)\.txt", ".ci/run"),
    (r"venv/bin/python -m pytest", ".ci/run"),
    (r"venv/bin/python -m tools\.(plan|destroy) --stack [\w-]+( --quiet)?",
     "tests/test_readme_commands.py::test_the_front_pages_tool_commands_run_as_written"),
    (r"venv/bin/python -m tools\.check_reward --stack [\w-]+",
     "tests/test_check_reward.py::test_the_readmes_own_task_commands_run_as_written"),
    (r"venv/bin/python -m tools\.watch --stack [\w-]+",
     "tests/test_watch.py::test_watch_through_the_api_server_proxy_from_stack_outputs"),
    (r"pulumi stack select [\w-]+ --create",
     "tests/test_cli_loading.py::test_shipped_stack_passes_the_gate_then_stops_at_the_gcp_plugin"),
    (r"pulumi config set .+",
     "tests/test_cli_loading.py::test_readme_lines_replayed_pass_the_gate_then_stop_at_the_gcp_plugin"),
    (r"pulumi up( --stack [\w-]+)?",
     "tests/test_cli_loading.py::test_shipped_stack_passes_the_gate_then_stops_at_the_gcp_plugin"),
    (r"pulumi destroy( --stack [\w-]+)?",
     "tests/test_readme_commands.py::test_destroy_stops_the_job_before_any_kubernetes_object_or_node_pool"),
]


def front_page_commands(text: str = README) -> list[str]:
    found = []
    for fence in FENCE.finditer(text):
        if fence.group("lang") != "sh":
            continue
        for line in fence.group("body").splitlines():
            found += [c.strip() for c in line.split("#")[0].split("&&") if c.strip()]
    return found + [m.group(1) for m in INLINE.finditer(text)]


def runner(command: str) -> str | None:
    return next((by for pattern, by in RUN_BY if re.fullmatch(pattern, command)), None)


def test_every_command_block_of_the_front_page_is_marked_sh_or_text():
    """A command can hide in no other block: ```sh holds commands, ```text pictures."""
    assert {m.group("lang") for m in FENCE.finditer(README)} <= {"sh", "text"}


def test_every_command_on_the_front_page_is_run_by_a_test():
    commands = front_page_commands()
    assert len(commands) >= 15, commands
    unrun = [c for c in commands if runner(c) is None]
    assert not unrun, f"no test runs these; add one and name it in RUN_BY: {unrun}"


def test_a_command_no_test_runs_is_found():
    assert front_page_commands("```sh\nmake install   # a new step\n```\n") == ["make install"]
    assert runner("make install") is None


def test_a_command_in_a_tilde_fence_is_found():
    assert front_page_commands("~~~sh\nmake install\n~~~\n") == ["make install"]


def indented_code(text: str) -> list[str]:
    """Lines that open an indented code block (four spaces or a tab after a blank line), outside the fences:
    a command there is in no ```sh block, so no test would be asked to run it."""
    outside = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    lines = outside.splitlines()
    return [line for before, line in zip(["", *lines[:-1]], lines, strict=True)
            if not before.strip() and re.match(r"( {4}|\t)\s*\S", line)]


def test_an_indented_code_block_is_found():
    assert indented_code("Run it:\n\n    make install\n\n```sh\n\n    inside a fence\n```\n") == ["    make install"]


def test_the_front_page_has_no_indented_code_block():
    assert indented_code(README) == [], "put commands in a ```sh block, where the tests find them"


@pytest.mark.parametrize("by", sorted({by for _, by in RUN_BY} - {".ci/run"}))
def test_every_test_named_for_a_command_exists(by):
    path, name = by.split("::")
    tree = ast.parse((ROOT / path).read_text())
    assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, by


@pytest.mark.parametrize("command", sorted({c for c in front_page_commands() if runner(c) == ".ci/run"}))
def test_ci_runs_the_front_pages_setup_and_test_commands(command):
    ci = (ROOT / ".ci/run").read_text().replace(" -q", "")
    assert command in ci, f".ci/run does not run `{command}`"


TOOL_COMMANDS = sorted({c for c in front_page_commands() if runner(c) == RUN_BY[3][1]})


@pytest.mark.parametrize("command", TOOL_COMMANDS)
def test_the_front_pages_tool_commands_run_as_written(command, tmp_path, capsys):
    """As written, in this process; the plan writes into a scratch folder instead of build/plan/."""
    from tools import destroy, plan

    argv = shlex.split(command)[3:]
    module = shlex.split(command)[2]
    code = plan.main([*argv, "--out", str(tmp_path / "plan")]) if module == "tools.plan" else destroy.main(argv)
    assert code == 0, capsys.readouterr()


# --- what the front page says a command does ----------------------------------------------------------------------

def _printed(argv: list[str]) -> str:
    from tools import plan

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert plan.main(argv) == 0
    return out.getvalue()


def test_quiet_leaves_out_the_resource_tree_and_the_outputs_and_nothing_else(tmp_path):
    assert "`--quiet` leaves out the resource tree and the stack outputs" in README
    full = _printed(["--stack", "dev", "--out", str(tmp_path / "a")])
    quiet = _printed(["--stack", "dev", "--quiet", "--out", str(tmp_path / "b")])
    left_out = full.removesuffix(quiet)
    assert left_out != full and quiet.startswith("GPU memory per GPU"), quiet[:200]
    assert left_out.startswith("verl-gke / dev: ") and "\noutputs:\n" in left_out
    assert "+ gke-cluster (gcp:container/cluster:Cluster)" in left_out


def _order(stack: str):
    from tests.stack_helpers import shipped_plan
    from tools.destroy import DestroyOrder

    return DestroyOrder(shipped_plan(stack))


def _of_types(order, kinds: tuple[str, ...]) -> list[str]:
    return [u for u, r in order.resources.items() if r["type"].startswith(kinds) and not order.kept(u)]


K8S, POOL, JOB = ("kubernetes:",), ("gcp:container/nodePool:",), ("pulumi-python:dynamic/verl-gke:RayJob",)


@pytest.mark.parametrize("stack", readme_plan.STACKS)
def test_destroy_stops_the_job_before_any_kubernetes_object_or_node_pool(stack):
    """The README: `pulumi destroy` stops the job first."""
    order = _order(stack)
    (job,) = _of_types(order, JOB)
    later = _of_types(order, K8S + POOL)
    assert later and all(order.deleted_before(job, u) for u in later)


@pytest.mark.parametrize("stack", readme_plan.STACKS)
def test_destroy_deletes_node_pools_beside_the_kubernetes_objects_not_after_them(stack):
    """The README: the objects and the pools go side by side (a pool does not wait for every object)."""
    order = _order(stack)
    objects, pools = _of_types(order, K8S), _of_types(order, POOL)
    if not pools:
        pytest.skip("Autopilot: no node pools of the stack's own")
    assert all(any(not order.deleted_before(k, pool) for k in objects) for pool in pools)


# --- the figures: copied from the plan, and what the plan prints -----------------------------------------------------

def test_the_readmes_plan_figures_are_what_the_plan_computes():
    stale = [str(p.relative_to(ROOT)) for p, text in DOCS.items() if readme_plan.rendered(text) != text]
    assert not stale, f"stale figures in {stale}: run `{readme_plan.COMMAND}`"


def test_the_front_page_has_every_block_of_figures():
    assert set(readme_plan.blocks(README)) == set(readme_plan.BLOCKS)


# Computed numbers only: decimals and figures of three digits or more (a "2 ×" is in every output).
FIGURE = re.compile(r"(?<![\w.-])\d[\d,]*\.\d+|(?<![\w.-])\d{3,}(?:,\d{3})*(?![\w.])")


def _figures(text: str) -> set[str]:
    text = re.sub(r"Qwen[\w./-]*|`[^`]*`", "", text)  # model names and paths carry digits of their own
    return set(FIGURE.findall(text))


@pytest.mark.parametrize("stack", readme_plan.STACKS)
def test_every_figure_of_a_stacks_rows_is_one_its_plan_prints(stack):
    planned = readme_plan.plans()[stack]
    rows = [line for name in ("stacks", "sizing") for line in readme_plan.blocks(README)[name].splitlines()
            if line.startswith(f"| `{stack}` |")]
    assert len(rows) == 2
    missing = sorted(f for f in _figures("\n".join(rows)) if f not in planned.printed)
    assert not missing, missing


def test_every_figure_of_the_dev_block_is_one_the_dev_plan_prints():
    planned = readme_plan.plans()["dev"]
    block = readme_plan.blocks(README)["dev"]
    missing = sorted(f for f in _figures(block) if f not in planned.printed)
    assert len(_figures(block)) >= 15 and not missing, missing


def test_the_dev_blocks_checkpoint_and_merged_model_are_the_folders_the_plan_prints():
    printed = readme_plan.plans()["dev"].printed
    block = readme_plan.blocks(README)["dev"]
    folder = re.search(r"run folder  /checkpoints/(\S+/run-[0-9a-f]{12})", printed).group(1)
    merged = re.search(r"write (/data/merged/\S+/run-[0-9a-f]{12})", printed).group(1)
    steps = re.search(r"capped at (\d+) by", printed).group(1)
    assert f"`gs://<bucket>/checkpoints/{folder}/global_step_{steps}/`" in block
    assert f"`gs://<bucket>/{merged.removeprefix('/data/')}`" in block


# --- what the front page says about .ci/run and an existing venv --------------------------------------------------

def _ci_venv_step(tmp_path: Path) -> subprocess.CompletedProcess:
    """.ci/run up to its first install, in a scratch clone: the part that decides about venv/."""
    script = (ROOT / ".ci/run").read_text()
    head = script[:script.index("venv/bin/pip install")] + "echo venv-step-done\n"
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci/run").write_text(head)
    return subprocess.run(["bash", ".ci/run"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})


def test_ci_uses_a_working_venv_as_it_is(tmp_path):
    (tmp_path / "venv/bin").mkdir(parents=True)
    (tmp_path / "venv/bin/python").symlink_to(sys.executable)
    (tmp_path / "venv/mine").write_text("kept")
    run = _ci_venv_step(tmp_path)
    assert run.returncode == 0 and "venv-step-done" in run.stdout, run
    assert (tmp_path / "venv/mine").read_text() == "kept"


def test_ci_refuses_a_venv_that_does_not_run_and_keeps_it(tmp_path):
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv/mine").write_text("kept")
    run = _ci_venv_step(tmp_path)
    assert run.returncode == 1 and "venv-step-done" not in run.stdout, run
    assert "venv/ exists but venv/bin/python does not run" in run.stderr
    assert (tmp_path / "venv/mine").read_text() == "kept"
    assert "it never deletes one" in README
