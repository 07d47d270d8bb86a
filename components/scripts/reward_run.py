"""The reward's own process in the smoke test: loads the user's reward file and calls it, nothing else.

    python -I -B reward_run.py REWARD.py FUNCTION QUESTIONS_FD ANSWERS_FD

Started by the keeper (components/scripts/reward_jail.py) inside the jail: a throwaway folder holding a
copy of the reward, a fresh environment, no bytecode (-B), and the jail's limits. Everything after the
import of the reward is the user's code, so nothing this process says is a verdict: it answers each question
of the keeper (one JSON line in, one out, echoing the question's nonce) with a *description* of what happened,
and the trusted side (components/scripts/reward_check.py) judges the descriptions. The user's prints go to
stdout/stderr, which the trusted side shows bounded and escaped and never parses.

The file is loaded as verl loads it: importlib spec_from_file_location under the name "custom_module"
(volcengine/verl verl/trainer/ppo/reward.py get_custom_reward_fn @v0.6.1), and called with verl's keywords
(verl/workers/reward_manager/naive.py), which the keeper's questions carry. Standard library only.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import numbers
import os
import sys
import traceback

SHOWN_CHARS = 300  # of a repr or an exception's text: the trusted side bounds it again


def _where(err: BaseException, file: str) -> str:
    """The exception and the user's own line it came from."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == file]
    line = f" (line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
    return f"{type(err).__name__}: {err}"[:SHOWN_CHARS] + line[:SHOWN_CHARS]


def _repr(value: object) -> str:
    try:
        return repr(value)[:SHOWN_CHARS]
    except BaseException as err:  # noqa: BLE001 - a __repr__ of the user's
        return f"<unprintable {type(value).__name__}: {type(err).__name__}>"


def describe(value: object, depth: int = 0) -> dict:
    """What an answer is, as data the trusted side can judge: a number (with its value), a string, a dict
    (its keys and values, one level down) or something else; with its type's name and repr for messages."""
    shown = {"type": type(value).__name__, "repr": _repr(value)}
    if isinstance(value, numbers.Real):
        try:
            return {**shown, "kind": "number", "value": float(value)}
        except BaseException:  # noqa: BLE001 - a Real whose __float__ raises
            return {**shown, "kind": "other"}
    if isinstance(value, str):
        return {**shown, "kind": "string"}
    if isinstance(value, dict) and depth == 0:
        items = [[k if isinstance(k, str) else {"repr": _repr(k), "type": type(k).__name__},
                  describe(v, depth + 1)] for k, v in list(value.items())[:100]]
        return {**shown, "kind": "dict", "items": items}
    return {**shown, "kind": "other"}


def _missing(err: ModuleNotFoundError, file: str) -> dict:
    return {"kind": "missing_module", "module": str(err.name or err)[:SHOWN_CHARS], "detail": _where(err, file)}


def load(file: str, name: str, keywords: list[str]) -> tuple[dict, object]:
    """Import the file as verl does and check that the function takes the keywords verl calls it with;
    (what happened, the function or None)."""
    spec = importlib.util.spec_from_file_location("custom_module", file)
    if spec is None or spec.loader is None:
        return {"kind": "import_error", "detail": f"cannot load {os.path.basename(file)} as a Python module"}, None
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as err:
        return _missing(err, file), None
    except BaseException as err:  # noqa: BLE001 - a SyntaxError or SystemExit is the user's too
        return {"kind": "import_error", "detail": _where(err, file)}, None
    fn = getattr(module, name, None)
    if not callable(fn):
        defined = sorted(n for n, v in vars(module).items()
                         if inspect.isfunction(v) and v.__module__ == "custom_module")[:50]
        return {"kind": "no_function", "defined": defined}, None
    try:
        shown = f"{name}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        shown = name
    try:
        inspect.signature(fn).bind(**{k: None for k in keywords})
    except (TypeError, ValueError) as err:
        return {"kind": "bad_signature", "detail": f"{shown[:SHOWN_CHARS]} cannot take verl's keywords ({err})"}, None
    return {"kind": "loaded", "signature": shown[:SHOWN_CHARS]}, fn


def call(fn, kwargs: dict, file: str) -> dict:
    try:
        value = fn(**kwargs)
    except ModuleNotFoundError as err:
        return _missing(err, file)
    except BaseException as err:  # noqa: BLE001
        return {"kind": "raised", "detail": _where(err, file)}
    return {"kind": "answer", "value": describe(value)}


def main() -> int:
    file, name, questions_fd, answers_fd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    questions = os.fdopen(questions_fd, "r", encoding="utf-8")
    answers = os.fdopen(answers_fd, "w", encoding="utf-8")
    fn = None
    for line in questions:
        question = json.loads(line)
        if question["op"] == "load":
            said, fn = load(file, name, question["keywords"])
        elif question["op"] == "call" and fn is not None:
            said = call(fn, question["kwargs"], file)
        else:
            return 0
        answers.write(json.dumps({**said, "nonce": question["nonce"]}, default=str) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
