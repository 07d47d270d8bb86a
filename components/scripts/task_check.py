"""The checks of a task's parquet files, shared by the plan and the staging Job.

stacks.dataset runs them offline on local files (the plan, `pulumi preview`); the staging Job
(components/scripts/stage_data.py, step "task") runs them on the files it copied from gs://, which
the plan cannot read (no credentials offline). Shipped next to stage_data.py in the staging Job's
ConfigMap, so it imports nothing from this repository: the standard library and pyarrow only (a verl
dependency, volcengine/verl requirements.txt `pyarrow>=19.0.0` @035d7a79, so in verl's image; the GSM8K
step's `datasets` writes its parquet with it too).

verl's RL format: parquet with `data_source`, `prompt` (chat messages), `ability`,
`reward_model.ground_truth` and `extra_info` (volcengine/verl docs/preparation/prepare_data.rst
@d62da49 = v0.6.1). verl drops prompts longer than data.max_prompt_length (filter_overlong_prompts,
verl/utils/dataset/rl_dataset.py); its train loader drops the last partial batch, so a file with fewer
kept rows than data.train_batch_size leaves it empty ("Train dataloader is empty!").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

SCAN_ROWS = 200_000  # rows read per file for the row checks and the length estimate (bounded scan)
MAX_PROBLEMS_PER_FILE = 5
PROBE_ROWS = 3  # training rows the reward function is called on (plus one validation row)
ROLES = ("system", "user", "assistant", "tool")
# Prompt length estimate without the tokenizer (labelled as one wherever it is shown): UTF-8 bytes
# per token for English text with a BPE vocabulary like Qwen2.5's (~4; 3 as the pessimistic bound),
# plus the chat template: `<|im_start|>role\n ... <|im_end|>\n` per message and, when the prompt has
# no system message, Qwen2.5's default system prompt, plus the generation prompt (tokenizer_config.json).
BYTES_PER_TOKEN = 4.0
BYTES_PER_TOKEN_PESSIMISTIC = 3.0
MESSAGE_OVERHEAD_TOKENS = 5
DEFAULT_SYSTEM_TOKENS = 20
GENERATION_PROMPT_TOKENS = 3
ESTIMATE = "estimated without the tokenizer (~4 UTF-8 bytes per token + chat template)"


@dataclass
class FileReading:
    """What the bounded scan of one parquet file found."""

    rows: int = 0
    size_bytes: int = 0
    scanned: int = 0
    prompt_bytes: list[tuple[int, int]] = field(default_factory=list)  # (content bytes, messages) per row
    sources: dict[str, int] = field(default_factory=dict)  # data_source -> first row
    samples: list[dict] = field(default_factory=list)  # the first rows, for the reward smoke test



def _is_string(t) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)


def _schema_problems(schema, where: str) -> list[str]:
    """Column types verl's RLHFDataset and the reward manager read (prepare_data.rst)."""
    import pyarrow as pa

    problems = []
    names = set(schema.names)
    for column in ("data_source", "prompt", "reward_model"):
        if column not in names:
            problems.append(f"{where}, column {column}: missing (columns: {', '.join(schema.names)}); verl's RL "
                            "format needs data_source, prompt, reward_model.ground_truth (ability and extra_info "
                            "optional), docs/preparation/prepare_data.rst")
    if problems:
        return problems
    if not _is_string(schema.field("data_source").type):
        problems.append(f"{where}, column data_source: is {schema.field('data_source').type}, must be a string "
                        "(it picks the reward function)")
    prompt = schema.field("prompt").type
    item = prompt.value_type if pa.types.is_list(prompt) or pa.types.is_large_list(prompt) else None
    if item is None or not pa.types.is_struct(item) or {"role", "content"} - {item.field(i).name for i in
                                                                              range(item.num_fields)}:
        problems.append(f"{where}, column prompt: is {prompt}, must be a list of chat messages "
                        "{{role: string, content: string}} (verl applies the chat template to it)")
    elif not _is_string(item.field("content").type) or not _is_string(item.field("role").type):
        problems.append(f"{where}, column prompt: messages are {item}, role and content must be strings "
                        "(a text model's chat template)")
    reward = schema.field("reward_model").type
    if not pa.types.is_struct(reward) or "ground_truth" not in {reward.field(i).name
                                                                for i in range(reward.num_fields)}:
        problems.append(f"{where}, column reward_model: is {reward}, must be a struct with a ground_truth field "
                        "(the reward manager reads reward_model['ground_truth'])")
    for column, ok, allowed in (("ability", _is_string, "a string"),
                                ("extra_info", lambda t: pa.types.is_struct(t) or pa.types.is_null(t),
                                 "a struct (a dict per row) or null")):
        if column in names and not ok(schema.field(column).type):
            problems.append(f"{where}, column {column}: is {schema.field(column).type}, must be {allowed}")
    return problems


def read_parquet(key: str, path, scan_rows: int = SCAN_ROWS, label: str | None = None) -> tuple[FileReading, list[str]]:
    """The file's rows, checked one by one up to `scan_rows` (bounded for large files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = f"{key} ({label or os.path.basename(path)})"
    reading = FileReading(size_bytes=os.path.getsize(path))
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        return reading, [f"{where}: not a parquet file verl can read ({err})"]
    reading.rows = pf.metadata.num_rows
    problems = _schema_problems(pf.schema_arrow, where)
    if problems:
        return reading, problems
    if reading.rows == 0:
        return reading, [f"{where}: has no rows"]
    columns = [c for c in ("data_source", "prompt", "reward_model", "extra_info", "ability")
               if c in pf.schema_arrow.names]
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=4096, columns=columns):
            for values in batch.to_pylist():
                if row >= scan_rows or len(problems) >= MAX_PROBLEMS_PER_FILE:
                    break
                problems += _row_problems(where, row, values, reading)
                row += 1
            if row >= scan_rows or len(problems) >= MAX_PROBLEMS_PER_FILE:
                break
    except (pa.ArrowException, OSError) as err:
        problems.append(f"{where}, row {row}: unreadable ({err})")
    reading.scanned = row
    return reading, problems


def _row_problems(where: str, row: int, values: dict, reading: FileReading) -> list[str]:
    at = f"{where}, row {row}"
    source = values.get("data_source")
    messages = values.get("prompt")
    reward = values.get("reward_model")
    problems = []
    if not isinstance(source, str) or not source:
        problems.append(f"{at}, column data_source: is {source!r}, must be a non-empty string")
    else:
        reading.sources.setdefault(source, row)
    if not messages:
        problems.append(f"{at}, column prompt: is {messages!r}, must hold at least one message")
    else:
        size = 0
        for i, m in enumerate(messages):
            role, content = (m or {}).get("role"), (m or {}).get("content")
            if role not in ROLES:
                problems.append(f"{at}, column prompt[{i}].role: is {role!r}, must be one of {', '.join(ROLES)}")
            if not isinstance(content, str):
                problems.append(f"{at}, column prompt[{i}].content: is {content!r}, must be a string")
            else:
                size += len(content.encode("utf-8"))
        if not any((m or {}).get("role") == "system" for m in messages):
            size = -size - 1  # sign marks "no system message": the template adds the default one
        reading.prompt_bytes.append((size, len(messages)))
    if not isinstance(reward, dict) or reward.get("ground_truth") is None:
        problems.append(f"{at}, column reward_model.ground_truth: is missing or null "
                        f"({reward!r}); the reward function compares against it")
    if not problems and len(reading.samples) < PROBE_ROWS:
        reading.samples.append({"row": row, **values})
    return problems


def prompt_tokens(size: int, messages: int, bytes_per_token: float = BYTES_PER_TOKEN) -> int:
    """Estimated prompt tokens after the chat template (see ESTIMATE)."""
    system = size < 0
    content = -size - 1 if system else size
    return (math.ceil(content / bytes_per_token) + MESSAGE_OVERHEAD_TOKENS * messages
            + (DEFAULT_SYSTEM_TOKENS + MESSAGE_OVERHEAD_TOKENS if system else 0) + GENERATION_PROMPT_TOKENS)



@dataclass(frozen=True)
class PromptSummary:
    """A file's prompt lengths against max_prompt_length, extrapolated from the scanned rows."""

    tokens_min: int
    tokens_max: int
    mean_kept: float  # mean estimated tokens of the prompts verl keeps
    dropped: int  # rows verl's overlong filter drops (~4 bytes per token)
    dropped_worst: int  # the same at 3 bytes per token
    kept: int  # rows left after the filter
    basis: str  # "" when every row was scanned, else ", from the first N rows"


def prompt_summary(reading: FileReading, max_prompt_length: int) -> PromptSummary:
    tokens = [prompt_tokens(s, m) for s, m in reading.prompt_bytes]
    worst = [prompt_tokens(s, m, BYTES_PER_TOKEN_PESSIMISTIC) for s, m in reading.prompt_bytes]
    scale = reading.rows / max(1, len(tokens))  # a bounded scan extrapolates to the file's rows
    dropped = round(sum(t > max_prompt_length for t in tokens) * scale)
    fitting = [t for t in tokens if t <= max_prompt_length]
    return PromptSummary(
        tokens_min=min(tokens, default=0), tokens_max=max(tokens, default=0),
        mean_kept=sum(fitting) / len(fitting) if fitting else float(max_prompt_length),
        dropped=dropped, dropped_worst=round(sum(t > max_prompt_length for t in worst) * scale),
        kept=reading.rows - dropped,
        basis="" if reading.scanned >= reading.rows else f", from the first {reading.scanned:,} rows")


def check_staged(spec: dict) -> tuple[list[str], list[str]]:
    """The staging Job's check of the files it copied (the plan's checks, which it could not run):
    schema and rows, the declared row count, prompt lengths against max_prompt_length, enough rows for
    one batch, and without a reward file a data_source verl scores. Returns (problems, notes).

    spec: {"files": [{"key", "split" ("train"/"val"), "path" (the copy), "source" (gs:// URL),
    "rows" (declared, or null)}], "max_prompt_length", "train_batch_size",
    "scored_sources" (null when the stack has a reward file), "scored_prefixes",
    "rows_key" and "reward_key" (the config keys messages name)}."""
    problems: list[str] = []
    notes: list[str] = []
    limit = int(spec["max_prompt_length"])
    scored = spec.get("scored_sources")
    for f in spec["files"]:
        where = f"{f['key']} ({f['source']})"
        reading, found = read_parquet(f["key"], f["path"], label=f["source"])
        problems += found
        if found:
            continue
        s = prompt_summary(reading, limit)
        notes.append(f"{where}: {reading.rows:,} rows, prompts {s.tokens_min}-{s.tokens_max} tokens, {s.dropped:,} "
                     f"over max_prompt_length {limit} ({ESTIMATE}{s.basis})")
        declared = f.get("rows")
        if declared is not None and reading.rows != int(declared):
            problems.append(f"{where}: has {reading.rows:,} rows, the stack declares {int(declared):,} "
                            f"({spec['rows_key']}, which the plan sized the run with): set it to the file's rows")
        need = int(spec["train_batch_size"]) if f["split"] == "train" else 1
        if s.kept < need:
            problems.append(f"{where}: {s.kept:,} of {reading.rows:,} rows remain after verl's overlong-prompt filter "
                            f"at max_prompt_length {limit} ({ESTIMATE}{s.basis}); "
                            + (f"the train loader needs a full batch of {need}" if need > 1 else "none would remain"))
        if scored is not None:
            for source, row in reading.sources.items():
                if source not in scored and not source.startswith(tuple(spec.get("scored_prefixes") or ())):
                    problems.append(f"{where}, row {row}, column data_source: {source!r} has no built-in scorer in "
                                    f"verl (default_compute_score raises NotImplementedError): set "
                                    f"{spec['reward_key']} to your reward function")
    return problems, notes
