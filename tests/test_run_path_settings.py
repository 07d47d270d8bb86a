"""Issue 22: the recipe's run-path settings (what each process finds in its environment), checkpoint
identity, save time and the barrier's timeout, and the response length with the KV check."""

from __future__ import annotations

import dataclasses

import pytest

from catalog.accelerators import ACCELERATORS, nccl_env
from catalog.models import model_spec
from catalog.paths import bucket_paths
from recipe import grpo
from stacks import checkpoints
from stacks.derived import run_paths
from tests.stack_helpers import STACK_FILES
from tools import plan

STACKS = [p.stem.split(".", 1)[1] for p in STACK_FILES]
PATHS = bucket_paths("b200", "Qwen/Qwen2.5-32B-Instruct", "v0.6.1")


def load(stack: str):
    from stacks import config
    raw, _ = plan.read_stack_file(plan.ROOT / f"Pulumi.{stack}.yaml")
    return config.load(raw, stack, allow_placeholder_project=True)


@pytest.mark.parametrize("acc", ["b200", "h200", "l4"])
def test_runtime_env_keeps_bytecode_and_the_datasets_cache_off_the_bucket(acc):
    env = grpo.runtime_env(ACCELERATORS[acc], PATHS)["env_vars"]
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HF_DATASETS_CACHE"].startswith("/tmp/") and not env["HF_DATASETS_CACHE"].startswith(env["HF_HOME"])


@pytest.mark.parametrize("acc", ["b200", "h200"])
def test_library_path_is_extended_not_replaced(acc):
    a = ACCELERATORS[acc]
    env = grpo.runtime_env(a, PATHS)["env_vars"]
    # Ray expands it from the node's own env: test_ray_job_provider (the driver) and the rehearsal (the GPU actors).
    assert env["LD_LIBRARY_PATH"].endswith(":${LD_LIBRARY_PATH}")
    assert env["LD_LIBRARY_PATH"].startswith("/usr/local/nvidia/lib64:/usr/local/gib/lib64")
    assert "LD_LIBRARY_PATH" not in nccl_env(a)  # so the pod's env never replaces the image's value


@pytest.mark.parametrize("acc", ["b200", "h200"])
def test_nccl_bootstrap_is_pinned_on_rdma_stacks(acc):
    assert nccl_env(ACCELERATORS[acc])["NCCL_SOCKET_IFNAME"] == "eth0,eth1"
    assert "NCCL_SOCKET_IFNAME" not in nccl_env(ACCELERATORS["l4"])


def test_a_changed_run_gets_another_checkpoint_folder_and_the_same_run_the_same():
    cfg = load("b200")
    same = run_paths(cfg).checkpoint_dir
    assert same == run_paths(load("b200")).checkpoint_dir
    for change in ({"learning_rate": 2e-6}, {"train_batch_size": 128}, {"rollout_n": 4},
                   {"kl_loss_coef": 0.0}, {"max_response_length": 768},
                   {"extra_overrides": ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",)}):
        changed = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, **change))
        assert run_paths(changed).checkpoint_dir != same, change
    assert run_paths(dataclasses.replace(cfg, gpu_nodes=4)).checkpoint_dir != same  # world size: shards differ
    assert run_paths(dataclasses.replace(cfg, model="Qwen/Qwen2.5-7B-Instruct")).checkpoint_dir != same
    for keep in ({"total_epochs": 5}, {"save_freq": 10}, {"test_freq": 5}, {"logger": ("console",)},
                 {"gpu_memory_utilization": 0.5}, {"extra_overrides": ("trainer.log_val_generations=5",)}):
        kept = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, **keep))
        assert run_paths(kept).checkpoint_dir == same, keep  # an extended run resumes
    assert run_paths(cfg).merged_dir.endswith(same.rsplit("/", 1)[1])


def test_nccl_timeout_covers_a_slow_save():
    assert checkpoints.nccl_timeout_s(100) == checkpoints.VERL_NCCL_TIMEOUT_S
    assert checkpoints.nccl_timeout_s(400) == 1200  # 3 x 400 s, whole minutes
    cfg = load("b200")
    full = dataclasses.replace(cfg.grpo, save_contents="full")  # model, optimizer, extra: 393 GB for 32B
    one_node = dataclasses.replace(cfg, gpu_nodes=1, grpo=full)  # 393 GB through one sidecar: ~393 s
    assert checkpoints.nccl_timeout_for(one_node) >= 3 * 393
    item = [o for o in grpo.overrides(cfg.grpo, stack="b200", nnodes=1, gpus_per_node=8, paths=PATHS,
                                      nccl_timeout=checkpoints.nccl_timeout_for(one_node))
            if o.startswith("actor_rollout_ref.nccl_timeout=")]
    assert item == [f"actor_rollout_ref.nccl_timeout={checkpoints.nccl_timeout_for(one_node)}"]


@pytest.mark.parametrize("stack", STACKS)
def test_saves_take_under_a_tenth_of_the_run(stack):
    t = checkpoints.stack_save_time(load(stack))
    assert t.share < checkpoints.SAVE_SHARE_LIMIT, (stack, t)


@pytest.mark.parametrize("stack", ["b200", "h200"])
def test_response_length_is_verls_gsm8k_value_and_the_kv_cache_holds_the_batch(stack):
    """verl v0.6.1 examples/grpo_trainer (run_qwen2-7b.sh, run_deepseek7b_llm.sh): max_response_length=1024."""
    cfg = load(stack)
    assert cfg.grpo.max_response_length == 1024
    b = grpo.memory_breakdown(cfg.grpo, model_spec(cfg.model), cfg.accelerator, cfg.total_gpus)
    assert b.rollout_fits and b.kv_holds_batch, (b.kv_tokens, b.kv_tokens_needed)
    assert not cfg.warnings
