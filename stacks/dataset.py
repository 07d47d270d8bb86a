"""Bring your own task: the user's parquet files and reward function, checked before anything bills.

verl reads RL data as parquet with `data_source`, `prompt` (chat messages), `ability`,
`reward_model.ground_truth` and `extra_info` (volcengine/verl docs/preparation/prepare_data.rst
@d62da49 = v0.6.1), from local paths only (verl/utils/fs.py copies only hdfs://). A custom reward is a
file and a function name (custom_reward_function.path/.name, docs/preparation/reward_function.rst),
called as fn(data_source=, solution_str=, ground_truth=, extra_info=) and answering a number or a
dict with "score" (verl/workers/reward_manager/naive.py).

`inspect_task` reads the files offline (the plan and `pulumi preview` both run it through
stacks.config.load): the schema and types with a bounded scan, the rows, the prompt lengths as an
estimate without the tokenizer, and a smoke test of the reward function on a few real rows with a
made-up response, in a subprocess with a timeout and no credentials in its environment.
`facts` then turns the reading into the DatasetFacts the recipe, the memory model and the sizing use.
Every problem names the config key, the file, and where it can the row and the column.
"""

from __future__ import annotations

import copy
import hashlib
import json
import keyword
import math
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from catalog.datasets import VERL_SCORED_PREFIXES, VERL_SCORED_SOURCES, DatasetFacts
from catalog.paths import task_file

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # where Pulumi.yaml is: the CLI runs the program here
PROBE = Path(__file__).resolve().parent / "reward_probe.py"
SCAN_ROWS = 200_000  # rows read per file for the row checks and the length estimate (bounded scan)
MAX_PROBLEMS_PER_FILE = 5
PROBE_ROWS = 3  # training rows the reward function is called on (plus one validation row)
PROBE_TIMEOUT_S = 120.0  # import + a handful of calls; generous for a loaded machine
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
VERL_SOURCE_GB = 0.01  # verl's source, staged next to the data
ESTIMATE = "estimated without the tokenizer (~4 UTF-8 bytes per token + chat template)"


@dataclass(frozen=True)
class TaskFile:
    """One file the stack names: where it is here and where the pods read it."""

    key: str  # the config key, e.g. verl-gke:dataTrainFile
    value: str  # as written in the stack
    local: Path  # resolved local path
    role_name: str  # file name in the bucket: train.parquet, val.parquet, reward.py
    sha256: str = ""

    @property
    def object_name(self) -> str:
        """Content-addressed object in the stack's bucket: an unchanged file keeps its name."""
        return task_file(self.sha256, self.role_name, in_pod=False)

    @property
    def in_pod(self) -> str:
        return task_file(self.sha256, self.role_name, in_pod=True)

    @property
    def asset_path(self) -> str:
        """The path Pulumi's FileAsset records: relative to the project folder (where the CLI runs the
        program) when inside it, so the state does not depend on where the checkout lives."""
        try:
            return str(self.local.relative_to(PROJECT_ROOT))
        except ValueError:
            return str(self.local)


@dataclass(frozen=True)
class TaskSpec:
    """The stack's own task: train/validation parquet and, optionally, a reward function."""

    train: TaskFile
    val: TaskFile
    reward: TaskFile | None
    reward_function: str
    reward_packages: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[TaskFile, ...]:
        return tuple(f for f in (self.train, self.val, self.reward) if f is not None)


@dataclass
class FileReading:
    """What the bounded scan of one parquet file found."""

    rows: int = 0
    size_bytes: int = 0
    scanned: int = 0
    prompt_bytes: list[tuple[int, int]] = field(default_factory=list)  # (content bytes, messages) per row
    sources: dict[str, int] = field(default_factory=dict)  # data_source -> first row
    samples: list[dict] = field(default_factory=list)  # the first rows, for the reward smoke test


@dataclass
class Inspection:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the plan shows about the task
    readings: dict[str, FileReading] = field(default_factory=dict)  # "train" / "val"


def identifier_problem(name: str) -> str | None:
    """A Python name (a function or a top-level module), or why not."""
    if not name.isidentifier() or keyword.iskeyword(name):
        return "must be a Python identifier"
    return None


def resolve_file(key: str, value: str, role_name: str, problems: list[str]) -> TaskFile | None:
    """A local path (relative to the project folder) that exists, with its content hash."""
    if value.startswith(("gs://", "hdfs://", "http://", "https://")) or "://" in value:
        problems.append(f"{key} = {value!r}: must be a local path to the file; `pulumi up` uploads it to the "
                        "stack's bucket (gs:// and other URLs are not read by this version)")
        return None
    path = Path(value).expanduser()
    path = path if path.is_absolute() else PROJECT_ROOT / path
    if not path.exists():
        problems.append(f"{key} = {value!r}: no such file ({path})")
        return None
    if not path.is_file():
        problems.append(f"{key} = {value!r}: is not a regular file ({path})")
        return None
    try:
        digest = sha256_file(path)
    except OSError as err:
        problems.append(f"{key} = {value!r}: cannot read it ({err.strerror or err})")
        return None
    return TaskFile(key, value, path, role_name, digest)


_DIGESTS: dict[tuple, str] = {}  # (path, size, mtime): a large file is hashed once per process


def sha256_file(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = _sha256(path)
    return _DIGESTS[key]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- parquet ----------------------------------------------------------------------------------


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


def read_parquet(key: str, path: Path, scan_rows: int = SCAN_ROWS) -> tuple[FileReading, list[str]]:
    """The file's rows, checked one by one up to `scan_rows` (bounded for large files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = f"{key} ({path.name})"
    reading = FileReading(size_bytes=path.stat().st_size)
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


# --- the whole task ---------------------------------------------------------------------------


_READINGS: dict[tuple, Inspection] = {}  # one reading per content in a process (the plan loads a stack often)


def inspect_task(task: TaskSpec, timeout_s: float | None = None) -> Inspection:
    """Read both files and smoke-test the reward (what does not depend on the GRPO settings)."""
    timeout_s = PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    key = (tuple((f.key, str(f.local), f.sha256) for f in task.files), task.reward_function,
           task.reward_packages, timeout_s)
    if key not in _READINGS:
        _READINGS[key] = _inspect(task, timeout_s)
    return copy.deepcopy(_READINGS[key])


def _inspect(task: TaskSpec, timeout_s: float) -> Inspection:
    out = Inspection()
    for split, f in (("train", task.train), ("val", task.val)):
        reading, problems = read_parquet(f.key, f.local)
        out.readings[split] = reading
        out.problems += problems
    if out.problems:
        return out
    if task.reward is None:
        for split, f in (("train", task.train), ("val", task.val)):
            for source, row in out.readings[split].sources.items():
                if source not in VERL_SCORED_SOURCES and not source.startswith(VERL_SCORED_PREFIXES):
                    out.problems.append(
                        f"{f.key} ({f.local.name}), row {row}, column data_source: {source!r} has no built-in "
                        "scorer in verl (verl/utils/reward_score/__init__.py default_compute_score raises "
                        "NotImplementedError): set rewardFile to your reward function")
        return out
    cases = []
    for split in ("train", "val"):
        for sample in out.readings[split].samples[: PROBE_ROWS if split == "train" else 1]:
            cases += _cases(split, sample)
    result = probe_reward(task.reward.local, task.reward_function, cases, timeout_s)
    _judge_probe(task, result, out)
    return out


def _cases(split: str, sample: dict) -> list[dict]:
    """Two made-up responses per row: one that states the ground truth, one that is empty."""
    truth = sample["reward_model"]["ground_truth"]
    extra = dict(sample.get("extra_info") or {})
    # What verl's naive reward manager adds to extra_info before the call (naive.py).
    extra.update(num_turns=None, rollout_reward_scores={})
    base = {"split": split, "row": sample["row"], "data_source": sample["data_source"],
            "ground_truth": truth, "extra_info": extra}
    stated = f"Let me work it out step by step.\nThe answer is {truth}.\n#### {truth}"
    return [{**base, "solution_str": stated}, {**base, "solution_str": ""}]


def probe_env(home: str) -> dict[str, str]:
    """The reward's environment: no credential of any kind, a scratch HOME (no ~/.config/gcloud,
    ~/.netrc, ~/.cache/huggingface token), no proxy or cloud variables from the caller."""
    return {"PATH": os.environ.get("PATH", os.defpath), "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "CLOUDSDK_CONFIG": os.path.join(home, "gcloud"),
            "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}


def probe_reward(reward: Path, function: str, cases: list[dict], timeout_s: float) -> dict:
    """Run stacks/reward_probe.py on the cases: -I (no user site, no PYTHON* variables), a fresh
    folder as cwd and HOME, the environment of probe_env, killed with its process group on timeout."""
    with tempfile.TemporaryDirectory(prefix="verl-gke-reward-") as home:
        result_path = os.path.join(home, "result.json")
        request = json.dumps({"file": str(reward), "function": function, "cases": cases}, default=str)
        proc = subprocess.Popen([sys.executable, "-I", str(PROBE), result_path], cwd=home, env=probe_env(home),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(request, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the probe and anything the reward started
            proc.communicate()
            return {"status": "timeout", "detail": f"no answer within {timeout_s:g} s"}
        try:
            with open(result_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            tail = (output or "").strip()[-600:]
            return {"status": "crashed", "detail": f"exit code {proc.returncode}; output: {tail or '(none)'}"}


def _judge_probe(task: TaskSpec, result: dict, out: Inspection) -> None:
    reward = task.reward
    assert reward is not None
    fn_key = _key("rewardFunction")
    where = f"{reward.key} ({reward.local.name})"
    status, detail = result.get("status"), result.get("detail", "")
    at = ""
    if "case" in result:
        case = result["case"]
        f = task.train if case["split"] == "train" else task.val
        at = (f" on {f.key} ({f.local.name}) row {case['row']} with the made-up response "
              f"{case['solution_str'][:60]!r}")
    if status == "ok":
        out.notes.append(f"reward smoke test passed: {reward.local.name}:{task.reward_function} answered "
                         f"{', '.join(map(str, result.get('scores', [])))} on {result.get('calls', 0)} made-up "
                         "responses to real rows")
    elif status == "missing_module":
        module = result.get("module", "")
        top = module.split(".")[0]
        text = (f"{where} imports {module!r}, which is not installed here, so {task.reward_function} was not "
                f"smoke-tested{at}")
        if top in task.reward_packages:
            out.notes.append(text + f" ({top} is declared in rewardPackages: the image provides it)")
        else:
            out.warnings.append(text + ". Fine if the container image has it (verl's image ships torch, "
                                "transformers, numpy, ...): declare it in rewardPackages to say so")
    elif status == "no_function":
        out.problems.append(f"{fn_key} = {task.reward_function!r}: {where} defines no such function ({detail})")
    elif status == "bad_signature":
        out.problems.append(f"{fn_key} = {task.reward_function!r}: {detail}; verl calls it as fn(data_source=..., "
                            "solution_str=..., ground_truth=..., extra_info=...) "
                            "(verl/workers/reward_manager/naive.py)")
    elif status == "bad_return":
        out.problems.append(f"{fn_key} = {task.reward_function!r}: returned {detail}{at}; verl needs a number or "
                            "a dict with a numeric \"score\" (verl/workers/reward_manager/naive.py)")
    elif status in ("import_error", "raised"):
        what = "failed to import" if status == "import_error" else f"{task.reward_function} raised"
        out.problems.append(f"{where}: {what}{at}: {detail}")
    elif status == "timeout":
        out.problems.append(f"{where}: the reward smoke test got {detail}: its import or a call on a real row "
                            "hangs or is far too slow (verl calls it once per generated response)")
    else:
        out.problems.append(f"{where}: the reward smoke test crashed ({detail})")


def facts(task: TaskSpec, inspection: Inspection, *, max_prompt_length: int,
          max_response_length: int) -> tuple[DatasetFacts, list[str], list[str], list[str]]:
    """DatasetFacts for the run, plus (problems, warnings, notes): verl filters prompts longer than
    max_prompt_length (data.filter_overlong_prompts, verl/utils/dataset/rl_dataset.py), so the rows
    it keeps are the ones the sizing counts (and stacks.grpo.preflight checks a batch against)."""
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    kept: dict[str, int] = {}
    means: dict[str, float] = {}
    for split, f in (("train", task.train), ("val", task.val)):
        r = inspection.readings[split]
        tokens = [prompt_tokens(s, m) for s, m in r.prompt_bytes]
        worst = [prompt_tokens(s, m, BYTES_PER_TOKEN_PESSIMISTIC) for s, m in r.prompt_bytes]
        scanned = max(1, len(tokens))
        drop = sum(t > max_prompt_length for t in tokens)
        drop_worst = sum(t > max_prompt_length for t in worst)
        # A bounded scan extrapolates to the file's rows.
        scale = r.rows / scanned
        dropped = round(drop * scale)
        kept[split] = r.rows - dropped
        fitting = [t for t in tokens if t <= max_prompt_length]
        means[split] = sum(fitting) / len(fitting) if fitting else float(max_prompt_length)
        basis = "" if r.scanned >= r.rows else f", from the first {r.scanned:,} rows"
        notes.append(f"{f.key} ({f.local.name}): {r.rows:,} rows, prompts {min(tokens, default=0)}-"
                     f"{max(tokens, default=0)} tokens, mean {means[split]:.0f} ({ESTIMATE}{basis})")
        if drop_worst:
            text = (f"{f.key} ({f.local.name}): {dropped:,} of {r.rows:,} rows would be dropped by verl's "
                    f"overlong-prompt filter at grpoMaxPromptLength = {max_prompt_length} (up to "
                    f"{round(drop_worst * scale):,} at 3 bytes per token; {ESTIMATE}{basis})")
            (warnings if dropped else notes).append(text)
        if kept[split] < 1:
            problems.append(f"{_key('grpoMaxPromptLength')} = {max_prompt_length}: every row of {f.key} "
                            f"({f.local.name}) is longer (estimate: shortest prompt {min(tokens)} tokens); verl's "
                            "filter would leave it empty")
    data = DatasetFacts(
        name=f"{task.train.local.name}", train_rows=max(0, kept["train"]), val_rows=max(0, kept["val"]),
        mean_prompt_tokens=means["train"], mean_response_tokens=max_response_length / 2,
        data_gb=sum(r.size_bytes for r in inspection.readings.values()) / 1e9 + VERL_SOURCE_GB,
        lengths_basis=f"prompts {ESTIMATE}; responses assumed half of grpoMaxResponseLength",
        dropped_rows=inspection.readings["train"].rows - kept["train"])
    return data, problems, warnings, notes


def _key(name: str) -> str:
    from stacks.keys import full

    return full(name)
