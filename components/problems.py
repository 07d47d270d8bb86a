"""One shape for every component's argument checks.

Each `XArgs.problems()` is pure: it returns (path, reason) pairs, the path a field of the args
(`capacity.kind`, `paths.model_dir`) and the reason what is allowed. The component calls `require`
before it registers anything; the config gate (stacks.component_rules) calls the same `problems()`
and names the config key each path comes from, so a rule runs once there.

`ArgsError` is a `pulumi.RunError`: a program that builds a component with bad args ends with the
message alone, not a traceback (pulumi SDK `pulumi/errors.py`: RunError "results in a clean exit
rather than the usual verbose unhandled error logic"). It is a ValueError too, as the components
raised before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pulumi

Problem = tuple[str, str]  # (path in the args, reason)

_PLAIN = (str, int, float, bool, type(None))
_MISSING = object()


class ArgsError(pulumi.RunError, ValueError):
    """A component's args break its rules; `problems` holds each as one line."""

    def __init__(self, component: str, problems: list[str]):
        self.component, self.problems = component, problems
        super().__init__(f"invalid {component} arguments:\n  - " + "\n  - ".join(problems))


def value_at(args: object, path: str) -> Any:
    """The value a path names (fields joined by dots); _MISSING where the path leaves the args."""
    value: Any = args
    for part in path.split("."):
        value = value.get(part, _MISSING) if isinstance(value, Mapping) else getattr(value, part, _MISSING)
    return value


def describe(owner: str, args: object, path: str, reason: str, secret: Iterable[str] = ()) -> str:
    """`owner.path = value: reason`, the value shown only when it is plain and not a secret field."""
    value = value_at(args, path)
    plain = isinstance(value, _PLAIN) or (isinstance(value, (tuple, list, frozenset))
                                          and all(isinstance(v, _PLAIN) for v in value))
    shown = f" = {value!r}" if plain and path.split(".")[0] not in set(secret) else ""
    return f"{owner}.{path}{shown}: {reason}"


def require(component: str, args: object, found: Iterable[Problem] | None = None, owner: str = "") -> None:
    """Raise ArgsError with every problem (`args.problems()` unless given); return when there is none.

    `args` is an XArgs, or a mapping of a component's plain parameters (then `owner` names them)."""
    found = list(args.problems() if found is None else found)  # type: ignore[attr-defined]
    if found:
        owner = owner or type(args).__name__
        secret = getattr(args, "SECRET_FIELDS", ())
        raise ArgsError(component, [describe(owner, args, path, reason, secret) for path, reason in found])
