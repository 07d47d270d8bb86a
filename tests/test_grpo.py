"""The GRPO recipe: preflight arithmetic, the fixed overrides, entrypoint quoting, runtime env, job id."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest

from catalog import versions
from catalog.accelerators import ACCELERATORS
from catalog.paths import CHECKPOINT_MOUNT, MOUNT, bucket_paths
from recipe import grpo
from recipe.overrides import render
from stacks import config
from stacks.keys import field_key

BASE = {"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}
MODEL = "Qwen/Qwen2.5-32B-Instruct"
UNKNOWN_MODEL = "acme/Frobnicator-7B"  # not in the Qwen2.5 head table: the head check is skipped
RAY_SUBMISSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # components/ray_job.py


@pytest.fixture(scope="module")
def defaults() -> grpo.GrpoSettings:
    return config.load(BASE, "b200").grpo


def paths_for(stack: str = "b200", model: str = MODEL):
    return bucket_paths(stack, model, "v0.6.1")


def overrides_map(items: list[str]) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in items]
    assert len({k for k, _ in pairs}) == len(pairs), "a key is overridden twice"
    return dict(pairs)


def test_every_setting_has_its_config_key():
    fields = {f.name for f in dataclasses.fields(grpo.GrpoSettings) if f.compare}  # layout_options: derived
    keys = {k.name for k in config.KEYS if k.name.startswith("grpo")}
    assert {field_key(f).split(":", 1)[1] for f in fields} == keys


def rendered(problems: list) -> list[str]:
    """The recipe's problems as the gate reports them: naming the config keys (stacks.config)."""
    return [str(p.renamed(field_key)) for p in problems]


def test_the_recipe_names_its_own_fields(defaults):
    """recipe/ knows no config key: its messages name GrpoSettings fields (and nnodes); stacks maps them."""
    g = dataclasses.replace(defaults, rollout_n=1, extra_overrides=("data.train_batch_size=8",))
    problems = grpo.settings_problems(g, nnodes=2, gpus_per_node=8, model=MODEL)[:2]  # then the batch it unbalances
    assert [p.key for p in problems] == ["extra_overrides", "rollout_n"]
    assert [str(p) for p in problems] == [
        "extra_overrides: 'data.train_batch_size=8' overrides data.train_batch_size, which set train_batch_size "
        "instead",
        "rollout_n = 1: GRPO normalises rewards within a prompt's group: use >= 2 responses"]
    assert rendered(problems) == [
        "verl-gke:grpoExtraOverrides: 'data.train_batch_size=8' overrides data.train_batch_size, which set "
        "verl-gke:grpoTrainBatchSize instead",
        "verl-gke:grpoRolloutN = 1: GRPO normalises rewards within a prompt's group: use >= 2 responses"]
    # A verl key that ends in a field's name stays as typed.
    g = dataclasses.replace(defaults, extra_overrides=("actor_rollout_ref.rollout.n=4",))
    text = rendered(grpo.settings_problems(g, nnodes=2, gpus_per_node=8, model=MODEL))[0]
    assert text.startswith("verl-gke:grpoExtraOverrides: 'actor_rollout_ref.rollout.n=4' overrides "
                           "actor_rollout_ref.rollout.n, which set verl-gke:grpoRolloutN instead"), text


@pytest.mark.parametrize("nnodes", [2, 1])
def test_defaults_pass_preflight(defaults, nnodes):
    assert grpo.settings_problems(defaults, nnodes=nnodes, gpus_per_node=8, model=MODEL) == []


ACTOR, ROLLOUT = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."


def extra(*items: str) -> dict[str, tuple[str, ...]]:
    return {"extra_overrides": items}


# name: (settings changed, nodes, model, key named, text in the message). Batch arithmetic by hand:
# world = nodes x 8; samples = train x n; per-GPU mini = mini x n / world.
BAD = {
    # 255 x 8 = 2040 samples over 16 GPUs leaves 8.
    "samples-not-divisible": ({"train_batch_size": 255, "ppo_mini_batch_size": 128}, 2, MODEL,
                              "grpoTrainBatchSize", "2040 samples"),
    "mini-above-train": ({"train_batch_size": 128, "ppo_mini_batch_size": 256}, 2, MODEL,
                         "grpoPpoMiniBatchSize", "<= train batch size 128"),
    # 100 x 5 = 500 over 16 ranks is 31.25 (256 x 5 = 1280 samples divide: 80 per GPU).
    "mini-not-integral": ({"rollout_n": 5, "ppo_mini_batch_size": 100}, 2, MODEL,
                          "grpoPpoMiniBatchSize", "500 must divide evenly over 16"),
    # 256 x 8 / 16 = 128 per GPU; 128 % 24 = 8.
    "micro-not-dividing": ({"ppo_mini_batch_size": 256, "ppo_micro_batch_size_per_gpu": 24}, 2, MODEL,
                           "grpoPpoMicroBatchSizePerGpu", "per-GPU mini batch 128"),
    # 8 x 8 / 8 = 8 per GPU < 16.
    "micro-above-mini": ({"train_batch_size": 8, "ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 16,
                          "log_prob_micro_batch_size_per_gpu": 4}, 1, MODEL,
                         "grpoPpoMicroBatchSizePerGpu", "per-GPU mini batch 8"),
    # 32 x 8 / 16 = 16 samples per GPU.
    "log-prob-micro-too-big": ({"train_batch_size": 32, "ppo_mini_batch_size": 32,
                                "log_prob_micro_batch_size_per_gpu": 32}, 2, MODEL,
                               "grpoLogProbMicroBatchSizePerGpu", "16 samples each GPU holds"),
    "ref-log-prob-micro-too-big": ({"train_batch_size": 32, "ppo_mini_batch_size": 32,
                                    "ref_log_prob_micro_batch_size_per_gpu": 17}, 2, MODEL,
                                   "grpoRefLogProbMicroBatchSizePerGpu", "16 samples"),
    "tp-not-dividing-world": ({"tensor_parallel_size": 3}, 2, UNKNOWN_MODEL, "grpoTensorParallelSize",
                              "must divide the GPUs per node (8) and the total (16)"),
    "tp-spanning-nodes": ({"tensor_parallel_size": 16}, 2, UNKNOWN_MODEL, "grpoTensorParallelSize",
                          "GPUs per node (8)"),
    "tp-vs-heads-1.5b": ({"tensor_parallel_size": 8}, 1, "Qwen/Qwen2.5-1.5B-Instruct", "grpoTensorParallelSize",
                         "12 attention / 2 KV heads): use one of 1, 2, 4"),
    "tp-vs-heads-7b": ({"tensor_parallel_size": 8}, 2, "Qwen/Qwen2.5-7B", "grpoTensorParallelSize",
                       "28 attention / 4 KV heads"),
    "tp-vs-heads-0.5b": ({"tensor_parallel_size": 4}, 1, "Qwen/Qwen2.5-0.5B-Instruct",
                         "grpoTensorParallelSize", "use one of 1, 2"),
    "grpo-needs-a-group": ({"rollout_n": 1}, 2, MODEL, "grpoRolloutN", ">= 2"),
    "batch-above-gsm8k": ({"train_batch_size": 8000}, 2, MODEL, "grpoTrainBatchSize", "7473 GSM8K"),
    "too-long-for-vllm": ({"max_response_length": 8000}, 2, MODEL, "grpoMaxResponseLength",
                          "max_num_batched_tokens 8192"),
    "bad-logger": ({"logger": ("console", "tensorbored")}, 2, MODEL, "grpoLogger", "'tensorbored' is not"),
    "no-logger": ({"logger": ()}, 2, MODEL, "grpoLogger", "at least one"),
    "extra-without-value": (extra("trainer.critic_warmup"), 2, MODEL, "grpoExtraOverrides",
                            "must look like key=value"),
    "extra-bad-key": (extra("trainer..x=1"), 2, MODEL, "grpoExtraOverrides", "must look like"),
    "extra-no-key": (extra("=1"), 2, MODEL, "grpoExtraOverrides", "must look like"),
    "extra-owns-setting": (extra("data.train_batch_size=8"), 2, MODEL, "grpoExtraOverrides",
                           "set verl-gke:grpoTrainBatchSize instead"),
    "extra-owns-shape": (extra("trainer.nnodes=4"), 2, MODEL, "grpoExtraOverrides", "derived from the stack"),
    "extra-owns-path": (extra("~trainer.default_local_dir"), 2, MODEL, "grpoExtraOverrides", "derived"),
    "extra-owns-kl-fix": (extra("algorithm.use_kl_in_reward=true"), 2, MODEL, "grpoExtraOverrides",
                          "fixed by the recipe"),
    "extra-deprecated-micro": (extra(ACTOR + "ppo_micro_batch_size=64"), 2, MODEL, "grpoExtraOverrides",
                               "exclusive"),
    "extra-credential-key": (extra("+trainer.wandb_api_key=abc"), 2, MODEL, "grpoExtraOverrides",
                             "credential"),
    "extra-credential-value": (extra("+trainer.note=hf_abcdefghijklmnopqrstuvwx"), 2, MODEL,
                               "grpoExtraOverrides", "credential"),
    "extra-twice": (extra("trainer.critic_warmup=1", "trainer.critic_warmup=2"), 2, MODEL,
                    "grpoExtraOverrides", "set twice"),
    "extra-sp-not-dividing": (extra(ACTOR + "ulysses_sequence_parallel_size=3"), 2, MODEL,
                              "grpoExtraOverrides", "must divide"),
    "extra-sp-without-rmpad": ({**extra(ACTOR + "ulysses_sequence_parallel_size=2"), "use_remove_padding": False},
                               2, MODEL, "grpoExtraOverrides", "needs verl-gke:grpoUseRemovePadding = true"),
    "extra-owns-remove-padding": (extra("actor_rollout_ref.model.use_remove_padding=false"), 2, MODEL,
                                  "grpoExtraOverrides", "set verl-gke:grpoUseRemovePadding instead"),
    # verl's seqlen_balancing needs every sequence (512 + 512 tokens) to fit one micro-batch.
    "token-budget-below-sequence": ({"ppo_max_token_len_per_gpu": 1000}, 2, MODEL, "grpoPpoMaxTokenLenPerGpu",
                                    "must hold one whole sequence: >= prompt + response = 1536"),
    "log-prob-budget-below-sequence": ({"log_prob_max_token_len_per_gpu": 512}, 2, MODEL,
                                       "grpoLogProbMaxTokenLenPerGpu", ">= prompt + response = 1536"),
    "extra-not-an-int": (extra(ROLLOUT + "max_num_batched_tokens=lots"), 2, MODEL, "grpoExtraOverrides",
                         "must be an integer"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_settings_are_rejected_naming_the_key(defaults, case):
    changes, nnodes, model, key, text = BAD[case]
    g = dataclasses.replace(defaults, **changes)
    problems = rendered(grpo.settings_problems(g, nnodes=nnodes, gpus_per_node=8, model=model))
    named = [p for p in problems if p.startswith(f"{config.PROJECT}:{key}")]
    assert named, problems
    assert any(text in p for p in named), named
    assert all(re.match(r"^verl-gke:grpo\w+", p) or p.startswith("verl-gke:gpuNodes") for p in problems)


# Bounds the key table holds (stacks.keys): the gate refuses them before the recipe's arithmetic runs.
GATE_BAD = {
    "zero-prompt-length": ("grpoMaxPromptLength", "0", "must be an integer >= 1"),
    "keep-no-checkpoint": ("grpoMaxCheckpointsToKeep", "0", "must be an integer >= 1"),
    "gpu-memory-zero": ("grpoGpuMemoryUtilization", "0", "must be a number in (0.0, 1.0]"),
    "gpu-memory-over-one": ("grpoGpuMemoryUtilization", "1.2", "must be a number in (0.0, 1.0]"),
}


@pytest.mark.parametrize("case", list(GATE_BAD))
def test_bounds_are_the_gates(case):
    key, value, text = GATE_BAD[case]
    with pytest.raises(config.ConfigError) as err:
        config.load({**BASE, f"verl-gke:{key}": value}, "b200")
    assert any(p.startswith(f"verl-gke:{key} = ") and text in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("case", ["samples-not-divisible", "mini-above-train", "mini-not-integral",
                                  "micro-not-dividing", "tp-spanning-nodes", "tp-vs-heads-1.5b"])
def test_batch_and_tp_cases_are_the_only_problem(defaults, case):
    changes, nnodes, model, _, _ = BAD[case]
    g = dataclasses.replace(defaults, **changes)
    assert len(grpo.settings_problems(g, nnodes=nnodes, gpus_per_node=8, model=model)) == 1


def test_all_problems_are_reported_at_once(defaults):
    g = dataclasses.replace(defaults, train_batch_size=255, ppo_mini_batch_size=128, logger=("nope",),
                            extra_overrides=("trainer.nnodes=3",), tensor_parallel_size=8)
    problems = rendered(grpo.settings_problems(g, nnodes=2, gpus_per_node=8, model="Qwen/Qwen2.5-1.5B-Instruct"))
    keys = [p.split(" ", 1)[0].rstrip(":").removeprefix("verl-gke:") for p in problems]
    assert keys == ["grpoExtraOverrides", "grpoTrainBatchSize", "grpoTensorParallelSize", "grpoLogger"]


def test_good_variants_pass(defaults):
    ok = [
        ({"tensor_parallel_size": 2}, 1, "Qwen/Qwen2.5-1.5B-Instruct"),  # the dev stack's shape
        ({"tensor_parallel_size": 4}, 2, "Qwen/Qwen2.5-7B-Instruct"),
        ({"tensor_parallel_size": 8}, 2, "Qwen/Qwen2.5-72B-Instruct"),
        ({"tensor_parallel_size": 8}, 2, UNKNOWN_MODEL),
        ({"max_response_length": 8000,
          "extra_overrides": ("actor_rollout_ref.rollout.max_num_batched_tokens=16384",)}, 2, MODEL),
        ({"extra_overrides": ("actor_rollout_ref.rollout.enforce_eager=true", "+trainer.note=x",
                              "++trainer.balance_batch=true", "trainer={critic_warmup:1}")}, 2, MODEL),
        ({"logger": ("console", "tensorboard")}, 2, MODEL),
        # sp 2: 8 data-parallel ranks; 256 x 8 / 8 = 256 per rank, divisible by micro 16.
        (extra(ACTOR + "ulysses_sequence_parallel_size=2"), 2, MODEL),
        ({"kl_loss_coef": 0.0}, 2, MODEL),
    ]
    for changes, nnodes, model in ok:
        g = dataclasses.replace(defaults, **changes)
        assert grpo.settings_problems(g, nnodes=nnodes, gpus_per_node=8, model=model) == [], changes


def test_overrides_fix_the_tutorial(defaults):
    paths = paths_for()
    ov = overrides_map(grpo.overrides(defaults, stack="b200", nnodes=2, gpus_per_node=8, paths=paths))
    assert ov["algorithm.adv_estimator"] == "grpo"
    # KL as verl's GRPO examples apply it; the tutorial's in-reward kl_ctrl is gone.
    assert ov["actor_rollout_ref.actor.use_kl_loss"] == "true"
    assert ov["algorithm.use_kl_in_reward"] == "false"
    assert ov["actor_rollout_ref.actor.kl_loss_coef"] == "0.001"
    assert ov["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert ov["actor_rollout_ref.actor.entropy_coeff"] == "0.0"
    assert "algorithm.kl_ctrl.kl_coef" not in ov
    assert float(ov["actor_rollout_ref.actor.optim.lr"]) == 1e-6
    # Weights from the bucket copy, data from the bucket.
    assert ov["actor_rollout_ref.model.path"] == paths.model_dir == f"{MOUNT}/models/{MODEL}/main"
    assert ov["data.train_files"] == paths.train_file and ov["data.val_files"] == paths.val_file
    # Checkpoints: absolute, on the bucket, resumed.
    assert ov["trainer.default_local_dir"] == paths.checkpoint_dir
    assert ov["trainer.default_local_dir"].startswith(CHECKPOINT_MOUNT + "/")
    assert ov["trainer.resume_mode"] == "auto"
    # Shape and names from the stack; logger a Hydra list.
    assert (ov["trainer.nnodes"], ov["trainer.n_gpus_per_node"]) == ("2", "8")
    assert ov["trainer.logger"] == "[console,tensorboard]"
    assert (ov["trainer.project_name"], ov["trainer.experiment_name"]) == ("verl-gke", "b200")
    assert ov["actor_rollout_ref.rollout.name"] == "vllm"
    assert ov["actor_rollout_ref.rollout.gpu_memory_utilization"] == "0.6"
    assert ov["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] == "4"
    assert ov["actor_rollout_ref.actor.strategy"] == "fsdp2"
    # The save cadence is derived (stacks.checkpoints.cadence: tests/test_save_cadence.py): some step count.
    assert (ov["trainer.test_freq"], ov["trainer.total_epochs"]) == ("10", "2") and int(ov["trainer.save_freq"]) >= 1
    assert ov["trainer.max_actor_ckpt_to_keep"] == "2"


def test_overrides_apply_verls_throughput_settings(defaults):
    """Issue #13's table: every recommendation of perf_tuning.rst and the GRPO examples is on by default."""
    ov = overrides_map(grpo.overrides(defaults, stack="b200", nnodes=2, gpus_per_node=8, paths=paths_for()))
    assert ov["actor_rollout_ref.model.use_remove_padding"] == "true"
    for key in ("actor.use_dynamic_bsz", "rollout.log_prob_use_dynamic_bsz", "ref.log_prob_use_dynamic_bsz"):
        assert ov["actor_rollout_ref." + key] == "true", key
    train = int(ov["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"])
    seq = 512 + 1024  # max_response_length 1024: verl v0.6.1 examples/grpo_trainer for GSM8K
    assert train >= 2 * seq and train % seq == 0 and 16384 <= train <= 32768  # perf_tuning.rst, issue #13
    for key in ("rollout", "ref"):
        assert train <= int(ov[f"actor_rollout_ref.{key}.log_prob_max_token_len_per_gpu"]) <= 2 * train
    # 32B: 40 heads / 8 KV heads on 180 GB B200s: TP 2 holds the weights in half the vLLM pool.
    assert ov["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "2"
    assert ov["actor_rollout_ref.actor.ppo_mini_batch_size"] == "64"  # 256 / 4: four updates per step
    # verl 0.6.1 never reads ref.fsdp_config.param_offload (the reference is always on the host): not sent.
    assert "actor_rollout_ref.ref.fsdp_config.param_offload" not in ov
    # The layout the recipe picked for two nodes (recipe.tuning): in the command, so a change replaces the job.
    assert ov["actor_rollout_ref.actor.fsdp_config.fsdp_size"] in ("-1", "8")
    assert ov["trainer.val_before_train"] == "true"


def test_overrides_follow_shape_and_settings(defaults):
    g = dataclasses.replace(defaults, logger=("console", "wandb"), kl_loss_coef=0.0,
                            extra_overrides=(" +trainer.note=x ", "trainer={critic_warmup:1}"))
    items = grpo.overrides(g, stack="dev", nnodes=1, gpus_per_node=8, paths=paths_for("dev"))
    assert items[-2:] == ["+trainer.note=x", "trainer={critic_warmup:1}"]
    ov = overrides_map(items[:-2])
    assert ov["trainer.nnodes"] == "1"
    assert ov["trainer.logger"] == "[console,wandb]"
    assert ov["actor_rollout_ref.actor.use_kl_loss"] == "false"  # no KL: no reference model to load
    expected = f"{CHECKPOINT_MOUNT}/dev/Qwen/Qwen2.5-32B-Instruct"  # the checkpoint PV (only-dir)
    assert ov["trainer.default_local_dir"] == paths_for("dev").checkpoint_dir == expected


@pytest.mark.parametrize("value", ["b200", "123", "true", "False", "null", "nan", "1e5", "dev.2", "a-b_c",
                                   "/data/models/Qwen/Qwen2.5-1.5B-Instruct", "with space", "x:y", "it's", 'a"b',
                                   "back\\slash'", 7, 0.6, 1e-6, 0.0, True, False, ["console", "wandb"]])
def test_hydra_values_parse_back_to_the_same_type(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"a.b={render(value)}").value()
    assert parsed == value and type(parsed) is type(value)


# text -> accepted by the gate; an accepted one must be one Hydra parses (never looser than Hydra's grammar).
SHAPES = {"trainer.critic_warmup=1": True, "+trainer.note=1": True, "++trainer.note=x": True,
          "trainer.critic_warmup=": True, "+trainer.note=[1,2]": True,
          "actor_rollout_ref.actor.optim.betas.0=0.9": True,
          "trainer.critic-warmup=1": False, "~trainer.critic_warmup": False, "~trainer.critic_warmup=0": False,
          "trainer/critic_warmup=1": False, "trainer@x=1": False, "trainer.critic_warmup": False, "+trainer": False,
          "=1": False, "trainer..critic_warmup=1": False, ".trainer=1": False, "trainer.critic warmup=1": False,
          "1a=2": False}


@pytest.mark.parametrize("text", list(SHAPES))
def test_override_shape_never_looser_than_hydra(text):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    problems = grpo._parse_extras((text,))[1]
    assert (not problems) == SHAPES[text], (text, problems)
    if not problems:
        try:
            OverridesParser.create().parse_override(text)
        except HydraException as err:
            raise AssertionError(f"accepted {text!r}, which Hydra refuses") from err


def spec_of(items: list[str], main_script: str = "/data/scripts/supervisor-abc/verl_main.py"):
    """The job's command around these overrides, with every supervisor option a stack may set."""
    paths = paths_for()
    return grpo.job_spec(items, main_script=main_script, script="/data/scripts/supervisor-abc/supervise.py",
                         state=paths.checkpoint_dir + "/verl-gke-run.json", paths=paths, expected_gpus=16, merge=True,
                         release=("verl-b200-ray", "gpu-group"), keep=2, nccl_check="--nodes 2 --gpus-per-node 8")


def test_entrypoint_round_trips_through_the_shell(defaults):
    g = dataclasses.replace(defaults, extra_overrides=("+trainer.note='it''s; rm -rf / $(x)'",))
    items = grpo.overrides(g, stack="b200", nnodes=2, gpus_per_node=8, paths=paths_for())
    spec = spec_of(items)
    assert shlex.split(spec.entrypoint) == [
        "python3", "/data/scripts/supervisor-abc/supervise.py", *spec.supervisor.options(),
        "--", "python3", "/data/scripts/supervisor-abc/verl_main.py", *items]


@pytest.mark.parametrize("acc,tuner", [("b200", "tuner_config_a4.txtpb"), ("h200", "tuner_config_a3u.txtpb")])
def test_runtime_env(acc, tuner):
    paths = paths_for()
    env = grpo.runtime_env(ACCELERATORS[acc], paths)
    assert list(env) == ["env_vars"]  # no pip/uv/conda/working_dir/py_modules: the image has the deps
    variables = env["env_vars"]
    assert variables["NCCL_TUNER_CONFIG_PATH"].endswith("/" + tuner)
    assert variables["HF_HOME"] == paths.hf_home
    assert variables["PYTHONPATH"] == paths.verl_src
    assert variables["PYTHONUNBUFFERED"] == "1"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in variables.items())
    secret_like = [k for k, v in variables.items() if re.search(r"TOKEN|SECRET|KEY|PASSWORD", k, re.I) and v]
    assert secret_like == [] and not any("hf_" in v for v in variables.values())


def test_no_secret_reaches_the_job():
    token = "hf_DistinctiveGrpoTestToken7c1d"
    cfg = config.load({**BASE, "verl-gke:hfToken": token}, "b200", secret_keys=["verl-gke:hfToken"])
    assert cfg.has_hf_token
    paths = bucket_paths("b200", cfg.model, cfg.verl_version)
    items = grpo.overrides(cfg.grpo, stack="b200", nnodes=cfg.gpu_nodes,
                           gpus_per_node=cfg.accelerator.gpus_per_node, paths=paths)
    env = grpo.runtime_env(cfg.accelerator, paths)
    blob = json.dumps([items, spec_of(items).entrypoint, env])
    assert token not in blob and "HF_TOKEN" not in blob


def test_submission_id():
    env = grpo.runtime_env(ACCELERATORS["b200"], paths_for())
    command = spec_of(["a=1"])
    first = grpo.submission_id("b200", command, env, 16)
    assert first == grpo.submission_id("b200", spec_of(["a=1"]), json.loads(json.dumps(env)), 16)
    assert re.fullmatch(r"verl-grpo-b200-[0-9a-f]{12}", first) and RAY_SUBMISSION_ID.match(first)
    others = {
        grpo.submission_id("b200", spec_of(["a=2"]), env, 16),
        grpo.submission_id("b200", command, grpo.runtime_env(ACCELERATORS["h200"], paths_for()), 16),
        grpo.submission_id("b200", command, env, 8),
    }
    assert first not in others and len(others) == 3
    odd = grpo.submission_id("org/My Stack!" + "x" * 200, command, {}, 8)
    assert RAY_SUBMISSION_ID.match(odd) and len(odd) + len("-r99") <= 128


def test_verl_test_requirement_matches_the_pin():
    lines = (Path(__file__).resolve().parent.parent / "requirements-verl-test.txt").read_text().splitlines()
    pinned = f"verl=={versions.VERL_VERSION.removeprefix('v')}"
    assert [line for line in lines if line.startswith("verl")] == [pinned]
