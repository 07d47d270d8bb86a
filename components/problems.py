"""One shape for every component's argument checks.

Each `XArgs.problems()` is pure: it returns catalog.problems.Problem, keyed by a field of the args
(`capacity.kind`, `paths.model_dir`), saying what is allowed. The component calls `require` before it
registers anything; the config gate (stacks.component_rules) calls the same `problems()` and names the
config key each field comes from, so a rule runs once there.

`ArgsError` is a `pulumi.RunError`: a program that builds a component with bad args ends with the
message alone, not a traceback (pulumi SDK `pulumi/errors.py`: RunError "results in a clean exit
rather than the usual verbose unhandled error logic"). It is a catalog.problems.ConfigError too,
carrying the same problems, and a ValueError, as the components raised before.

A component built alone gets the same clean message when an arg has the wrong shape: an Output in a
field that is not a `pulumi.Input` (the component shapes resources from it when the program runs) is
named as such, and a rule that cannot read a value of the wrong type is reported, not a traceback. A
value not known yet in a `pulumi.Input` field is never judged (each rule checks plain values only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import pulumi

from catalog.problems import NO_VALUE, ConfigError, Problem

_PLAIN = (str, int, float, bool, type(None))
_MISSING = object()


class ArgsError(pulumi.RunError, ConfigError, ValueError):
    """A component's args break its rules (`found`, each named `<Owner>.<field>`; `problems`: their lines)."""

    def __init__(self, component: str, found: list[Problem]):
        self.component = component
        ConfigError.__init__(self, found, f"invalid {component} arguments")


def value_at(args: object, path: str) -> Any:
    """The value a path names (fields joined by dots); _MISSING where the path leaves the args."""
    if not path:
        return _MISSING
    value: Any = args
    for part in path.split("."):
        value = value.get(part, _MISSING) if isinstance(value, Mapping) else getattr(value, part, _MISSING)
    return value


def located(owner: str, args: object, problem: Problem, secret: Iterable[str] = ()) -> Problem:
    """The problem keyed `owner.field` (`owner` alone: the args as a whole), with the field's value where it is
    plain and not a secret field."""
    path = problem.key
    value = value_at(args, path)
    plain = isinstance(value, _PLAIN) or (isinstance(value, (tuple, list, frozenset))
                                          and all(isinstance(v, _PLAIN) for v in value))
    shown = value if plain and path.split(".")[0] not in set(secret) else NO_VALUE
    return Problem(f"{owner}{'.' + path if path else ''}", problem.allowed, shown)


def _takes_output(annotation: object) -> bool:
    """Whether a field's annotation (a string under `from __future__ import annotations`) admits an Output."""
    text = (annotation if isinstance(annotation, str) else repr(annotation)).replace("pulumi.", "")
    return text.startswith(("Input[", "Output[", "Any"))


def unknown_in_plain_fields(args: object) -> list[Problem]:
    """Fields that hold an Output although their type is not a pulumi.Input: the component reads them
    when the program runs (names, sizes, the accelerator), so they must be plain values by then."""
    if not dataclasses.is_dataclass(args) or isinstance(args, type):
        return []
    return [Problem(f.name, f"is a pulumi.Output: give a plain {f.type} (only pulumi.Input fields take a value "
                            "not known yet)")
            for f in dataclasses.fields(args)
            if isinstance(getattr(args, f.name, None), pulumi.Output) and not _takes_output(f.type)]


def _checked(args: object, secret: Iterable[str]) -> list[Problem]:
    """`args.problems()`; a rule that cannot read a value of the wrong type is one problem, not a traceback."""
    try:
        return list(args.problems())  # type: ignore[attr-defined]
    except (TypeError, AttributeError) as err:
        text = str(err)
        for value in _strings([getattr(args, name, None) for name in secret]):
            text = text.replace(value, "<secret>")  # an error's text may quote a value: never a secret one
        first = text.splitlines()[0] if text else ""
        return [Problem("", f"a value has the wrong type ({type(err).__name__}: {first}): "
                            f"pass the types {type(args).__name__} declares")]


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, Mapping):
        value = [*value.keys(), *value.values()]
    return [s for v in value for s in _strings(v)] if isinstance(value, (list, tuple)) else []


def require(component: str, args: object, found: Iterable[Problem] | None = None, owner: str = "") -> None:
    """Raise ArgsError with every problem (`args.problems()` unless given); return when there is none.

    `args` is an XArgs, or a mapping of a component's plain parameters (then `owner` names them)."""
    secret = getattr(args, "SECRET_FIELDS", ())
    if found is None:
        found = unknown_in_plain_fields(args) or _checked(args, secret)
    found = list(found)
    if found:
        owner = owner or type(args).__name__
        raise ArgsError(component, [located(owner, args, p, secret) for p in found])
