"""What the recipe, the memory model and the sizing need to know about a training dataset.

One `DatasetFacts` per run: GSM8K's own row (the default, as staged by verl's preprocessing script),
or the figures `stacks.dataset` reads from a user's parquet files. Nothing else spells GSM8K's
row count or mean lengths.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetFacts:
    """Rows and mean lengths of the training run's data. Token counts are estimates unless the
    source says otherwise (`lengths_basis`)."""

    name: str  # for messages: "GSM8K", "dataTrainFile train.parquet"
    train_rows: int  # rows verl's train loader sees (after the overlong-prompt filter)
    val_rows: int  # validation prompts (one response each: val_kwargs.n = 1)
    mean_prompt_tokens: float
    mean_response_tokens: float
    data_gb: float  # what the files (and verl's source) take in the bucket, decimal GB
    lengths_basis: str  # where the mean lengths come from
    dropped_rows: int = 0  # training rows the overlong-prompt filter is estimated to drop

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "train_rows": self.train_rows, "val_rows": self.val_rows,
                "mean_prompt_tokens": round(self.mean_prompt_tokens, 1),
                "mean_response_tokens": round(self.mean_response_tokens, 1),
                "data_gb": round(self.data_gb, 4), "lengths_basis": self.lengths_basis,
                "dropped_rows": self.dropped_rows}


# openai/gsm8k "main": 7473 train / 1319 test rows (its dataset card). Mean lengths from issue #13:
# prompts ~100 tokens, responses ~270 of the 1024 padded. Two parquet files and verl's source: a few MB.
GSM8K = DatasetFacts(
    name="GSM8K", train_rows=7473, val_rows=1319, mean_prompt_tokens=100, mean_response_tokens=270,
    data_gb=0.01, lengths_basis="GSM8K means measured with the Qwen2.5 tokenizer (issue #13)")


# data_source values verl's default_compute_score scores without a custom reward function
# (volcengine/verl verl/utils/reward_score/__init__.py @d62da4950573 = v0.6.1); any other value raises
# NotImplementedError in the reward manager, after the GPUs have generated the first batch.
VERL_SCORED_SOURCES = frozenset({
    "openai/gsm8k", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500",
    "math_dapo", "math", "math_dapo_reasoning", "numina_aops_forum", "numina_synthetic_math",
    "numina_amc_aime", "numina_synthetic_amc", "numina_cn_k12", "numina_olympiads", "codecontests", "apps",
    "codeforces", "taco", "hiyouga/geometry3k", "searchR1_nq", "searchR1_triviaqa", "searchR1_popqa",
    "searchR1_hotpotqa", "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle",
})
VERL_SCORED_PREFIXES = ("aime",)  # data_source.startswith("aime")
