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
    weights_gb: float = 0.0  # all safetensors files, decimal GB (bf16: ~2 bytes per parameter)
    largest_file_gb: float = 0.0  # the largest single file: what one staged write may have to buffer


GB_PER_GIB = 1024**3 / 1e9


# (attention heads, KV heads) from each Qwen2.5 config.json.
_QWEN25 = {"0.5": (14, 2), "1.5": (12, 2), "3": (16, 2), "7": (28, 4), "14": (40, 8), "32": (40, 8),
           "72": (64, 8)}
# (total weights GB, largest file GB) from the file listings of Qwen/Qwen2.5-<size>B-Instruct on the
# hub (huggingface.co/Qwen/Qwen2.5-32B-Instruct/tree/main etc.): single-file repos up to 1.5B,
# ~3.9-4.0 GB shards above.
_QWEN25_FILES = {"0.5": (0.99, 0.99), "1.5": (3.09, 3.09), "3": (6.17, 3.97), "7": (15.2, 3.95),
                 "14": (29.5, 3.96), "32": (65.5, 3.97), "72": (145.4, 3.96)}
MODELS: dict[str, ModelSpec] = {
    f"Qwen/Qwen2.5-{size}B{suffix}": ModelSpec("qwen2.5", size, heads, kv, *_QWEN25_FILES[size])
    for size, (heads, kv) in _QWEN25.items() for suffix in ("", "-Instruct")
}
# An unknown model: assume hub-style 5 GB shards (transformers' default max_shard_size) and a 32B size.
UNKNOWN_LARGEST_FILE_GB = 5.0
UNKNOWN_WEIGHTS_GB = 65.5


def largest_file_gib(model: str) -> float:
    spec = MODELS.get(model)
    return (spec.largest_file_gb if spec else UNKNOWN_LARGEST_FILE_GB) / GB_PER_GIB


def weights_gib(model: str) -> float:
    spec = MODELS.get(model)
    return (spec.weights_gb if spec else UNKNOWN_WEIGHTS_GB) / GB_PER_GIB


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
