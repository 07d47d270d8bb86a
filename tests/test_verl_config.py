"""The generated overrides against verl's own Hydra config at the pinned version.

Needs the verl package WITHOUT its heavy deps (`pip install --no-deps -r requirements-verl-test.txt`):
only its YAML and source are read, verl itself is never imported (importing it pulls in torch and
ray). Every stack file's settings are composed into verl's `ppo_trainer` config: a misspelled key
fails composition, and each value must come back with the type we meant.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from catalog import versions
from recipe import grpo
from stacks import config
from stacks.derived import run_paths
from tests.override_grammar import judged, overrides, tree_keys
from tools.plan import read_stack_file

_SPEC = importlib.util.find_spec("verl")  # finds the package without running its __init__
if _SPEC is None or not _SPEC.submodule_search_locations:
    pytest.skip("verl is not installed: pip install --no-deps -r requirements-verl-test.txt",
                allow_module_level=True)
hydra = pytest.importorskip("hydra", reason="hydra-core is needed to compose verl's config")
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.errors import ConfigCompositionException  # noqa: E402
from omegaconf import DictConfig, ListConfig, OmegaConf  # noqa: E402

VERL_DIR = Path(_SPEC.submodule_search_locations[0])
CONFIG_DIR = VERL_DIR / "trainer" / "config"
ROOT = Path(__file__).resolve().parent.parent
STACK_FILES = sorted(ROOT.glob("Pulumi.*.yaml"))
# Used only when the repo has no stack files yet: the shapes the stacks are meant to have.
FALLBACK = {
    "b200": {"verl-gke:accelerator": "b200", "verl-gke:gpuNodes": "2"},
    "h200": {"verl-gke:accelerator": "h200", "verl-gke:gpuNodes": "2"},
    "dev": {"verl-gke:gpuNodes": "1", "verl-gke:model": "Qwen/Qwen2.5-1.5B-Instruct",
            "verl-gke:grpoTensorParallelSize": "2"},
}
BASE = {"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}


def stack_raws() -> dict[str, dict[str, str]]:
    """stack -> raw config as the Pulumi CLI hands it over (strings; secure values as a placeholder)."""
    if not STACK_FILES:
        return {stack: {**BASE, **raw} for stack, raw in FALLBACK.items()}
    # The plan's reader: exactly what the CLI hands over (secure values as a placeholder, never needed here).
    return {path.stem.split(".", 1)[1]: read_stack_file(path)[0] for path in STACK_FILES}


STACKS = stack_raws()


class Job:
    def __init__(self, stack: str, raw: dict[str, str]):
        self.cfg = config.load(raw, stack, allow_placeholder_project=True)
        self.shape = {"nnodes": self.cfg.gpu_nodes, "gpus_per_node": self.cfg.accelerator.gpus_per_node}
        paths = run_paths(self.cfg)
        self.recipe = grpo.recipe(self.cfg.grpo, stack=stack, paths=paths, **self.shape)
        self.overrides = grpo.overrides(self.cfg.grpo, stack=stack, paths=paths, **self.shape)


def compose_verl(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def has_key(cfg: DictConfig, dotted: str) -> bool:
    parent, _, leaf = dotted.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return isinstance(node, DictConfig) and leaf in node.keys()  # keys(): `in` is False for "???" values


@pytest.fixture(scope="module")
def verl_defaults() -> DictConfig:
    return compose_verl([])


@pytest.fixture(scope="module", params=sorted(STACKS))
def job(request) -> Job:
    return Job(request.param, STACKS[request.param])


@pytest.fixture(scope="module")
def composed(job) -> DictConfig:
    return compose_verl(job.overrides)  # Hydra rejects a key verl does not have


def test_installed_verl_is_the_pinned_version():
    assert importlib.metadata.version("verl") == versions.VERL_VERSION.removeprefix("v")


def test_stack_passes_preflight(job):
    assert grpo.settings_problems(job.cfg.grpo, model=job.cfg.model, **job.shape) == []


def test_every_override_key_exists_in_verl(job, verl_defaults):
    assert [key for key in job.recipe if not has_key(verl_defaults, key)] == []


def test_values_compose_with_the_meant_types(job, composed, verl_defaults):
    for key, meant in job.recipe.items():
        value = OmegaConf.select(composed, key)
        if isinstance(value, ListConfig):
            value = OmegaConf.to_container(value)
        assert value == meant and type(value) is type(meant), (key, value, meant)
        # verl's default says which type it expects (ints widen to floats, e.g. entropy_coeff: 0).
        default = OmegaConf.select(verl_defaults, key, default=None, throw_on_missing=False)
        if isinstance(default, ListConfig):
            default = OmegaConf.to_container(default)
        if default is not None:
            widened = (type(default), type(value)) == (int, float)
            assert type(value) is type(default) or widened, (key, default)


def test_composed_config_resolves(job, composed):
    resolved = OmegaConf.to_container(composed, resolve=True, throw_on_missing=True)
    arr = resolved["actor_rollout_ref"]
    assert arr["ref"]["strategy"] == arr["actor"]["strategy"] == job.cfg.grpo.actor_strategy
    # GRPO runs no critic (verl's need_critic: critic.enable unset and adv_estimator != gae).
    assert resolved["critic"]["enable"] is None and resolved["algorithm"]["adv_estimator"] == "grpo"


@pytest.mark.parametrize("typo", ["trainer.nnodez=2", "actor_rollout_ref.actor.use_kl_los=true",
                                  "data.train_batch=8"])
def test_a_misspelled_key_fails(typo, verl_defaults):
    j = Job(*next(iter(STACKS.items())))
    with pytest.raises(ConfigCompositionException):
        compose_verl([*j.overrides, typo])
    assert not has_key(verl_defaults, typo.split("=", 1)[0])


# Extra overrides in the forms a user writes them, each accepted by the gate (recipe.overrides), and the value
# verl's composed config then holds at the key it sets.
ACCEPTED_FORMS = {
    "actor_rollout_ref.rollout.enforce_eager=true": ("actor_rollout_ref.rollout.enforce_eager", True),
    "+trainer.note=x": ("trainer.note", "x"),
    "trainer={critic_warmup: 3}": ("trainer.critic_warmup", 3),
    "+trainer={log_val_generations: 2}": ("trainer.log_val_generations", 2),
    "++trainer={balance_batch: false}": ("trainer.balance_batch", False),
    "actor_rollout_ref.rollout={val_kwargs: {top_k: 2}}": ("actor_rollout_ref.rollout.val_kwargs.top_k", 2),
    "actor_rollout_ref.rollout.max_num_batched_tokens=16384": ("actor_rollout_ref.rollout.max_num_batched_tokens",
                                                               16384),
    "+actor_rollout_ref.model.override_config={attn_implementation: eager}":
        ("actor_rollout_ref.model.override_config.attn_implementation", "eager"),
    "actor_rollout_ref.actor.optim.betas.1=0.95": ("actor_rollout_ref.actor.optim.betas.1", 0.95),
}


def test_extra_overrides_the_gate_accepts_compose():
    stack, raw = next(iter(STACKS.items()))
    j = Job(stack, {**raw, "verl-gke:grpoExtraOverrides": json.dumps(list(ACCEPTED_FORMS))})
    assert grpo.settings_problems(j.cfg.grpo, model=j.cfg.model, **j.shape) == []
    composed = compose_verl(j.overrides)
    assert {key: OmegaConf.select(composed, key) for key, _ in ACCEPTED_FORMS.values()} == \
        dict(ACCEPTED_FORMS.values())


def test_the_key_tree_the_gate_reads_is_verls():
    """catalog/verl_config.json against the installed verl==0.6.1 (tools/verl_keys.py --check)."""
    from tools import verl_keys

    assert verl_keys.main(["--check"]) == 0


def test_verls_path_shaped_defaults_are_judged_as_paths(verl_defaults):
    """A key whose default verl writes as a path (a `/` in it) is a path to the gate, or a key it owns or refuses
    as code: none can point outside the run by a name the path rule misses."""
    from recipe import overrides

    owned = grpo.owned_keys()
    unjudged = []
    for key, kind in config_leaves(verl_defaults):
        default = OmegaConf.select(verl_defaults, key, throw_on_resolution_failure=False, throw_on_missing=False)
        if kind != "str" or not isinstance(default, str) or "/" not in default:
            continue
        leaf = overrides.Leaf(key, "/tmp/x", "/tmp/x", "", f"{key}=/tmp/x", False)
        guarded = (any(key == o or key.startswith(o + ".") for o in owned)
                   or any(key == c or key.startswith(c + ".") for c in overrides.CODE_KEYS)
                   or overrides._PATH_NAME.search(key.rsplit(".", 1)[-1]))
        if not guarded:
            unjudged.append((key, default, overrides._leaf_problem(leaf, [], overrides.verl_config.tree(), owned,
                                                                   grpo.PATH_ANCHORS)))
    assert unjudged == []


def config_leaves(cfg: DictConfig, prefix: str = ""):
    """(dotted key, kind) of every leaf of a composed config, without resolving it."""
    for key in cfg.keys():
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_none():
            yield from config_leaves(node, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", ("str" if isinstance(node._value(), str) and not node._is_interpolation()
                                     else "other")


# What the gate says Hydra refuses when the job starts: Hydra refuses it (the gate's reading of verl's key tree).
HYDRA_REFUSES = ["trainer.nnodez_typo=2", "+trainer.critic_warmup=1", "actor_rollout_ref.ref.model.q=1",
                 "actor_rollout_ref.model.override_config={attn_implementation: eager}",
                 "trainer={critic_warmup_typo: 1}"]


@pytest.mark.parametrize("item", HYDRA_REFUSES)
def test_what_the_gate_says_hydra_refuses_hydra_refuses(item):
    _, problems = grpo._parse_extras((item,))
    assert problems and "Hydra" in str(problems[0]), problems
    with pytest.raises(ConfigCompositionException):
        compose_verl([*Job(*next(iter(STACKS.items()))).overrides, item])


def test_the_supervisors_model_only_load_composes_beside_full_saves():
    """A full-saving run resumed from a model-only checkpoint: the supervisor's override (appended last to the
    rendered command) makes verl load model and extra while it still saves all three."""
    spec = importlib.util.spec_from_file_location("supervise", ROOT / "components" / "scripts" / "supervise.py")
    supervise = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(supervise)
    stack, raw = next(iter(STACKS.items()))
    j = Job(stack, {**raw, "verl-gke:grpoSaveContents": "full"})
    checkpoint = compose_verl([*j.overrides, supervise.MODEL_ONLY_LOAD]).actor_rollout_ref.actor.checkpoint
    assert list(checkpoint.load_contents) == ["model", "extra"]
    assert list(checkpoint.save_contents) == ["model", "optimizer", "extra"]
    assert list(compose_verl(j.overrides).actor_rollout_ref.actor.checkpoint.load_contents) == \
        list(checkpoint.save_contents)  # without it, verl loads what it saves


def test_loggers_are_verls():
    tree = ast.parse((VERL_DIR / "utils" / "tracking.py").read_text())
    supported = next(ast.literal_eval(node.value) for node in ast.walk(tree)
                     if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "supported_backend"
                                                             for t in node.targets))
    assert set(grpo.LOGGERS) == set(supported)


def test_verl_validate_config(job, composed):
    # verl.utils.config.validate_config instantiates verl.workers.config dataclasses, and importing
    # any verl module runs verl/__init__.py, which imports torch, ray and tensordict (verl.protocol).
    for heavy in ("torch", "ray", "tensordict", "transformers"):
        if importlib.util.find_spec(heavy) is None:
            pytest.skip(f"verl's validate_config needs {heavy} (verl/__init__.py imports verl.protocol); "
                        "the light test install has only verl's YAML and source")
    from verl.utils.config import validate_config

    validate_config(composed, use_reference_policy=bool(job.recipe["actor_rollout_ref.actor.use_kl_loss"]),
                    use_critic=False)


def test_memory_model_assumptions_are_verls(verl_defaults):
    """recipe.memory sizes fp32 actor and reference shards and vLLM's default batch limits from verl's config."""
    rollout = verl_defaults.actor_rollout_ref.rollout
    assert rollout.max_num_batched_tokens == grpo.ROLLOUT_MAX_NUM_BATCHED_TOKENS
    assert rollout.max_num_seqs == grpo.ROLLOUT_MAX_NUM_SEQS
    assert rollout.free_cache_engine is True  # vLLM sleeps (weights and KV freed) during training
    for role in ("actor", "ref"):
        assert verl_defaults.actor_rollout_ref[role].fsdp_config.model_dtype == "fp32", role
    # Gradient checkpointing is on (the calibration measured with it) and the optimizer state is saved.
    assert verl_defaults.actor_rollout_ref.model.enable_gradient_checkpointing is True
    assert "optimizer" in verl_defaults.actor_rollout_ref.actor.checkpoint.save_contents
    # The calibrated entropy path (bench/memory_calibration.py run_case_fsdp2): compiled, unchunked, not
    # checkpointed; the actor's FSDP units reshard after forward and nothing of the actor is offloaded.
    actor = verl_defaults.actor_rollout_ref.actor
    assert actor.use_torch_compile is True and actor.entropy_coeff == 0
    assert actor.entropy_from_logits_with_chunking is False and actor.entropy_checkpointing is False
    assert actor.fsdp_config.reshard_after_forward is True and actor.fsdp_config.fsdp_size == -1
    assert not (actor.fsdp_config.offload_policy or actor.fsdp_config.param_offload
                or actor.fsdp_config.optimizer_offload)
    assert actor.fsdp_config.dtype == "bfloat16"  # MixedPrecisionPolicy param_dtype (fsdp_workers.py)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_an_override_the_gate_accepts_composes_in_verl(data):
    """Hydra composing verl's own config is the oracle: an override of verl's keys in any form that the gate
    accepts composes after the recipe's own, and verl's config then holds each leaf's value at its key."""
    item = data.draw(overrides(st.sampled_from(tree_keys())))
    kept, problems = judged(item)
    assume(not problems and "$" not in item)
    composed = compose_verl([*_JOB.overrides, item])
    for leaf in kept:
        value = OmegaConf.select(composed, leaf.key)
        value = OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value
        assert value == leaf.value, (item, leaf)


_JOB = Job(*next(iter(STACKS.items())))
