"""One shape for every bad setting the project reports, and the one error that carries them.

A `Problem` names the setting at fault in the words of whoever found it: a config key (the gate,
stacks), a recipe field (`rollout_n`), a component's argument path (`capacity.kind`). It says what is
allowed, and carries the value when a message may show it. Other settings a message mentions are
marked with `named()`, so `renamed()` can show every one of them under another naming (the gate shows
the recipe's fields as config keys) without mistaking a verl key or a value for one.

A value is shown escaped (repr) and cut short; never when it is a secret's (SECRET) or when it
looks like a credential (catalog.secret_shapes): a token typed into the wrong key is not echoed.

`ConfigError` holds every problem found at once, one line each; the gate, the deploy-time lookups
(stacks.preflight) and a component's own argument check (components.problems) all raise it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from catalog.secret_shapes import credential_shape

_MARK = "\x1f"  # ASCII unit separator: never in a message otherwise (values are shown with repr)
_NAMED = re.compile(f"{_MARK}([^{_MARK}]+){_MARK}")
MAX_SHOWN = 80  # characters of a value's repr a message shows
MAX_LINE = 300  # characters kept from each end of an over-long problem line
MAX_LINES = 100  # problem lines an error prints; ConfigError.problems keeps them all
# A text that continues the key's own phrase (`key is not set: ...`, `key (train.parquet), row 3: ...`)
# rather than saying what the key's value must be (`key = value: must be ...`).
_PHRASE = ("is ", "(")


def named(setting: str) -> str:
    """A setting's name inside a message (shown under the reader's naming by Problem.renamed)."""
    return f"{_MARK}{setting}{_MARK}"


@dataclass(frozen=True)
class AsText:
    """A value a message shows as this text rather than escaped: `[secret]` for a secret's, `0 (auto)`."""

    text: str

    def __repr__(self) -> str:
        return self.text


SECRET = AsText("[secret]")  # a secret's value: never shown
NO_VALUE = AsText("")  # the problem is about the key, not a value of it (compared by equality: copies stay equal)


def shown(value: object) -> str:
    """A value as a message shows it: escaped (repr), cut short when long, withheld when it looks like a
    credential."""
    text = repr(value)
    if not isinstance(value, AsText) and (what := credential_shape(text)):
        return f"<not shown: it looks like {what}>"
    if len(text) <= MAX_SHOWN:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as text"
    return f"{text[:MAX_SHOWN // 2]}... ({size})"


def _key_text(key: str) -> str:
    """A key as a message shows it: as typed, unless it hides characters or is too long to read."""
    return key if key.isprintable() and len(key) <= MAX_SHOWN else shown(key)


@dataclass(frozen=True)
class Problem:
    """`key`: the setting at fault; `allowed`: what is allowed (other settings marked with named());
    `value`: what the message shows of its value (NO_VALUE: none); `fatal` False: a warning (it runs,
    but worse than it should)."""

    key: str
    allowed: str
    value: object = NO_VALUE
    fatal: bool = True

    def renamed(self, name: Callable[[str], str]) -> Problem:
        """The same problem with its key and every named() setting shown as `name` spells them."""
        return dataclasses.replace(self, key=name(self.key), allowed=_NAMED.sub(lambda m: name(m[1]), self.allowed))

    def withheld(self) -> Problem:
        """The same problem that never shows its value (the key holds a secret)."""
        return self if not self.has_value else dataclasses.replace(self, value=SECRET)

    @property
    def has_value(self) -> bool:
        return not (isinstance(self.value, AsText) and self.value == NO_VALUE)

    def __str__(self) -> str:
        text = _NAMED.sub(lambda m: m[1], self.allowed)
        if self.has_value:
            return f"{_key_text(self.key)} = {shown(self.value)}: {text}"
        return f"{_key_text(self.key)}{' ' if text.startswith(_PHRASE) else ': '}{text}"


def _bounded(line: str) -> str:
    # Every problem stays readable whatever the input: a 1 MB value must not make a 3 MB message.
    return line if len(line) <= 2 * MAX_LINE else f"{line[:MAX_LINE]} [...] {line[-MAX_LINE:]}"


class ConfigError(Exception):
    """Bad settings refused: `found` holds every problem, `problems` their lines as the message prints them.

    Not a ValueError: the Pulumi SDK rewraps a ValueError raised while it serializes a resource's inputs
    ("While processing resource ... ValueError has risen"), and a deploy-time check raises inside one."""

    def __init__(self, found: Sequence[Problem], what: str = "invalid stack configuration"):
        self.found = tuple(found)
        self.problems = [_bounded(str(p)) for p in self.found]
        # ...and a file of 20,000 stray keys must not print 20,000 lines: the first MAX_LINES, then a count.
        shown_lines = self.problems[:MAX_LINES] + ([f"... and {len(self.problems) - MAX_LINES} more problems"]
                                                   if len(self.problems) > MAX_LINES else [])
        super().__init__(f"{what}:\n  - " + "\n  - ".join(shown_lines))
