"""Reward of the example task: 1 for the reversed word after "####", 0.1 for the format alone.

verl calls it as compute_score(data_source=, solution_str=, ground_truth=, extra_info=) through
custom_reward_function.path/.name (docs/preparation/reward_function.rst @v0.6.1). Standard library
only: the file runs in the Ray workers' Python as it is.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"####\s*([A-Za-z]+)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    found = _ANSWER.findall(solution_str or "")
    if not found:
        return {"score": 0.0, "formatted": False}
    correct = found[-1].strip().lower() == str(ground_truth).strip().lower()
    return {"score": 1.0 if correct else 0.1, "formatted": True}
