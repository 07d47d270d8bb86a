"""A problem with the recipe's settings, in the recipe's own words.

The recipe names its inputs by field (`rollout_n`, `nnodes`, `extra_overrides`); whoever reads the
settings from somewhere else shows them under its own names (stacks.config: the config keys), by
passing `render` a function from field to name. A message marks each setting it mentions with
`named()`, so nothing else in the text (a verl key such as actor_rollout_ref.rollout.n, a value) is
ever mistaken for one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_MARK = "\x1f"  # ASCII unit separator: never in a message otherwise (values are shown with repr)
_NAMED = re.compile(f"{_MARK}([a-z][a-z0-9_]*){_MARK}")


def named(field: str) -> str:
    """A setting's name inside a message (rendered by Problem.render)."""
    return f"{_MARK}{field}{_MARK}"


@dataclass(frozen=True)
class Problem:
    """`field`: the setting at fault; `text`: the message, settings marked with named()."""

    field: str
    text: str

    def render(self, name: Callable[[str], str] = str) -> str:
        return _NAMED.sub(lambda m: name(m[1]), self.text)

    def __str__(self) -> str:
        return self.render()


def problem(field: str, value: object, allowed: str) -> Problem:
    """`<field> = <value>: <allowed>`, the shape of every message about one setting's value."""
    return Problem(field, f"{named(field)} = {value!r}: {allowed}")
