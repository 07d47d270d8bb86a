"""Plan snapshots: the checked-in plan of every shipped stack, so a behaviour change shows in review.

    python -m tools.snapshot --update   # rewrite tests/snapshots/<stack>.json from the current code
    python -m tools.snapshot --check    # exit 1 and print the diff when a snapshot is stale

A snapshot holds every registration (URN, type, parent, provider, dependencies, options, aliases,
inputs) and the stack outputs. Nothing in it is random: the mocks derive every computed value
(random suffixes included) from the resource's name, and registrations are sorted by URN.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT_DIR = ROOT / "tests" / "snapshots"


def shipped_stacks() -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


def render(stack: str, data: dict | None = None) -> str:
    """The snapshot text of a shipped stack: from `data`, its plan (tools.plan.build_plan of its stack file) where
    the caller has it already, else rendered here."""
    from tools import plan

    if data is None:
        raw, secret_keys = plan.read_stack_file(ROOT / f"Pulumi.{stack}.yaml")
        data = plan.build_plan(stack, raw, secret_keys)
    resources = []
    for r in data["resources"]:
        entry = {k: v for k, v in r.items() if k != "name"}
        entry["dependsOn"] = sorted(entry["dependsOn"])
        resources.append(entry)
    return json.dumps({"stack": stack, "resources": resources, "outputs": data["outputs"]},
                      indent=1, sort_keys=True) + "\n"


def diff(stack: str, data: dict | None = None) -> str:
    """Unified diff between the checked-in snapshot and the current code ('' when equal); `data` as for render."""
    path = SNAPSHOT_DIR / f"{stack}.json"
    old = path.read_text() if path.exists() else ""
    new = render(stack, data)
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        f"{path.name} (checked in)", f"{path.name} (current code)", n=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the snapshots")
    parser.add_argument("--check", action="store_true", help="exit 1 when a snapshot is stale")
    parser.add_argument("stacks", nargs="*", help="stacks (default: every Pulumi.<stack>.yaml)")
    args = parser.parse_args(argv)
    stale = 0
    for stack in args.stacks or shipped_stacks():
        if args.update:
            SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
            (SNAPSHOT_DIR / f"{stack}.json").write_text(render(stack))
            print(f"wrote {SNAPSHOT_DIR / stack}.json")
        elif text := diff(stack):
            stale += 1
            print(text)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
