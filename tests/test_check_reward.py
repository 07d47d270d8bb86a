"""tools.check_reward: the reward's smoke test on real rows, the one offline command that runs the user's code.

What the plan printed about the reward before issue 45 (a verdict on a few calls, the failing row and
response, the scores) comes from this command now, run in the jail (tests/test_reward_jail.py: what the jail
holds back). Every refusal is exit 2 with the key named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components.scripts import reward_jail
from stacks import dataset
from tools import check_reward

ROOT = Path(__file__).resolve().parent.parent
SIG = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
GOOD_REWARD = SIG + "    return 1.0\n"


def row(i: int, **changes) -> dict:
    base = {"data_source": "my/task", "prompt": [{"role": "user", "content": f"question {i}"}],
            "ability": "x", "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"index": i}}
    return {**base, **changes}


def stack(tmp_path: Path, reward: str | None, **keys: object) -> Path:
    """Pulumi.dev.yaml naming a 40/8-row task and, unless None, a reward file with this body (in tmp_path,
    made if need be)."""
    tmp_path.mkdir(exist_ok=True)
    for name, rows in (("t.parquet", 40), ("v.parquet", 8)):
        pq.write_table(pa.Table.from_pylist([row(i) for i in range(rows)]), tmp_path / name)
    files = {"dataTrainFile": str(tmp_path / "t.parquet"), "dataValFile": str(tmp_path / "v.parquet"),
             "grpoTrainBatchSize": 16, **keys}
    if reward is not None:
        (tmp_path / "given").mkdir()
        (tmp_path / "given" / "reward.py").write_text(reward)
        files["rewardFile"] = str(tmp_path / "given" / "reward.py")
    path = tmp_path / "Pulumi.dev.yaml"
    text = (ROOT / "Pulumi.dev.yaml").read_text().replace("  verl-gke:grpoTrainBatchSize: 64\n", "")
    path.write_text(text + "".join(f"  verl-gke:{k}: {json.dumps(v)}\n" for k, v in files.items()))
    return path


def check(capsys, path: Path, *extra: str) -> tuple[int, str, str]:
    rc = check_reward.main(["--stack", "dev", "--config", str(path), *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_example_reward_passes_with_its_scores_and_the_jail_named(tmp_path, capsys):
    config = tmp_path / "Pulumi.dev.yaml"
    text = (ROOT / "Pulumi.dev.yaml").read_text().replace("  verl-gke:grpoTrainBatchSize: 64\n", "")
    keys = {"dataTrainFile": "examples/word_reverse/train.parquet", "dataValFile": "examples/word_reverse/val.parquet",
            "rewardFile": "examples/word_reverse/reward.py", "grpoTrainBatchSize": 16}
    config.write_text(text + "".join(f"  verl-gke:{k}: {json.dumps(v)}\n" for k, v in keys.items()))
    rc, out, err = check(capsys, config)
    assert rc == 0, err
    assert "reward smoke test passed: reward.py:compute_score answered 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0 on 8 " \
           "made-up responses to real rows" in out
    assert "jail: a fresh environment (nothing inherited)" in out


@pytest.mark.parametrize("body, expected", [
    (SIG + "    return 1 / len(solution_str)\n",
     "compute_score raised on verl-gke:dataTrainFile (t.parquet) row 0 with the made-up response '': "
     "ZeroDivisionError: division by zero (line 2: return 1 / len(solution_str))"),
    (SIG + "    return 'yes'\n", "verl-gke:rewardFunction = 'compute_score': returned 'yes' (str)"),
    (SIG + "    return {'acc': 1.0}\n", "returned {'acc': 1.0} (dict)"),
    (SIG + "    return float('nan')\n", "returned nan (float)"),
    (SIG + "    return None\n", "returned None (NoneType)"),
    ("raise RuntimeError('at import')\n" + GOOD_REWARD,
     "verl-gke:rewardFile (reward.py): failed to import: RuntimeError: at import (line 1"),
    ("import os\n" + SIG + "    os._exit(3)\n", "the reward smoke test crashed (its process ended without answering"
                                                " (exit code 3)) on verl-gke:dataTrainFile (t.parquet) row 0"),
    # The made-up responses alternate: the ground truth stated, then an empty one (reward_check.cases).
    (SIG + "    return {'score': 1.0, 'acc': True} if solution_str else {'score': 0.0}\n",
     "answered a dict with 'score' (number) here, a dict with 'acc' (number), 'score' (number) on the first "
     "call on verl-gke:dataTrainFile (t.parquet) row 0 with the made-up response ''"),
    (SIG + "    return {'score': 1.0} if solution_str else 0.0\n",
     "answered a plain number here, a dict with 'score' (number) on the first call"),
    (SIG + "    return {'score': 1.0, 'pred': 'x' if solution_str else 0}\n",
     "answered a dict with 'pred' (number), 'score' (number) here, a dict with 'pred' (string)"),
    (SIG + "    return {'score': 1.0, 'reward': 1.0}\n", "key 'reward' is verl's own"),
    (SIG + "    return {'score': 1.0, 'pred': None}\n",
     "'pred' is None (NoneType): each extra value must be a number or a string"),
    (SIG + "    return {'score': 1.0, 3: 1}\n", "key 3 must be a string"),
])
def test_a_reward_that_fails_on_a_call_is_refused_naming_row_and_response(tmp_path, capsys, body, expected):
    rc, _, err = check(capsys, stack(tmp_path, body))
    assert rc == 2 and expected in err, err


def test_a_dict_with_score_is_accepted(tmp_path, capsys):
    rc, out, err = check(capsys, stack(tmp_path, "def compute_score(**kw):\n    return {'score': 0.5, 'n': 1}\n"))
    assert rc == 0, err
    assert "answered 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5 on 8 made-up responses" in out


def test_the_reward_is_called_with_real_rows_as_verl_calls_it(tmp_path, capsys):
    rc, out, err = check(capsys, stack(tmp_path, (
        "import json\n" + SIG +
        "    print('CALL', json.dumps([data_source, ground_truth, extra_info, solution_str[-4:]]))\n"
        "    return 1.0\n")))
    assert rc == 0, err
    calls = [json.loads(line.partition("CALL ")[2]) for line in out.splitlines() if "| CALL " in line]
    assert ["my/task", "0", {"index": 0, "num_turns": None, "rollout_reward_scores": {}}, "## 0"] in calls
    assert ["my/task", "0", {"index": 0, "num_turns": None, "rollout_reward_scores": {}}, ""] in calls
    assert len(calls) == 2 * (dataset.PROBE_ROWS + 1)


def test_a_hanging_reward_is_stopped_at_the_timeout(tmp_path, capsys):
    rc, _, err = check(capsys, stack(tmp_path, "import time\n" + SIG + "    time.sleep(600)\n"), "--timeout", "3")
    assert rc == 2
    assert "the reward smoke test got no answer within 3 s on verl-gke:dataTrainFile (t.parquet) row 0" in err


def test_a_module_missing_here_is_a_warning_unless_declared(tmp_path, capsys):
    body = SIG + "    import not_installed_here_pkg\n    return 1.0\n"
    rc, _, err = check(capsys, stack(tmp_path, body))
    assert rc == 0 and "imports 'not_installed_here_pkg', which is not installed here, so compute_score was not " \
                       "smoke-tested on verl-gke:dataTrainFile (t.parquet) row 0" in err
    rc, out, err = check(capsys, stack(tmp_path / "declared", body, rewardPackages=["not_installed_here_pkg"]))
    assert rc == 0 and "declared in rewardPackages" in out and "not_installed_here_pkg" not in err


def test_exception_text_and_output_reach_the_terminal_escaped(tmp_path, capsys):
    """Issue 45 item 6: a reward's exception text reached the terminal with raw escape characters."""
    rc, out, err = check(capsys, stack(tmp_path, (
        "import sys\nprint('\\x1b[2J\\x1b]0;owned\\x07\\r\\u202eevil')\n"
        "sys.stderr.write('\\x1b[31m')\n" + SIG + "    raise ValueError('\\x1b[2J\\x1b]0;owned\\x07')\n")))
    assert rc == 2
    for raw in ("\x1b", "\x07", "\r", "\u202e"):
        assert raw not in out and raw not in err
    assert "\\x1b[2J\\x1b]0;owned\\x07\\x0d\\u202eevil" in out
    assert "ValueError: \\x1b[2J\\x1b]0;owned\\x07" in err


def test_gs_data_leaves_the_calls_to_the_staging_job(tmp_path, capsys):
    path = stack(tmp_path, GOOD_REWARD, dataTrainFile="gs://their-data/t.parquet", dataValFile="gs://their-data/v.parquet",
                 dataTrainRows=40)
    rc, out, err = check(capsys, path)
    assert rc == 0, err
    assert "imported and its signature checked; not called on rows: the data is gs://" in out


def test_a_stack_without_a_reward_file_is_refused_naming_the_key(tmp_path, capsys):
    rc, _, err = check(capsys, stack(tmp_path, None, dataTrainFile="", dataValFile=""))
    assert rc == 2 and "verl-gke:rewardFile is not set" in err


def test_a_reward_the_gate_refuses_is_not_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(reward_jail, "run", lambda *a, **k: pytest.fail("the jail ran a reward the gate refused"))
    rc, _, err = check(capsys, stack(tmp_path, "def compute_score(x):\n    return 1.0\n"))
    assert rc == 2 and "verl-gke:rewardFunction = 'compute_score': compute_score(x) cannot take" in err


def test_a_layer_the_machine_lacks_is_said_out_loud(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(reward_jail, "UNSHARE", ("unshare-is-not-here", "--"))
    monkeypatch.setattr(reward_jail, "_NAMESPACES", {})
    rc, _, err = check(capsys, stack(tmp_path, GOOD_REWARD))
    assert rc == 0
    assert "warning: NOT contained: no namespaces (the unshare command (util-linux) is not installed): the " \
           "network is reachable" in err


def test_the_readmes_own_task_commands_run_as_written(tmp_path, capsys, monkeypatch):
    """The README's "Your own data and reward" block: its `pulumi config set` lines on the dev stack, then the
    reward check as written (the stack file read from a copy of the project's, where the lines write)."""
    import re
    import shlex

    from tools import plan as plan_tool

    section = (ROOT / "README.md").read_text().partition("## Your own data and reward")[2]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1).splitlines()
    keys = {words[3]: words[4] for words in map(shlex.split, block) if words[:3] == ["pulumi", "config", "set"]}
    assert set(keys) == {"dataTrainFile", "dataValFile", "rewardFile", "grpoTrainBatchSize"}
    text = (ROOT / "Pulumi.dev.yaml").read_text().replace("  verl-gke:grpoTrainBatchSize: 64\n", "")
    (tmp_path / "Pulumi.dev.yaml").write_text(text + "".join(f"  verl-gke:{k}: {v}\n" for k, v in keys.items()))
    monkeypatch.setattr(plan_tool, "ROOT", tmp_path)
    (command,) = [line for line in block if "tools.check_reward" in line]
    assert check_reward.main(shlex.split(command)[3:]) == 0, capsys.readouterr().err
    assert "reward smoke test passed: reward.py:compute_score" in capsys.readouterr().out

