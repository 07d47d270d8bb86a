"""Bring your own task: the user's parquet files and reward function, checked before anything bills.

verl reads RL data as parquet with `data_source`, `prompt` (chat messages), `ability`,
`reward_model.ground_truth` and `extra_info` (volcengine/verl docs/preparation/prepare_data.rst
@d62da49 = v0.6.1), from local paths only (verl/utils/fs.py copies only hdfs://). A custom reward is a
file and a function name (custom_reward_function.path/.name, docs/preparation/reward_function.rst),
called as fn(data_source=, solution_str=, ground_truth=, extra_info=) and answering a number or a
dict with "score" (verl/workers/reward_manager/naive.py).

`inspect_task` reads the files offline (the plan and `pulumi preview` both run it through
stacks.config.load): the schema and types with a bounded scan, the rows, the prompt lengths as an
estimate without the tokenizer, and the reward file without running it (components/scripts/reward_check.py:
it parses and takes verl's keywords). The reward's smoke test on real rows runs where user code may run,
contained (components/scripts/reward_jail.py): tools.check_reward, on `smoke_cases`, and the staging Job.
`facts` then turns the reading into the DatasetFacts the recipe, the memory model and the sizing use.
Every problem names the config key, the file, and where it can the row and the column.
"""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from catalog.datasets import VERL_SCORED_PREFIXES, VERL_SCORED_SOURCES, DatasetFacts
from catalog.paths import task_copy, task_file
from catalog.problems import Problem
from components.scripts import reward_check

# The parquet checks live with the staging script, which runs them on gs:// files in the cluster.
from components.scripts.task_check import (  # noqa: F401 - re-exported: one place for each check
    BYTES_PER_TOKEN,
    BYTES_PER_TOKEN_PESSIMISTIC,
    ESTIMATE,
    MAX_PROBLEMS_PER_FILE,
    PROBE_ROWS,
    ROLES,
    SCAN_ROWS,
    FileReading,
    prompt_summary,
    prompt_tokens,
    read_parquet,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # where Pulumi.yaml is: the CLI runs the program here
VERL_SOURCE_GB = 0.01  # verl's source, staged next to the data


@dataclass(frozen=True)
class TaskFile:
    """One file the stack names: where it is here (local) or its gs:// URL (source), and where the pods
    read it."""

    key: str  # the config key, e.g. verl-gke:dataTrainFile
    value: str  # as written in the stack
    local: Path | None  # resolved local path; None for a gs:// file
    role_name: str  # file name in the bucket: train.parquet, val.parquet, reward.py
    sha256: str = ""  # of the content (local) or of the URL (gs://; catalog.paths.task_copy names the copy)
    source: str = ""  # gs://bucket/object: copied into the stack's bucket by the staging Job

    @property
    def label(self) -> str:
        """How messages name the file: its local name, or its gs:// URL."""
        return self.source or self.local.name

    @property
    def source_bucket(self) -> str:
        return self.source.removeprefix("gs://").partition("/")[0]

    @property
    def object_name(self) -> str:
        """The object in the stack's bucket: content-addressed for a local file, URL-addressed for a copy."""
        if self.source:
            return task_copy(self.source, self.role_name, in_pod=False)
        return task_file(self.sha256, self.role_name, in_pod=False)

    @property
    def in_pod(self) -> str:
        return task_copy(self.source, self.role_name) if self.source else task_file(self.sha256, self.role_name)

    @property
    def asset_path(self) -> str:
        """The path Pulumi's FileAsset records: relative to the project folder (where the CLI runs the
        program) when inside it, so the state does not depend on where the checkout lives."""
        assert self.local is not None, "a gs:// file is copied by the staging Job, not uploaded"
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
    train_rows: int = 0  # dataTrainRows: the declared rows of a gs:// training file (0 for a local one)

    @property
    def files(self) -> tuple[TaskFile, ...]:
        return tuple(f for f in (self.train, self.val, self.reward) if f is not None)

    @property
    def uploads(self) -> tuple[TaskFile, ...]:
        """The local files `pulumi up` uploads."""
        return tuple(f for f in self.files if not f.source)

    @property
    def copies(self) -> tuple[TaskFile, ...]:
        """The gs:// files the staging Job copies in and checks."""
        return tuple(f for f in self.files if f.source)


@dataclass
class Inspection:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the plan shows about the task
    readings: dict[str, FileReading] = field(default_factory=dict)  # "train" / "val"


# gs://bucket/object: a bucket name as GCS allows it (3-63 of a-z 0-9 . _ -, alphanumeric at both ends;
# cloud.google.com/storage/docs/buckets#naming) and an object name without gsutil wildcards or a
# trailing slash (a folder is not a file).
_GS_URL = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,61}[a-z0-9])/([^*?\[\]#\x00-\x1f\x7f]*[^/*?\[\]#\x00-\x1f\x7f])")
GS_ROLES = ("train.parquet", "val.parquet")  # only the data may be a gs:// URL: the plan reads the reward


def resolve_file(key: str, value: str, role_name: str, problems: list[Problem]) -> TaskFile | None:
    """A local path (relative to the project folder) that exists, with its content hash; or, for the
    data files, a gs:// URL that the staging Job copies into the stack's bucket (not read here)."""
    if value.startswith("gs://") and role_name in GS_ROLES:
        if not _GS_URL.fullmatch(value) or len(value.encode()) > 1024 + 70:
            problems.append(Problem(key, "must be gs://<bucket>/<object>, one object (no wildcard, no trailing /), "
                                    "with a valid bucket name", value))
            return None
        return TaskFile(key, value, None, role_name, hashlib.sha256(value.encode()).hexdigest(), source=value)
    if "://" in value:
        allowed = ("a local path (uploaded by `pulumi up`) or gs://<bucket>/<object> (copied in during staging)"
                   if role_name in GS_ROLES else "a local path to the file, which `pulumi up` uploads to the "
                   "stack's bucket (the plan checks it, so it must be here)")
        problems.append(Problem(key, f"must be {allowed}", value))
        return None
    if not value.isprintable():  # the message below shows the path: no control character reaches the terminal
        problems.append(Problem(key, "must be a path of printable characters", value))
        return None
    try:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else PROJECT_ROOT / path
        exists, regular = path.exists(), path.is_file()
    except (OSError, RuntimeError, ValueError) as err:
        # A name longer than the file system takes (ENAMETOOLONG), `~someone` with no such user.
        why = getattr(err, "strerror", None) or err
        problems.append(Problem(key, f"is not a path this machine can look up ({why})", value))
        return None
    if not exists:
        problems.append(Problem(key, f"no such file ({path})", value))
        return None
    if not regular:
        problems.append(Problem(key, f"is not a regular file ({path})", value))
        return None
    try:
        digest = sha256_file(path)
    except OSError as err:
        problems.append(Problem(key, f"cannot read it ({err.strerror or err})", value))
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



# --- the whole task ---------------------------------------------------------------------------


_READINGS: dict[tuple, Inspection] = {}  # one reading per content in a process (the plan loads a stack often)


def inspect_task(task: TaskSpec) -> Inspection:
    """Read both files and the reward, without running it (what does not depend on the GRPO settings)."""
    key = (tuple((f.key, str(f.local), f.sha256) for f in task.files), task.reward_function, task.reward_packages)
    if key not in _READINGS:
        _READINGS[key] = _inspect(task)
    return copy.deepcopy(_READINGS[key])


def _inspect(task: TaskSpec) -> Inspection:
    out = Inspection()
    for split, f in (("train", task.train), ("val", task.val)):
        if f.source:  # no credentials here: the staging Job checks its copy (components/scripts/task_check.py)
            out.notes.append(f"{f.key} = {f.source}: not read by the plan (no credentials offline); checked in "
                             "staging: the Job copies it into the stack's bucket and checks schema, rows and prompt "
                             "lengths before the GRPO job is submitted")
            continue
        reading, lines = read_parquet(f.key, f.local)
        out.readings[split] = reading
        out.problems += [_keyed(f.key, line) for line in lines]
    if out.problems:
        return out
    if task.reward is None:
        for split, f in (("train", task.train), ("val", task.val)):
            if split not in out.readings:
                continue
            for source, row in out.readings[split].sources.items():
                if source not in VERL_SCORED_SOURCES and not source.startswith(VERL_SCORED_PREFIXES):
                    out.problems.append(Problem(
                        f.key, f"({f.local.name}), row {row}, column data_source: {source!r} has no built-in "
                        "scorer in verl (verl/utils/reward_score/__init__.py default_compute_score raises "
                        "NotImplementedError): set rewardFile to your reward function"))
        return out
    # Read, never run: neither the plan nor `pulumi preview`/`up` executes the user's code (tools.check_reward
    # and the staging Job run the smoke test, contained: components/scripts/reward_jail.py).
    result = reward_check.static_check(str(task.reward.local), task.reward_function)
    lines, warnings, notes = reward_check.judge(result, names(task))
    problems = reward_problems(lines, names(task))
    out.problems += problems
    out.warnings += warnings
    out.notes += notes
    if not problems:
        shown = result["signature"] or task.reward_function
        out.notes.append(f"{task.reward.key} ({task.reward.label}): {shown} read without running it (the plan and "
                         "`pulumi preview`/`up` never run your code); its smoke test on real rows runs in the staging "
                         "Job during `pulumi up`, and offline, contained, with tools.check_reward")
    return out


def names(task: TaskSpec) -> reward_check.Names:
    """How the reward checks' messages name the stack's reward and data."""
    assert task.reward is not None
    return reward_check.Names(
        reward_key=task.reward.key, reward_label=task.reward.label, function_key=_key("rewardFunction"),
        function=task.reward_function, packages=task.reward_packages,
        files={"train": (task.train.key, task.train.label), "val": (task.val.key, task.val.label)})


def check_command(stack: str) -> str:
    """The offline smoke test of the stack's reward (tools.check_reward); `--stack=NAME` in one word, so a stack
    named `-x` stays an argument (as stacks.compose.watch_command)."""
    return f"venv/bin/python -m tools.check_reward --stack={shlex.quote(stack)}"


def smoke_cases(inspection: Inspection) -> list[dict]:
    """The reward smoke test's calls: made-up responses to the first rows of the local files (none for gs://
    files, which only the staging Job reads)."""
    return reward_check.cases({split: r.samples for split, r in inspection.readings.items()}, PROBE_ROWS)


def facts(task: TaskSpec, inspection: Inspection, *, max_prompt_length: int,
          max_response_length: int) -> tuple[DatasetFacts, list[Problem], list[str], list[str]]:
    """DatasetFacts for the run, plus (problems, warnings, notes): verl filters prompts longer than
    max_prompt_length (data.filter_overlong_prompts, verl/utils/dataset/rl_dataset.py), so the rows
    it keeps are the ones the sizing counts (and recipe.grpo.settings_problems checks a batch against)."""
    problems: list[Problem] = []
    warnings: list[str] = []
    notes: list[str] = []
    kept: dict[str, int] = {}
    means: dict[str, float] = {}
    for split, f in (("train", task.train), ("val", task.val)):
        if f.source:
            # Not read offline: the declared training rows (dataTrainRows, checked in staging), padded prompts.
            kept[split] = task.train_rows if split == "train" else kept.get("train", task.train_rows)
            means[split] = float(max_prompt_length)
            continue
        r = inspection.readings[split]
        p = prompt_summary(r, max_prompt_length)
        kept[split], means[split] = p.kept, p.mean_kept
        notes.append(f"{f.key} ({f.label}): {r.rows:,} rows, prompts {p.tokens_min}-{p.tokens_max} tokens, "
                     f"mean {p.mean_kept:.0f} ({ESTIMATE}{p.basis})")
        if p.dropped_worst:
            text = (f"{f.key} ({f.label}): {p.dropped:,} of {r.rows:,} rows would be dropped by verl's "
                    f"overlong-prompt filter at grpoMaxPromptLength = {max_prompt_length} (up to "
                    f"{p.dropped_worst:,} at 3 bytes per token; {ESTIMATE}{p.basis})")
            (warnings if p.dropped else notes).append(text)
        if p.kept < 1:
            problems.append(Problem(_key("grpoMaxPromptLength"), f"every row of {f.key} ({f.label}) is longer "
                                    f"(estimate: shortest prompt {p.tokens_min} tokens); verl's filter would leave "
                                    "it empty", max_prompt_length))
    if task.train.source:
        basis = (f"{task.train.source} checked in staging: {_key('dataTrainRows')} rows as declared, prompts assumed "
                 "grpoMaxPromptLength (not read offline), responses half of grpoMaxResponseLength")
    else:
        basis = f"prompts {ESTIMATE}; responses assumed half of grpoMaxResponseLength"
    if task.val.source:
        basis += f"; validation rows assumed as many as the training rows ({task.val.source} not read offline)"
    train_reading = inspection.readings.get("train")
    data = DatasetFacts(
        name=task.train.label if task.train.source else task.train.local.name,
        train_rows=max(0, kept["train"]), val_rows=max(0, kept["val"]),
        mean_prompt_tokens=means["train"], mean_response_tokens=max_response_length / 2,
        data_gb=sum(r.size_bytes for r in inspection.readings.values()) / 1e9 + VERL_SOURCE_GB,
        lengths_basis=basis,
        dropped_rows=train_reading.rows - kept["train"] if train_reading else 0)
    return data, problems, warnings, notes


def staging_check(task: TaskSpec, *, train_batch_size: int, max_prompt_length: int) -> dict | None:
    """What the staging Job checks (stage_data.py --task): the gs:// files it copies in and checks, and the
    reward's smoke test on the first rows of the data as the pods see it. None: no gs:// file and no reward."""
    if not task.copies and task.reward is None:
        return None
    return {
        "files": [{"key": f.key, "split": "train" if f is task.train else "val", "source": f.source,
                   "path": f.in_pod, "rows": task.train_rows if f is task.train else None}
                  for f in task.copies],
        "train_batch_size": train_batch_size, "max_prompt_length": max_prompt_length,
        # Without a reward file verl scores by data_source (catalog.datasets); with one, any value goes.
        "scored_sources": None if task.reward else sorted(VERL_SCORED_SOURCES),
        "scored_prefixes": list(VERL_SCORED_PREFIXES),
        "rows_key": _key("dataTrainRows"), "reward_key": _key("rewardFile"),
        "reward": None if task.reward is None else {
            "path": task.reward.in_pod, "function": task.reward_function, "packages": list(task.reward_packages),
            "key": task.reward.key, "label": task.reward.label, "function_key": _key("rewardFunction"),
            "data": [{"split": split, "key": f.key, "label": f.label, "path": f.in_pod}
                     for split, f in (("train", task.train), ("val", task.val))]},
    }


def _keyed(key: str, line: str) -> Problem:
    """A line of a check that also runs in the staging pod (which prints it, so it writes text) as a problem of
    `key`, the key the line starts with: `<key> (<file>), row 3: ...`."""
    return Problem(key, line.removeprefix(key).lstrip())


def reward_problems(lines: list[str], names: reward_check.Names) -> list[Problem]:
    """The reward check's problem lines (components/scripts/reward_check.py, which the staging Job runs too) as
    problems: of rewardFunction, with its value, or of rewardFile."""
    valued = f"{names.function_key} = {names.function!r}: "
    return [Problem(names.function_key, line.removeprefix(valued), names.function) if line.startswith(valued)
            else _keyed(names.reward_key, line) for line in lines]


def _key(name: str) -> str:
    from stacks.keys import full

    return full(name)
