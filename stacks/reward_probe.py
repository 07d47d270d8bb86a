"""Reward smoke test, run by stacks.dataset in its own process: never imported by the program.

    python -I reward_probe.py RESULT.json  < {"file", "function", "cases": [...]}

Loads the user's file the way verl does (importlib spec_from_file_location under the name
"custom_module", verl/trainer/ppo/reward.py get_custom_reward_fn @v0.6.1), checks that the named
function takes verl's keywords, calls it once per case and writes one verdict to RESULT.json (the
reward may print anything on stdout). Standard library only.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import numbers
import sys
import traceback

KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")  # naive.py's call


def _where(err: BaseException, file: str) -> str:
    """The exception and the user's own line it came from."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == file]
    line = f" (line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
    return f"{type(err).__name__}: {err}{line}"


def _number(value: object) -> bool:
    return isinstance(value, numbers.Real) and math.isfinite(float(value))


def probe(request: dict) -> dict:
    file, name, cases = request["file"], request["function"], request["cases"]
    spec = importlib.util.spec_from_file_location("custom_module", file)
    if spec is None or spec.loader is None:
        return {"status": "import_error", "detail": f"cannot load {file} as a Python module"}
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as err:
        return {"status": "missing_module", "module": err.name or str(err), "detail": _where(err, file)}
    except BaseException as err:  # noqa: BLE001 - a SyntaxError or SystemExit is the user's too
        return {"status": "import_error", "detail": _where(err, file)}
    fn = getattr(module, name, None)
    if not callable(fn):
        defined = sorted(n for n, v in vars(module).items()
                         if inspect.isfunction(v) and v.__module__ == "custom_module")
        return {"status": "no_function", "detail": f"functions defined: {', '.join(defined) or 'none'}"}
    try:
        shown = f"{name}{inspect.signature(fn)}"
        inspect.signature(fn).bind(**{k: None for k in KEYWORDS})
    except (TypeError, ValueError) as err:
        return {"status": "bad_signature", "detail": f"{shown if 'shown' in locals() else name} cannot take "
                                                     f"verl's keywords ({err})"}
    scores: list[float] = []
    shape: dict | None = None  # what the first call answered (_shape): every call must answer the same
    for case in cases:
        kwargs = {k: case[k] for k in KEYWORDS}
        try:
            value = fn(**kwargs)
        except ModuleNotFoundError as err:
            return {"status": "missing_module", "module": err.name or str(err), "detail": _where(err, file),
                    "case": case, "scores": scores}
        except BaseException as err:  # noqa: BLE001
            return {"status": "raised", "detail": _where(err, file), "case": case, "scores": scores}
        score = value.get("score") if isinstance(value, dict) else value
        if not _number(score) or (isinstance(value, dict) and "score" not in value):
            shown = repr(value)[:200]
            return {"status": "bad_return", "detail": f"{shown} ({type(value).__name__})", "case": case,
                    "scores": scores}
        if isinstance(value, dict) and (problem := _extra_problem(value)):
            return {"status": "bad_extra", "detail": problem, "case": case, "scores": scores}
        this = _shape(value)
        if scores and this != shape:
            return {"status": "inconsistent", "detail": f"{_show(this)} here, {_show(shape)} on the first call",
                    "case": case, "scores": scores}
        shape = this
        scores.append(round(float(score), 4))
    return {"status": "ok", "scores": scores, "calls": len(cases)}


# verl's reward manager puts every key of a dict answer in reward_extra_info, one list per key
# (naive.py); validation then asserts each list holds one value per response and adds its own "reward"
# list (ray_trainer.py _validate), and averages each key per prompt unless its first value is a string
# (metric_utils.py process_validation_metrics). So: the same keys on every call, no "reward", and each
# value a number or a string, always the same kind.
RESERVED = ("reward",)


def _extra_problem(value: dict) -> str | None:
    for key, item in value.items():
        if key in RESERVED:
            return (f"key {key!r} is verl's own: validation appends the score under it too, so its list "
                    "holds two values per response and the length check fails (ray_trainer.py _validate)")
        if not isinstance(key, str):
            return f"key {key!r} must be a string (verl logs it as a metric name)"
        if key != "score" and not isinstance(item, str) and not isinstance(item, numbers.Real):
            return (f"{key!r} is {item!r} ({type(item).__name__}): each extra value must be a number or a string "
                    "(verl averages it per prompt, metric_utils.py process_validation_metrics)")
    return None


def _shape(value: object) -> dict | None:
    """None for a plain number; for a dict, each key and whether its value is text or a number."""
    if not isinstance(value, dict):
        return None
    return {key: "string" if isinstance(item, str) else "number" for key, item in value.items()}


def _show(shape: dict | None) -> str:
    if shape is None:
        return "a plain number"
    return "a dict with " + ", ".join(f"{k!r} ({kind})" for k, kind in sorted(shape.items()))


def main() -> int:
    request = json.load(sys.stdin)
    result = probe(request)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
