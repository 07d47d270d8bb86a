"""A stack file as the Pulumi CLI hands it to the program, for the offline plan (no CLI needed).

    reading = read(Path("Pulumi.dev.yaml"), "dev")
    reading.values       # {"verl-gke:gpuNodes": "1", ...}: the strings `pulumi up` hands the program
    reading.secret_keys  # the keys stored as `secure:` (their values cannot be decrypted offline)

Its agreement with the real CLI (v3.276.0) is the test: tests/test_cli_loading.py runs every shipped stack
and every case below through `pulumi preview` and compares what the program was handed with this reading.
What it does, in the CLI's order:

- YAML is read as yaml.v3 reads it (YAML 1.2 scalars, where PyYAML reads 1.1): `yes`/`no`/`on`/`off` are
  strings, `true`/`True`/`TRUE` booleans; `0o17`, `0x1F`, `0b1`, `0777` and `1_000` integers; `1e-6`, `4.0`
  floats. A float reaches the program as Go's JSON writes it (`1e-6` -> "0.000001", `4.0` -> "4"), null as
  "", a list or map as compact JSON (sorted keys, `<>&` escaped as Go does).
- Keys: `name` is `verl-gke:name`, `ns:config:name` is `ns:name`, any other key needs exactly one colon.
- Every key Pulumi.yaml declares (stacks.keys: Key.declared) that the stack leaves out gets its default; each
  declared key's value must have the declared type (pkg/workspace/config.go validateStackConfigValue).
- A `{secure: ...}` value (or a list/map holding one) is secret; offline it is SECURE_PLACEHOLDER.

Refused where the CLI takes the file (each would reach the gate as nonsense, or silently drop config): a
timestamp-like plain scalar (the CLI hands "2024-01-02 00:00:00 +0000 UTC": quote it), one key spelt twice
(`gpuNodes` and `verl-gke:gpuNodes`: the CLI keeps one at random), an unknown top-level field (`confg:`),
ESC `environment:` (not resolvable offline), more than MAX_VALUES values once aliases are expanded, and more
than MAX_DEPTH levels of nesting. Taken where the CLI refuses it: a document under MAX_VALUES values made mostly
of aliases (yaml.v3's "excessive aliasing" ratio), which reaches the gate; no declared key takes one.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from stacks.keys import KEYS, PROJECT

SECURE_PLACEHOLDER = "secure-value-not-decrypted-offline"
STACK_FIELDS = ("config", "environment", "secretsprovider", "encryptedkey", "encryptionsalt")  # ProjectStack
MAX_VALUES = 100_000
MAX_DEPTH = 100
MAX_BYTES = 16 * 1024 * 1024  # far above MAX_VALUES short values; a bound on what the plan reads into memory


class StackFileError(Exception):
    """A stack file the CLI (or, where the module docstring says so, this reader) refuses."""


@dataclass(frozen=True)
class Reading:
    values: dict[str, str]
    secret_keys: list[str]


# --- YAML, as yaml.v3 resolves plain scalars (gopkg.in/yaml.v3 v3.0.1 resolve.go) -----------------------

_NAMED = {**dict.fromkeys(("true", "True", "TRUE"), True), **dict.fromkeys(("false", "False", "FALSE"), False),
          **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
          **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
          **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf), **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan)}
_INT = re.compile(r"([-+]?)(?:0[xX]([0-9a-fA-F]+)|0[oO]([0-7]+)|0[bB]([01]+)|(0[0-7]*)|([1-9][0-9]*))")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?")


class _Timestamp(str):
    """A plain scalar yaml.v3 reads as a time (the CLI then hands the program Go's text of it)."""


def resolve_plain(text: str) -> Any:
    """What a plain (unquoted) scalar is to yaml.v3."""
    if text in _NAMED:
        return _NAMED[text]
    if text[0] == ".":
        return float(text) if _FLOAT.fullmatch(text) else text
    if text[0] not in "+-0123456789":
        return text
    if _TIMESTAMP.fullmatch(text):
        return _Timestamp(text)
    plain = text.replace("_", "")
    if m := _INT.fullmatch(plain):
        sign, hexa, octal, binary, legacy, decimal = m.groups()
        digits, base = next((d, b) for d, b in ((hexa, 16), (octal, 8), (binary, 2), (legacy, 8), (decimal, 10))
                            if d is not None)
        number = int(sign + digits, base)
        if -(2**63) <= number < 2**64:  # int64, else uint64; beyond both, a float as below
            return number
    return float(plain) if _FLOAT.fullmatch(plain) else text


def resolves_as_string(text: str) -> bool:
    """Whether yaml.v3 reads `text`, written as a plain scalar, back as that string."""
    value = resolve_plain(text) if text else None
    return value == text and not isinstance(value, _Timestamp)


class _Loader(yaml.SafeLoader):
    """PyYAML's syntax, yaml.v3's plain scalars; a key written twice in one mapping is refused (as yaml.v3 does)."""

    def resolve(self, kind, value, implicit):
        if kind is yaml.ScalarNode and implicit[0]:
            return "tag:yaml.org,2002:merge" if value == "<<" else "!plain"
        return super().resolve(kind, value, implicit)

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                continue  # an unhashable key: refused as a key later, by its text
            if key in seen:
                raise yaml.MarkedYAMLError(problem=f'mapping key "{key}" already defined at line {seen[key] + 1}',
                                           problem_mark=key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


_Loader.yaml_implicit_resolvers = {}
_Loader.add_constructor("!plain", lambda loader, node: resolve_plain(loader.construct_scalar(node)))


def load_yaml(text: str, where: str) -> Any:
    """The first document, as yaml.v3 decodes it (StackFileError with file:line:column where YAML fails)."""
    try:
        return next(iter(yaml.load_all(text.removeprefix("\ufeff"), Loader=_Loader)), None)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        at = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise StackFileError(f"{where}{at}: invalid YAML: {err.problem or err.context}") from None
    except yaml.reader.ReaderError as err:  # a character YAML does not allow
        before = text.removeprefix("\ufeff")[:err.position]
        at = f"{before.count(chr(10)) + 1}:{err.position - before.rfind(chr(10))}"
        raise StackFileError(f"{where}:{at}: invalid YAML: control character U+{err.character:04X} is not "
                             "allowed") from None
    except (ValueError, TypeError) as err:  # an explicit tag PyYAML's constructor cannot build (!!int 0o17)
        raise StackFileError(f"{where}: invalid YAML: {err}") from None
    except RecursionError:
        raise StackFileError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None


# --- values as config.Value holds them (sdk/go/common/resource/config/object.go MarshalString) ---------------


def _extent(value: Any, seen: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(values, levels) of `value` once aliases are expanded: an alias is the same Python object, counted again
    (not walked again) wherever it appears."""
    if not isinstance(value, list | dict):
        return 1, 0
    if id(value) not in seen:
        seen[id(value)] = (1, MAX_DEPTH + 1)  # a cycle (`&a [*a]`) is too deep
        items = [_extent(v, seen) for v in (value.values() if isinstance(value, dict) else value)]
        seen[id(value)] = (1 + sum(n for n, _ in items), 1 + max((d for _, d in items), default=0))
    return seen[id(value)]


def _go_float(f: float) -> str:
    """encoding/json's float64: 'f' format between 1e-6 and 1e21, else the exponent without zero padding."""
    if not math.isfinite(f):
        raise StackFileError(f"json: unsupported value: {f}")
    if f == 0 or 1e-6 <= abs(f) < 1e21:
        text = format(Decimal(repr(f)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, exponent = repr(f).split("e")
    return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0')}"


def _scalar_text(v: Any) -> str:
    """A scalar as the program gets it: its text, JSON text for a number or boolean, "" for null."""
    if v is None:
        return ""
    if isinstance(v, _Timestamp):
        raise StackFileError(f"{str(v)!r} reads as a timestamp, which the Pulumi CLI hands the program as Go's "
                             "time text: quote it")
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return _go_float(v)
    if not isinstance(v, str | int):  # an explicit tag (!!set, !!binary, !!timestamp): not a config value here
        raise StackFileError(f"a YAML {type(v).__name__} is not read offline: write the value as a string")
    return str(v)


def go_json(v: Any) -> str:
    """encoding/json's Marshal: compact, map keys sorted, `<`, `>`, `&`, U+2028 and U+2029 escaped."""
    if isinstance(v, dict):
        items = sorted(((_scalar_text(k), x) for k, x in v.items()), key=lambda kv: kv[0])
        return "{" + ",".join(f"{go_json(k)}:{go_json(x)}" for k, x in items) + "}"
    if isinstance(v, list):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    if isinstance(v, str) and not isinstance(v, _Timestamp):
        text = json.dumps(v, ensure_ascii=False)
        for ch, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                            ("\u2029", "\\u2029")):
            text = text.replace(ch, escaped)
        return text
    return "null" if v is None else _scalar_text(v)


def _is_secure(v: Any) -> bool:
    return isinstance(v, dict) and len(v) == 1 and isinstance(v.get("secure"), str)


def _holds_secure(v: Any) -> bool:
    items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
    return _is_secure(v) or any(_holds_secure(x) for x in items)


def config_key(key: Any) -> str:
    """The full key of a stack file's key (stackConfigNamespacedWithProject, then config.ParseKey)."""
    text = _scalar_text(key) if not isinstance(key, str) else key
    if isinstance(key, str) and ":" not in key:
        return f"{PROJECT}:{key}"
    parts = text.split(":")
    if len(parts) == 2:
        return text
    if len(parts) == 3 and parts[1] == "config":
        return f"{parts[0]}:{parts[2]}"
    raise StackFileError(f"could not parse {text} as a configuration key (configuration keys should be of the "
                         "form `<namespace>:<name>`)")


# --- the stack file, merged with Pulumi.yaml's declarations (pkg/workspace/config.go mergeConfig) ------------

_TYPE_HINTS = {
    "array": "a YAML list in the stack file, or `pulumi config set --path '{name}[0]' <value>` per item (a plain "
             "`pulumi config set {name} ...` stores a string)",
    "integer": "an integer such as 2 (no decimals, no underscores)",
    "boolean": "true or false (YAML yes/no/on/off are strings to Pulumi)",
    "string": "a single string, not a list or a mapping",
}


def _type_ok(type_: str, v: Any) -> bool:
    """workspace.ValidateConfigValue on the value as the CLI checks it: a list or map as itself, a scalar as the
    text the program gets."""
    if type_ == "array":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if isinstance(v, list | dict):
        return False
    text = _scalar_text(v)
    if type_ == "integer":
        return bool(re.fullmatch(r"[+-]?[0-9]+", text)) and -(2**63) <= int(text) < 2**63  # strconv.Atoi
    if type_ == "boolean":
        return text in ("true", "false")
    return True


def from_config(config: Mapping[Any, Any], stack: str, where: str) -> Reading:
    """The stack file's `config:` mapping (as load_yaml reads it) -> what the program is handed."""
    data: dict[str, Any] = {}
    spelt: dict[str, Any] = {}
    for key, value in config.items():
        try:
            full = config_key(key)
        except StackFileError as err:
            raise StackFileError(f"{where}: {err}") from None
        if full in data:
            raise StackFileError(f"{where}: config keys {spelt[full]!r} and {key!r} both mean {full!r}; the Pulumi "
                                 "CLI would keep one of them at random")
        data[full], spelt[full] = value, key
    count, levels = _extent(data, {})
    if levels > MAX_DEPTH + 1:
        raise StackFileError(f"{where}: nested deeper than {MAX_DEPTH} levels (aliases expanded)")
    if count > MAX_VALUES:
        raise StackFileError(f"{where}: excessive aliasing: more than {MAX_VALUES} values once aliases are expanded")
    secret = sorted(k for k, v in data.items() if _holds_secure(v))
    values: dict[str, str] = {}
    for k, v in data.items():
        try:
            values[k] = SECURE_PLACEHOLDER if k in secret else go_json(v) if isinstance(v, list | dict) \
                else _scalar_text(v)
        except StackFileError as err:
            raise StackFileError(f"{where}: {k}: {err}") from None
    problems = []
    for k in (k for k in KEYS if k.declared):
        if k.full not in data:
            values[k.full] = go_json(k.default) if isinstance(k.default, list) else _scalar_text(k.default)
        elif k.full not in secret and not _type_ok(k.type, data[k.full]):
            hint = _TYPE_HINTS[k.type].format(name=k.name)
            problems.append(f"{k.full}: Stack '{stack}' with configuration key '{k.name}' must be of type "
                            f"'{'array<string>' if k.type == 'array' else k.type}' (the Pulumi CLI refuses it; "
                            f"use {hint})")
    if problems:
        raise StackFileError(f"{where}: the Pulumi CLI would not load this config:\n  - " + "\n  - ".join(problems))
    return Reading(values, secret)


def from_text(text: str, stack: str, where: str) -> Reading:
    doc = load_yaml(text, where)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise StackFileError(f"{where}: a stack file must be a mapping at the top level, not {type(doc).__name__}")
    for field in doc:
        if field not in STACK_FIELDS:
            close = difflib.get_close_matches(str(field), STACK_FIELDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise StackFileError(f"{where}: unknown top-level field {field!r} (a stack file has "
                                 f"{', '.join(STACK_FIELDS)}){hint}")
    if doc.get("environment") is not None:
        raise StackFileError(f"{where}: 'environment' (Pulumi ESC) is set: the CLI merges its values into the "
                             "config, which cannot be done offline")
    config = {} if doc.get("config") is None else doc["config"]
    if not isinstance(config, dict):
        raise StackFileError(f"{where}: 'config' must be a mapping of keys to values, not {type(config).__name__}")
    return from_config(config, stack, where)


def kind_problem(info: os.stat_result) -> str | None:
    """Why a file of this kind and size cannot be a stack file (a folder, a FIFO, a device: one the read would
    block on or never finish), or None."""
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        return "is a folder, not a stack file: name the Pulumi.<stack>.yaml file inside it"
    if not stat.S_ISREG(mode):
        kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
        kind = next((name for test, name in kinds if test(mode)), "a special file")
        return f"is {kind}, not a regular file: a stack file is a YAML file"
    if info.st_size > MAX_BYTES:
        return f"is {info.st_size:,} bytes; a stack file is at most {MAX_BYTES:,}"
    return None


def read_bytes(path: Path) -> bytes:
    """The stack file's bytes: opened without blocking (a FIFO) and checked before it is read, the read bounded
    (StackFileError); FileNotFoundError as open raises it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if problem := kind_problem(os.fstat(fd)):
            raise StackFileError(f"{path}: {problem}")
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:  # it grew while read
        raise StackFileError(f"{path}: is more than {MAX_BYTES:,} bytes; a stack file is at most {MAX_BYTES:,}")
    return data


def read(path: Path, stack: str) -> Reading:
    """Pulumi.<stack>.yaml (a missing file is an empty config, as for the CLI)."""
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        data = b""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise StackFileError(f"{path}: not valid UTF-8 (byte offset {err.start})") from None
    return from_text(text, stack, str(path))


def validate_stack_name(name: str) -> None:
    """tokens.ParseStackName's rule for a stack's own name (ValueError)."""
    if not name:
        raise ValueError("a stack name may not be empty")
    if len(name.encode()) > 100:
        raise ValueError("a stack name cannot exceed 100 characters")
    if bad := re.search(r"[^A-Za-z0-9_.-]", name):
        raise ValueError("a stack name may only contain alphanumeric, hyphens, underscores, or periods: "
                         f"invalid character {bad.group()!r} at position {bad.start()}")
