"""GRPO settings as the stack configures them (parsed and defaulted in stacks/config.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GrpoSettings:
    train_batch_size: int
    rollout_n: int
    max_prompt_length: int
    max_response_length: int
    learning_rate: float
    ppo_mini_batch_size: int
    ppo_micro_batch_size_per_gpu: int
    log_prob_micro_batch_size_per_gpu: int
    ref_log_prob_micro_batch_size_per_gpu: int
    tensor_parallel_size: int
    gpu_memory_utilization: float
    rollout_engine: str
    actor_strategy: str
    kl_loss_coef: float
    kl_loss_type: str
    entropy_coeff: float
    total_epochs: int
    save_freq: int
    test_freq: int
    val_before_train: bool
    logger: tuple[str, ...]
    extra_overrides: tuple[str, ...]
