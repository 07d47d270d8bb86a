"""The Pulumi CLI's loading of a project and a stack's config, before the program runs: the one reader.

    project = load_project(ROOT / "Pulumi.yaml")
    loaded = load_stack(project, ROOT / "Pulumi.b200.yaml", "b200")
    loaded.values        # {"verl-gke:gpuNodes": "2", ...}: exactly the strings the program is handed

Each step follows pulumi/pulumi @ 1b5949891b3cefcb9974752b24a5ecef0acc86c8 (paths below are in that
repository), in the CLI's order:

1. Parse Pulumi.yaml with yaml.v3's scalar rules and limits (tools.stack_file; gopkg.in/yaml.v3 through
   sdk/go/common/encoding), a leading UTF-8 BOM stripped (workspace/loaders.go readFileStripUTF8BOM).
2. ValidateProject (sdk/go/common/workspace/project.go, against project.json): a non-empty string
   `name`, each config entry a short form (string, integer, boolean, array) or a declaration with only
   type/items/description/secret/default/value, `type` one of string, integer, boolean, array, object,
   array `items` given.
3. RewriteShorthandConfigValues: a short form becomes `default:` for a project key, `value:` for a
   namespaced one; then the yaml.v3 round trip of LoadProjectBytes (a whole float such as 1.0 is
   re-read as the integer 1).
4. Project.Validate: not both default and value; an array declares items; a project key's default has
   its declared type (ValidateConfigValue); a namespaced key has no type and no default, and a value.
5. The stack file (LoadProjectStackBytes, tools.stack_file): keys without a namespace take the
   project's (stackConfigNamespacedWithProject), `ns:config:name` is `ns:name` (config.ParseKey), each
   value stored as config.Value (text, secure, object).
6. The merge (pkg/workspace/config.go mergeConfig, as ValidateStackConfigAndApplyProjectConfig runs
   it for preview/up/destroy): for each declared key, in sorted order, a stack value is looked up by
   key path; a project key with neither stack value, default nor value is missing; otherwise a
   default/value is injected (createConfigValue: a string, integer or boolean as its text, anything
   else as JSON). Missing keys fail first ("Stack 'x' is missing configuration value(s) ..."), then
   each explicitly typed key is checked (validateStackConfigValue): a `secret: true` key must be
   `secure:`, and the value (JSON-decoded when it is an object) must pass ValidateConfigValue.

ESC `environment:` is refused offline (tools.stack_file). `secure:` values cannot be decrypted
without the stack's secrets provider: a caller may pass `decrypt`; without it the type check of a
secure value is skipped (the CLI would check the plaintext) and the program gets a placeholder.

Divergences, all refusals of what no stack here needs: nesting beyond tools.stack_file.MAX_DEPTH
levels (yaml.v3 allows 10,000); every problem of one file is reported, where the CLI stops at its first;
a stack file's top-level field other than config/environment/secretsprovider/encryptedkey/encryptionsalt
is refused (a typo such as `confg:` would otherwise deploy every default), where the CLI ignores it
(sdk/go/common/encoding/marshal.go yamlMarshaler.Unmarshal is not strict).

`config_set` is `pulumi config set [--path] [--secret] [--type T] KEY VALUE`
(pkg/cmd/pulumi/config/config.go configSetCmd.Run, io.go parseConfigKey, resource/config/map.go Set,
object.go Set/coerce, resource/properties_path.go parsePropertyPath) on a stack file's text: what the
README tells users to type is replayed through it and read back with load_stack.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools import stack_file
from tools.stack_file import ConfigValue, StackFileError

__all__ = ["ConfigType", "Project", "Loaded", "StackFileError", "load_project", "parse_project",
           "load_stack", "merge", "config_set", "dump_stack", "SECURE_PLACEHOLDER"]

SECURE_PLACEHOLDER = "secure-value-not-decrypted-offline"
TYPES = ("string", "integer", "boolean", "array", "object")  # project.json simpleConfigType
_DECLARATION_FIELDS = ("type", "items", "description", "secret", "default", "value")
_PROJECT_FIELDS = ("name", "description", "author", "website", "license", "runtime", "main", "config",
                   "stackConfigDir", "backend", "options", "template", "packages", "plugins")
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class ItemsType:
    type: str
    items: ItemsType | None = None


@dataclass(frozen=True)
class ConfigType:
    """workspace.ProjectConfigType: `type` None = not explicitly typed; default/value None = absent."""

    type: str | None = None
    items: ItemsType | None = None
    default: Any = None
    value: Any = None
    secret: bool = False
    description: str = ""

    def full_type(self) -> str:
        """InferFullTypeName: array<string>, array<array<string>>, ..."""
        return _full_type(self.type or "", self.items)


def _full_type(name: str, items: ItemsType | None) -> str:
    return f"array<{_full_type(items.type, items.items)}>" if items is not None else name


@dataclass(frozen=True)
class Project:
    name: str
    config: dict[str, ConfigType] = field(default_factory=dict)
    where: str = "Pulumi.yaml"


@dataclass(frozen=True)
class Loaded:
    """What `pulumi up` hands the program: values (secure ones as SECURE_PLACEHOLDER unless decrypted),
    the secret keys (PULUMI_CONFIG_SECRET_KEYS), and which keys the merge injected from Pulumi.yaml."""

    values: dict[str, str]
    secret_keys: list[str]
    injected: frozenset[str]
    stored: dict[str, ConfigValue]


# ---------------------------------------------------------------------------
# Project: parse, ValidateProject, shorthand rewrite, Project.Validate
# ---------------------------------------------------------------------------


def load_project(path: str | Path) -> Project:
    text = _read_text(Path(path))
    return parse_project(text, str(path))


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StackFileError(f"{path}: no such file") from None
    except OSError as err:
        raise StackFileError(f"{path}: {err.strerror or err}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StackFileError(f"{path}: not valid UTF-8 (byte offset {e.start})") from None


def parse_project(text: str, where: str = "Pulumi.yaml") -> Project:
    doc = stack_file._load_first_document(text, where)
    try:
        stack_file._check_string_keys(doc)
    except ValueError as e:
        raise StackFileError(f"could not validate '{where}': {e}") from None
    if not isinstance(doc, dict):
        raise StackFileError(f"could not validate '{where}': expected project to be an object, was "
                             f"'{_go_kind(doc)}'")
    _validate_project_schema(doc, where)
    name = doc["name"]
    config = doc.get("config")
    if isinstance(config, str) or config is None:  # RewriteConfigPathIntoStackConfigDir: a folder, not keys
        if isinstance(config, str) and "stackConfigDir" in doc:
            raise StackFileError(f"{where}: Should not use both config and stackConfigDir to define the stack "
                                 "directory. Use only stackConfigDir instead.")
        return Project(name, {}, where)
    declared: dict[str, ConfigType] = {}
    for key, entry in config.items():
        if isinstance(entry, (str, bool, list)) or _is_go_int(entry):  # RewriteShorthandConfigValues
            entry = {"default" if _is_project_key(name, key) else "value": entry}
        entry = {k: _yaml_roundtrip(v) for k, v in entry.items()}
        declared[key] = ConfigType(
            type=entry.get("type"), items=_items(entry.get("items")), default=entry.get("default"),
            value=entry.get("value"), secret=bool(entry.get("secret", False)),
            description=entry.get("description") or "")
    project = Project(name, declared, where)
    problem = validate_project(project)
    if problem:
        raise StackFileError(f"could not unmarshal '{where}': {problem}")
    return project


def _go_kind(v: Any) -> str:
    return {list: "[]interface {}", str: "string", bool: "bool", int: "int", float: "float64"}.get(
        type(v), "<nil>" if v is None else type(v).__name__)


def _is_go_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1]


def _is_project_key(project: str, key: str) -> bool:
    """configKeyIsNamespacedByProject."""
    return ":" not in key or key.startswith(project + ":")


def _yaml_roundtrip(v: Any) -> Any:
    """LoadProjectBytes marshals the project with yaml.v3 and reads it back: a float yaml.v3 writes
    without a point or exponent (strconv 'g' format) is re-read as an integer."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21 and len(str(int(abs(v)))) <= 6:
        return int(v)
    if isinstance(v, list):
        return [_yaml_roundtrip(x) for x in v]
    if isinstance(v, dict):
        return {k: _yaml_roundtrip(x) for k, x in v.items()}
    return v


def _items(raw: Any) -> ItemsType | None:
    if not isinstance(raw, dict):
        return None
    return ItemsType(str(raw.get("type")), _items(raw.get("items")))


def _validate_project_schema(doc: dict, where: str) -> None:
    """ValidateProject: the name check, then the parts of project.json a config block can break."""
    problems: list[str] = []
    if "name" not in doc:
        close = difflib.get_close_matches("name", list(doc), n=1, cutoff=0.5)
        hint = f"; found '{close[0]}' instead" if close else ""
        raise StackFileError(f"could not validate '{where}': project is missing a 'name' attribute{hint}")
    if not isinstance(doc["name"], str) or not doc["name"]:
        raise StackFileError(f"could not validate '{where}': project is missing a non-empty string 'name' "
                             "attribute")
    for key in doc:
        if key not in _PROJECT_FIELDS:
            close = difflib.get_close_matches(key, _PROJECT_FIELDS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.append(f"#: additional properties '{key}' not allowed{hint}")
    config = doc.get("config")
    if config is not None and not isinstance(config, (dict, str)):
        problems.append(f"#/config: expected object, string or null, but got {_json_kind(config)}")
    for key, entry in (config.items() if isinstance(config, dict) else ()):
        at = f"#/config/{key}"
        if isinstance(entry, (str, bool, list)) or _is_go_int(entry):
            continue
        if not isinstance(entry, dict):
            problems.append(f"{at}: expected string, integer, boolean, array or a config type declaration, "
                            f"but got {_json_kind(entry)}")
            continue
        for attr in entry:
            if attr not in _DECLARATION_FIELDS:
                close = difflib.get_close_matches(attr, _DECLARATION_FIELDS, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                problems.append(f"{at}: additional properties '{attr}' not allowed{hint}")
        if "type" in entry and entry["type"] not in TYPES:
            problems.append(f"{at}/type: value must be one of {', '.join(repr(t) for t in TYPES)}")
        if "description" in entry and not isinstance(entry["description"], str):
            problems.append(f"{at}/description: expected string, but got {_json_kind(entry['description'])}")
        if "secret" in entry and not isinstance(entry["secret"], bool):
            problems.append(f"{at}/secret: expected boolean, but got {_json_kind(entry['secret'])}")
        if "items" in entry:
            problems += _items_problems(entry["items"], f"{at}/items")
    if problems:
        raise StackFileError(f"could not validate '{where}': " + "; ".join(problems))


def _items_problems(items: Any, at: str) -> list[str]:
    if not isinstance(items, dict):
        return [f"{at}: expected object, but got {_json_kind(items)}"]
    if "type" not in items:
        return [f"{at}: missing properties: 'type'"]
    if items["type"] not in TYPES:
        return [f"{at}/type: value must be one of {', '.join(repr(t) for t in TYPES)}"]
    if items["type"] == "array":
        if "items" not in items:
            return [f"{at}: missing properties: 'items'"]
        return _items_problems(items["items"], f"{at}/items")
    return []


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(v), type(v).__name__)


def validate_project(project: Project) -> str | None:
    """Project.Validate; the first problem (keys in sorted order: Go's map order is random)."""
    if not project.name:
        return "project is missing a 'name' attribute"
    for key in sorted(project.config):
        t = project.config[key]
        if t.default is not None and t.value is not None:
            return f"project config '{key}' cannot have both a 'default' and 'value' attribute"
        if _is_project_key(project.name, key):
            if t.type == "array" and t.items is None:
                return (f"The configuration key '{key}' declares an array but does not specify the underlying "
                        "type via the 'items' attribute")
            if t.type is not None and t.default is not None and not validate_value(t.type, t.items, t.default):
                return (f"The default value specified for configuration key '{key}' is not of the expected "
                        f"type '{t.full_type()}'")
        else:
            if t.type is not None:
                return f"Configuration key '{key}' is not namespaced by the project and should not define a type"
            if t.default is not None:
                return (f"Configuration key '{key}' is not namespaced by the project and should not define a "
                        "default value. Did you mean to use the 'value' attribute instead of 'default'?")
            if t.value is None:
                return f"Configuration key '{key}' is namespaced and must provide an attribute 'value'"
    return None


_ATOI = re.compile(r"[+-]?[0-9]+")


def go_atoi(text: str) -> bool:
    """strconv.Atoi succeeds: an optional sign and decimal digits, within int64."""
    return bool(_ATOI.fullmatch(text)) and _INT64[0] <= int(text) <= _INT64[1]


def validate_value(type_name: str, items: ItemsType | None, value: Any) -> bool:
    """ValidateConfigValue (sdk/go/common/workspace/project.go)."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        if isinstance(value, float):
            return math.isfinite(value) and value == math.trunc(value)
        return isinstance(value, str) and go_atoi(value)
    if type_name == "boolean":
        return value in ("true", "false") if isinstance(value, str) else isinstance(value, bool)
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(validate_value(items.type, items.items, v) for v in value)


# ---------------------------------------------------------------------------
# Key paths (resource/properties_path.go parsePropertyPath, strict) and the config map
# ---------------------------------------------------------------------------


def parse_property_path(path: str) -> list[str | int]:
    """ParsePropertyPathStrict: `a.b`, `a[0]`, `a["k.with.dots"]`, `a[*]`; ValueError with Go's reason."""
    out: list[str | int] = []
    if path.startswith("."):
        raise ValueError("expected property path to start with a name or index")
    while path:
        c = path[0]
        if c == ".":
            path = path[1:]
            if not path:
                raise ValueError("expected property path to end with a name or index")
            if path[0] == "[":
                raise ValueError("expected property name after '.'")
        elif c == "[":
            if len(path) > 1 and path[1] == '"':
                key: list[str] = []
                i = 2
                while True:
                    if i >= len(path):
                        raise ValueError("missing closing quote in property name")
                    if path[i] == '"':
                        i += 1
                        break
                    if path[i] == "\\" and i + 1 < len(path) and path[i + 1] == '"':
                        key.append('"')
                        i += 2
                    else:
                        key.append(path[i])
                        i += 1
                if i >= len(path) or path[i] != "]":
                    raise ValueError("missing closing bracket in property access")
                out.append("".join(key))
                path = path[i + 1:]
            else:
                end = path.find("]")
                if end == -1:
                    raise ValueError("missing closing bracket in array index")
                segment = path[1:end]
                if segment == "*":
                    out.append("*")
                else:
                    if not re.fullmatch(r"[+-]?[0-9]+", segment) or not _INT64[0] <= int(segment) <= _INT64[1]:
                        raise ValueError(f'invalid array index: strconv.ParseInt: parsing "{segment}": '
                                         "invalid syntax")
                    out.append(int(segment))
                path = path[end + 1:]
        else:
            i = 0
            while i < len(path) and path[i] not in ".[":
                i += 1
            out.append(path[:i])
            path = path[i:]
    return out


def _parse_key_path(full_key: str) -> tuple[list[str | int], str]:
    """map.go parseKeyPath: the path in the key's name, and the key of its first segment."""
    namespace, _, name = full_key.partition(":")
    try:
        p = parse_property_path(name)
    except ValueError as e:
        raise ValueError(f"invalid config key path: {e}") from None
    if not p:
        raise ValueError("empty config key path")
    if not isinstance(p[0], str):
        raise ValueError("first path segement of config key must be a string")
    if p[0] == "":
        raise ValueError("config key is empty")
    return p, f"{namespace}:{p[0]}"


@dataclass
class _Secure:
    ciphertext: str


def _to_tree(v: ConfigValue) -> Any:
    """config.Value -> object (object.go UnmarshalString; numbers via json.Number: int64, else float64)."""
    if not v.object:
        return _Secure(v.text) if v.secure else v.text
    return _from_json(json.loads(v.text, parse_float=float, parse_int=int))


def _from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if len(v) == 1 and isinstance(v.get("secure"), str):
            return _Secure(v["secure"])
        return {k: _from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool) and not _INT64[0] <= v <= _INT64[1]:
        return float(v)  # json.Number: Int64() fails, Float64() is used
    return v


def _plain(v: Any) -> Any:
    """object.marshalObject: the tree as YAML/JSON data ({secure: ...} for ciphertext)."""
    if isinstance(v, _Secure):
        return {"secure": v.ciphertext}
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _from_tree(v: Any) -> ConfigValue:
    """object.MarshalString."""
    if isinstance(v, _Secure):
        return ConfigValue(v.ciphertext, secure=True)
    if isinstance(v, str):
        return ConfigValue(v)
    if v is None or isinstance(v, (bool, int, float)):
        return ConfigValue(stack_file._go_json(v)[0])
    text, secret = stack_file._go_json(_plain(v))
    return ConfigValue(text, secure=secret, object=True)


def _get(values: Mapping[str, ConfigValue], full_key: str) -> ConfigValue | None:
    """config.Map.Get(key, path=true)."""
    p, root_key = _parse_key_path(full_key)
    root = values.get(root_key)
    if len(p) == 1 or root is None:
        return root
    node = _to_tree(root)
    for seg in p[1:]:
        if isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node):
            node = node[seg]
        elif isinstance(node, dict) and isinstance(seg, str) and seg in node:
            node = node[seg]
        else:
            return None
    return _from_tree(node)


def _set_path(values: dict[str, ConfigValue], full_key: str, value: ConfigValue, new: Any) -> None:
    """config.Map.Set(key, v, path=true); `new` is the coerced object for a nested set."""
    p, root_key = _parse_key_path(full_key)
    if len(p) == 1:
        values[root_key] = value
        return
    root = _to_tree(values[root_key]) if root_key in values else _container(p[1])
    holder = [root]
    _object_set(holder, 0, p[:1], p[1:], new)
    values[root_key] = _from_tree(holder[0])


def _container(accessor: str | int) -> Any:
    return [None] * (accessor + 1) if isinstance(accessor, int) else {}


def _object_set(parent: list | dict, slot: Any, prefix: list, path: list, new: Any) -> None:
    """object.Set: create containers as needed; the error texts are Go's (prefix printed as %v)."""
    if not path:
        parent[slot] = new
        return
    current = parent[slot]
    if not isinstance(current, (list, dict)):
        if current is None or len(prefix) == 1:  # COMPAT in object.Set: the top level is overwritten
            current = _container(path[0])
        else:
            raise ValueError(f"{_go_path(prefix)}: expected {'an array' if isinstance(path[0], int) else 'a map'}")
        parent[slot] = current
    prefix = [*prefix, path[0]]
    if isinstance(current, list):
        if not isinstance(path[0], int):
            raise ValueError(f"{_go_path(prefix)}: key for an array must be an int")
        index = path[0]
        if index < 0 or index > len(current):
            raise ValueError(f"{_go_path(prefix)}: array index out of range")
        if index == len(current):
            current.append(None)
        _object_set(current, index, prefix, path[1:], new)
        return
    if not isinstance(path[0], str):
        raise ValueError(f"{_go_path(prefix)}: key for a map must be a string")
    if len(path) == 1 and not current and path[0] == "secure" and isinstance(new, str):
        raise ValueError('"secure" key in maps of length 1 are reserved')
    current.setdefault(path[0], None)
    _object_set(current, path[0], prefix, path[1:], new)


def _go_path(p: list) -> str:
    return "[" + " ".join(str(x) for x in p) + "]"


# ---------------------------------------------------------------------------
# The stack: read, merge with the project (pkg/workspace/config.go)
# ---------------------------------------------------------------------------


def _create_config_value(value: Any) -> ConfigValue:
    """createConfigValue: a string, Go int or bool as fmt %v text; anything else as JSON."""
    if isinstance(value, bool):
        return ConfigValue("true" if value else "false")
    if isinstance(value, str) or _is_go_int(value):
        return ConfigValue(str(value))
    stack_file._check_string_keys(value)
    text, secret = stack_file._go_json(value)
    return ConfigValue(text, secure=secret, object=True)


_HINTS = {
    "array": "a YAML list in the stack file, or `pulumi config set --path '{name}[0]' <value>` per item "
             "(a plain `pulumi config set {name} ...` stores a string)",
    "integer": "an integer such as 2 (Go's strconv.Atoi: no decimals, no underscores)",
    "boolean": "true or false (YAML yes/no/on/off are strings to Pulumi)",
    "string": "a single string, not a list or a mapping",
    "object": "a YAML mapping in the stack file, or `pulumi config set --path '{name}.<key>' <value>`",
}


def merge(project: Project, stored: Mapping[str, ConfigValue], stack: str, where: str, *,
          inject_defaults: bool = True, decrypt: Callable[[str], str] | None = None) -> Loaded:
    """mergeConfig with validate=true; `inject_defaults=False` skips only the injection (for tests
    that compare a stack with and without the CLI's defaults)."""
    values = dict(stored)
    missing: list[str] = []
    injected: set[str] = set()
    problems: list[str] = []
    keys: dict[str, str] = {}  # declared key -> full key, for the keys the CLI can parse
    for key in sorted(project.config):
        t = project.config[key]
        try:
            full = _config_key(project.name, key)
            found = _get(values, full) is not None
        except ValueError as e:
            problems.append(f"{key}: {e}")
            continue
        keys[key] = full
        has_default, has_value = t.default is not None, t.value is not None
        if not found and not has_value and not has_default and full.split(":", 1)[0] == project.name:
            missing.append(key)
            continue
        if not found and (has_value or has_default) and inject_defaults:
            chosen = t.default if has_default else t.value
            try:
                cv = _create_config_value(chosen)
                _set_path(values, full, cv, _to_tree(cv))
            except ValueError as e:
                problems.append(f"{key}: {e}")
                continue
            injected.add(full)
    if missing:
        raise StackFileError(f"{where}: {_missing_error(sorted(missing), stack)}")
    for key, full in keys.items():
        t = project.config[key]
        if t.type is None:
            continue
        try:
            cv = _get(values, full)
        except ValueError as e:  # a stack value the path cannot walk
            problems.append(f"{full}: {e}")
            continue
        if cv is None:  # only when the injection was skipped
            continue
        if t.secret and not cv.secure:
            problems.append(f"{full}: Stack '{stack}' with configuration key '{key}' must be encrypted as it's "
                            f"secret: run `pulumi config set --secret {key} <value>`")
            continue
        if cv.secure and decrypt is None:
            continue  # the plaintext is the provider's: the CLI checks it after decrypting
        text = _decrypted_text(cv, decrypt)
        try:
            content = json.loads(text) if cv.object else text
        except json.JSONDecodeError as e:
            problems.append(f"{full}: {e}")
            continue
        if not validate_value(t.type, t.items, content):
            shown = "[secret]" if cv.secure else repr(text if len(text) <= 80 else text[:77] + "...")
            hint = _HINTS.get(t.type, "").format(name=key)
            problems.append(f"{full} = {shown}: Stack '{stack}' with configuration key '{key}' must be of type "
                            f"'{t.full_type()}' (the Pulumi CLI refuses it; use {hint})")
    if problems:
        raise StackFileError(f"{where}: the Pulumi CLI would not load this config:\n  - " + "\n  - ".join(problems))
    secret_keys = sorted(k for k, v in values.items() if v.secure)
    out = {k: (_decrypted_text(v, decrypt) if v.secure and decrypt else SECURE_PLACEHOLDER if v.secure else v.text)
           for k, v in values.items()}
    return Loaded(out, secret_keys, frozenset(injected), values)


def _decrypted_text(v: ConfigValue, decrypt: Callable[[str], str] | None) -> str:
    if not v.secure or decrypt is None:
        return v.text
    if not v.object:
        return decrypt(v.text)

    def walk(x: Any) -> Any:
        if isinstance(x, _Secure):
            return decrypt(x.ciphertext)
        if isinstance(x, dict):
            return {k: walk(y) for k, y in x.items()}
        if isinstance(x, list):
            return [walk(y) for y in x]
        return x

    return stack_file._go_json(walk(_to_tree(v)))[0]


def _config_key(project: str, key: str) -> str:
    """parseConfigKey in pkg/workspace/config.go: ParseKey for a namespaced key, else project:key."""
    if ":" in key:
        return stack_file._namespace_key(key, project)
    return f"{project}:{key}"


def _missing_error(keys: list[str], stack: str) -> str:
    """missingStackConfigurationKeysError + formatMissingKeys."""
    if len(keys) == 1:
        listed = f"'{keys[0]}'"
    else:
        listed = ", ".join(f"'{k}'" for k in keys[:-2]) + (", " if len(keys) > 2 else "")
        listed += f"'{keys[-2]}' and '{keys[-1]}'"
    return f"Stack '{stack}' is missing configuration {'value' if len(keys) == 1 else 'values'} {listed}"


def load_stack(project: Project, path: str | Path, stack: str, *, inject_defaults: bool = True,
               decrypt: Callable[[str], str] | None = None) -> Loaded:
    """LoadProjectStack (a missing file is an empty config) + the merge."""
    path = Path(path)
    try:
        text = _read_text(path)
    except StackFileError:
        if path.exists():
            raise
        text = ""
    return load_stack_text(project, text, stack, str(path), inject_defaults=inject_defaults, decrypt=decrypt)


def load_stack_text(project: Project, text: str, stack: str, where: str = "<stack file>", *,
                    inject_defaults: bool = True, decrypt: Callable[[str], str] | None = None) -> Loaded:
    stored = stack_file.parse_stack_values(text, project.name, where)
    return merge(project, stored, stack, where, inject_defaults=inject_defaults, decrypt=decrypt)


# ---------------------------------------------------------------------------
# `pulumi config set`, and the stack file as the CLI writes it back
# ---------------------------------------------------------------------------


def cli_key(project: str, key: str, path: bool) -> str:
    """pkg/cmd/pulumi/config/io.go parseConfigKey: with --path only the top segment is namespaced."""
    if path:
        cut = min((i for i in (key.find("["), key.find(".")) if i > 0), default=-1)
        if cut > 0:
            top = cli_key(project, key[:cut], False)
            return top + key[cut:]
    if ":" not in key:
        key = f"{project}:{key}"
    return stack_file._namespace_key(key, project)


def _coerce(text: str) -> Any:
    """object.go coerce: "true"/"false", and base-10 digits not starting with 0, become typed."""
    if text in ("true", "false"):
        return text == "true"
    if len(text) > 1 and text[0] == "0":
        return text
    if re.fullmatch(r"[+-]?[0-9]+", text) and _INT64[0] <= int(text) <= 2**64 - 1:
        return int(text)
    return text


def _typed(text: str, type_: str) -> Any:
    """Value.unmarshalObject for --type: strconv.Atoi / ParseBool / ParseFloat."""
    if type_ == "string":
        return text
    if type_ == "int":
        if not go_atoi(text):
            raise ValueError(f'strconv.Atoi: parsing "{text}": invalid syntax')
        return int(text)
    if type_ == "bool":
        if text in ("1", "t", "T", "TRUE", "true", "True"):
            return True
        if text in ("0", "f", "F", "FALSE", "false", "False"):
            return False
        return False  # Go logs a warning and stores false
    if type_ == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f'strconv.ParseFloat: parsing "{text}": invalid syntax') from None
    raise ValueError(f'invalid type "{type_}"; must be one of string, int, bool, or float')


def config_set(project: str, stored: dict[str, Any], key: str, value: str, *, path: bool = False,
               secret: bool = False, type_: str | None = None) -> None:
    """`pulumi config set` on a stack's config as stored (full key -> YAML data, {secure: ...} for
    ciphertext). A secret is stored as base64 of the value, standing in for the provider's ciphertext."""
    import base64

    full = cli_key(project, key, path)
    values = {k: stack_file.config_value(v) for k, v in stored.items()}
    if secret:
        cv = ConfigValue(base64.b64encode(value.encode()).decode(), secure=True)
        new: Any = _Secure(cv.text)
    elif type_:
        new = _typed(value, type_)
        cv = _from_tree(new)
    else:
        cv, new = ConfigValue(value), _coerce(value)
    top = full if not path else _parse_key_path(full)[1] if len(_parse_key_path(full)[0]) == 1 else None
    if path and top is None:
        _set_path(values, full, cv, new)
    else:
        values[top] = cv
    # SaveProjectStack writes each value through Value.MarshalYAML: an untyped top-level value as a
    # string, a --type'd one as its type.
    stored.clear()
    for k, v in values.items():
        stored[k] = _plain(new) if (type_ and k == top) else _plain(_to_tree(v))


class _Dumper(yaml.SafeDumper):
    """Writes what yaml.v3 reads back unchanged: a string quoted when yaml.v3 would read another type."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = None if stack_file.resolves_as_string(data) and "\n" not in data else '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_stack(config: Mapping[str, Any]) -> str:
    """A stack file holding `config` (full key -> YAML data)."""
    return yaml.dump({"config": dict(config)}, Dumper=_Dumper, sort_keys=True, allow_unicode=True, width=10_000)
