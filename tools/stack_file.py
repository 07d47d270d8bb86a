"""Offline reader for Pulumi stack files (``Pulumi.<stack>.yaml``).

Goal: produce the same ``{"<ns>:<key>": "<string>"}`` map that the Pulumi CLI
hands to the program (PULUMI_CONFIG), without running the CLI.

Behaviour modelled on pulumi/pulumi @ 1b5949891b3cefcb9974752b24a5ecef0acc86c8
and gopkg.in/yaml.v3 v3.0.1 (go-yaml/yaml @ f6f7691b1fdeb513f56608cd2c32c51f8194bf51).
The upstream file each rule follows is named where the rule is implemented (and, for the
CLI's load order, in tools/cli_loader.py).  This is an independent re-implementation; no
upstream code is copied.

Summary of the rules implemented here:

* YAML is parsed with PyYAML's scanner/parser/composer only; scalar
  resolution is our own and follows yaml.v3 (YAML 1.2-ish core schema with
  yaml.v3's extras: ``0777`` octal, ``_`` digit separators, ``0b``/``0o``/``0x``).
  ``yes/no/on/off/y/n`` stay strings; ``true/True/TRUE`` are booleans;
  ``~``, ``null``, ``Null``, ``NULL`` and empty are null.
* A config value becomes a string as follows: string -> itself; null -> "";
  bool -> "true"/"false"; int -> decimal; float -> Go ``encoding/json``
  formatting (``4.0`` -> ``4``, ``1e3`` -> ``1000``, ``1e21`` -> ``1e+21``);
  NaN/Inf -> error; mapping/sequence -> compact JSON with sorted keys and Go's
  HTML escaping.  ``{secure: <string>}`` (exactly one key) is a secret.
* Keys without ``:`` get ``<project>:`` prepended; ``ns:config:name`` is
  shortened to ``ns:name``; any other key with two or more colons is an error.
"""

from __future__ import annotations

import base64
import binascii
import copy
import difflib
import functools
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

__all__ = [
    "ConfigValue",
    "Secret",
    "config_value",
    "parse_stack_values",
    "StackFileError",
    "read_stack_file",
    "parse_stack_yaml",
    "config_value_to_string",
    "validate_stack_name",
    "validate_project_name",
]


# workspace.ProjectStack's fields (sdk/go/common/workspace/project.go). yaml.v3 ignores any other
# top-level field, so a typo such as `confg:` would silently drop every value: we refuse it instead.
STACK_FILE_FIELDS = ("config", "environment", "secretsprovider", "encryptedkey", "encryptionsalt")


class StackFileError(Exception):
    """A stack file could not be turned into config the way the CLI would."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Secret:
    """A config value the CLI would decrypt before the program sees it.

    ``raw`` is what the stack file holds: the ciphertext for a plain
    ``{secure: ...}`` value, or, for an object/list containing secure values,
    the JSON text with ``{"secure": "<ciphertext>"}`` placeholders (``is_object``).
    The program would see the decrypted text instead; an offline plan cannot.
    """

    raw: str
    is_object: bool = False

    def __str__(self) -> str:  # never leak ciphertext into logs by accident
        return "[secret]"


# ---------------------------------------------------------------------------
# YAML loading: PyYAML syntax layer + yaml.v3-style scalar resolution
# ---------------------------------------------------------------------------

_PLAIN = "!__plain__"  # sentinel tag: untagged plain scalar, resolve later
_Y = "tag:yaml.org,2002:"


class _Resolver(BaseResolver):
    """Leave every implicit decision to us (no YAML 1.1 implicit resolvers)."""

    def resolve(self, kind, value, implicit):  # noqa: D401 - PyYAML hook
        if kind is ScalarNode:
            if implicit[0]:
                return _PLAIN
            return _Y + "str"
        if kind is SequenceNode:
            return _Y + "seq"
        return _Y + "map"


# YAML resource limits.
# Aliases: yaml.v3 refuses a document whose decoding is mostly alias expansion (decode.go
# allowedAliasRatio / unmarshal, go-yaml/yaml @ f6f7691b1fdeb513f56608cd2c32c51f8194bf51): once more
# than 100 of more than 1,000 decoded nodes come from aliases, the share allowed is 99 % up to 400,000
# nodes, falling linearly to 10 % at 4,000,000. _Builder counts nodes the same way.
_ALIAS_RATIO_LOW, _ALIAS_RATIO_HIGH = 400_000, 4_000_000
# Nesting: yaml.v3 accepts 10,000 levels (scannerc.go max_flow_level / max_indents). DIVERGENCE: we
# refuse more than MAX_DEPTH levels (aliases expanded), because PyYAML's composer and our builder recurse
# and Python's stack ends near 1,000 frames; no Pulumi stack or project file comes near 100 levels.
MAX_DEPTH = 100


def _allowed_alias_ratio(decodes: int) -> float:
    if decodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


class _Alias:
    """An alias (`*name`) in the composed graph: PyYAML hands back the anchored node itself, but
    yaml.v3 counts alias expansions, so the builder must see where each one is."""

    def __init__(self, target: Node, mark: Any) -> None:
        self.target = target
        self.start_mark = mark
        self.value = target.value if isinstance(target, ScalarNode) else None


class _TooDeepError(Exception):
    def __init__(self, mark: Any) -> None:
        self.mark = mark


class _Loader(Reader, Scanner, Parser, Composer, _Resolver):
    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _Resolver.__init__(self)
        self._depth = 0

    def compose_node(self, parent, index):  # noqa: D401 - PyYAML hook
        event = self.peek_event()
        self._depth += 1
        if self._depth > MAX_DEPTH:  # stop before PyYAML's recursion gets anywhere near Python's limit
            raise _TooDeepError(event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        return _Alias(node, event.start_mark) if isinstance(event, AliasEvent) else node


def _unalias(node: Any) -> Any:
    while isinstance(node, _Alias):
        node = node.target
    return node


_FLOAT_RE = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_TIMESTAMP_FORMATS = (
    re.compile(r"^\d{4}-\d{1,2}-\d{1,2}[Tt]\d{1,2}:\d{1,2}:\d{1,2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"),
    re.compile(r"^\d{4}-\d{1,2}-\d{1,2} \d{1,2}:\d{1,2}:\d{1,2}(\.\d+)?$"),
    re.compile(r"^\d{4}-\d{1,2}-\d{1,2}$"),
)
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_MAP_CONSTANTS: dict[str, Any] = {
    "true": True, "True": True, "TRUE": True,
    "false": False, "False": False, "FALSE": False,
    "": None, "~": None, "null": None, "Null": None, "NULL": None,
    ".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan,
    ".inf": math.inf, ".Inf": math.inf, ".INF": math.inf,
    "+.inf": math.inf, "+.Inf": math.inf, "+.INF": math.inf,
    "-.inf": -math.inf, "-.Inf": -math.inf, "-.INF": -math.inf,
}


class _Timestamp(str):
    """A plain scalar yaml.v3 resolves as !!timestamp: decoded into `any` it is a Go time.Time, which
    Pulumi's config object turns into time.Time.String() (resource/config/object.go unmarshalObject)."""

    def go_string(self) -> str:
        """time.Time.String() of what yaml.v3's parseTimestamp returns; the machine's zone taken as UTC."""
        m = re.match(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[Tt ](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d+))?"
                     r"(Z|[+-]\d{2}:\d{2})?)?$", str(self))
        if not m:
            return str(self)
        y, mo, d, h, mi, sec, frac, zone = m.groups()
        text = f"{int(y):04d}-{int(mo):02d}-{int(d):02d} {int(h or 0):02d}:{int(mi or 0):02d}:{int(sec or 0):02d}"
        frac = (frac or "")[:9].rstrip("0")
        if frac:
            text += "." + frac
        if zone in (None, "Z", "+00:00", "-00:00"):
            return text + " +0000 UTC"
        offset = zone.replace(":", "")
        return f"{text} {offset} {offset}"  # a fixed zone Go names by its offset


def _go_parse_int(s: str, signed: bool) -> int | None:
    """Go strconv.ParseInt/ParseUint with base 0 (underscores already removed)."""
    neg = False
    body = s
    if body[:1] in "+-" and body:
        if not signed:
            return None
        neg = body[0] == "-"
        body = body[1:]
    if not body:
        return None
    low = body[:2].lower()
    if low == "0x":
        base, digits = 16, body[2:]
    elif low == "0b":
        base, digits = 2, body[2:]
    elif low == "0o":
        base, digits = 8, body[2:]
    elif body[0] == "0" and len(body) > 1:
        base, digits = 8, body[1:]
    else:
        base, digits = 10, body
    allowed = "0123456789abcdef"[:base]
    if not digits or any(c.lower() not in allowed for c in digits):
        return None
    value = int(digits, base)
    if neg:
        value = -value
    if signed:
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    return value if value <= _UINT64_MAX else None


def _go_parse_float(s: str) -> float | None:
    """Go strconv.ParseFloat(s, 64) for the decimal forms yaml.v3 feeds it."""
    if not _FLOAT_RE.match(s):
        return None
    f = float(s)
    if math.isinf(f):  # Go reports ErrRange; yaml.v3 then keeps the string
        return None
    return f


def _resolve_plain(text: str) -> Any:
    """Mirror of yaml.v3 resolve("", text) for an untagged plain scalar."""
    hint = text[:1]
    if text in _MAP_CONSTANTS:
        return _MAP_CONSTANTS[text]
    if hint == ".":
        f = _go_parse_float(text)
        return text if f is None else f
    if hint and hint in "+-0123456789":
        if hint.isdigit() and any(p.match(text) for p in _TIMESTAMP_FORMATS):
            return _Timestamp(text)
        plain = text.replace("_", "")
        i = _go_parse_int(plain, signed=True)
        if i is None:
            i = _go_parse_int(plain, signed=False)
        if i is not None:
            return i
        f = _go_parse_float(plain)
        if f is not None:
            return f
    return text


def resolves_as_string(text: str) -> bool:
    """True when yaml.v3 reads `text`, written as a plain scalar, back as the same string."""
    value = _resolve_plain(text)
    return isinstance(value, str) and not isinstance(value, _Timestamp) and value == text


class _Builder:
    """Turns a composed PyYAML node graph into Python values, yaml.v3 style."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._active: set[int] = set()
        self.decodes = 1  # yaml.v3 counts the document node too
        self.alias_count = 0
        self._alias_depth = 0
        self._alias_site: Any = None  # the outermost alias being expanded: where a bomb is reported
        self._depth = 0

    def err(self, node: Any, msg: str) -> StackFileError:
        m = node.start_mark
        return StackFileError(f"{self.where}:{m.line + 1}:{m.column + 1}: {msg}")

    def build(self, node: Any) -> Any:
        # yaml.v3 decoder.unmarshal: every node decoded counts; those inside an alias count as aliasing.
        self.decodes += 1
        if self._alias_depth:
            self.alias_count += 1
        if (self.alias_count > 100 and self.decodes > 1000
                and self.alias_count / self.decodes > _allowed_alias_ratio(self.decodes)):
            raise self.err(self._alias_site or node, "document contains excessive aliasing (yaml.v3 "
                           "refuses it: the aliases expand to far more than the file holds)")
        if isinstance(node, _Alias):
            if not self._alias_depth:
                self._alias_site = node
            self._alias_depth += 1
            try:
                return self.build(node.target)
            finally:
                self._alias_depth -= 1
        if id(node) in self._active:
            raise self.err(node, "anchor value contains itself")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise self.err(node, f"nested deeper than {MAX_DEPTH} levels (aliases expanded); this reader "
                                 "refuses that (yaml.v3 allows 10,000): flatten the value")
        self._active.add(id(node))
        try:
            if isinstance(node, ScalarNode):
                return self._scalar(node)
            if isinstance(node, SequenceNode):
                return [self.build(n) for n in node.value]
            return self._mapping(node)
        finally:
            self._active.discard(id(node))
            self._depth -= 1

    def _scalar(self, node: ScalarNode) -> Any:
        tag = node.tag
        if tag == _PLAIN:
            return _resolve_plain(node.value)
        if tag == _Y + "str" or tag == "!":
            return node.value
        short = tag[len(_Y):] if tag.startswith(_Y) else None
        if short in ("int", "float", "bool", "null", "timestamp"):
            value = _resolve_plain(node.value)
            kind = {bool: "bool", int: "int", float: "float", type(None): "null",
                    _Timestamp: "timestamp", str: "str"}[type(value)]
            if short == "float" and kind == "int":
                return float(value)
            if kind != short:
                raise self.err(node, f"cannot decode !!{kind} `{node.value}` as a !!{short}")
            return value
        if short == "binary":
            try:
                data = base64.b64decode("".join(node.value.split()), validate=True)
            except binascii.Error:
                raise self.err(node, "!!binary value contains invalid base64 data") from None
            return data.decode("utf-8", errors="replace")
        # Unknown tags: yaml.v3 keeps the scalar's text.
        return node.value

    def _is_merge_key(self, key: Node) -> bool:
        return isinstance(key, ScalarNode) and key.value == "<<" and key.tag in (
            _PLAIN, _Y + "str", _Y + "merge", "!")

    def _mapping(self, node: MappingNode) -> dict:
        seen: dict[tuple[str, str], Node] = {}
        for k, _ in node.value:
            ident = (type(k).__name__, k.value if isinstance(k, ScalarNode) else str(id(k)))
            if ident in seen:
                first = seen[ident]
                raise self.err(k, f"mapping key {k.value!r} already defined at line "
                                  f"{first.start_mark.line + 1}")
            seen[ident] = k
        out: dict = {}
        merges: list[Node] = []
        for k, v in node.value:
            if self._is_merge_key(k):
                merges.append(v)
                continue
            key = self.build(k)
            if isinstance(key, (dict, list)):
                raise self.err(k, "invalid map key (a mapping or sequence)")
            out[key] = self.build(v)
        for m in merges:
            sources = m.value if isinstance(m, SequenceNode) else [m]
            for src in sources:
                if not isinstance(_unalias(src), MappingNode):
                    raise self.err(src, "map merge requires map or sequence of maps as the value")
                for mk, mv in self.build(src).items():
                    out.setdefault(mk, mv)
        return out


def _load_first_document(text: str, where: str) -> Any:
    """The first YAML document of `text` as yaml.v3 decodes it into `any` (StackFileError where it refuses).

    The same text parses to the same document: the last few parses are kept and each caller gets a copy
    of its own (the test suite reads Pulumi.yaml and the shipped stack files hundreds of times, ~30 ms
    each; a refused text raises every time)."""
    return copy.deepcopy(_parse_first_document(text, where))


@functools.lru_cache(maxsize=32)
def _parse_first_document(text: str, where: str) -> Any:
    try:
        loader = _Loader(text)  # PyYAML's reader checks every character here, before any parsing
    except yaml.reader.ReaderError as e:
        # yaml.v3 refuses the same characters ("yaml: control characters are not allowed").
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        raise StackFileError(f"{where}:{line}:{column}: invalid YAML: control character U+{e.character:04X} "
                             "is not allowed (a stray byte, or a binary file?)") from None
    try:
        if not loader.check_node():  # empty stream
            return None
        node = loader.get_node()  # first document only, like yaml.Unmarshal
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        parts = [p for p in (e.context, e.problem) if p]
        msg = "; ".join(parts) or "invalid YAML"
        if mark is None:
            raise StackFileError(f"{where}: invalid YAML: {msg}") from None
        raise StackFileError(
            f"{where}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {msg}") from None
    except yaml.YAMLError as e:
        raise StackFileError(f"{where}: invalid YAML: {e}") from None
    except _TooDeepError as e:
        raise StackFileError(
            f"{where}:{e.mark.line + 1}:{e.mark.column + 1}: nested deeper than {MAX_DEPTH} levels; this "
            "reader refuses that (yaml.v3 allows 10,000): flatten the value") from None
    finally:
        loader.dispose()
    if node is None:
        return None
    try:
        return _Builder(where).build(node)
    except RecursionError:  # a safety net: MAX_DEPTH keeps well below Python's limit
        raise StackFileError(f"{where}: nested too deeply to read") from None


# ---------------------------------------------------------------------------
# Value -> string, as Go's encoding/json + pulumi config.Value produce it
# ---------------------------------------------------------------------------


def _go_type_name(v: Any) -> str:
    if v is None:
        return "%!s(<nil>)"
    if isinstance(v, bool):
        return f"%!s(bool={'true' if v else 'false'})"
    if isinstance(v, int):
        if v > _INT64_MAX:
            return f"%!s(uint64={v})"
        return f"%!s(int={v})"
    if isinstance(v, float):
        return f"%!s(float64={_go_float(v, for_json=False)})"
    return str(v)


def _go_float(f: float, for_json: bool = True) -> str:
    """Format like Go encoding/json (for_json) after a yaml.v3 round trip."""
    if math.isnan(f) or math.isinf(f):
        txt = "NaN" if math.isnan(f) else ("+Inf" if f > 0 else "-Inf")
        raise ValueError(f"json: unsupported value: {txt}")
    if f == 0:
        return "0"  # -0.0 is re-read by yaml.v3 as int 0
    d = Decimal(repr(f)).normalize()  # shortest round-trip digits
    sign, digits, exp = d.as_tuple()
    ds = "".join(map(str, digits))
    sci_exp = exp + len(ds) - 1
    a = abs(f)
    if for_json and 1e-6 <= a < 1e21:
        return format(d, "f")
    if not for_json and -4 <= sci_exp < 6:  # Go %v = strconv 'g', shortest
        return format(d, "f")
    mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
    if sci_exp < 0:
        e = f"e-{-sci_exp:02d}" if not for_json else f"e-{-sci_exp}"
    else:
        e = f"e+{sci_exp:02d}"
    return ("-" if sign else "") + mant + e


_GO_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                    "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                  "\b": "\\b", "\f": "\\f"}


def _go_json_string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch in _GO_HTML_ESCAPES:
            out.append(_GO_HTML_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _is_secure(v: Any) -> bool:
    return isinstance(v, dict) and len(v) == 1 and isinstance(v.get("secure"), str)


def _go_json(v: Any) -> tuple[str, bool]:
    """Compact JSON as Go's json.Marshal writes it; also says if a secret is inside."""
    if v is None:
        return "null", False
    if isinstance(v, bool):
        return ("true" if v else "false"), False
    if isinstance(v, int):
        return str(v), False
    if isinstance(v, float):
        return _go_float(v), False
    if isinstance(v, _Timestamp):
        return _go_json_string(v.go_string()), False
    if isinstance(v, str):
        return _go_json_string(v), False
    if isinstance(v, list):
        parts = [_go_json(x) for x in v]
        return "[" + ",".join(p for p, _ in parts) + "]", any(s for _, s in parts)
    if isinstance(v, dict):
        if _is_secure(v):
            return '{"secure":' + _go_json_string(v["secure"]) + "}", True
        items = []
        secret = False
        keyed = {_go_key(k): x for k, x in v.items()}
        for k in sorted(keyed):  # Go sorts map keys bytewise == code point order
            txt, s = _go_json(keyed[k])
            secret = secret or s
            items.append(_go_json_string(k) + ":" + txt)
        return "{" + ",".join(items) + "}", secret
    raise TypeError(f"unexpected value {v!r}")


@dataclass(frozen=True)
class ConfigValue:
    """config.Value (sdk/go/common/resource/config/value.go): the text the program gets (ciphertext
    while `secure`), and whether it is JSON of an object or list (`object`)."""

    text: str
    secure: bool = False
    object: bool = False


def config_value(value: Any) -> ConfigValue:
    """A stack file's YAML value as config.Value.UnmarshalYAML stores it (ValueError on NaN/Inf)."""
    if isinstance(value, (dict, list)) and not _is_secure(value):
        text, secret = _go_json(value)
        return ConfigValue(text, secure=secret, object=True)
    out = config_value_to_string(value)
    if isinstance(out, Secret):
        return ConfigValue(out.raw, secure=True)
    return ConfigValue(out)


def config_value_to_string(value: Any) -> str | Secret:
    """What the program sees for one top-level config value (ValueError on NaN/Inf)."""
    if value is None:
        return ""  # CLI warns: "No value for configuration key ..." and uses ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, _Timestamp):
        return value.go_string()
    if isinstance(value, str):
        return str(value)
    if _is_secure(value):
        return Secret(str(value["secure"]))
    text, secret = _go_json(value)
    return Secret(text, is_object=True) if secret else text


# ---------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------


def _yaml_key_text(k: Any) -> str:
    """The text a scalar key decodes to as a Go string (yaml.v3 sets n.Value; we rebuild it): fmt's %v
    (_go_key) but for null, whose node value is empty."""
    return "" if k is None else _go_key(k)


def _parse_key(key: str) -> str:
    """config.ParseKey alone."""
    n = key.count(":")
    if n == 1:
        return key
    if n == 2:
        ns, module, name = key.split(":")
        if module == "config":
            return f"{ns}:{name}"
    raise ValueError(
        f"could not parse {key} as a configuration key "
        "(configuration keys should be of the form `<namespace>:<name>`)")


def _namespace_key(key: str, project: str) -> str:
    """stackConfigNamespacedWithProject + config.ParseKey."""
    return _parse_key(key if ":" in key else f"{project}:{key}")


def _check_string_keys(v: Any) -> None:
    """SimplifyMarshalledValue (sdk/go/common/workspace/project.go): yaml.v3 decodes a mapping whose keys
    are all strings as map[string]any, which the cast returns untouched (it does not look inside);
    only a map[any]any (some key not a string) and lists are walked, and a non-string key is an error."""
    if isinstance(v, dict) and not all(isinstance(k, str) for k in v):
        for k, x in v.items():
            if not isinstance(k, str):
                raise ValueError(f"expected only string keys, got '{_go_type_name(k)}'")
            _check_string_keys(x)
    elif isinstance(v, list):
        for x in v:
            _check_string_keys(x)


def _go_key(k: Any) -> str:
    """fmt %v of a map key (resource/config/object.go unmarshalObject, the map[any]any case)."""
    if isinstance(k, str):
        return k
    if k is None:
        return "<nil>"
    if isinstance(k, bool):
        return "true" if k else "false"
    if isinstance(k, float):
        return _go_float(k, for_json=False)
    return str(k)


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def parse_stack_yaml(text: str, project: str, where: str = "<stack file>",
                     *, allow_environment: bool = False) -> dict[str, str | Secret]:
    """Like read_stack_file, for text already in memory."""
    values = parse_stack_values(text, project, where, allow_environment=allow_environment)
    return {k: (Secret(v.text, is_object=v.object) if v.secure else v.text) for k, v in values.items()}


def parse_stack_values(text: str, project: str, where: str = "<stack file>",
                       *, allow_environment: bool = False) -> dict[str, ConfigValue]:
    """The stack file's config as config.Map holds it after LoadProjectStackBytes."""
    if text.startswith("\ufeff"):
        text = text[1:]
    doc = _load_first_document(text, where)
    if doc is None:
        return {}
    try:
        _check_string_keys(doc)
    except ValueError as e:
        raise StackFileError(f"{where}: {e}") from None
    if not isinstance(doc, dict):
        kind = "a list" if isinstance(doc, list) else f"a {type(doc).__name__} scalar"
        raise StackFileError(
            f"{where}: the stack file must be a mapping at the top level, but it is {kind}")
    for field in doc:
        if field not in STACK_FILE_FIELDS:
            close = difflib.get_close_matches(field, STACK_FILE_FIELDS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise StackFileError(
                f"{where}: unknown top-level field {field!r} (a stack file has "
                f"{', '.join(STACK_FILE_FIELDS)}){hint}")
    if doc.get("environment") is not None and not allow_environment:
        raise StackFileError(
            f"{where}: 'environment' (Pulumi ESC) is set; its values are merged into config "
            "by the CLI and cannot be reproduced offline")
    config = doc.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        kind = "a list" if isinstance(config, list) else f"a {type(config).__name__}"
        raise StackFileError(f"{where}: 'config' must be a mapping of keys to values, but it is {kind}")

    result: dict[str, ConfigValue] = {}
    origin: dict[str, str] = {}
    # stackConfigNamespacedWithProject only rewrites a map[string]any; with any non-string key the
    # keys reach config.ParseKey as yaml.v3 decodes them into string (their text), un-namespaced.
    namespaced = all(isinstance(k, str) for k in config)
    for raw_key, value in sorted(config.items(), key=lambda kv: str(kv[0])) if not namespaced else config.items():
        try:
            key = _namespace_key(raw_key, project) if namespaced else _parse_key(_yaml_key_text(raw_key))
        except ValueError as e:
            raise StackFileError(f"{where}: config key {raw_key!r}: {e}") from None
        if key in result:
            raise StackFileError(
                f"{where}: config keys {origin[key]!r} and {raw_key!r} both mean {key!r}; "
                "the Pulumi CLI would pick one of them at random")
        try:
            result[key] = config_value(value)
        except ValueError as e:
            raise StackFileError(f"{where}: config key {raw_key!r}: {e}") from None
        origin[key] = raw_key
    return result


def read_stack_file(path: str, project: str, *, allow_environment: bool = False
                    ) -> dict[str, str | Secret]:
    """Read Pulumi.<stack>.yaml and return {"ns:key": value-as-the-program-sees-it}.

    A missing file gives {} (the CLI treats it as an empty stack config).
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StackFileError(f"{path}: not valid UTF-8 (byte offset {e.start})") from None
    return parse_stack_yaml(text, project, path, allow_environment=allow_environment)


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------

_NAME_PREFIX = re.compile(r"[A-Za-z0-9_.-]*")
_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
               "\t": "\\t", "\v": "\\v", "\\": "\\\\", "'": "\\'"}


def _go_quote_byte(b: int) -> str:
    """Go's %q applied to a byte (a rune in U+0000..U+00FF)."""
    ch = chr(b)
    if ch in _GO_ESCAPES:
        return f"'{_GO_ESCAPES[ch]}'"
    if b < 0x20 or b == 0x7F:
        return f"'\\x{b:02x}'"
    if not ch.isprintable():
        return f"'\\u{b:04x}'"
    return f"'{ch}'"


def validate_stack_name(name: str, *, allow_dot_only: bool = True) -> None:
    """Validate an unqualified stack name exactly like tokens.ParseStackName.

    The CLI accepts "." and ".." (they match the character rule).  Pass
    allow_dot_only=False to also reject names made only of periods.
    """
    if name == "":
        raise ValueError("a stack name may not be empty")
    raw = name.encode("utf-8")
    if len(raw) > 100:  # Go counts bytes
        raise ValueError("a stack name cannot exceed 100 characters")
    m = _NAME_PREFIX.match(name)
    end = m.end() if m else 0
    if end != len(name):
        pos = len(name[:end].encode("utf-8"))  # byte position, as Go reports it
        raise ValueError(
            "a stack name may only contain alphanumeric, hyphens, underscores, or periods: "
            f"invalid character {_go_quote_byte(raw[pos])} at position {pos}")
    if not allow_dot_only and set(name) == {"."}:
        raise ValueError("a stack name may not consist only of periods")


def validate_project_name(name: str) -> None:
    """tokens.ValidateProjectName."""
    if name == "":
        raise ValueError("project names may not be empty")
    if len(name.encode("utf-8")) > 100:
        raise ValueError("project names are limited to 100 characters")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError("project names may only contain alphanumerics, hyphens, underscores, and periods")
