"""docs/gpu-release.md against the code: every exit of the run supervisor has its row (and no row names an
exit the code lacks), the provider functions it names exist, and its figures and command are the code's."""

from __future__ import annotations

import importlib.util
import json
import re

from catalog.ray import JOB_STOP_WAIT_S, WORKER_GROUP
from components.ray_job_provider import RayJobProvider
from stacks.derived import GrpoJob
from tests.stack_helpers import ROOT

DOC = (ROOT / "docs" / "gpu-release.md").read_text()
_spec = importlib.util.spec_from_file_location("supervise_doc", ROOT / "components" / "scripts" / "supervise.py")
supervise = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(supervise)


def _table(heading: str) -> list[list[str]]:
    """The rows of the table under a `## heading`, as cells."""
    section = DOC.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]  # past the header and rule
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_every_exit_of_the_supervisor_has_its_row_with_its_exit_code():
    rows = {cells[0].strip("`"): cells for cells in _table("The supervisor's exits")}
    assert set(rows) == set(supervise.EXITS)
    for name, code in supervise.EXITS.items():
        assert rows[name][1] == ("the trainer's" if code is None else str(code)), rows[name]
        assert rows[name][3], name  # says who releases


def test_the_provider_functions_the_page_names_exist():
    named = set(re.findall(r"`(?:RayJobProvider\.)?(_?[a-z_]+)`", " ".join(" ".join(c) for c in
                                                                          _table("The job provider's failure paths"))))
    methods = {"create", "delete", "read", "update", "_release"}
    assert methods <= named, named
    assert all(callable(getattr(RayJobProvider, m)) for m in methods)


def test_the_interrupted_create_row_gives_the_providers_own_grace():
    from components import provider_stop

    row = next(r for r in _table("The job provider's failure paths") if r[0].startswith("`create` interrupted:"))
    assert "`components/provider_stop.py`" in row[1] and f"within {provider_stop.KILL_GRACE_S:g} s" in row[1]


def test_the_figures_and_the_manual_command_are_the_codes():
    assert f"less {supervise.STOP_RECORD_S:g} s" in DOC
    assert GrpoJob.__dataclass_fields__["stop_timeout_s"].default - JOB_STOP_WAIT_S == 60
    assert "`RAY_JOB_STOP_WAIT_TIME_S` + 60 s" in DOC
    command = DOC.split("```\n", 1)[1].split("```", 1)[0]
    patch = json.loads(command.split(" -p '", 1)[1].rsplit("'", 1)[0])
    assert patch == supervise.protocol.worker_group_patch(0, WORKER_GROUP, 0)
