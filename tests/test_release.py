"""From 0.1.0 on, a release's URNs stay: every URN of the latest baseline (release/urns-<version>.json, written
by `python -m tools.release --write` when the version is bumped) is still planned, or kept by an alias.
docs/upgrading.md says how a change keeps them, and CHANGELOG.md what each release changed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import pulumi_cli, urn_replay
from tests.stack_helpers import shipped_plan
from tools import mocking, release, snapshot

BASELINE = release.latest_baseline()
RELEASED = json.loads(BASELINE.read_text())["stacks"] if BASELINE else {}


def test_the_current_version_has_its_urn_baseline():
    path = release.baseline_path(release.version())
    assert path.is_file(), f"version {release.version()} has no URN baseline: python -m tools.release --write"
    assert path == BASELINE and json.loads(path.read_text())["version"] == release.version()


def test_the_baseline_covers_every_shipped_stack():
    assert set(RELEASED) == set(snapshot.shipped_stacks())


@pytest.mark.parametrize("stack", sorted(RELEASED))
def test_every_urn_of_the_last_release_is_still_planned_or_aliased(stack):
    assert not release.lost(RELEASED[stack], shipped_plan(stack)["resources"]), (
        f"a deployed {stack} stack would lose these resources: add an alias (docs/upgrading.md)")


def test_a_urn_the_plan_drops_is_reported_lost():
    resources = shipped_plan("dev")["resources"]
    dropped = resources.pop(0)["urn"]
    assert release.lost([dropped, resources[0]["urn"]], resources) == [dropped]


def test_the_changelog_has_an_entry_for_the_current_version():
    text = (release.ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(release.version())}\b", text, re.M), "CHANGELOG.md: no entry for the version"


def test_a_written_baseline_is_never_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(release, "RELEASE_DIR", tmp_path)
    written = release.write("9.9.9")
    assert json.loads(written.read_text())["stacks"].keys() == set(release.snapshot_stacks())
    with pytest.raises(FileExistsError):
        release.write("9.9.9")


def _resources(run: mocking.Run) -> list[dict]:
    return [{"urn": r.urn, "parent": r.parent, "aliases": r.aliases} for r in run.resources]


def _moved(stage: str) -> list[dict]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(urn_replay.STAGE_ENV, stage)
        return _resources(mocking.run(urn_replay.moved, {}, "moved", project="verl-gke"))


def _ops(ws: pulumi_cli.Workspace, stage: str) -> dict[str, str]:
    preview = ws.run("preview", "--json", program="tests.urn_replay:moved", host_env={urn_replay.STAGE_ENV: stage})
    assert preview.code == 0, preview
    return {s["urn"]: s["op"] for s in json.loads(preview.out).get("steps", [])}


@pytest.mark.cli
def test_aliases_keep_the_urns_the_engine_keeps(tmp_path: Path):
    """The real engine on a released tree moved with aliases (renamed, retyped, reparented, a child inheriting
    its parent's move) and without: the URNs `lost` reports are the ones the engine deletes."""
    ws = pulumi_cli.program_workspace(tmp_path)
    assert ws.run("stack", "init", "moved").code == 0
    up = ws.run("up", "--yes", "--skip-preview", program="tests.urn_replay:moved",
                host_env={urn_replay.STAGE_ENV: "before"})
    assert up.code == 0, up
    state = json.loads(ws.run("stack", "export").out)["deployment"]["resources"]
    released = [r["urn"] for r in state if r["type"] != mocking.ROOT_STACK_TYPE and not r["urn"].endswith("::default")]
    assert len(released) == 4
    assert release.lost(released, _moved("aliased")) == []
    assert set(_ops(ws, "aliased").values()) <= {"same"}
    deleted = sorted(u for u, op in _ops(ws, "unaliased").items() if op == "delete")
    assert release.lost(released, _moved("unaliased")) == deleted and len(deleted) == 4
