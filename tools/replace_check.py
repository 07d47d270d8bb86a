"""What an update of a live stack would replace: the engine's ignoreChanges, then the provider's ForceNew.

`apply_ignore_changes` is our reading of the Pulumi engine's processIgnoreChanges / PropertyPath.Reset
(pulumi/pulumi pkg/resource/deploy/step_generator.go, sdk/go/common/resource/properties_path.go
@1b594989), tested against the engine's own cases (tests/data/pulumi_ignore_changes_cases.json).
`replacing` says which changed fields the bridged GCP provider replaces on, from the ForceNew fields
tools.provider_schema read out of the provider's Go schema (tests/data/reference/provider_force_new.json).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FORCE_NEW = ROOT / "tests" / "data" / "reference" / "provider_force_new.json"

_TOKEN = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_]*)|\["((?:[^"\\]|\\.)*)"\]|\[(\*|\d+)\]')
_MISSING = object()


def parse_path(path: str) -> list[str | int]:
    """`a.b["c"][0][*]` -> ["a", "b", "c", 0, "*"]."""
    parts: list[str | int] = []
    i = 0
    while i < len(path):
        m = _TOKEN.match(path, i)
        if not m:
            raise ValueError(f"bad property path {path!r} at {i}")
        name, quoted, index = m.groups()
        parts.append(name if name is not None else quoted if quoted is not None
                     else index if index == "*" else int(index))
        i = m.end()
    return parts


def _reset(path: list, old: Any, new: Any) -> bool:
    key = path[0]
    if key == "*" or isinstance(key, int):
        if isinstance(old, list) and isinstance(new, list):
            indexes = range(min(len(old), len(new))) if key == "*" else ([key] if key < min(len(old), len(new)) else [])
            if len(path) == 1:
                for i in indexes:
                    new[i] = copy.deepcopy(old[i])
            else:
                for i in indexes:
                    if not _reset(path[1:], old[i], new[i]):
                        return False
            return len(old) == len(new) if key == "*" else True
        return old is _MISSING and new is _MISSING
    if len(path) == 1:
        has = isinstance(old, dict) and key in old
        if has:
            if not isinstance(new, dict):
                return False
            new[key] = copy.deepcopy(old[key])
        elif isinstance(new, dict):
            new.pop(key, None)
        return True
    if not isinstance(old, dict) or not isinstance(new, dict):
        return not isinstance(old, dict) and not isinstance(new, dict)
    has_old, has_new = key in old, key in new
    if has_old and not has_new:
        return False
    if not has_old and not has_new:
        return True
    return _reset(path[1:], old.get(key, _MISSING), new[key])


def apply_ignore_changes(old: dict, new: dict, ignore: list[str]) -> dict:
    """The new inputs with each ignored path reset to its old value (deleted where old has none)."""
    result = copy.deepcopy(new)
    for path in ignore:
        _reset(parse_path(path), old, result)
    return result


def force_new_data() -> dict:
    return json.loads(FORCE_NEW.read_text())


def _values_at(value: Any, parts: list[str]) -> list[Any]:
    """Every value at a dotted path, through lists (a block list or a MaxItems=1 object)."""
    if not parts:
        return [value]
    if isinstance(value, list):
        return [v for item in value for v in _values_at(item, parts)]
    if isinstance(value, dict) and parts[0] in value:
        return _values_at(value[parts[0]], parts[1:])
    return []


def _count(values: list[Any]) -> int:
    return sum(len(v) if isinstance(v, list) else 1 for v in values)


def _is_block(values: list[Any]) -> bool:
    return any(isinstance(v, dict) or (isinstance(v, list) and any(isinstance(i, dict) for i in v)) for v in values)


def replacing(token: str, old: dict, new: dict, replace_on_changes: list[str] = (),
              data: dict | None = None) -> list[str]:
    """The ForceNew fields (or replaceOnChanges paths) whose change replaces a resource of type `token`.

    Terraform's SDKv2 schema diff (helper/schema/schema.go diffList) applies a block's ForceNew to its
    element count only: a nested field replaces only if it is ForceNew itself. The node pool proves it:
    node_config is ForceNew, yet its Update changes node_config fields in place. A list of primitive
    values is one value. Raises KeyError for a type the data does not cover.
    """
    data = data or force_new_data()
    fields = set(data["resources"][token]["force_new"])
    fields |= {o["path"] for o in data.get("observed_replacements", {}).get(token, [])}
    fields |= {re.sub(r"\[\d+\]|\[\*\]", "", p) for p in replace_on_changes}
    out = []
    for field in sorted(fields):
        parts = field.split(".")
        before, after = _values_at(old, parts), _values_at(new, parts)
        if before == after:
            continue
        if _is_block(before + after) and field not in {re.sub(r"\[\d+\]|\[\*\]", "", p) for p in replace_on_changes}:
            if _count(before) != _count(after):
                out.append(field)
        else:
            out.append(field)
    return out
