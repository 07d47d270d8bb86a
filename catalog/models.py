"""Models the recipe knows: the figures that decide sharding, memory and access.

Every architecture figure is a field of the model's published config.json (Qwen/Qwen2.5-*), read
from copies on the Hugging Face hub (the source of each row is cited below; the memory benchmark
bench/memory_calibration.py builds the models from the same figures). vLLM shards heads and KV
heads across tensor-parallel ranks; the memory model (recipe.memory) sizes weights, KV cache and
activations from the rest. Adding a model is a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

# Organisations whose models are gated on the hub: a token is required up front.
GATED_MODEL_ORGS = ("meta-llama", "google", "mistralai")


@dataclass(frozen=True)
class ModelSpec:
    family: str
    size: str  # as in the repo id, e.g. "32" for Qwen2.5-32B
    attention_heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    layers: int  # num_hidden_layers
    hidden: int  # hidden_size
    intermediate: int  # intermediate_size
    vocab: int  # vocab_size (the padded embedding rows, as published)
    tied: bool  # tie_word_embeddings
    source: str = ""

    weights_gb: float = 0.0  # all safetensors files, decimal GB (bf16: ~2 bytes per parameter)
    largest_file_gb: float = 0.0  # the largest single file: what one staged write may have to buffer

    @property
    def head_dim(self) -> int:
        return self.hidden // self.attention_heads

    @property
    def params(self) -> int:
        """Exact parameter count of a Qwen2 decoder (q/k/v carry a bias; a tied head counts once).

        Matches the count torch reports for the built model (bench/memory_calibration.json n_params).
        """
        h, kv = self.hidden, self.kv_heads * self.head_dim
        attention = 2 * h * h + h + 2 * (h * kv + kv)  # q (+bias), o, k and v (+bias)
        per_layer = attention + 3 * h * self.intermediate + 2 * h  # gate/up/down, two RMSNorms
        embeddings = self.vocab * h * (1 if self.tied else 2)
        return self.layers * per_layer + embeddings + h  # + final norm

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (the unit FSDP gathers at a time)."""
        return (self.params - self.vocab * self.hidden * (1 if self.tied else 2) - self.hidden) // self.layers


_HF = "huggingface.co/"
# size: (heads, kv heads, layers, hidden, intermediate, vocab, tied, config.json read)
_QWEN25 = {
    "0.5": (14, 2, 24, 896, 4864, 151936, True,
            _HF + "Jonathanmann/qwen-sms-3400/blob/main/config.json (_name_or_path Qwen/Qwen2.5-0.5B-Instruct)"),
    "1.5": (12, 2, 28, 1536, 8960, 151936, True,
            _HF + "onnx-community/Qwen2.5-1.5B-Instruct/blob/94677ac9/config.json"),
    "3": (16, 2, 36, 2048, 11008, 151936, True, _HF + "osllmai-community/Qwen2.5-3B-Instruct/blob/main/config.json"),
    "7": (28, 4, 28, 3584, 18944, 152064, False, _HF + "osllmai-community/Qwen2.5-7B-Instruct/blob/main/config.json"),
    "14": (40, 8, 48, 5120, 13824, 152064, False,
           _HF + "jebish7/Qwen2.5-14B-Instruct/blob/main/config.json (duplicate of Qwen/Qwen2.5-14B-Instruct)"),
    "32": (40, 8, 64, 5120, 27648, 152064, False,
           _HF + "xlangai/AgentTrek-1.0-32B/blob/main/config.json (_name_or_path Qwen/Qwen2.5-32B-Instruct)"),
    "72": (64, 8, 80, 8192, 29568, 152064, False,
           _HF + "m8than/banana-2-b-72b/blob/main/config.json (_name_or_path Qwen/Qwen2.5-72B-Instruct)"),
}
GB_PER_GIB = 1024**3 / 1e9
# (total weights GB, largest file GB) from the file listings of Qwen/Qwen2.5-<size>B-Instruct on the
# hub (huggingface.co/Qwen/Qwen2.5-32B-Instruct/tree/main etc.): single-file repos up to 1.5B,
# ~3.9-4.0 GB shards above.
_QWEN25_FILES = {"0.5": (0.99, 0.99), "1.5": (3.09, 3.09), "3": (6.17, 3.97), "7": (15.2, 3.95),
                 "14": (29.5, 3.96), "32": (65.5, 3.97), "72": (145.4, 3.96)}
MODELS: dict[str, ModelSpec] = {
    f"Qwen/Qwen2.5-{size}B{suffix}": ModelSpec("qwen2.5", size, *row, *_QWEN25_FILES[size])
    for size, row in _QWEN25.items() for suffix in ("", "-Instruct")
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
