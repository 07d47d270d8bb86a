"""Every key's value read through its row of stacks.keys, with every problem the rows find.

The CLI hands the program strings (PULUMI_CONFIG). A row says how to read one: the rules every key of
its kind obeys (stacks.keys.KIND_RULES) on the value as given; its type as the CLI reads it (an
`integer` as Go's strconv.Atoi, a `boolean` as exactly true or false, an array as JSON), its bounds
and its choices; then its own rules (Key.rules, Key.each). A key with a problem is `refused`: its
value is read as a stand-in from then on, and no rule over several keys (stacks.cross_keys) or the
recipe's arithmetic reads it. Keys that no row declares are problems too (unknown_key_problems).

A key marked secret (`pulumi config set --secret`) that the program cannot keep secret is refused and
read as its default, so no later rule shows its value; a secret key (hfToken) set in plain text is refused
too; no problem ever shows a secret key's value.
"""

from __future__ import annotations

import difflib
import json
import re
import unicodedata
from collections.abc import Collection, Mapping
from typing import Any

from catalog.gcp_provider import GCP_PROVIDER_KEYS, provider_keys
from catalog.problems import MAX_LINES, MAX_SHOWN, SECRET, Problem, shown
from catalog.secret_shapes import credential_shape
from stacks.keys import DATA_BOUND, KEYS, KEYS_BY_NAME, KIND_RULES, PLAIN_TEXT, PROJECT, Key

_ATOI = re.compile(r"^[+-]?[0-9]+$")  # what Go's strconv.Atoi takes (the CLI's `integer` check)
# A number written as a string, in ASCII: Python's float() also takes other scripts' digits ("١" is 1.0), full-width
# ones and underscores ("1_0"), none of which the user meant as that number.
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


class KeyValues:
    """Every key's value as its row reads it (`v`; the secrets are read by the program itself), and every
    problem found (`problems`), in the order: keys marked secret that cannot be, unknown keys, each key."""

    def __init__(self, raw: Mapping[str, Any], secret_keys: Collection[str] = ()):
        self.secret = frozenset(secret_keys)
        self.problems: list[Problem] = []
        self.missing: set[str] = set()  # required keys that are unset or empty
        self.refused: set[str] = set()  # keys with a problem: no later rule reads their values
        self.masked = {k.name for k in KEYS if k.full in self.secret and not k.secret}
        for key in sorted(self.masked):
            spec = KEYS_BY_NAME[key]
            self.problems.append(Problem(
                spec.full, f"is set as a secret (--secret), which the program cannot keep: "
                f"{spec.plain_text or PLAIN_TEXT}; set it with `pulumi config set {key} <value>` "
                f"(only {' and '.join(k.name for k in KEYS if k.secret)} are kept secret)"))
        self.refused |= self.masked
        masked = {KEYS_BY_NAME[k].full for k in self.masked}
        self.raw = {k: v for k, v in raw.items() if k not in masked}
        self.problems += unknown_key_problems(raw)
        self.problems += provider_credential_problems(raw, self.secret)
        self.v: dict[str, Any] = {}
        for k in KEYS:
            if k.secret:
                self._judge_secret(k)
            else:
                self.v[k.name] = self._read(k)

    def bad(self, key: str, value: object, allowed: str) -> None:
        """Record a problem of `key` (a name of the table) and refuse the key."""
        full = KEYS_BY_NAME[key].full
        self.problems.append(Problem(full, allowed, SECRET if full in self.secret else value))
        self.refused.add(key)

    def passed(self, *keys: str) -> bool:
        """Whether every one of `keys` passed its row (a rule over several keys reads only those)."""
        return not self.refused.intersection(keys)

    def is_default(self, key: str) -> bool:
        """The value equals the declared default, as the CLI would inject it for an absent key."""
        value, default = self._value(key), KEYS_BY_NAME[key].default
        if isinstance(default, list) and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return False
        if isinstance(default, bool) and isinstance(value, str):
            return value == str(default).lower()
        if isinstance(default, int) and not isinstance(default, bool) and isinstance(value, str):
            return value == str(default)
        return value == default

    def is_set(self, key: str) -> bool:
        """The stack sets the key (the CLI injects each declared default a stack leaves out, pulumi/pulumi @
        1b5949891b3c pkg/workspace/config.go, so a value equal to the default reads as not set)."""
        return KEYS_BY_NAME[key].full in self.raw and not self.is_default(key)

    def _value(self, key: str) -> Any:
        spec = KEYS_BY_NAME[key]
        return self.raw[spec.full] if spec.full in self.raw else spec.default

    def _read(self, k: Key) -> Any:
        """One key: the rules of its kind, its type, bounds and choices, then its own rules."""
        given = self._value(k.name)
        for applies, rule in KIND_RULES:
            if applies(k) and (problem := rule(given)):
                self.bad(k.name, given, problem)
                break
        value = self._typed(k)
        if k.name not in self.refused:
            self._judge(k, value)
        return value

    def _judge(self, k: Key, value: Any) -> None:
        for item in value if k.each else ():
            if problem := _first(k.each, item):
                self.bad(k.name, item, problem)
        if problem := _first(k.rules, value):  # a list's rules judge it whatever its items are (duplicates)
            self.bad(k.name, list(value) if k.each else value, problem)

    def _judge_secret(self, k: Key) -> None:
        """A secret key is set as a secret, and its own rules, on its value as given; no problem shows it."""
        value = self.raw.get(k.full)
        if value not in (None, "") and k.full not in self.secret:
            # Plain text in the stack file (tracked by git) or in the CLI's config: the CLI marks every `secure:`
            # value secret (PULUMI_CONFIG_SECRET_KEYS under `pulumi up`, the plan's reading of the file).
            self.problems.append(Problem(k.full, f"is set in plain text (in the stack file, which git tracks): set it "
                                         f"with `pulumi config set --secret {k.name} <value>`, which stores it "
                                         "encrypted"))
            self.refused.add(k.name)
        if value is not None and (problem := _first(k.rules, value)):
            self.problems.append(Problem(k.full, problem, SECRET))
            self.refused.add(k.name)

    def _typed(self, k: Key) -> Any:
        """One key as its row types it: integer, boolean, list, number, one of its choices, or text."""
        if k.type == "integer":
            return self._int(k)
        if k.type == "boolean":
            return self._bool(k.name)
        if k.type == "array":
            return self._list(k.name)
        if k.number:
            return self._float(k)
        text = self._str(k.name)
        if k.choices and text not in k.choices and k.name not in self.missing:
            self.bad(k.name, text, "must be one of " + ", ".join(k.choices))
        return text

    def _str(self, key: str) -> str:
        """The value as text; a required key (no default) that is unset or empty is reported once."""
        value = self._value(key)
        text = "" if value is None else str(value).strip()
        if not text and KEYS_BY_NAME[key].default is None and key not in self.masked:
            self.problems.append(Problem(KEYS_BY_NAME[key].full, f"is not set: {KEYS_BY_NAME[key].description}"))
            self.missing.add(key)
            self.refused.add(key)
        return text

    def _int(self, k: Key) -> int:
        """An integer as the Pulumi CLI accepts one for an `integer` key (Go strconv.Atoi: optional
        sign, decimal digits, int64), within the row's bounds: every count has an upper bound."""
        value = self._value(k.name)
        text = str(value)
        minimum, maximum = k.minimum, k.maximum
        if not _ATOI.fullmatch(text) or not -(2**63) <= int(text) < 2**63:
            self.bad(k.name, value, f"must be an integer from {minimum if minimum is not None else 0} "
                     f"to {DATA_BOUND.get(k.name, maximum)}")
            return minimum or 0
        number = int(text)
        if minimum is not None and number < minimum:
            self.bad(k.name, number, f"must be an integer >= {minimum}")
        elif number > maximum:
            self.bad(k.name, number, f"must be at most {maximum} ({k.why})")
            return minimum or 0
        return number

    def _float(self, k: Key) -> float:
        """A number written as a string, within the row's bounds ((minimum, maximum] when open_minimum)."""
        value = self._value(k.name)
        low, high = k.minimum, k.maximum
        text = str(value).strip()
        if not _DECIMAL.fullmatch(text):
            # float() takes these too: nan and inf (which no comparison below would catch), other scripts' digits.
            non_finite = text.lower().lstrip("+-") in ("nan", "inf", "infinity")
            self.bad(k.name, value, f"must be a finite number in [{low}, {high}]" if non_finite else
                     "must be a number in ASCII digits, such as 1e-6 or 0.5")
            return low
        number = float(text)
        if number < low or number > high or (k.open_minimum and number == low):
            bracket = "(" if k.open_minimum else "["
            self.bad(k.name, number, f"must be a number in {bracket}{low}, {high}]")
        return number

    def _bool(self, key: str) -> bool:
        value = self._value(key)
        if isinstance(value, bool):
            return value
        # The CLI accepts exactly these for a `boolean` key (pkg/workspace/config.go); yes/on/True
        # typed in quotes reach it as strings and fail `pulumi preview`, so they fail here too.
        if value not in ("true", "false"):
            self.bad(key, value, "must be true or false (YAML yes/no/on/off are strings to Pulumi)")
            return False
        return value == "true"

    def _list(self, key: str) -> tuple[str, ...]:
        value = self._value(key)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                self.bad(key, value, f"must be a list of strings: a YAML list in the stack file, or "
                         f"`pulumi config set --path '{key}[0]' <value>` per item")
                return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.bad(key, value, f"must be a list of strings (a YAML list; `pulumi config set --path '{key}[0]' ...`)")
            return ()
        return tuple(value)


def _first(rules: tuple, value: object) -> str | None:
    """What the first broken rule allows (each rule assumes the ones before it passed)."""
    return next((problem for rule in rules if (problem := rule(value))), None)


# --- keys that no row declares -------------------------------------------------------------------

# Namespaces whose keys something in `pulumi up` reads: ours, the Google provider's (it reads gcp:* keys
# beyond the three we declare, e.g. gcp:impersonateServiceAccount) and the engine's (pulumi:*). Every
# Kubernetes provider here is explicit (built from the cluster's outputs), so kubernetes:* keys, like any
# other namespace, would be silently ignored: `verl:gpuNodes: 4` once planned 2 nodes without a word.
READ_NAMESPACES = (PROJECT, "gcp", "pulumi")
# Ours first: a typo is most likely of a key the stack files set.
GCP_NAMES = [k.name.partition(":")[2] for k in KEYS if k.name.startswith("gcp:")] + sorted(GCP_PROVIDER_KEYS)


def _invisible(key: str) -> bool:
    """Whether a key carries characters a reader cannot see: spaces, zero-width or other format characters."""
    return any(c.isspace() or unicodedata.category(c) in ("Cf", "Cc", "Zs", "Zl", "Zp") for c in key)


def _visible(key: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKC", key)
                   if not (c.isspace() or unicodedata.category(c) in ("Cf", "Cc", "Zs", "Zl", "Zp")))


# The Google provider's keys that hold a credential (pulumi-gcp's config: `credentials` a service-account key's JSON,
# `accessToken` an OAuth token): plain text in a stack file puts it in git.
KEYS_FULL = frozenset(k.full for k in KEYS)
PROVIDER_CREDENTIAL_KEYS = ("gcp:credentials", "gcp:accessToken")


def provider_credential_problems(raw: Mapping[str, Any], secret_keys: Collection[str]) -> list[Problem]:
    """Keys outside the key table (the provider's `gcp:*`, `pulumi:*`) holding a credential in plain text: the
    provider's credential keys set without --secret, and any such key whose value looks like a credential."""
    problems: list[Problem] = []
    for key in sorted(raw):
        if key in KEYS_FULL or key in secret_keys or key.partition(":")[0] not in ("gcp", "pulumi"):
            continue
        value = raw[key]
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if key in PROVIDER_CREDENTIAL_KEYS or credential_shape(text):
            problems.append(Problem(key, f"must not hold a credential in plain text (the stack file is tracked by "
                                         f"git): set it with `pulumi config set --secret {key} <value>`, or use "
                                         "Application Default Credentials", value=SECRET))
    return problems


def unknown_key_problems(raw: Mapping[str, Any]) -> list[Problem]:
    """Keys in our namespace (or one a typo away from it) that the program does not read, and keys in a
    namespace nothing in `pulumi up` reads."""
    problems: list[Problem] = []
    ours = [k.name for k in KEYS if ":" not in k.name]

    def closest(name: str, names: list[str]) -> list[str]:
        # A "did you mean" only where a line can be printed: difflib over every key of a file with 20,000
        # stray ones took seconds for lines nobody sees (ConfigError prints the first MAX_LINES).
        return difflib.get_close_matches(name, names, n=1, cutoff=0.6) \
            if len(name) <= MAX_SHOWN and len(problems) < MAX_LINES else []

    for key in sorted(raw):
        namespace, _, name = key.partition(":")
        if key not in KEYS_FULL and _invisible(key):
            # Show the exact characters: a "did you mean" with an identical-looking name helps no one.
            look_alike = _visible(key)
            hint = (f"it looks like {look_alike} but carries invisible or space characters; retype it"
                    if look_alike in KEYS_FULL else "keys have no spaces or invisible characters")
            problems.append(Problem(shown(key), f"(as typed, escaped) is not a known key: {hint}"))
        elif namespace == PROJECT and name not in KEYS_BY_NAME:
            close = closest(name, ours)
            hint = f"did you mean {PROJECT}:{close[0]}?" if close else "see Pulumi.yaml for the declared keys"
            problems.append(Problem(key, f"is not a known key: {hint}"))
        elif namespace == "gcp" and key not in KEYS_FULL and name not in provider_keys():
            # The Google provider reads its own keys (catalog.gcp_provider); a typo of one (gcp:regoin) would
            # otherwise surface only as the key it meant being unset.
            close = closest(name, GCP_NAMES)
            hint = f"did you mean gcp:{close[0]}?" if close else "the keys it reads are in catalog/gcp_provider.py"
            problems.append(Problem(key, f"is not a key the Google provider reads: {hint}"))
        elif namespace != PROJECT and len(namespace) <= MAX_SHOWN and \
                difflib.SequenceMatcher(None, namespace.lower(), PROJECT).ratio() >= 0.75:
            problems.append(Problem(key, f"namespace {namespace!r} is not this project's; did you mean "
                                         f"{PROJECT}:{name}?"))
        elif namespace not in READ_NAMESPACES:
            hint = f"; did you mean {PROJECT}:{name}?" if name in KEYS_BY_NAME else ""
            problems.append(Problem(key, f"nothing in this program reads namespace {namespace!r} (it reads "
                                         f"{', '.join(n + ':' for n in READ_NAMESPACES)} keys), so the value would be "
                                         f"silently ignored{hint}"))
    return problems
