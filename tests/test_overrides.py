"""grpoExtraOverrides read as Hydra reads them (recipe.overrides): every form of an override is judged by the
keys it sets (issue 45 item 2).

The cases run the offline plan and tools.destroy on a stack file, as a user does: exit 2, the key named, the
refused value never shown where it is a credential, nothing written and nothing registered. The properties
run the judgement itself over overrides generated from Hydra's grammar.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.override_grammar import NAME, judged, overrides, tree_keys
from tests.stack_helpers import ROOT, STACK_FILES, count_program_runs, plan_in_process
from tools import destroy, plan

KEY = "verl-gke:grpoExtraOverrides"
CREDENTIAL = "sk-proj-Zq7Xv0dLw3Rt9Yb2Kc5Hn8Mf1Pa4Se6Ug"

# name -> (the override, text the refusal must hold): each one the gate accepted before (issue 45 item 2).
CASES = {
    "checkpoints-by-dict": ("trainer={default_local_dir: /tmp/ckpt}", "trainer.default_local_dir"),
    "checkpoints-by-added-dict": ("+trainer={default_local_dir: /tmp/ckpt}", "trainer.default_local_dir"),
    "model-by-nested-dict": ("actor_rollout_ref={model: {path: /tmp/model}}", "actor_rollout_ref.model.path"),
    "rollout-data-dir": ("trainer.rollout_data_dir=/tmp/rollouts", "trainer.rollout_data_dir"),
    "validation-data-dir": ("trainer.validation_data_dir=/tmp/validation", "trainer.validation_data_dir"),
    "hdfs-dir": ("trainer.default_hdfs_dir=/tmp/hdfs", "trainer.default_hdfs_dir"),
    "resume-from-path": ("trainer.resume_from_path=/tmp/ckpt/global_step_1", "trainer.resume_from_path"),
    "hydra-run-dir": ("hydra.run.dir=/tmp/hydra", "hydra.run.dir"),
    "dataset-class-from-a-file": ("data.custom_cls.path=/tmp/evil.py", "data.custom_cls"),
    "reward-by-dict": ("custom_reward_function={path: /tmp/reward.py, name: score}", "verl-gke:rewardFile"),
    "train-files-by-dict": ("data={train_files: /tmp/other.parquet}", "data.train_files"),
    "credential-in-runtime-env": (f"+ray_kwargs.ray_init.runtime_env={{env_vars: {{OPENAI_API_KEY: {CREDENTIAL}}}}}",
                                  "looks like an OpenAI"),  # the value's shape; its key's name: the property tests
    "delete-a-node": ("~trainer", "by deleting trainer"),
    "delete-a-key": ("~trainer.critic_warmup", "deletes trainer.critic_warmup"),
    "sweep": ("trainer.critic_warmup=0,1", "is a sweep"),
    "choice-sweep": ("trainer.critic_warmup=choice(0,1)", "is a sweep"),
    "range-sweep": ("trainer.critic_warmup=range(0,2)", "is a sweep"),
    "interval-sweep": ("+trainer.note=interval(0,1)", "is a sweep"),
    "glob": ("trainer.critic_warmup=glob(*)", "is a sweep"),
    "shuffle": ("+trainer.note=shuffle([a,b])", "calls shuffle()"),
    "non-ascii-key": ("+trainer.d\u00e9faut=1", "keys are ASCII"),
    "cyrillic-look-alike-key": ("+trainer.critic_w\u0430rmup=1", "keys are ASCII"),
    "confusable-key": ("+trainer.defauIt_local_dir=/tmp/ckpt", "passes for verl's trainer.default_local_dir"),
    "newline-in-value": ("+trainer.note='a\nb'", "U+000A"),
    "nul-in-value": ("+trainer.note='a\u0000b'", "U+0000"),
}


def stack_file(tmp_path: Path, items: list[str]) -> Path:
    """Pulumi.dev.yaml with grpoExtraOverrides set (as YAML data: what `pulumi config set --path` stores)."""
    content = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    content["config"][KEY] = items
    path = tmp_path / "Pulumi.hostile.yaml"
    path.write_text(yaml.safe_dump(content, allow_unicode=False))
    return path


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Every program run's resource count; the plan's default output folder inside the test's folder."""
    return count_program_runs(monkeypatch, tmp_path)


def assert_refused(rc: int, text: str, named: str, tmp_path: Path, registered: list[int]) -> None:
    assert rc == 2, text
    assert f"{KEY}:" in text and named in text, text
    assert "Traceback" not in text and CREDENTIAL not in text, text
    assert registered == [], "a refused config must not run the program"
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert written == ["Pulumi.hostile.yaml"], f"a refused config wrote {written}"


def run_destroy(path: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = destroy.main(["--stack", "hostile", "--config", str(path)])
    return rc, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("case", list(CASES))
def test_the_plan_refuses_the_override(case, tmp_path, counted):
    item, named = CASES[case]
    path = stack_file(tmp_path, [item])
    proc = plan_in_process("--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out"))
    assert_refused(proc.returncode, proc.stdout + proc.stderr, named, tmp_path, counted)


@pytest.mark.parametrize("case", list(CASES))
def test_destroy_refuses_what_the_plan_refuses(case, tmp_path, counted):
    item, named = CASES[case]
    rc, text = run_destroy(stack_file(tmp_path, [item]))
    assert_refused(rc, text, named, tmp_path, counted)


# Forms a user may write, each judged by the keys it sets: they plan like the dotted key.
ACCEPTED = ["trainer={critic_warmup: 1}", "+trainer.note=x", "++trainer.balance_batch=true",
            "actor_rollout_ref.rollout={val_kwargs: {top_k: 2}}",
            "trainer.rollout_data_dir=${trainer.default_local_dir}/rollouts",
            "+actor_rollout_ref.model.override_config={attn_implementation: eager}"]


def test_accepted_forms_plan_and_reach_the_entrypoint(tmp_path, counted):
    path = stack_file(tmp_path, ACCEPTED)
    proc = plan_in_process("--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = next(r["inputs"] for r in json.loads((tmp_path / "out" / "plan.json").read_text())["resources"]
               if r["type"].endswith(":RayJob"))
    assert shlex.split(job["entrypoint"])[-len(ACCEPTED):] == ACCEPTED


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_shipped_stacks_extra_overrides_are_accepted(path):
    from recipe import grpo

    raw, _ = plan.read_stack_file(path)
    items = tuple(json.loads(raw.get(KEY, "[]")))
    assert grpo.extra_override_problems(items, own_task=False) == []


# --- the judgement itself (recipe.overrides) ------------------------------------------------------------------


def test_the_recipes_own_overrides_read_back_as_its_settings():
    """Every fixed and derived override the recipe emits passes Hydra's grammar and the single-run rules, and
    reads back as the value the recipe meant."""
    from catalog.paths import bucket_paths
    from recipe import grpo
    from recipe.overrides import read
    from stacks import config

    for path in STACK_FILES:
        stack = path.stem.split(".", 1)[1]
        cfg = config.load(plan.read_stack_file(path)[0], stack, allow_placeholder_project=True)
        shape = {"nnodes": cfg.gpu_nodes, "gpus_per_node": cfg.accelerator.gpus_per_node,
                 "paths": bucket_paths(stack, cfg.model, cfg.verl_version)}
        meant = grpo.recipe(cfg.grpo, stack=stack, **shape)
        reading = read(tuple(grpo.overrides(cfg.grpo, stack=stack, **shape)))
        assert reading.problems == [], reading.problems
        assert {leaf.key: leaf.value for leaf in reading.leaves} == \
            {k: list(v) if isinstance(v, tuple) else v for k, v in meant.items()}


def test_every_key_the_recipe_emits_is_owned(monkeypatch):
    """The owned table is the recipe's own keys: one set with a task and total_training_steps included."""
    from catalog.paths import bucket_paths
    from recipe import grpo
    from stacks import config

    cfg = config.load({"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b",
                       "verl-gke:grpoTotalTrainingSteps": "7"}, "b200")

    class File:
        in_pod = "/data/tasks/x/train.parquet"

    class Task:
        train = val = reward = File()
        reward_function = "score"

    emitted = grpo.recipe(cfg.grpo, stack="b200", nnodes=2, gpus_per_node=8,
                          paths=bucket_paths("b200", cfg.model, cfg.verl_version), task=Task())
    assert set(emitted) - set(grpo.owned_keys()) == set()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_an_accepted_override_reads_back_from_its_leaves(data):
    """Every accepted override, its leaves rendered back one by one, reads as the same leaves, accepted too; and
    Hydra's own parser takes it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = st.one_of(st.sampled_from(tree_keys()), st.builds(lambda a, b: f"trainer.{a}.{b}", NAME, NAME),
                     st.builds(lambda a: f"trainer.{a}", NAME))
    item = data.draw(overrides(keys))
    kept, problems = judged(item)
    if problems:
        return
    OverridesParser.create().parse_override(item)
    again, again_problems = judged(*(leaf.rendered() for leaf in kept))
    assert again_problems == [] and [(leaf.key, leaf.value) for leaf in again] == \
        [(leaf.key, leaf.value) for leaf in kept], item


def _owned_or_inside() -> st.SearchStrategy[str]:
    from recipe import grpo

    owned = sorted(grpo.owned_keys())
    return st.one_of(st.sampled_from(owned), st.builds(lambda k, n: f"{k}.{n}", st.sampled_from(owned), NAME))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_form_of_an_owned_key_is_accepted(data):
    """An override that sets a key the project owns, or one inside it, is refused whatever its form (dotted,
    folded into a dict at any depth, +, ++), and the refusal names grpoExtraOverrides' field."""
    item = data.draw(overrides(_owned_or_inside()))
    kept, problems = judged(item)
    assert problems and not kept, item
    assert all(p.key == "extra_overrides" for p in problems)


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(["trainer", "actor_rollout_ref", "actor_rollout_ref.actor", "data",
                            "actor_rollout_ref.model", "ray_kwargs", "custom_reward_function"]),
       value=st.sampled_from(["null", "{}", "[]", "0", "x"]), op=st.sampled_from(["", "+", "++", "~"]))
def test_a_node_that_holds_an_owned_key_cannot_be_replaced(key, value, op):
    kept, problems = judged(f"{op}{key}" + ("" if op == "~" else f"={value}"))
    assert problems and not kept


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["api_key", "OPENAI_API_KEY", "hfToken", "password", "client_secret", "auth_token",
                             "accessKey", "privateKey", "credentials"]),
       depth=st.integers(0, 3), fold=st.booleans())
def test_a_credential_name_at_any_depth_is_refused_without_its_value(name, depth, fold):
    path = ["trainer", *(f"n{i}" for i in range(depth)), name]
    item = (f"+{path[0]}={{" + ":{".join(path[1:]) + f":{CREDENTIAL}" + "}" * (len(path) - 1) if fold
            else f"+{'.'.join(path)}={CREDENTIAL}")
    kept, problems = judged(item)
    assert problems and not kept and CREDENTIAL not in str(problems), item


def test_overrides_are_refused_whatever_else_fails():
    """The gate judges the overrides before, and apart from, the recipe's arithmetic: a bad batch size does not
    hide a checkpoint folder moved off the bucket."""
    from stacks import config

    raw, _ = plan.read_stack_file(ROOT / "Pulumi.dev.yaml")
    raw.update({KEY: json.dumps(["trainer={default_local_dir: /tmp/x}"]), "verl-gke:grpoTrainBatchSize": "0"})
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "dev", allow_placeholder_project=True)
    assert any(p.startswith(f"{KEY}: ") and "trainer.default_local_dir" in p for p in err.value.problems)


def test_an_override_and_a_batch_problem_are_reported_together_once():
    """Every problem at once: the judged override and the recipe's arithmetic on the overrides that passed."""
    from stacks import config

    raw, _ = plan.read_stack_file(ROOT / "Pulumi.dev.yaml")
    raw.update({KEY: json.dumps(["+trainer={default_local_dir: /tmp/x}"]), "verl-gke:grpoTrainBatchSize": "63"})
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "dev", allow_placeholder_project=True)
    override = [p for p in err.value.problems if p.startswith(f"{KEY}: ")]
    assert len(override) == 1 and "trainer.default_local_dir" in override[0], err.value.problems
    assert any(p.startswith("verl-gke:grpo") and not p.startswith(KEY) for p in err.value.problems), err.value.problems



def test_a_path_named_key_at_the_top_level_is_judged_as_a_path():
    """The path check looked for the first path-named segment with `if at := ...`: at the top level its index
    is 0, falsy, so `+file=/etc/passwd` passed unjudged."""
    _, problems = judged("+file=/etc/passwd")
    assert len(problems) == 1 and "sets the path file to '/etc/passwd', outside the run's own folders" in \
        problems[0].allowed, problems
