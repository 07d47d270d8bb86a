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
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from catalog.datasets import VERL_SCORED_PREFIXES, VERL_SCORED_SOURCES, DatasetFacts
from catalog.paths import task_copy, task_file

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
PROBE = Path(__file__).resolve().parent / "reward_probe.py"
PROBE_TIMEOUT_S = 120.0  # import + a handful of calls; generous for a loaded machine
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
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the plan shows about the task
    readings: dict[str, FileReading] = field(default_factory=dict)  # "train" / "val"


def identifier_problem(name: str) -> str | None:
    """A Python name (a function or a top-level module), or why not."""
    if not name.isidentifier() or keyword.iskeyword(name):
        return "must be a Python identifier"
    return None


# gs://bucket/object: a bucket name as GCS allows it (3-63 of a-z 0-9 . _ -, alphanumeric at both ends;
# cloud.google.com/storage/docs/buckets#naming) and an object name without gsutil wildcards or a
# trailing slash (a folder is not a file).
_GS_URL = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,61}[a-z0-9])/([^*?\[\]#\x00-\x1f\x7f]*[^/*?\[\]#\x00-\x1f\x7f])")
GS_ROLES = ("train.parquet", "val.parquet")  # only the data may be a gs:// URL: the reward is smoke-tested here


def resolve_file(key: str, value: str, role_name: str, problems: list[str]) -> TaskFile | None:
    """A local path (relative to the project folder) that exists, with its content hash; or, for the
    data files, a gs:// URL that the staging Job copies into the stack's bucket (not read here)."""
    if value.startswith("gs://") and role_name in GS_ROLES:
        if not _GS_URL.fullmatch(value) or len(value.encode()) > 1024 + 70:
            problems.append(f"{key} = {value!r}: must be gs://<bucket>/<object>, one object (no wildcard, no "
                            "trailing /), with a valid bucket name")
            return None
        return TaskFile(key, value, None, role_name, hashlib.sha256(value.encode()).hexdigest(), source=value)
    if "://" in value:
        allowed = ("a local path (uploaded by `pulumi up`) or gs://<bucket>/<object> (copied in during staging)"
                   if role_name in GS_ROLES else "a local path to the file, which `pulumi up` uploads to the "
                   "stack's bucket (the plan smoke-tests it, so it must be here)")
        problems.append(f"{key} = {value!r}: must be {allowed}")
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
        if f.source:  # no credentials here: the staging Job checks its copy (components/scripts/task_check.py)
            out.notes.append(f"{f.key} = {f.source}: not read by the plan (no credentials offline); checked in "
                             "staging: the Job copies it into the stack's bucket and checks schema, rows and prompt "
                             "lengths before the GRPO job is submitted")
            continue
        reading, problems = read_parquet(f.key, f.local)
        out.readings[split] = reading
        out.problems += problems
    if out.problems:
        return out
    if task.reward is None:
        for split, f in (("train", task.train), ("val", task.val)):
            if split not in out.readings:
                continue
            for source, row in out.readings[split].sources.items():
                if source not in VERL_SCORED_SOURCES and not source.startswith(VERL_SCORED_PREFIXES):
                    out.problems.append(
                        f"{f.key} ({f.local.name}), row {row}, column data_source: {source!r} has no built-in "
                        "scorer in verl (verl/utils/reward_score/__init__.py default_compute_score raises "
                        "NotImplementedError): set rewardFile to your reward function")
        return out
    cases = []
    for split in ("train", "val"):
        reading = out.readings.get(split, FileReading())
        for sample in reading.samples[: PROBE_ROWS if split == "train" else 1]:
            cases += _cases(split, sample)
    if not cases:  # gs:// data only: the probe still imports the file and checks the function's signature
        out.notes.append(f"{task.reward.key} ({task.reward.label}): imported and its signature checked; not called "
                         "on rows (the data is gs://, which the plan does not read)")
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


# What the probe found wrong with the function itself, said after "rewardFunction = '<name>': " ({at} names
# the row and made-up response it answered on, where the probe says).
_FUNCTION_PROBLEMS = {
    "no_function": "{where} defines no such function ({detail})",
    "bad_signature": "{detail}; verl calls it as fn(data_source=..., solution_str=..., ground_truth=..., "
                     "extra_info=...) (verl/workers/reward_manager/naive.py)",
    "bad_return": "returned {detail}{at}; verl needs a number or a dict with a numeric \"score\" "
                  "(verl/workers/reward_manager/naive.py)",
    "bad_extra": "its dict answer{at}: {detail}",
    "inconsistent": "answered {detail}{at}; verl keeps one list per key of a dict answer and its validation "
                    "asserts each holds one value per response (verl/trainer/ppo/ray_trainer.py _validate), so "
                    "every call must answer a number, or a dict with the same keys",
}


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
        at = (f" on {f.key} ({f.label}) row {case['row']} with the made-up response "
              f"{case['solution_str'][:60]!r}")
    if status == "ok" and result.get("calls", 0):
        out.notes.append(f"reward smoke test passed: {reward.local.name}:{task.reward_function} answered "
                         f"{', '.join(map(str, result.get('scores', [])))} on {result.get('calls', 0)} made-up "
                         "responses to real rows")
    elif status == "ok":
        pass  # no rows to call it on: the note above says so
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
    elif status in _FUNCTION_PROBLEMS:
        said = _FUNCTION_PROBLEMS[status].format(where=where, detail=detail, at=at)
        out.problems.append(f"{fn_key} = {task.reward_function!r}: {said}")
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
    it keeps are the ones the sizing counts (and recipe.grpo.preflight checks a batch against)."""
    problems: list[str] = []
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
            problems.append(f"{_key('grpoMaxPromptLength')} = {max_prompt_length}: every row of {f.key} "
                            f"({f.label}) is longer (estimate: shortest prompt {p.tokens_min} tokens); verl's "
                            "filter would leave it empty")
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
    """What the staging Job copies in and checks (stage_data.py --task): None without gs:// files."""
    if not task.copies:
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
    }


def _key(name: str) -> str:
    from stacks.keys import full

    return full(name)
