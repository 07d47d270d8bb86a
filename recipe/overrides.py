"""The stack's extra verl overrides, read as Hydra reads them and judged key by key.

verl's trainer composes its config with Hydra (verl/trainer/main_ppo.py @hydra.main, v0.6.1), so an extra
override means what Hydra's override grammar makes of it: `trainer={default_local_dir: x}` sets
trainer.default_local_dir as surely as `trainer.default_local_dir=x` does. Each item is therefore parsed by
hydra-core's own parser (hydra.core.override_parser.overrides_parser.OverridesParser), refused where one run
cannot mean it (a sweep, a glob, a function other than a cast, a deletion, a config group choice, a package,
characters a reader cannot see), expanded into the leaf keys it sets, resolved against verl's config key
tree at the pinned tag (catalog.verl_config, generated from verl's YAML: verl itself is never installed here)
and judged leaf by leaf:
- a key the caller owns (the recipe's settings, its paths, its fixed values) is refused in any form: the key,
  a key inside it, or a node that holds it;
- a key that makes verl import or instantiate code (a class from a file, a module, a `_target_`) is refused:
  user code runs only as the stack's own reward, where it is contained;
- a path-valued key must name a folder of the run itself, written relative to the run's own paths
  (`${trainer.default_local_dir}/...`), or stay null;
- a key named like a credential, at any depth, or a value shaped like one is refused without showing the value
  (the overrides are the job's entrypoint, plain text on the Ray dashboard and in the state);
- a key verl does not have needs a leading `+` and one it has must not get one (Hydra refuses both when the job
  starts), and a key set twice, in any two forms, is refused.

Pure: the catalog, the standard library and hydra-core's parser (a runtime dependency, imported when there is
an item to read).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import posixpath
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from catalog import secret_shapes, verl_config
from catalog.problems import Problem, named

FIELD = "extra_overrides"
# One key segment of verl's config: a name (verl's own include dashes: nsys's `cuda-memory-usage`) or a list index.
_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*|[0-9]+")
# Strings Hydra reads back unchanged without quotes (after its bool/null/inf/nan words are left out).
_BARE = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
_LITERALS = ("true", "false", "null", "inf", "nan")
# Hydra's functions a single run can mean: the casts. The others sweep (choice, range, interval, glob), mark a
# sweep (tag) or reorder a list (sort, shuffle: shuffle's order changes with every job start).
_CASTS = ("int", "float", "str", "bool")
MAX_SHOWN = 100

# Leaf names that load code wherever they are: Hydra instantiates `_target_` (verl/utils/config.py
# omega_conf_to_dataclass calls hydra.utils.instantiate), verl imports `external_lib` as a module
# (verl/utils/import_utils.py import_external_libs) and `optimizer_impl` (verl/workers/config/optimizer.py
# build_optimizer: importlib.import_module), transformers runs the model folder's Python with trust_remote_code.
CODE_NAMES = {
    "_target_": "Hydra instantiates the callable it names (verl/utils/config.py omega_conf_to_dataclass)",
    "_args_": "it holds the arguments of a call Hydra instantiates",
    "_partial_": "it is an option of a call Hydra instantiates", "_convert_": "it is an option of a call Hydra "
    "instantiates", "_recursive_": "it is an option of a call Hydra instantiates",
    "external_lib": "verl imports the module it names (verl/utils/import_utils.py import_external_libs)",
    "optimizer_impl": "verl imports the module it names (verl/workers/config/optimizer.py build_optimizer)",
    "trust_remote_code": "transformers then runs the Python files of the model folder",
}
# verl v0.6.1 keys whose value names code it loads (the key and everything inside it).
CODE_KEYS = {
    "data.custom_cls": "verl imports the dataset class from that file (trainer/main_ppo.py create_rl_dataset: "
                       "load_extern_type)",
    "data.sampler": "verl imports the sampler class from that file (trainer/main_ppo.py create_rl_sampler)",
    "data.datagen": "verl imports the data generator from that file "
                    "(experimental/dynamic_dataset/dynamicgen_dataset.py)",
    "data.tool_config_path": "verl builds the tools its YAML names by class (tools/utils/tool_registry.py)",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": "verl builds the tools its YAML names by class "
                                                             "(tools/utils/tool_registry.py)",
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path": "verl builds the interactions its YAML names "
                                                                    "by class (interactions/interaction_registry)",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": "Hydra instantiates the agent loops its YAML names "
                                                              "(experimental/agent_loop/agent_loop.py)",
    "actor_rollout_ref.rollout.agent.custom_async_server": "it names a server class by file and name "
                                                           "(workers/config/rollout.py CustomAsyncServerConfig)",
    "actor_rollout_ref.rollout.engine_kwargs": "verl hands its keys to vLLM or SGLang unread, whose arguments name "
                                               "classes to import and paths (worker_cls, logits_processors, "
                                               "download_dir) that nothing here can judge",
}
# A leaf named like a path holds one (verl's: path, *_path, *_dir, *_file(s), tokenizer, input_tokenizer);
# a folder or single file written to (dir, save_path, file) is a write, the rest reads.
_PATH_NAME = re.compile(r"(^|_)(path|dir|file|files|tokenizer)$")
_WRITE_NAME = re.compile(r"(^|_)(dir|file)$|(^|_)save_path$")
_ANCHORED = re.compile(r"\$\{(?P<key>[A-Za-z_][A-Za-z0-9_.]*)\}(?P<rest>(/[A-Za-z0-9_.-]+)*)/?")
# Words that name a credential in a key (split at _, - and camelCase): `wandb_api_key`, `OPENAI_API_KEY`, `hfToken`.
_CREDENTIAL_WORDS = {"secret", "password", "passwd", "passphrase", "credential", "credentials", "apikey"}
_CREDENTIAL_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("auth", "token")}
_CREDENTIAL_VALUE = re.compile(r"hf_[A-Za-z0-9]{20,}")  # shorter Hugging Face tokens than secret_shapes' shape
_HF_TOKEN_SHORT = ("carries what looks like a credential (a Hugging Face token, hf_...): the overrides become the "
                   "job's entrypoint, shown in plain text on the Ray dashboard; set it with `pulumi config set "
                   "--secret hfToken`")


@dataclass(frozen=True)
class Leaf:
    """One key an override sets, with the value Hydra parsed."""

    key: str  # dotted, as in verl's config
    value: Any
    text: str  # the value as override text: as typed for an item of one key, else rendered
    op: str  # "", "+" or "++" as typed ("~" for a deletion, value None)
    item: str  # the override it came from, stripped
    new: bool  # not a key of verl's config
    at: str = ""  # the override's own key (the leaf's, or the node its dict value goes into)
    shown: str = dataclasses.field(default="", compare=False)  # the item for messages, or this leaf where the
    # item also names a credential (its value is then never shown)

    def rendered(self) -> str:
        """This leaf as an override of its own, which reads back as this one leaf."""
        op = "++" if self.op == "++" else "+" if self.new else ""
        return f"{op}{self.key}={render(self.value)}"


@dataclass(frozen=True)
class Reading:
    """What Hydra makes of each item, in order: its leaves, or the problem that keeps it from having any."""

    items: tuple[tuple[Leaf, ...] | Problem, ...]

    @property
    def leaves(self) -> list[Leaf]:
        return [leaf for found in self.items if not isinstance(found, Problem) for leaf in found]

    @property
    def problems(self) -> list[Problem]:
        return [found for found in self.items if isinstance(found, Problem)]


def render(value: Any) -> str:
    """A parsed value in override syntax that Hydra reads back as the same value (strings quoted as needed)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if value != value else "inf" if value == float("inf") else "-inf" if value == -float("inf") \
            else repr(value)
    if isinstance(value, str):
        if _BARE.fullmatch(value) and value.lower() not in _LITERALS:
            return value
        from hydra.core.override_parser.types import Quote, QuotedString  # Hydra's own escaping of quotes

        return QuotedString(text=value, quote=Quote.single).with_quotes()
    if isinstance(value, list | tuple):
        return "[" + ",".join(render(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{render(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no override form for {value!r}")


@functools.cache
def _parsers() -> tuple[Any, Any]:
    """Hydra's parser as Hydra's compose uses it, and one that knows only the casts."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    full, casts = OverridesParser.create(), OverridesParser.create()
    for name in [n for n in casts.functions.definitions if n not in _CASTS]:
        del casts.functions.definitions[name], casts.functions.functions[name]
    return full, casts


def _shown(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= MAX_SHOWN else f"{shown[:MAX_SHOWN // 2]}... ({len(text)} characters)"


def _bad(text: str) -> Problem:
    return Problem(FIELD, text)


def _invisible(text: str) -> tuple[int, str] | None:
    """The first character a reader cannot see or a terminal acts on (controls, NUL, line breaks, zero-width and
    direction marks, odd spaces), with its position."""
    for i, c in enumerate(text):
        if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") or (c.isspace() and c != " "):
            return i, f"U+{ord(c):04X}"
    return None


def _key_part(item: str) -> str:
    """The item's key as typed, for messages about an item that does not parse (only when it is a plain name)."""
    key = item.split("=", 1)[0].lstrip("+~")
    return key if re.fullmatch(r"[A-Za-z0-9_.@/-]{1,100}", key) else "<its key>"


def _names_credential(name: str) -> bool:
    """Whether a name (a key segment) reads as a credential's: split at _, - and camelCase into words."""
    words = [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)]
    return bool(_CREDENTIAL_WORDS & set(words) or set(zip(words, words[1:], strict=False)) & _CREDENTIAL_PAIRS
                or (words and words[-1] == "token"))


def _credential_key(key: str, tree: verl_config.VerlConfig) -> str | None:
    """The first segment of `key`, at any depth, named like a credential (verl's own keys are not)."""
    parts = key.split(".")
    for i, part in enumerate(parts):
        if tree.kind(".".join(parts[:i + 1])) is None and _names_credential(part):
            return part
    return None


def _display(item: str) -> str:
    """The item for a message, or only its key where a name in it reads as a credential's (its value follows)."""
    if any(_names_credential(word) for word in re.findall(r"[A-Za-z0-9_]+", item)):
        return f"the item for {_key_part(item)}"
    return _shown(item)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def _exists(key: str, tree: verl_config.VerlConfig) -> bool:
    """A key of verl's config, or an index into one of its lists."""
    parent, _, last = key.rpartition(".")
    return tree.kind(key) is not None or (last.isdigit() and tree.kind(parent) == "list")


def _expand(key: str, value: Any, typed: str | None) -> list[tuple[str, Any, str]] | str:
    """(leaf key, value, text) of a value, a non-empty dict expanded into its keys; or why it cannot be."""
    if not (isinstance(value, dict) and value):
        return [(key, value, typed if typed is not None else render(value))]
    out: list[tuple[str, Any, str]] = []
    for k, v in value.items():
        if not isinstance(k, str) or not _SEGMENT.fullmatch(k) or k.isdigit():
            return f"the dict key {k!r} is not a name (letters, digits, _ and -)"
        found = _expand(f"{key}.{k}", v, None)
        if isinstance(found, str):
            return found
        out += found
    return out


_FOLLOWS = ("verl's {key} is an interpolation (its value follows another key): give it one value, or set the key "
            "it follows")


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _unresolved(leaf: Leaf, tree: verl_config.VerlConfig) -> str | None:
    """Why Hydra refuses the leaf when the job starts, against verl's config: `key=` needs a key verl has, `+key=`
    one it has not; a dict value merges into verl's dict nodes (`key=`: only into keys they have) and replaces a
    null or a scalar whole, but does not merge into a list, an interpolation or a missing value, nor a list into a
    dict (omegaconf: "Cannot merge DictConfig with ListConfig")."""
    if leaf.op == "" and not _exists(leaf.at, tree):
        return (f"verl {tree.version} has no key {leaf.at}{_did_you_mean(leaf.at, tree)}; a key of your own takes a "
                f"leading + (+{leaf.at}=...), which Hydra needs to add it")
    if leaf.op == "+" and leaf.at == leaf.key and not isinstance(leaf.value, dict | list) and \
            tree.kind(leaf.key) not in (None, "null", "missing", "interpolation"):
        # hydra-core 1.3 hydra/_internal/config_loader_impl.py _apply_overrides_to_config: `+` adds over a null,
        # or merges a dict or a list
        return f"{leaf.key} is verl's own key, set: drop the + (Hydra refuses to add a key that holds a value)"
    kind = tree.kind(leaf.key)
    if kind == "interpolation" and isinstance(leaf.value, dict | list):
        return _FOLLOWS.format(key=leaf.key)
    if (isinstance(leaf.value, list) and kind == "dict") or (isinstance(leaf.value, dict) and kind == "list"):
        return f"verl's {leaf.key} is {_a(kind)}: Hydra does not merge {_a(type(leaf.value).__name__)} into it"
    parts = leaf.key.split(".")
    value_from = len(leaf.at.split("."))  # the segments from here on come from the dict value
    for depth in range(1, len(parts)):  # every node above the leaf
        node, kind = ".".join(parts[:depth]), tree.kind(".".join(parts[:depth]))
        if kind is None or (kind == "list" and parts[depth].isdigit()):
            return None  # new below, or an index into verl's list
        if kind == "interpolation":
            return _FOLLOWS.format(key=node)
        if kind in ("list", "missing"):
            return f"verl's {node} is {_a(kind)}: no key goes inside it"
        if kind != "dict":
            return None  # a null or a scalar is replaced whole
        if depth >= value_from and leaf.op == "" and tree.kind(".".join(parts[:depth + 1])) is None:
            missing = ".".join(parts[:depth + 1])
            return (f"verl {tree.version} has no key {missing}{_did_you_mean(missing, tree)}; Hydra merges a dict "
                    f"only into keys verl has: add it with +{leaf.at}={{...}}")
    return None


def _did_you_mean(key: str, tree: verl_config.VerlConfig) -> str:
    """verl's key closest to a missing one, among the keys of its nearest node verl has."""
    parts = key.split(".")
    at = next((i for i in range(len(parts) - 1, -1, -1) if tree.kind(".".join(parts[:i])) == "dict" or i == 0), 0)
    close = difflib.get_close_matches(parts[at], tree.children(".".join(parts[:at])), n=1, cutoff=0.7)
    return f" (did you mean {'.'.join([*parts[:at], close[0]])}?)" if close else ""


def _skeleton(name: str) -> str:
    """A name as it looks: case, - and _, and the glyphs that pass for one another (l 1 I |, O 0, rn m, vv w)."""
    s = name.lower().replace("-", "_").replace("rn", "m").replace("vv", "w")
    return s.translate(str.maketrans({"1": "l", "i": "l", "|": "l", "0": "o"}))


def _confusable(key: str, tree: verl_config.VerlConfig) -> str | None:
    """verl's key that a new key passes for (same skeleton at the same place), None when there is none."""
    parts = key.split(".")
    for i in range(len(parts)):
        parent = ".".join(parts[:i])
        if (parent and tree.kind(parent) != "dict") or tree.kind(".".join(parts[:i + 1])) is not None:
            continue
        for sibling in tree.children(parent):
            if _skeleton(sibling) == _skeleton(parts[i]):
                return ".".join([*parts[:i], sibling])
        return None
    return None


def read(items: tuple[str, ...]) -> Reading:
    """Every item through Hydra's grammar, expanded into leaves, each resolved against verl's config (read once
    per tuple of strings: the gate, the recipe's arithmetic and the run key all ask)."""
    return _read(items) if all(isinstance(i, str) for i in items) else _read.__wrapped__(items)


@functools.cache
def _read(items: tuple[str, ...]) -> Reading:
    tree = verl_config.tree()
    return Reading(tuple(found if isinstance(found, Problem) else tuple(found)
                         for found in (_read_item(raw, tree) for raw in items)))


def _read_item(raw: object, tree: verl_config.VerlConfig) -> list[Leaf] | Problem:
    from hydra.errors import HydraException

    if not isinstance(raw, str):
        return _bad(f"{raw!r} must be a string: key=value, +key=value or ++key=value")
    item = raw.strip(" ")
    if (shape := secret_shapes.resolver_problem(item) or secret_shapes.credential_problem(item, _key_part(item))
            or (_HF_TOKEN_SHORT if _CREDENTIAL_VALUE.search(item) else None)):
        return _bad(f"{_key_part(item)} {shape}")  # never the item: it holds the value
    if found := _invisible(item):
        return _bad(f"the item for {_key_part(item)} carries {found[1]} at character {found[0]}: one override "
                    "is one line of visible text (a quoted value may hold spaces)")
    shown = _display(item)
    safe = not shown.startswith("the item for ")
    if not item.split("=", 1)[0].isascii():
        return _bad(f"{shown}: keys are ASCII names (letters, digits, _ and -): a look-alike letter names "
                    "another key than the one you read")
    full, casts = _parsers()
    try:
        parsed = full.parse_override(item)
    except HydraException as err:
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return _bad(f"{shown} must look like key=value, +key=value or ++key=value (Hydra's override grammar: "
                    f"{why[:200] if safe else 'not shown'})")
    if parsed.is_sweep_override():
        return _bad(f"{shown} is a sweep ({parsed.value_type.name.lower().replace('_', ' ')}): it asks for one "
                    "job per value, and this stack runs one; give one value")
    try:
        casts.parse_override(item)
    except HydraException as err:
        name = re.search(r"Unknown function '([^']*)'", str(err))
        return _bad(f"{shown} calls {name[1] if name else 'a function'}(): one run takes one value as typed; "
                    f"only the casts {', '.join(f + '()' for f in _CASTS)} are read")
    key = parsed.key_or_group
    if parsed.package is not None or "/" in key or (key in tree.groups and not isinstance(parsed.value(), dict)):
        return _bad(f"{shown} picks a config group of verl's (actor, rollout, data, ...): the recipe composes "
                    "verl's FSDP defaults (verl/trainer/config/ppo_trainer.yaml) and judges keys against them; "
                    "set the keys themselves")
    if not all(_SEGMENT.fullmatch(s) for s in key.split(".")) or key.split(".")[0].isdigit():
        return _bad(f"{shown} must look like key=value, +key=value or ++key=value with a dotted key of names "
                    "(letters, digits, _ and -)")
    op = {"ADD": "+", "FORCE_ADD": "++", "DEL": "~"}.get(parsed.type.name, "")
    if op == "~":
        return [Leaf(key, None, "", "~", item, not _exists(key, tree), key, shown)]
    value = parsed.value()
    typed = item.split("=", 1)[1] if not (isinstance(value, dict) and value) else None
    expanded = _expand(key, value, typed)
    if isinstance(expanded, str):
        return _bad(f"{shown}: {expanded}")
    leaves = [Leaf(k, v, text, op, item, not _exists(k, tree), key) for k, v, text in expanded]
    return [dataclasses.replace(leaf, shown=shown if safe else _shown(leaf.rendered())) for leaf in leaves]


def _relation(leaf: Leaf, table: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(the table's key, why, how the leaf reaches it) when the leaf's key is it, lies inside it or holds it."""
    key = leaf.key
    for owned, why in table.items():
        if key == owned:
            return owned, why, ""
        if key.startswith(owned + "."):
            return owned, why, f" ({key} is part of it)"
        if owned.startswith(key + "."):
            return owned, why, f" (by {'deleting' if leaf.op == '~' else 'setting'} {key}, which holds it)"
    return None


def _path_problem(leaf: Leaf, anchors: Mapping[str, tuple[str, bool]]) -> str | None:
    """Why a path-valued leaf's value leaves the run's own folders (None: null, or anchored inside one)."""
    if leaf.value is None:
        return None
    write = bool(_WRITE_NAME.search(leaf.key.rsplit(".", 1)[-1]))
    allowed = [(k, what) for k, (what, writable) in anchors.items() if writable or not write]
    m = _ANCHORED.fullmatch(leaf.value) if isinstance(leaf.value, str) else None
    rest = m["rest"] if m else ""
    if m and m["key"] in dict(allowed) and posixpath.normpath("/x" + rest) == "/x" + rest.rstrip("/") and \
            not any(p in (".", "..") for p in rest.split("/")):
        return None
    forms = " or ".join(f"${{{k}}}/<folder> ({what})" for k, what in allowed)
    return (f"sets the path {leaf.key} to {_shown(leaf.text)}, outside the run's own folders: write it as {forms}, "
            f"or null{' (a write: the weights are read-only)' if write and len(allowed) < len(anchors) else ''}")


def judge(items: tuple[str, ...], *, owned: Mapping[str, str],
          anchors: Mapping[str, tuple[str, bool]]) -> tuple[list[Leaf], list[Problem]]:
    """The leaves that passed, and a problem for every item or leaf that did not, in the items' order.

    `owned`: the caller's keys (key -> why, ending a sentence "... which <why>"), refused in any form;
    `anchors`: the caller's path keys a path-valued leaf may be written under (key -> (what it is, writable)).
    """
    tree = verl_config.tree()
    problems: list[Problem] = []
    kept: list[Leaf] = []
    for found in read(tuple(items)).items:
        if isinstance(found, Problem):
            problems.append(found)
            continue
        for leaf in found:
            if problem := _leaf_problem(leaf, kept, tree, owned, anchors):
                problems.append(_bad(problem))
            else:
                kept.append(leaf)
    return kept, problems


def _leaf_problem(leaf: Leaf, kept: list[Leaf], tree: verl_config.VerlConfig, owned: Mapping[str, str],
                  anchors: Mapping[str, tuple[str, bool]]) -> str | None:
    """Why one leaf is refused (credentials first: their messages never show a value), None when it is not."""
    if part := _credential_key(leaf.key, tree):
        return (f"{leaf.key} names a credential ({part}): the overrides are the job's entrypoint, in plain text on "
                "the Ray dashboard and in the state; use a Kubernetes secret instead (hfToken, wandbApiKey: "
                "`pulumi config set --secret`)")
    if any(secret_shapes.credential_problem(s, leaf.key) or _CREDENTIAL_VALUE.search(s) for s in _strings(leaf.value)):
        return f"{leaf.key} carries what looks like a credential; use a Kubernetes secret instead"
    if rel := _relation(leaf, owned):
        return f"{leaf.shown} overrides {rel[0]}{rel[2]}, which {rel[1]}"
    if rel := _relation(leaf, CODE_KEYS) or next(
            ((p, CODE_NAMES[p], "") for p in leaf.key.split(".") if p in CODE_NAMES), None):
        return (f"{leaf.shown} sets {rel[0]}, which can load code: {rel[1]}. A stack runs code of its own only as "
                f"its reward ({named('reward_file')}), contained")
    if leaf.new and (like := _confusable(leaf.key, tree)):
        return f"{leaf.shown} adds {leaf.key}, which passes for verl's {like}: a key must read as what it is"
    if leaf.op == "~":
        return (f"{leaf.shown} deletes {leaf.key} from verl's config: verl then fails on the missing key or reads "
                "another default; set the value you mean instead")
    segments = leaf.key.split(".")
    if (at := next((i for i, p in enumerate(segments) if _PATH_NAME.search(p) and not p.isdigit()), None)) \
            is not None:
        if at != len(segments) - 1:
            return f"{leaf.shown} sets the path {'.'.join(segments[:at + 1])} to a dict or list: a path is one string"
        if why := _path_problem(leaf, anchors):
            return f"{leaf.shown} {why}"
    if why := _unresolved(leaf, tree):
        return f"{leaf.shown}: {why}"
    for other in kept:
        if other.key == leaf.key:
            return f"{leaf.key} is set twice (the last would silently win)"
        if other.key.startswith(leaf.key + ".") or leaf.key.startswith(other.key + "."):
            return f"{leaf.key} and {other.key} are both set, one inside the other (the last would silently win)"
    return None
