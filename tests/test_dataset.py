"""Bring your own task (issue 27): the stack's own parquet files and reward function.

The example task (examples/word_reverse) is planned and its reward read without running it; broken files
and rewards the gate can see without running them are refused by stacks.config.load (the plan's and
`pulumi preview`'s gate) with the key, file, row and column named (the smoke test that runs the reward:
tests/test_check_reward.py, tests/test_reward_jail.py); the figures of the data reach the sizing, the
memory model and the bounds; GSM8K stays the default. verl facts are read from verl's own source at the
pinned tag where it is installed.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog.datasets import GSM8K, VERL_SCORED_PREFIXES, VERL_SCORED_SOURCES
from catalog.paths import MOUNT
from recipe import grpo, sizing
from recipe.job_spec import JobSpec
from stacks import config, dataset
from tools import plan as plan_tool

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "word_reverse"
EXAMPLE_KEYS = {
    "verl-gke:dataTrainFile": "examples/word_reverse/train.parquet",
    "verl-gke:dataValFile": "examples/word_reverse/val.parquet",
    "verl-gke:rewardFile": "examples/word_reverse/reward.py",
    "verl-gke:grpoTrainBatchSize": "16",
}


def dev_raw(**extra: str) -> dict[str, str]:
    raw, _ = plan_tool.read_stack_file(ROOT / "Pulumi.dev.yaml")
    raw.update(EXAMPLE_KEYS)
    raw.update({f"verl-gke:{k}": v for k, v in extra.items()})
    return raw


def load(**extra: str) -> config.StackConfig:
    return config.load(dev_raw(**extra), "dev", allow_placeholder_project=True)


def refused(**extra: str) -> str:
    with pytest.raises(config.ConfigError) as err:
        load(**extra)
    return str(err.value)


def row(i: int, **changes) -> dict:
    base = {"data_source": "my/task", "prompt": [{"role": "user", "content": f"question {i}"}],
            "ability": "x", "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"index": i}}
    return {**base, **changes}


def write(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> str:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return str(path)


def reward_file(tmp_path: Path, body: str, name: str = "reward.py") -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


GOOD_REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"


@pytest.fixture
def files(tmp_path):
    """A valid 40/8-row task in tmp_path: returns the keys that name it."""
    return {"dataTrainFile": write(tmp_path / "t.parquet", [row(i) for i in range(40)]),
            "dataValFile": write(tmp_path / "v.parquet", [row(i) for i in range(8)]),
            "rewardFile": reward_file(tmp_path, GOOD_REWARD), "grpoTrainBatchSize": "16"}


# --- the example task ------------------------------------------------------------------------------


def test_example_task_is_read_and_its_reward_checked_without_running_it():
    cfg = load()
    assert cfg.task is not None and cfg.data.train_rows == 56 and cfg.data.val_rows == 13
    notes = "\n".join(cfg.task_notes)
    assert "compute_score(data_source, solution_str, ground_truth, extra_info=None) read without running it" in notes
    assert "estimated without the tokenizer" in notes
    assert cfg.warnings == ()


def test_example_task_plan_uploads_content_addressed_and_passes_the_files_to_verl():
    raw = dev_raw()
    p = plan_tool.build_plan("dev", raw, [])
    objects = {r["name"]: r for r in p["resources"] if r["type"] == "gcp:storage/bucketObject:BucketObject"}
    digest = {n: hashlib.sha256((EXAMPLE / n).read_bytes()).hexdigest()
              for n in ("train.parquet", "val.parquet", "reward.py")}
    assert {o["inputs"]["name"] for o in objects.values()} == {
        f"tasks/{digest['train.parquet']}/train.parquet", f"tasks/{digest['val.parquet']}/val.parquet",
        f"tasks/{digest['reward.py']}/reward.py"}
    bucket = next(r for r in p["resources"] if r["type"] == "gcp:storage/bucket:Bucket")
    assert all(o["inputs"]["bucket"] == bucket["inputs"]["name"] for o in objects.values())
    assert objects["task-files-train"]["inputs"]["source"]["path"] == "examples/word_reverse/train.parquet"
    job = next(r for r in p["resources"] if r["type"].endswith("RayJob"))
    overrides = JobSpec.from_dict(p["job"]).trainer.overrides
    for override in (f"data.train_files={MOUNT}/tasks/{digest['train.parquet']}/train.parquet",
                     f"data.val_files={MOUNT}/tasks/{digest['val.parquet']}/val.parquet",
                     f"custom_reward_function.path={MOUNT}/tasks/{digest['reward.py']}/reward.py",
                     "custom_reward_function.name=compute_score", "data.train_batch_size=16"):
        assert override in overrides, override
    # The job waits for the uploads; the staging Job does not stage GSM8K, and smoke-tests the uploaded reward
    # (step "task") once the uploads are in.
    assert {o["urn"] for o in objects.values()} <= set(job["dependsOn"])
    stage = next(r for r in p["resources"] if r["type"] == "kubernetes:batch/v1:Job")
    args = stage["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--steps") + 1] == "verl,model,task"
    reward = json.loads(args[args.index("--task") + 1])["reward"]
    assert reward["path"] == f"{MOUNT}/tasks/{digest['reward.py']}/reward.py"
    assert [f["path"] for f in reward["data"]] == [f"{MOUNT}/tasks/{digest['train.parquet']}/train.parquet",
                                                   f"{MOUNT}/tasks/{digest['val.parquet']}/val.parquet"]
    prep = next(r for r in p["resources"] if r["type"] == "verl-gke:data_prep:DataPrep")
    assert {o["urn"] for o in objects.values()} <= set(prep["dependsOn"])
    assert p["dataset"]["train_rows"] == 56 and p["sizing"]["steps_per_epoch"] == 56 // 16


def test_gsm8k_stays_the_default():
    raw, _ = plan_tool.read_stack_file(ROOT / "Pulumi.dev.yaml")
    cfg = config.load(raw, "dev", allow_placeholder_project=True)
    assert cfg.task is None and cfg.data is GSM8K
    p = plan_tool.build_plan("dev", raw, [])
    assert not [r for r in p["resources"] if "task" in r["type"] or r["type"].endswith("BucketObject")]
    stage = next(r for r in p["resources"] if r["type"] == "kubernetes:batch/v1:Job")
    assert "--steps" not in stage["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [o for o in JobSpec.from_dict(p["job"]).trainer.overrides if "custom_reward_function" in o]


def test_an_unchanged_file_keeps_its_object_and_a_changed_one_gets_a_new_one(tmp_path, files):
    first = load(**files).task
    copy = tmp_path / "elsewhere.parquet"
    copy.write_bytes(Path(files["dataTrainFile"]).read_bytes())
    assert load(**{**files, "dataTrainFile": str(copy)}).task.train.object_name == first.train.object_name
    write(copy, [row(i) for i in range(41)])
    assert load(**{**files, "dataTrainFile": str(copy)}).task.train.object_name != first.train.object_name


# --- the data's figures drive the sizing, memory model and bounds -----------------------------------


def test_sizing_and_memory_read_the_data_not_gsm8k(tmp_path, files):
    long_text = "word " * 300  # ~1500 bytes: ~380 tokens by the estimate
    files["dataTrainFile"] = write(tmp_path / "long.parquet", [
        row(i, prompt=[{"role": "user", "content": long_text}]) for i in range(40)])
    cfg = load(**files)
    assert cfg.data.train_rows == 40 and cfg.data.val_rows == 8
    assert 350 < cfg.data.mean_prompt_tokens < 420
    z = sizing.run_sizing(cfg)
    assert z.steps_per_epoch == 40 // 16
    samples = 16 * cfg.grpo.rollout_n
    assert z.rollout_tokens_per_step == round(samples * (cfg.data.mean_prompt_tokens + cfg.data.mean_response_tokens))
    assert grpo.tokens_per_sequence(cfg.grpo, cfg.data) != grpo.tokens_per_sequence(cfg.grpo)  # not GSM8K's 370


def test_batch_bound_follows_the_rows(files):
    assert "verl-gke:grpoTrainBatchSize = 41: must be at most 40 (the 40 rows of dataTrainFile)" in \
        refused(**{**files, "grpoTrainBatchSize": "41"})


def test_overlong_prompts_are_counted_and_enough_rows_must_remain(tmp_path, files):
    rows = [row(i) for i in range(30)] + [row(i, prompt=[{"role": "user", "content": "x" * 4000}])
                                          for i in range(30, 40)]
    files["dataTrainFile"] = write(tmp_path / "mixed.parquet", rows)
    cfg = load(**files)
    assert cfg.data.train_rows == 30 and cfg.data.dropped_rows == 10
    assert any("10 of 40 rows would be dropped" in w and "grpoMaxPromptLength = 512" in w for w in cfg.warnings)
    text = refused(**{**files, "grpoTrainBatchSize": "32"})
    assert "grpoTrainBatchSize = 32: exceeds the 30 mixed.parquet training rows (after the 10 overlong" in text
    assert "every row of verl-gke:dataTrainFile" in refused(**{**files, "grpoMaxPromptLength": "20"})


# --- broken data: key, file, row, column ------------------------------------------------------------


def test_missing_column(tmp_path, files):
    files["dataTrainFile"] = write(tmp_path / "t.parquet", [{k: v for k, v in row(i).items() if k != "reward_model"}
                                                           for i in range(40)])
    text = refused(**files)
    assert "verl-gke:dataTrainFile (t.parquet), column reward_model: missing" in text


def test_prompt_as_plain_text_is_refused_by_type(tmp_path, files):
    files["dataValFile"] = write(tmp_path / "v.parquet", [row(i, prompt="what is 2+2?") for i in range(8)])
    assert "verl-gke:dataValFile (v.parquet), column prompt: is string, must be a list of chat messages" in \
        refused(**files)


@pytest.mark.parametrize("bad, where", [
    ({"reward_model": {"style": "rule", "ground_truth": None}}, "row 3, column reward_model.ground_truth"),
    ({"prompt": [{"role": "robot", "content": "hi"}]}, "row 3, column prompt[0].role: is 'robot'"),
    ({"prompt": []}, "row 3, column prompt: is [], must hold at least one message"),
    ({"data_source": ""}, "row 3, column data_source: is '', must be a non-empty string"),
])
def test_a_bad_row_is_named(tmp_path, files, bad, where):
    rows = [row(i) for i in range(40)]
    rows[3] = row(3, **bad)
    files["dataTrainFile"] = write(tmp_path / "t.parquet", rows)
    assert f"verl-gke:dataTrainFile (t.parquet), {where}" in refused(**files)


def test_not_parquet_and_missing_files(tmp_path, files):
    junk = tmp_path / "junk.parquet"
    junk.write_text("data_source,prompt\n")
    assert "(junk.parquet): not a parquet file verl can read" in refused(**{**files, "dataTrainFile": str(junk)})
    assert "verl-gke:dataValFile = 'nope.parquet': no such file" in refused(**{**files, "dataValFile": "nope.parquet"})
    assert "must be a local path" in refused(**{**files, "dataTrainFile": "https://example.com/t.parquet"})


def test_keys_that_need_each_other(files):
    assert "verl-gke:dataValFile = '': must be set with dataTrainFile" in refused(dataValFile="")
    raw, _ = plan_tool.read_stack_file(ROOT / "Pulumi.dev.yaml")
    raw["verl-gke:rewardFile"] = files["rewardFile"]
    with pytest.raises(config.ConfigError, match="rewardFile = .*needs dataTrainFile"):
        config.load(raw, "dev", allow_placeholder_project=True)
    assert "verl-gke:rewardFunction = 'my_fn': only applies with rewardFile" in \
        refused(rewardFile="", rewardFunction="my_fn", dataTrainFile=files["dataTrainFile"])
    assert "verl-gke:rewardFunction = 'not a name'" in refused(rewardFunction="not a name")


def test_bounded_scan_reads_at_most_scan_rows(tmp_path):
    rows = [row(i) for i in range(50)]
    rows[45] = row(45, data_source=None)
    reading, problems = dataset.read_parquet("k", Path(write(tmp_path / "t.parquet", rows)), scan_rows=40)
    assert reading.rows == 50 and reading.scanned == 40 and problems == []
    _, problems = dataset.read_parquet("k", tmp_path / "t.parquet", scan_rows=50)
    assert problems and "row 45, column data_source" in problems[0]


def test_unscored_data_source_without_reward_file(tmp_path, files):
    files["rewardFile"] = ""
    assert ("row 0, column data_source: 'my/task' has no built-in scorer in verl" in refused(**files))
    files["dataTrainFile"] = write(tmp_path / "g.parquet", [row(i, data_source="openai/gsm8k") for i in range(40)])
    files["dataValFile"] = write(tmp_path / "gv.parquet", [row(i, data_source="openai/gsm8k") for i in range(8)])
    assert load(**files).task.reward is None


# --- the reward, read without running it --------------------------------------------------------------
# What only a call shows (an exception, a wrong answer, a hang) is the smoke test's: tests/test_check_reward.py.


@pytest.mark.parametrize("body, expected", [
    ("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n",
     "verl-gke:rewardFunction = 'compute_score': verl-gke:rewardFile (reward.py) defines no such function "
     "(functions defined: score)"),
    ("def compute_score(solution, truth):\n    return 1.0\n",
     "verl-gke:rewardFunction = 'compute_score': compute_score(solution, truth) cannot take verl's keywords "
     "(missing a required argument: 'solution')"),
    ("def compute_score(data_source, solution_str, /, ground_truth, extra_info=None):\n    return 1.0\n",
     "missing a required argument: 'data_source'"),
    ("def compute_score(data_source, solution_str, ground_truth):\n    return 1.0\n",
     "got an unexpected keyword argument 'extra_info'"),
    ("compute_score = lambda data_source, solution_str: 1.0\n", "got an unexpected keyword argument 'ground_truth'"),
    ("async def compute_score(**kw):\n    return 1.0\n", "as `async def`: verl calls it without awaiting"),
    ("import json\ndef broken(:\n", "verl-gke:rewardFile (reward.py): does not parse: SyntaxError: invalid syntax "
                                    "(line 2: def broken(:)"),
    ("x = 1\0\n", "verl-gke:rewardFile (reward.py): does not parse:"),
    ("x = '\x1b[2J'\n(\n", "does not parse: SyntaxError"),
])
def test_a_reward_the_gate_can_read_as_broken_is_refused(tmp_path, files, body, expected):
    files["rewardFile"] = reward_file(tmp_path, body)
    message = refused(**files)
    assert expected in message and "\x1b" not in message


@pytest.mark.parametrize("body, unchecked", [
    ("from helpers import *\n", "bound by an import (line 1)"),
    ("import functools\n@functools.lru_cache\ndef compute_score(**kw):\n    return 1.0\n", "a decorated def"),
    ("globals()['compute_score'] = lambda **kw: 1.0\n", "globals(), exec, setattr or a module __getattr__"),
    ("class compute_score:\n    pass\n", "bound by a class (line 1)"),
])
def test_a_binding_the_gate_cannot_read_is_left_to_the_smoke_test(tmp_path, files, body, unchecked):
    files["rewardFile"] = reward_file(tmp_path, body)
    assert any(unchecked in n and "not checked without running it" in n for n in load(**files).task_notes)


def test_conditional_and_plain_defs_are_both_read(tmp_path, files):
    files["rewardFile"] = reward_file(tmp_path, (
        "try:\n    import sympy\nexcept ImportError:\n    sympy = None\n"
        "if sympy:\n    def compute_score(solution_str, ground_truth, data_source, extra_info):\n        return 1.0\n"
        "else:\n    def compute_score(**kw):\n        return 0.0\n"))
    cfg = load(**files)
    assert cfg.warnings == ()  # an import under `except ImportError` is optional, not a missing package
    assert any("compute_score(**kw) read without running it" in n for n in cfg.task_notes)


def test_a_reward_file_larger_than_the_bound_is_refused_unread(tmp_path, files):
    from components.scripts import reward_check

    files["rewardFile"] = reward_file(tmp_path, GOOD_REWARD + "#" * reward_check.MAX_REWARD_BYTES)
    assert f"is larger than {reward_check.MAX_REWARD_BYTES:,} bytes" in refused(**files)


def test_a_package_only_in_the_image_is_a_warning_or_declared(files, tmp_path):
    files["rewardFile"] = reward_file(tmp_path, "import not_installed_here_pkg\n" + GOOD_REWARD)
    cfg = load(**files)
    assert any("imports 'not_installed_here_pkg', which is not installed here" in w for w in cfg.warnings)
    cfg = load(**files, rewardPackages='["not_installed_here_pkg"]')
    assert cfg.warnings == ()
    assert any("declared in rewardPackages" in n for n in cfg.task_notes)


def test_a_project_module_counts_as_not_installed(files, tmp_path):
    """The jail's Python has the standard library and site-packages, not the project (or any working folder)."""
    files["rewardFile"] = reward_file(tmp_path, "import stacks.keys\n" + GOOD_REWARD)
    assert any("imports 'stacks', which is not installed here" in w for w in load(**files).warnings)


def test_the_plan_and_preview_never_run_the_reward(files, tmp_path, capsys):
    """Issue 45: the gate ran the user's reward unconfined inside `pulumi preview`/`up` and the plan."""
    from stacks.compose import program
    from tools import mocking

    ran = tmp_path / "ran"
    files["rewardFile"] = reward_file(tmp_path, (
        f"open({str(ran)!r}, 'a').write('imported\\n')\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        f"    open({str(ran)!r}, 'a').write('called\\n')\n    return 1.0\n"))
    stack = write_stack(tmp_path, files)
    assert plan_tool.main(["--stack", "dev", "--config", str(stack), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert not ran.exists()
    assert "reward smoke test (your code, run contained): venv/bin/python -m tools.check_reward --stack=dev" in \
        capsys.readouterr().out
    mocking.run(lambda: program(allow_placeholder_project=True), dev_raw(**files), "dev", [], project=config.PROJECT,
                preview=True)
    assert not ran.exists()


def test_extra_overrides_cannot_set_the_reward():
    assert "comes from verl-gke:rewardFile" in refused(
        grpoExtraOverrides='["custom_reward_function.path=/data/x.py"]')


@pytest.mark.parametrize("override", [
    "data.prompt_key=question", "data.reward_fn_key=source", "reward_model.reward_manager=batch",
    "+custom_reward_function.reward_kwargs.scale=2", "++custom_reward_function.reward_kwargs={scale:2}",
])
def test_extra_overrides_cannot_change_what_the_task_checks_assume(override):
    """The checks read `prompt` and `data_source` and call the reward as the naive manager does."""
    message = refused(grpoExtraOverrides=json.dumps([override]))
    assert f"verl-gke:grpoExtraOverrides: {override!r} changes" in message
    assert "with verl-gke:dataTrainFile" in message


def test_gsm8k_stacks_keep_those_overrides():
    raw, _ = plan_tool.read_stack_file(ROOT / "Pulumi.dev.yaml")
    raw["verl-gke:grpoExtraOverrides"] = json.dumps(["reward_model.reward_manager=batch"])
    cfg = config.load(raw, "dev", allow_placeholder_project=True)
    assert cfg.task is None and "reward_model.reward_manager=batch" in cfg.grpo.extra_overrides


def test_the_assumed_defaults_are_verls():
    import yaml

    data = yaml.safe_load(_verl_file("trainer/config/data/legacy_data.yaml").read_text())
    assert (data["prompt_key"], data["reward_fn_key"]) == ("prompt", "data_source")
    reward_model = yaml.safe_load(_verl_file("trainer/config/reward_model/reward_model.yaml").read_text())
    assert reward_model["reward_manager"] == "naive"


# --- upstream: verl's own source at the pinned tag ---------------------------------------------------


def _verl_file(relative: str) -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed: pip install --no-deps -r requirements-verl-test.txt")
    return Path(spec.submodule_search_locations[0]) / relative


def test_scored_sources_match_verls_default_compute_score():
    tree = ast.parse(_verl_file("utils/reward_score/__init__.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "default_compute_score")
    literals, prefixes = set(), set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "data_source":
            literals |= {c.value for c in ast.walk(node.comparators[0]) if isinstance(c, ast.Constant)}
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "startswith":
            prefixes |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    assert literals == VERL_SCORED_SOURCES and prefixes == set(VERL_SCORED_PREFIXES)


def test_the_probe_loads_the_file_as_verl_does():
    source = _verl_file("trainer/ppo/reward.py").read_text()
    assert 'spec_from_file_location("custom_module", file_path)' in source
    naive = _verl_file("workers/reward_manager/naive.py").read_text()
    call = naive[naive.index("score = self.compute_score("):]
    call = call[:call.index(")")]
    assert [k for k in ("data_source", "solution_str", "ground_truth", "extra_info") if f"{k}=" in call] == \
        list(dataset_keywords())
    assert 'reward = score["score"]' in naive


def dataset_keywords() -> tuple[str, ...]:
    from components.scripts import reward_check
    return reward_check.KEYWORDS


def test_task_overrides_compose_into_verls_config():
    hydra = pytest.importorskip("hydra")
    del hydra
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    config_dir = _verl_file("trainer/config")
    cfg = load()
    from catalog.paths import bucket_paths
    overrides = grpo.overrides(cfg.grpo, stack="dev", nnodes=1, gpus_per_node=2,
                               paths=bucket_paths("dev", cfg.model, cfg.verl_version), task=cfg.task)
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        composed = compose(config_name="ppo_trainer", overrides=overrides)
    assert OmegaConf.select(composed, "custom_reward_function.path") == cfg.task.reward.in_pod
    assert OmegaConf.select(composed, "custom_reward_function.name") == "compute_score"
    assert OmegaConf.select(composed, "data.train_files") == cfg.task.train.in_pod


def write_stack(tmp_path: Path, files: dict[str, str]) -> Path:
    """Pulumi.dev.yaml with the task's keys, in tmp_path."""
    stack_file = tmp_path / "Pulumi.dev.yaml"
    text = (ROOT / "Pulumi.dev.yaml").read_text().replace("  verl-gke:grpoTrainBatchSize: 64\n", "")
    stack_file.write_text(text + "".join(f"  verl-gke:{k}: {json.dumps(v)}\n" for k, v in files.items()))
    return stack_file


def test_the_plan_exits_2_naming_file_row_and_column(tmp_path, files, capsys):
    rows = [row(i) for i in range(40)]
    rows[7] = row(7, reward_model={"style": "rule", "ground_truth": None})
    files["dataTrainFile"] = write(tmp_path / "t.parquet", rows)
    stack_file = write_stack(tmp_path, files)
    assert plan_tool.main(["--stack", "dev", "--config", str(stack_file), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "verl-gke:dataTrainFile (t.parquet), row 7, column reward_model.ground_truth" in err
    assert not (tmp_path / "out" / "plan.json").exists()


def test_pulumi_preview_refuses_before_registering_anything(tmp_path, files):
    from stacks.compose import program
    from tools import mocking

    files["rewardFile"] = reward_file(tmp_path, "def compute_score(solution):\n    return 1.0\n")
    raw = dev_raw(**files)
    # The program's gate raises before its first registration: the run fails, nothing is created.
    with pytest.raises(Exception, match="compute_score\\(solution\\) cannot take verl's keywords"):
        mocking.run(lambda: program(allow_placeholder_project=True), raw, "dev", [],
                    project=config.PROJECT, preview=True)


# --- gs:// train/validation files: copied in and checked by the staging Job ---------------------


GS_TRAIN, GS_VAL = "gs://their-data/sets/train.parquet", "gs://their-data/sets/val.parquet"


def gs_plan(**extra: str) -> dict:
    raw = dev_raw(dataTrainFile=GS_TRAIN, dataValFile=GS_VAL, dataTrainRows="4000", **extra)
    return plan_tool.build_plan("dev", raw, [])


def test_gs_files_are_not_read_offline_and_say_checked_in_staging():
    cfg = load(dataTrainFile=GS_TRAIN, dataValFile=GS_VAL, dataTrainRows="4000")
    assert cfg.task.train.source == GS_TRAIN and cfg.task.train.local is None
    assert cfg.data.train_rows == 4000 and cfg.data.mean_prompt_tokens == cfg.grpo.max_prompt_length
    assert "checked in staging" in cfg.data.lengths_basis
    notes = "\n".join(cfg.task_notes)
    assert f"{GS_TRAIN}: not read by the plan" in notes and "checked in staging" in notes
    # The reward file is still read and its signature checked; the staging Job calls it on the copies.
    assert "read without running it" in notes
    p = gs_plan()
    report = plan_tool.report(p)
    assert "checked in staging" in report and "4,000 training rows" in report
    assert p["sizing"]["steps_per_epoch"] == 4000 // 16


def test_gs_files_are_copied_by_the_staging_job_with_a_read_grant():
    p = gs_plan()
    by_type = lambda t: [r for r in p["resources"] if r["type"] == t]  # noqa: E731
    digest = {u: hashlib.sha256((u + "\n" + n).encode()).hexdigest()
              for u, n in ((GS_TRAIN, "train.parquet"), (GS_VAL, "val.parquet"))}
    dest = {GS_TRAIN: f"{MOUNT}/tasks/gs-{digest[GS_TRAIN]}/train.parquet",
            GS_VAL: f"{MOUNT}/tasks/gs-{digest[GS_VAL]}/val.parquet"}
    # Only the reward is uploaded; the data is copied in by the staging Job.
    assert [o["inputs"]["name"].rsplit("/", 1)[1] for o in by_type("gcp:storage/bucketObject:BucketObject")] == [
        "reward.py"]
    members = by_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    (grant,) = [g for g in members if g["inputs"]["bucket"] == "their-data"]
    pods = next(g for g in members if g["name"] == "storage-bucket-access")
    assert grant["inputs"]["role"] == "roles/storage.objectViewer"
    assert grant["inputs"]["member"] == pods["inputs"]["member"]  # the pods' (staging) identity, read-only
    # The staging component waits for the grant (its children wait for its registration, which waits for it).
    assert grant["urn"] in next(r for r in by_type("verl-gke:data_prep:DataPrep"))["dependsOn"]
    stage = next(r for r in by_type("kubernetes:batch/v1:Job"))
    container = stage["inputs"]["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--steps") + 1] == "verl,model,task"
    spec = json.loads(args[args.index("--task") + 1])
    assert [(f["source"], f["path"], f["rows"]) for f in spec["files"]] == [
        (GS_TRAIN, dest[GS_TRAIN], 4000), (GS_VAL, dest[GS_VAL], None)]
    assert spec["train_batch_size"] == 16 and spec["max_prompt_length"] == load().grpo.max_prompt_length
    assert spec["scored_sources"] is None  # a reward file is set
    assert "task-source-their-data" in spec["files"][0]["grant"]
    rules = stage["inputs"]["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"]
    assert 5 in rules  # a missing file or failed check is not retried
    cm = next(r for r in by_type("kubernetes:core/v1:ConfigMap") if "stage_data.py" in r["inputs"]["data"])
    assert cm["inputs"]["data"]["task_check.py"] == (ROOT / "components" / "scripts" / "task_check.py").read_text()
    overrides = JobSpec.from_dict(p["job"]).trainer.values()
    assert (overrides["data.train_files"], overrides["data.val_files"]) == (dest[GS_TRAIN], dest[GS_VAL])


def test_the_stacks_own_bucket_needs_no_grant(files):
    own = "gs://" + load().name("data") + "-0a1b2c3d/mine/train.parquet"
    p = plan_tool.build_plan("dev", dev_raw(dataTrainFile=own, dataValFile=files["dataValFile"],
                                            dataTrainRows="4000"), [])
    grants = [r for r in p["resources"] if r["type"] == "gcp:storage/bucketIAMMember:BucketIAMMember"]
    assert [g["name"] for g in grants] == ["storage-bucket-access"]
    stage = next(r for r in p["resources"] if r["type"] == "kubernetes:batch/v1:Job")
    args = stage["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    (f,) = json.loads(args[args.index("--task") + 1])["files"]
    assert f["source"] == own and "own bucket" in f["grant"]
    # The local validation file is uploaded as before.
    assert any(o["inputs"]["name"].endswith("/val.parquet") for o in p["resources"]
               if o["type"] == "gcp:storage/bucketObject:BucketObject")


@pytest.mark.parametrize("extra, expected", [
    ({"dataTrainFile": GS_TRAIN, "dataValFile": GS_VAL}, "verl-gke:dataTrainRows = 0: must be the number of rows"),
    ({"dataTrainRows": "100"}, "verl-gke:dataTrainRows = 100: only applies when dataTrainFile is a gs:// path"),
    ({"dataTrainFile": "gs://their-data/sets/*.parquet", "dataValFile": GS_VAL, "dataTrainRows": "9"},
     "must be gs://<bucket>/<object>, one object (no wildcard"),
    ({"dataTrainFile": "gs://their-data/sets/", "dataValFile": GS_VAL, "dataTrainRows": "9"},
     "no trailing /"),
    ({"dataTrainFile": "gs://A_Bad/x.parquet", "dataValFile": GS_VAL, "dataTrainRows": "9"}, "valid bucket name"),
    ({"rewardFile": "gs://their-data/reward.py"}, "verl-gke:rewardFile = 'gs://their-data/reward.py': must be a "
                                                  "local path to the file"),
])
def test_gs_keys_are_checked(extra, expected):
    assert expected in refused(**extra)


def test_gsm8k_refuses_data_train_rows():
    raw, _ = plan_tool.read_stack_file(ROOT / "Pulumi.dev.yaml")
    raw["verl-gke:dataTrainRows"] = "10"
    with pytest.raises(config.ConfigError, match="dataTrainRows = 10: only applies with a gs:// dataTrainFile"):
        config.load(raw, "dev", allow_placeholder_project=True)


def test_the_batch_bound_follows_the_declared_rows():
    assert "grpoTrainBatchSize = 64: must be at most 40" in refused(
        dataTrainFile=GS_TRAIN, dataValFile=GS_VAL, dataTrainRows="40", grpoTrainBatchSize="64")


@pytest.mark.parametrize("buckets", [("their-data", "their-data"), ("Bad_Bucket",)])
def test_source_grants_refuse_bad_bucket_lists_before_registering(buckets):
    from components.task_files import TaskSourceAccess, TaskSourceAccessArgs
    from tools import mocking

    errors = []

    def program():
        try:
            TaskSourceAccess("task-source", TaskSourceAccessArgs(buckets=buckets, member="principal://x"))
        except ValueError as e:
            errors.append(str(e))

    run = mocking.run(program, {}, "dev")
    assert errors and "must be a unique bucket name" in errors[0] and not run.resources
