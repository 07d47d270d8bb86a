"""Smoke-test the stack's reward function on real rows, contained: the offline command that runs your code.

    venv/bin/python -m tools.check_reward --stack dev [--config Pulumi.dev.yaml] [--timeout 120]

The plan and `pulumi preview`/`up` read the reward file without running it (components/scripts/reward_check.py);
the staging Job of `pulumi up` and this command run it. It loads the stack as the plan does, makes the calls
verl would make (two made-up responses, one stating the ground truth and one empty, for the first rows of the
local data), runs them in the jail of components/scripts/reward_jail.py, and prints what contained the reward
and, loudly, what could not on this machine, the reward's own output (bounded and escaped), and the verdict.
It loads no secret: the stack file's `secure:` values are never decrypted and PULUMI_CONFIG is never read.

Exit 0: the smoke test passed (or could not call the function only because the data is gs://);
2: a bad invocation or config, or a reward that failed the smoke test, each problem naming its key.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from components.scripts import reward_check, reward_jail


def _timeout(text: str) -> float:
    value = float(text)
    if not 1 <= value <= 3600:
        raise argparse.ArgumentTypeError("must be between 1 and 3600 seconds")
    return value


def main(argv: list[str] | None = None) -> int:
    from stacks import config as stack_config
    from stacks import dataset
    from tools import plan as plan_tool
    from tools import stack_file

    parser = argparse.ArgumentParser(prog="python -m tools.check_reward", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="stack name, e.g. dev")
    parser.add_argument("--config", type=Path, help="stack file (default: Pulumi.<stack>.yaml)")
    parser.add_argument("--timeout", type=_timeout, default=reward_jail.DEFAULT_TIMEOUT_S,
                        help=f"seconds for the import and every call (default {reward_jail.DEFAULT_TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    path = args.config or Path(f"Pulumi.{args.stack}.yaml")
    try:
        path = plan_tool.stack_path(args.stack, args.config)
        raw, secret_keys = plan_tool.read_stack_file(path, args.stack)
        cfg = stack_config.load(raw, args.stack, allow_placeholder_project=True, secret_keys=secret_keys)
    except plan_tool.UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (stack_file.StackFileError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except stack_config.ConfigError as err:
        print(f"error: {path.name}: {err}", file=sys.stderr)
        return 2
    task = cfg.task
    if task is None or task.reward is None:
        print(f"error: {path.name}: {stack_config.KEYS_BY_NAME['rewardFile'].full} is not set: the stack runs no "
              "reward code of yours (verl scores its data_source itself)", file=sys.stderr)
        return 2
    calls = dataset.smoke_cases(dataset.inspect_task(task))
    run = reward_jail.run(task.reward.local, task.reward_function, list(reward_check.KEYWORDS),
                          [c["kwargs"] for c in calls], args.timeout)
    result = reward_check.verdict(run.report, len(calls), args.timeout)
    lines, warnings, notes = reward_check.judge(result, dataset.names(task), calls)
    problems = dataset.reward_problems(lines, dataset.names(task))
    if not calls and result["status"] == "ok":
        notes.append(f"{task.reward.key} ({task.reward.label}): imported and its signature checked; not called on "
                     "rows: the data is gs://, which only the staging Job reads (it calls the reward on its copies)")
    held, missing = run.containment()
    print(f"reward {task.reward.key} ({task.reward.label}), function {task.reward_function}: {len(calls)} calls")
    print(*(f"jail: {line}" for line in held), sep="\n")
    print(*reward_check.output_lines(run.output, run.output_bytes), sep="\n")
    print(*notes, sep="\n")
    for line in missing:
        print(f"warning: NOT contained: {line}", file=sys.stderr)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
