"""The URNs a release's shipped stacks plan, frozen when the version is bumped, and the check against them.

    python -m tools.release --write   # release/urns-<version>.json from tests/snapshots/ (pyproject's version)
    python -m tools.release --check   # exit 1 naming each URN of the latest baseline the snapshots lose

A deployed stack's resource is found by its URN: one that leaves the plan without an alias is deleted and
created again by the next `pulumi up` (docs/upgrading.md). The baseline is written once per version and never
rewritten; tests/test_release.py checks the current plan of every shipped stack against the latest one.
An alias resolves as the engine resolves it (pulumi/pulumi pkg/resource/deploy/step_generator.go
`generateAliases`, `collapseAliasToUrn`, `inheritedChildAlias` @1b5949891b3c; sdk/go/common/resource/alias.go
`CreateURN`): the alias's name, type and parent default to the resource's own, and a child also answers to
each of its parent's old URNs (its name's parent prefix swapped for the old parent's name).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASE_DIR = ROOT / "release"
SNAPSHOT_DIR = ROOT / "tests" / "snapshots"
ROOT_STACK_TYPE = "pulumi:pulumi:Stack"
_BASELINE = re.compile(r"^urns-(\d+)\.(\d+)\.(\d+)\.json$")


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def baseline_path(ver: str) -> Path:
    return RELEASE_DIR / f"urns-{ver}.json"


def latest_baseline() -> Path | None:
    """The baseline of the newest release written (release/urns-X.Y.Z.json, by version, not by name)."""
    found = [(tuple(int(g) for g in m.groups()), p) for p in RELEASE_DIR.glob("urns-*.json")
             if (m := _BASELINE.match(p.name))]
    return max(found)[1] if found else None


def _parts(urn: str) -> tuple[str, str, str, str]:
    """urn:pulumi:<stack>::<project>::<qualified type>::<name> -> (stack, project, qualified type, name)."""
    head, project, qualified, name = urn.split("::", 3)
    return head.removeprefix("urn:pulumi:"), project, qualified, name


def create_urn(name: str, type_: str, parent: str, project: str, stack: str) -> str:
    """sdk/go/common/resource/alias.go CreateURN: under a parent, the parent's URN up to its name, `$`, the type."""
    if not parent:
        return f"urn:pulumi:{stack}::{project}::{type_}::{name}"
    return f"{parent[:parent.rindex('::')]}${type_}::{name}"


def _under(parent: str) -> str:
    """A parent as URNs are built: none for the root stack (collapseAliasToUrn's parentIsRootStack)."""
    return "" if not parent or _parts(parent)[2] == ROOT_STACK_TYPE else parent


def _collapse(alias: dict, name: str, type_: str, parent: str, stack: str, project: str,
              old_parents: set[str]) -> set[str]:
    """collapseAliasToUrn: one alias (the SDK's Alias message as a dict) of a resource, as URNs: an alias that
    names a parent which itself moved is looked for under the parent's old URNs as well (`old_parents`)."""
    if alias.get("urn"):
        return {alias["urn"]}
    spec = alias.get("spec") or {}
    under = "" if spec.get("noParent") else _under(spec.get("parentUrn") or parent)
    args = (spec.get("name") or name, spec.get("type") or type_)
    where = (spec.get("project") or project, spec.get("stack") or stack)
    return {create_urn(*args, p, *where) for p in {under} | (old_parents if under else set())}


def _inherited(child_type: str, child_name: str, parent_name: str, parent_alias: str, stack: str,
               project: str) -> str:
    """inheritedChildAlias: the child under its parent's old URN, `<parent>-x` renamed `<old parent>-x`."""
    _, _, qualified, old_parent_name = _parts(parent_alias)
    name = old_parent_name + child_name[len(parent_name):] if child_name.startswith(parent_name) else child_name
    return f"urn:pulumi:{stack}::{project}::{qualified}${child_type}::{name}"


def alias_urns(resources: Iterable[dict]) -> dict[str, set[str]]:
    """URN -> the old URNs the resource answers to (its aliases and those it inherits), for a plan's resources
    (each with `urn`, `parent` and `aliases`: the SDK's Alias messages as JSON text, as tools.plan writes them)."""
    by_urn = {r["urn"]: r for r in resources}
    found: dict[str, set[str]] = {}

    def of(urn: str) -> set[str]:
        if urn in found or urn not in by_urn:
            return found.get(urn, set())
        r = by_urn[urn]
        stack, project, qualified, name = _parts(urn)
        type_ = qualified.rsplit("$", 1)[-1]
        parent = _under(r.get("parent") or "")
        own: set[str] = set()
        for text in r.get("aliases") or []:
            alias = json.loads(text)
            named_parent = (alias.get("spec") or {}).get("parentUrn") or parent
            own |= _collapse(alias, name, type_, parent, stack, project, of(named_parent) if named_parent else set())
        aliases = set(own)
        if parent:
            parent_name = _parts(parent)[3]
            for old_parent in of(parent):
                aliases.add(_inherited(type_, name, parent_name, old_parent, stack, project))
                for alias in own:
                    _, _, old_qualified, old_name = _parts(alias)
                    aliases.add(_inherited(old_qualified.rsplit("$", 1)[-1], old_name, parent_name, old_parent,
                                           stack, project))
        found[urn] = aliases - {urn}
        return found[urn]

    for urn in by_urn:
        of(urn)
    return found


def lost(baseline: Iterable[str], resources: list[dict]) -> list[str]:
    """The baseline URNs the plan neither registers nor reaches through an alias: Pulumi would delete them."""
    reached = set(r["urn"] for r in resources).union(*alias_urns(resources).values())
    return sorted(u for u in baseline if u not in reached)


def snapshot_resources(stack: str) -> list[dict]:
    return json.loads((SNAPSHOT_DIR / f"{stack}.json").read_text())["resources"]


def snapshot_stacks() -> list[str]:
    return sorted(p.stem for p in SNAPSHOT_DIR.glob("*.json"))


def write(ver: str) -> Path:
    """The baseline of `ver` from the snapshots; a release's URNs are never rewritten (FileExistsError)."""
    path = baseline_path(ver)
    if path.exists():
        raise FileExistsError(f"{path} exists: a release's URNs are never rewritten")
    stacks = {s: sorted(r["urn"] for r in snapshot_resources(s)) for s in snapshot_stacks()}
    RELEASE_DIR.mkdir(exist_ok=True)
    path.write_text(json.dumps({"version": ver, "stacks": stacks}, indent=1, sort_keys=True) + "\n")
    return path


def check() -> list[str]:
    """`<stack>: <urn>` for each URN of the latest baseline the snapshots lose (a stack gone loses all of its)."""
    path = latest_baseline()
    if path is None:
        return []
    problems = []
    for stack, urns in json.loads(path.read_text())["stacks"].items():
        resources = snapshot_resources(stack) if (SNAPSHOT_DIR / f"{stack}.json").exists() else []
        problems += [f"{stack}: {u}" for u in lost(urns, resources)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.release", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the baseline of pyproject.toml's version")
    mode.add_argument("--check", action="store_true", help="exit 1 when the snapshots lose a baseline URN")
    args = parser.parse_args(argv)
    if args.write:
        try:
            print(f"wrote {write(version())}")
        except FileExistsError as err:
            print(err, file=sys.stderr)
            return 1
        return 0
    problems = check()
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} URN(s) of {latest_baseline().name} are lost: add an alias (docs/upgrading.md)",
              file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
