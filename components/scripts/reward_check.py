"""What the project believes about the user's reward file: the trusted side of its checks.

- `static_check` reads the file without running it (the plan and `pulumi preview`/`up`, which never execute
  user code): a regular file of at most MAX_REWARD_BYTES that parses, binds `rewardFunction` at top level,
  and, where that is a plain `def` or lambda, takes verl's keywords. Modules it imports that are not
  installed here are listed (rewardPackages declares those the image provides).
- `cases` and `verdict` are the smoke test: the made-up responses to real rows the reward is called on, and
  the verdict on the answers the jail's keeper reported (components/scripts/reward_jail.py). Every rule on an
  answer is applied here, to a description of it: nothing the reward's process says is taken as a verdict.
- `judge` turns either result into the problems, warnings and notes the plan, tools.check_reward and the
  staging Job print, every text that came from the reward escaped (`printable`).

verl's contract: the file is loaded under the name "custom_module" (verl/trainer/ppo/reward.py
get_custom_reward_fn @v0.6.1) and called as fn(data_source=, solution_str=, ground_truth=, extra_info=),
answering a number or a dict with a numeric "score" (verl/workers/reward_manager/naive.py). Shipped to the
staging Job next to stage_data.py: standard library only.
"""

from __future__ import annotations

import ast
import importlib.machinery
import math
import os
import stat
import sys
import unicodedata
from dataclasses import dataclass

KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")  # naive.py's call
MAX_REWARD_BYTES = 1024 * 1024
SHOWN_CHARS = 600  # of any text that came from the reward, once escaped
# Names that can bind a module attribute without a statement the static check sees.
DYNAMIC_BINDERS = frozenset({"globals", "exec", "setattr", "vars", "__import__", "eval"})


def printable(text: object, limit: int = SHOWN_CHARS) -> str:
    """Text from the reward, safe for a terminal and a log: control, format and private-use characters (ESC,
    CR, BEL, bidirectional overrides, ...) escaped as \\xNN / \\uNNNN, newlines and tabs kept, cut at `limit`."""
    text = str(text)
    out = []
    for ch in text[:limit]:
        if ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp"):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out) + (f"... ({len(text):,} characters)" if len(text) > limit else "")


def output_lines(output: bytes, total: int, limit: int = 4000) -> list[str]:
    """The reward's stdout and stderr as the jail kept them (`total` bytes in all), escaped and cut at `limit`
    characters, each line marked as the reward's own."""
    if not total:
        return ["output of the reward: none"]
    kept = f", the first {len(output):,} kept" if total > len(output) else ""
    shown = printable(output.decode("utf-8", errors="backslashreplace"), limit)
    return [f"output of the reward ({total:,} bytes{kept}; escaped):", *(f"  | {line}" for line in shown.splitlines())]


# --- the file, read without running it --------------------------------------------------------------


def read_source(path: str) -> tuple[bytes | None, str]:
    """(the file's bytes, "") or (None, why not): a regular file (opened without blocking on a FIFO), read
    up to MAX_REWARD_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        return None, f"cannot read it ({err.strerror or err})"
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "is not a regular file"
        data = f.read(MAX_REWARD_BYTES + 1)
    if len(data) > MAX_REWARD_BYTES:
        return None, f"is larger than {MAX_REWARD_BYTES:,} bytes: a reward function is a small Python file"
    return data, ""


def _statements(body: list[ast.stmt]):
    """Module-level statements, into the blocks that run at import (if/try/with/for/while), not into
    function or class bodies."""
    for node in body:
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for name in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(node, name, []) or [])
        for handler in getattr(node, "handlers", []) or []:
            yield from _statements(handler.body)
        for case in getattr(node, "cases", []) or []:
            yield from _statements(case.body)


def _binds(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.Import | ast.ImportFrom):
        return any((a.asname or a.name.split(".")[0]) == name or a.name == "*" for a in node.names)
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return any(isinstance(n, ast.Name) and n.id == name for t in targets if t is not None for n in ast.walk(t))


_BINDING_KINDS = {"Assign": "an assignment", "AnnAssign": "an assignment", "AugAssign": "an assignment",
                  "Import": "an import", "ImportFrom": "an import", "ClassDef": "a class", "For": "a for loop"}


def signature_problem(args: ast.arguments) -> str | None:
    """Why a function with these parameters cannot be called with verl's keywords (inspect's wording), or None."""
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    for i, a in enumerate(positional):
        if i < first_default and (a in args.posonlyargs or a.arg not in KEYWORDS):
            return f"missing a required argument: {a.arg!r}"
    for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if default is None and a.arg not in KEYWORDS:
            return f"missing a required argument: {a.arg!r}"
    named = {a.arg for a in (*args.args, *args.kwonlyargs)}
    for k in KEYWORDS:
        if k not in named and args.kwarg is None:
            return f"got an unexpected keyword argument {k!r}"
    return None


def _missing_modules(tree: ast.Module) -> list[str]:
    """Top-level modules the file imports (outside a try that catches ImportError) that this Python cannot
    find in its standard library or site-packages (not the working folder: the jail has none)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    paths = [p for p in sys.path if p and any(os.path.realpath(p) == q or os.path.realpath(p).startswith(q + os.sep)
                                              for q in prefixes)]
    names: list[str] = []

    def guarded(handlers) -> bool:
        caught = {n.id for h in handlers for n in ast.walk(h.type) if isinstance(n, ast.Name)} if handlers else set()
        return any(h.type is None for h in handlers) or bool(caught & {"ImportError", "ModuleNotFoundError",
                                                                       "Exception", "BaseException"})

    def visit(node: ast.AST, optional: bool) -> None:
        if isinstance(node, ast.Import):
            names.extend(a.name.split(".")[0] for a in node.names if not optional)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and not optional:
            names.append(node.module.split(".")[0])
        if isinstance(node, ast.Try):
            for child in node.body:
                visit(child, optional or guarded(node.handlers))
            for child in (*node.handlers, *node.orelse, *node.finalbody):
                visit(child, optional)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, optional)

    visit(tree, False)
    return [n for n in dict.fromkeys(names) if n not in sys.stdlib_module_names and n not in sys.builtin_module_names
            and importlib.machinery.PathFinder.find_spec(n, paths) is None]


def static_check(path: str, function: str) -> dict:
    """The reward file read, parsed and searched for `function`, never run. {"status": "ok" | "unreadable" |
    "syntax" | "no_function" | "bad_signature" | "async", "detail", "signature", "unchecked", "missing_modules"}."""
    data, problem = read_source(path)
    if data is None:
        return {"status": "unreadable", "detail": problem}
    try:
        tree = ast.parse(data, filename=os.path.basename(path))
    except SyntaxError as err:
        line = f" (line {err.lineno}: {(err.text or '').strip()})" if err.lineno else ""
        return {"status": "syntax", "detail": printable(f"SyntaxError: {err.msg}{line}")}
    except (ValueError, RecursionError, MemoryError) as err:  # NUL bytes, nesting beyond the parser's stack
        return {"status": "syntax", "detail": printable(f"{type(err).__name__}: {err}")}
    top = list(_statements(tree.body))
    bindings = [n for n in top if _binds(n, function)]
    dynamic = any(isinstance(n, ast.Name) and n.id in DYNAMIC_BINDERS for s in top
                  if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for n in ast.walk(s)) \
        or any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in top)
    result = {"status": "ok", "detail": "", "signature": "", "unchecked": "",
              "missing_modules": _missing_modules(tree)}
    if not bindings:
        if dynamic:
            return {**result, "unchecked": "it is not bound by a statement the check can read (globals(), exec, "
                                           "setattr or a module __getattr__)"}
        defined = sorted({n.name for n in top if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)})
        return {**result, "status": "no_function", "detail": f"functions defined: {', '.join(defined) or 'none'}"}
    checked = []
    for node in bindings:
        fn = node.value if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda) else node
        if isinstance(fn, ast.AsyncFunctionDef):
            checked.append(("async", f"{function}({ast.unparse(fn.args)})", None))
        elif isinstance(fn, ast.FunctionDef | ast.Lambda) and not getattr(fn, "decorator_list", []):
            checked.append(("def", f"{function}({ast.unparse(fn.args)})", signature_problem(fn.args)))
        else:
            kind = _BINDING_KINDS.get(type(node).__name__, "a statement")
            kind = "a decorated def" if isinstance(fn, ast.FunctionDef) else f"{kind} (line {node.lineno})"
            return {**result, "unchecked": f"it is bound by {kind}, whose signature the check cannot read"}
    good = [c for c in checked if c[0] == "def" and c[2] is None]
    if good:
        return {**result, "signature": printable(good[-1][1])}
    kind, shown, problem = checked[0]
    if kind == "async":
        return {**result, "status": "async", "signature": printable(shown)}
    return {**result, "status": "bad_signature", "signature": printable(shown),
            "detail": printable(f"{shown} cannot take verl's keywords ({problem})")}


# --- the smoke test: the calls and the verdict on their answers -------------------------------------------


def cases(samples: dict[str, list[dict]], train_rows: int) -> list[dict]:
    """Two made-up responses per row (the first `train_rows` training rows and one validation row): one that
    states the ground truth, one that is empty. {"split", "row", "kwargs"} each."""
    out = []
    for split in ("train", "val"):
        for sample in samples.get(split, [])[: train_rows if split == "train" else 1]:
            truth = sample["reward_model"]["ground_truth"]
            extra = dict(sample.get("extra_info") or {})
            # What verl's naive reward manager adds to extra_info before the call (naive.py).
            extra.update(num_turns=None, rollout_reward_scores={})
            base = {"data_source": sample["data_source"], "ground_truth": truth, "extra_info": extra}
            stated = f"Let me work it out step by step.\nThe answer is {truth}.\n#### {truth}"
            for response in (stated, ""):
                out.append({"split": split, "row": sample["row"], "kwargs": {**base, "solution_str": response}})
    return out


# verl's reward manager puts every key of a dict answer in reward_extra_info, one list per key
# (naive.py); validation then asserts each list holds one value per response and adds its own "reward"
# list (ray_trainer.py _validate), and averages each key per prompt unless its first value is a string
# (metric_utils.py process_validation_metrics). So: the same keys on every call, no "reward", and each
# value a number or a string, always the same kind.
RESERVED = ("reward",)


def _text(value: object) -> str:
    return printable(value if isinstance(value, str) else repr(value))


def _number(d: dict) -> bool:
    value = d.get("value")
    return d.get("kind") == "number" and isinstance(value, int | float) and math.isfinite(value)


def _items(d: dict) -> list[tuple[object, dict]]:
    return [(k, v) for k, v in (d.get("items") or []) if isinstance(v, dict)] if d.get("kind") == "dict" else []


def _extra_problem(d: dict) -> str | None:
    for key, item in _items(d):
        if key in RESERVED:
            return (f"key {key!r} is verl's own: validation appends the score under it too, so its list "
                    "holds two values per response and the length check fails (ray_trainer.py _validate)")
        if not isinstance(key, str):
            shown = key.get("repr") if isinstance(key, dict) else key
            return f"key {_text(shown)} must be a string (verl logs it as a metric name)"
        if key != "score" and item.get("kind") not in ("string", "number"):
            return (f"{printable(repr(key))} is {_text(item.get('repr'))} ({_text(item.get('type'))}): each extra "
                    "value must be a number or a string (verl averages it per prompt, metric_utils.py "
                    "process_validation_metrics)")
    return None


def _shape(d: dict) -> dict | None:
    """None for a plain number; for a dict, each key and whether its value is text or a number."""
    if d.get("kind") != "dict":
        return None
    return {str(k): "string" if v.get("kind") == "string" else "number" for k, v in _items(d)}


def _show(shape: dict | None) -> str:
    if shape is None:
        return "a plain number"
    return "a dict with " + ", ".join(f"{printable(repr(k))} ({kind})" for k, kind in sorted(shape.items()))


_LOAD_KINDS = ("loaded", "import_error", "missing_module", "no_function", "bad_signature")
_CALL_KINDS = ("answer", "raised", "missing_module")


def verdict(report: list[dict], calls: int, timeout_s: float) -> dict:
    """The smoke test's result from the keeper's report (reward_jail.Run.report) on `calls` cases: {"status":
    "ok" | "timeout" | "crashed" | "protocol" | one of the answers' problems, "detail", "case", "scores",
    "calls"}. A status other than "ok" names the first case that failed, where there is one."""
    frames = [f for f in report if isinstance(f, dict)]
    end = frames[-1] if frames and frames[-1].get("frame") == "end" else None
    asked = [f for f in frames if f.get("frame") in ("answer", "broken")]
    if end is None:
        return {"status": "crashed", "detail": "the check's keeper ended without its report"}
    if not end.get("started"):
        return {"status": "crashed", "detail": f"the reward's process did not start ({_text(end.get('detail'))})"}
    scores: list[float] = []
    shape: dict | None = None
    for frame in asked:
        case = frame.get("case")
        at = {} if case is None else {"case": case, "scores": scores}
        if frame.get("frame") == "broken":
            why = frame.get("why")
            if why == "timeout":
                return {"status": "timeout", "detail": f"no answer within {timeout_s:g} s", **at}
            return {"status": "crashed", "detail": f"{_text(why)} (exit code {end.get('exit')})", **at}
        answer = frame.get("answer") if isinstance(frame.get("answer"), dict) else {}
        kind = answer.get("kind")
        if kind not in (_LOAD_KINDS if case is None else _CALL_KINDS):
            return {"status": "protocol", "detail": f"an answer of kind {_text(kind)}", **at}
        if kind == "loaded":
            continue
        if kind == "no_function":
            defined = answer.get("defined") if isinstance(answer.get("defined"), list) else []
            return {"status": kind, "detail": f"functions defined: {_text(', '.join(map(str, defined)) or 'none')}"}
        if kind == "missing_module":
            return {"status": kind, "module": _text(answer.get("module")), "detail": _text(answer.get("detail")), **at}
        if kind != "answer":
            return {"status": kind, "detail": _text(answer.get("detail")), **at}
        value = answer.get("value") if isinstance(answer.get("value"), dict) else {}
        items = dict((k, v) for k, v in _items(value) if isinstance(k, str))
        score = items.get("score", {}) if value.get("kind") == "dict" else value
        if not _number(score):
            return {"status": "bad_return", "detail": f"{_text(value.get('repr'))} ({_text(value.get('type'))})", **at}
        if problem := _extra_problem(value):
            return {"status": "bad_extra", "detail": problem, **at}
        this = _shape(value)
        if scores and this != shape:
            return {"status": "inconsistent", "detail": f"{_show(this)} here, {_show(shape)} on the first call", **at}
        shape = this
        scores.append(round(float(score["value"]), 4))
    if len(scores) < calls:
        return {"status": "crashed", "detail": f"{len(scores)} of {calls} calls answered (exit code {end.get('exit')})"}
    return {"status": "ok", "scores": scores, "calls": calls}


# --- what to say --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Names:
    """How messages name the reward and the data: config keys and file labels."""

    reward_key: str  # verl-gke:rewardFile
    reward_label: str  # reward.py, as the stack names it
    function_key: str  # verl-gke:rewardFunction
    function: str
    packages: tuple[str, ...]  # rewardPackages: modules only the image has
    files: dict[str, tuple[str, str]]  # split -> (config key, label)


_FUNCTION_PROBLEMS = {
    "no_function": "{where} defines no such function ({detail})",
    "bad_signature": "{detail}; verl calls it as fn(data_source=..., solution_str=..., ground_truth=..., "
                     "extra_info=...) (verl/workers/reward_manager/naive.py)",
    "async": "{where} defines {signature} as `async def`: verl calls it without awaiting and gets a coroutine, not "
             "a number (verl/workers/reward_manager/naive.py)",
    "bad_return": "returned {detail}{at}; verl needs a number or a dict with a numeric \"score\" "
                  "(verl/workers/reward_manager/naive.py)",
    "bad_extra": "its dict answer{at}: {detail}",
    "inconsistent": "answered {detail}{at}; verl keeps one list per key of a dict answer and its validation "
                    "asserts each holds one value per response (verl/trainer/ppo/ray_trainer.py _validate), so "
                    "every call must answer a number, or a dict with the same keys",
}


def judge(result: dict, names: Names, calls: list[dict] = (), *, here: str = "here",
          missing_is_problem: bool = False) -> tuple[list[str], list[str], list[str]]:
    """(problems, warnings, notes) from static_check's or verdict's result. `calls` are the cases the verdict
    was on; `here` names where a missing module was missing; `missing_is_problem`: in the image itself."""
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    where = f"{names.reward_key} ({names.reward_label})"
    status, detail = result.get("status"), result.get("detail", "")
    at = ""
    if isinstance(result.get("case"), int) and 0 <= result["case"] < len(calls):
        case = calls[result["case"]]
        key, label = names.files[case["split"]]
        at = f" on {key} ({label}) row {case['row']} with the made-up response {case['kwargs']['solution_str'][:60]!r}"
    if status == "ok" and result.get("calls"):
        notes.append(f"reward smoke test passed: {names.reward_label}:{names.function} answered "
                     f"{', '.join(map(str, result.get('scores', [])))} on {result['calls']} made-up responses to "
                     "real rows")
    elif status == "missing_module":
        module = result.get("module", "")
        text = (f"{where} imports {module!r}, which is not installed {here}, so {names.function} was not "
                f"smoke-tested{at}")
        if missing_is_problem:
            problems.append(f"{text}: verl would fail to load it; add the package to the image")
        elif module.split(".")[0] in names.packages:
            notes.append(text + f" ({module.split('.')[0]} is declared in rewardPackages: the image provides it)")
        else:
            warnings.append(text + ". Fine if the container image has it (verl's image ships torch, transformers, "
                            "numpy, ...): declare it in rewardPackages to say so")
    elif status in _FUNCTION_PROBLEMS:
        said = _FUNCTION_PROBLEMS[status].format(where=where, detail=detail, at=at,
                                                 signature=result.get("signature", names.function))
        problems.append(f"{names.function_key} = {names.function!r}: {said}")
    elif status == "unreadable":
        problems.append(f"{where}: {detail}")
    elif status == "syntax":
        problems.append(f"{where}: does not parse: {detail}")
    elif status in ("import_error", "raised"):
        what = "failed to import" if status == "import_error" else f"{names.function} raised"
        problems.append(f"{where}: {what}{at}: {detail}")
    elif status == "timeout":
        problems.append(f"{where}: the reward smoke test got {detail}{at}: its import or a call on a real row hangs or "
                        "is far too slow (verl calls it once per generated response)")
    elif status == "protocol":
        problems.append(f"{where}: the reward's process wrote to the smoke test's channel itself ({detail}){at}; its "
                        "answers are not believed")
    elif status != "ok":
        problems.append(f"{where}: the reward smoke test crashed ({detail}){at}")
    for module in result.get("missing_modules", ()):
        if module in names.packages:
            notes.append(f"{where} imports {module!r}, which is not installed here ({module} is declared in "
                         "rewardPackages: the image provides it)")
        else:
            warnings.append(f"{where} imports {module!r}, which is not installed here, so the offline smoke test "
                            "cannot call it here. Fine if the container image has it (verl's image ships torch, "
                            "transformers, numpy, ...): declare it in rewardPackages to say so")
    if result.get("unchecked"):
        notes.append(f"{where}: {names.function} not checked without running it: {result['unchecked']}")
    return problems, warnings, notes
