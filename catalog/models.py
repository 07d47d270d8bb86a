"""Models the recipe knows: the figures that decide sharding, memory and access.

Heads and KV heads come from each model's config.json on the Hugging Face hub (Qwen/Qwen2.5-*);
vLLM shards both across tensor-parallel ranks. Adding a model is a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

# Organisations whose models are gated on the hub: a token is required up front.
GATED_MODEL_ORGS = ("meta-llama", "google", "mistralai")


@dataclass(frozen=True)
class ModelSpec:
    family: str
    size: str  # as in the repo id, e.g. "32" for Qwen2.5-32B
    attention_heads: int
    kv_heads: int


# (attention heads, KV heads) from each Qwen2.5 config.json.
_QWEN25 = {"0.5": (14, 2), "1.5": (12, 2), "3": (16, 2), "7": (28, 4), "14": (40, 8), "32": (40, 8),
           "72": (64, 8)}
MODELS: dict[str, ModelSpec] = {
    f"Qwen/Qwen2.5-{size}B{suffix}": ModelSpec("qwen2.5", size, heads, kv)
    for size, (heads, kv) in _QWEN25.items() for suffix in ("", "-Instruct")
}


def model_spec(model: str) -> ModelSpec | None:
    return MODELS.get(model)


def is_gated(model: str) -> bool:
    return model.split("/")[0] in GATED_MODEL_ORGS


def tp_choices(spec: ModelSpec, gpus_per_node: int) -> list[int]:
    """Tensor-parallel sizes vLLM accepts for this model within one node: heads % tp == 0 and the
    KV heads either split (kv % tp == 0) or replicated (tp % kv == 0)."""
    q, kv = spec.attention_heads, spec.kv_heads
    return [t for t in range(1, gpus_per_node + 1)
            if not gpus_per_node % t and not q % t and not (kv % t and t % kv)]
