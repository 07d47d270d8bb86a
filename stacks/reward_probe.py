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
    scores = []
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
        scores.append(round(float(score), 4))
    return {"status": "ok", "scores": scores, "calls": len(cases)}


def main() -> int:
    request = json.load(sys.stdin)
    result = probe(request)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
