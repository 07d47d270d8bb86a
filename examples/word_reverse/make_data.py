"""Writes train.parquet and val.parquet of the example task: reverse a word, letter by letter.

    venv/bin/python examples/word_reverse/make_data.py

Rows in verl's RL format (volcengine/verl docs/preparation/prepare_data.rst @v0.6.1): data_source,
prompt as chat messages, ability, reward_model.ground_truth, extra_info. Deterministic: rerunning it
writes the same rows, so `pulumi up` finds the same content and uploads nothing.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
DATA_SOURCE = "example/word_reverse"
INSTRUCTION = 'Reverse the letters of the word "{word}". Write the reversed word after "####".'
WORDS = (
    "planet river garden window bottle candle marble pencil rocket silver forest mirror castle "
    "button ladder pillow orange violet copper branch bridge cactus dragon engine falcon guitar "
    "hammer island jacket kettle lemon magnet needle oyster parrot quartz rabbit saddle tunnel "
    "umpire velvet walnut yellow zipper anchor basket cobalt desert empire fabric goblet harbor "
    "iceberg jungle kernel lantern meadow nectar orchid pepper quiver ribbon sphinx timber "
    "unicorn vessel wizard yogurt zenith"
).split()
VAL_EVERY = 5  # every fifth word goes to validation


def row(word: str, split: str, index: int) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": INSTRUCTION.format(word=word)}],
        "ability": "string-manipulation",
        "reward_model": {"style": "rule", "ground_truth": word[::-1]},
        "extra_info": {"split": split, "index": index, "word": word},
    }


def main() -> None:
    splits = {"train": [], "val": []}
    for i, word in enumerate(WORDS):
        split = "val" if i % VAL_EVERY == VAL_EVERY - 1 else "train"
        splits[split].append(row(word, split, len(splits[split])))
    for split, rows in splits.items():
        pq.write_table(pa.Table.from_pylist(rows), HERE / f"{split}.parquet")
        print(f"{split}.parquet: {len(rows)} rows")


if __name__ == "__main__":
    main()
