"""Stage verl source, model weights and GSM8K (or the stack's gs:// task files) into the training bucket
(mounted by GCS FUSE).

Runs in a Kubernetes Job in the verl image, which ships verl's dependencies but not verl.
Each output folder gets a marker file, written last, holding a JSON identity of what was staged:
a folder whose marker matches is skipped; any other folder is resumed (model) or wiped and
redone (verl source, dataset), so a Job killed half-way is safe to rerun.

Weights are written sequentially (xet and hf_transfer off, `--max-workers` files at a time), the
only order GCS FUSE streams without staging whole files on local disk. A lease object in the bucket
(created only if absent, renewed and released with generation preconditions) keeps two staging runs
from ever writing the same folders; a lease whose holder stopped renewing it is taken over.
On failure the reason also goes to the termination log, which Kubernetes shows in the Job's status.

Step "task" copies the stack's gs:// train/validation files (which the plan cannot read) from their
bucket into tasks/gs-<sha256 of URL and role>/ through the JSON API with the pod's Workload Identity token,
verifies size and MD5, and runs the plan's parquet checks on the copies (task_check.py, shipped next
to this script): a file that fails them fails the Job, so the GRPO job, which waits for staging, is
never submitted. A copy is marked complete only once checked; a missing marker means copy again. With a
reward file, the step then smoke-tests it on the first rows of the data, contained (reward_jail.py and
reward_check.py, shipped next to this script): the only place `pulumi up` runs the user's code before verl.

The Hugging Face token is read from HF_TOKEN only: never an argument, never printed.
Exit codes: 0 done, 1 a step failed, 2 bad arguments, 3 model gated/private/not found,
4 another staging run holds the lease, 5 a gs:// task file is missing, unreadable (no grant) or fails
the checks, or the reward fails its smoke test.
"""

from __future__ import annotations

import argparse
import base64
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

STEPS = ("verl", "model", "dataset", "task")
DEFAULT_STEPS = ("verl", "model", "dataset")  # "task" only when the stack names gs:// task files
GSM8K_SCRIPT = "examples/data_preprocess/gsm8k.py"
DATASET_FILES = ("train.parquet", "test.parquet")
EXIT_FAILED, EXIT_MODEL_ACCESS, EXIT_LEASE, EXIT_TASK = 1, 3, 4, 5  # 2 is argparse's usage error
# Sequential downloads: xet and hf_transfer write chunks of one file in parallel, which GCS FUSE
# cannot stream (huggingface_hub constants.py; Google's verl data-prep Jobs set HF_HUB_DISABLE_XET).
SEQUENTIAL_ENV = {"HF_HUB_DISABLE_XET": "1", "HF_HUB_ENABLE_HF_TRANSFER": "0"}


class StepError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED, retry: bool = True):
        super().__init__(message)
        self.code, self.retry = code, retry


def log(message: str, err: bool = False) -> None:
    print(scrub(message), file=sys.stderr if err else sys.stdout, flush=True)


def scrub(text: object) -> str:
    """Belt and braces: no library message we echo may leak the token."""
    text, token = str(text), os.environ.get("HF_TOKEN", "")
    return text.replace(token, "***") if token else text


# --- markers ---------------------------------------------------------------------------------


def is_complete(folder: str, marker: str, identity: dict, required: tuple = ()) -> bool:
    try:
        with open(os.path.join(folder, marker)) as f:
            staged = json.load(f)
    except (OSError, ValueError):
        return False
    return (
        isinstance(staged, dict)
        and all(staged.get(k) == v for k, v in identity.items())
        and all(os.path.isfile(os.path.join(folder, name)) for name in required)
    )


def write_marker(folder: str, marker: str, identity: dict, **info) -> None:
    # Temp name + rename: a reader never sees a half-written marker.
    path = os.path.join(folder, marker)
    staged_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(path + ".tmp", "w") as f:
        json.dump({**info, **identity, "staged_at": staged_at}, f, indent=1)
    os.replace(path + ".tmp", path)


def remove_marker(folder: str, marker: str) -> None:
    # From here on the folder counts as incomplete, whatever happens next.
    try:
        os.remove(os.path.join(folder, marker))
    except FileNotFoundError:
        pass


# --- files -----------------------------------------------------------------------------------


def wipe(folder: str) -> None:
    if os.path.ismount(folder) or os.path.abspath(folder) == "/":
        raise StepError(f"refusing to wipe {folder}: it is a mount point", retry=False)
    if os.path.lexists(folder):
        shutil.rmtree(folder)


def copy_tree(src: str, dst: str, exclude: set, atomic: bool = False) -> None:
    """Plain byte copies: GCS FUSE has no hard links, keeps symlinks poorly and may reject
    the chmod/utime that copytree/copy2 do, so links are followed and metadata is not copied."""
    for root, dirs, files in os.walk(src, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in exclude)
        out = os.path.join(dst, os.path.relpath(root, src))
        os.makedirs(out, exist_ok=True)
        for name in sorted(set(files) - exclude):
            source, target = os.path.join(root, name), os.path.join(out, name)
            if not os.path.exists(source):
                log(f"  skipping dangling symlink {os.path.relpath(source, src)}")
                continue
            if atomic:  # readers of these files never see a partial one
                shutil.copyfile(source, target + ".tmp")
                os.replace(target + ".tmp", target)
            else:
                shutil.copyfile(source, target)


# --- retries ---------------------------------------------------------------------------------


def with_retries(what: str, args: argparse.Namespace, fn):
    for attempt in range(args.retries + 1):
        try:
            return fn()
        except Exception as e:
            permanent = (isinstance(e, StepError) and not e.retry) or (
                isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)
            )
            if permanent or attempt == args.retries:
                raise
            delay = args.backoff * 2**attempt
            log(f"  {what} failed ({e}); retry {attempt + 1}/{args.retries} in {delay:g} s", err=True)
            time.sleep(delay)


# --- steps -----------------------------------------------------------------------------------


def git(*argv: str, cwd: str | None = None) -> str:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")  # a wrong URL fails instead of prompting
    # Abort a stalled transfer (< 1 kB/s for 60 s) so the retry loop gets a chance.
    cmd = ["git", "-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60", *argv]
    proc = subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        detail = proc.stderr.strip() or proc.stdout.strip()
        raise StepError(f"git {argv[0]} failed: {detail}", retry="couldn't find remote ref" not in detail)
    return proc.stdout.strip()


def stage_verl(args: argparse.Namespace) -> tuple[bool, str]:
    identity = {"repo": args.verl_repo, "verl_ref": args.verl_ref}
    if is_complete(args.verl_dir, args.marker_name, identity):
        return True, f"{args.verl_dir} holds {args.verl_ref}"
    with tempfile.TemporaryDirectory(prefix="verl-src-", dir=args.work_dir) as tmp:
        src = os.path.join(tmp, "src")

        def clone() -> None:
            # init + shallow fetch of one ref works for tags, branches and commit SHAs alike.
            shutil.rmtree(src, ignore_errors=True)
            git("init", "-q", src)
            git("fetch", "-q", "--depth", "1", args.verl_repo, args.verl_ref, cwd=src)
            git("-c", "advice.detachedHead=false", "checkout", "-q", "FETCH_HEAD", cwd=src)

        with_retries(f"fetch of {args.verl_ref} from {args.verl_repo}", args, clone)
        commit = git("rev-parse", "HEAD", cwd=src)
        wipe(args.verl_dir)
        copy_tree(src, args.verl_dir, exclude={".git", args.marker_name})
    write_marker(args.verl_dir, args.marker_name, identity, commit=commit)
    return False, f"{args.verl_ref} ({commit[:12]}) into {args.verl_dir}"


def access_denied(e: Exception) -> bool:
    # Matched by name and HTTP status so this works across huggingface_hub versions.
    names = {c.__name__ for c in type(e).__mro__}
    status = getattr(getattr(e, "response", None), "status_code", None)
    return bool(names & {"GatedRepoError", "RepositoryNotFoundError"}) or status in (401, 403)


def hub_download(args: argparse.Namespace) -> None:
    os.environ.update(SEQUENTIAL_ENV)  # read by huggingface_hub at import: set before it
    import huggingface_hub  # the image ships it; only this step needs it

    token = os.environ.get("HF_TOKEN") or None
    kwargs = {"max_workers": args.max_workers}
    version = tuple(int(p) for p in huggingface_hub.__version__.split(".")[:2] if p.isdigit())
    if version < (0, 23):
        kwargs["local_dir_use_symlinks"] = False  # older default: symlinks into the cache
    try:
        # local_dir: real files in the model folder, and a rerun resumes what is already there.
        huggingface_hub.snapshot_download(
            repo_id=args.model_id,
            revision=args.model_revision,
            local_dir=args.model_dir,
            token=token,
            **kwargs,
        )
    except Exception as e:
        if not access_denied(e):
            raise
        raise StepError(
            f"cannot download {args.model_id}: it is gated, private or does not exist "
            f"({'the hfToken set was refused' if token else 'no hfToken is set'}; {type(e).__name__}). "
            f"Accept the model's licence on https://huggingface.co/{args.model_id} and set a token "
            "that can read it: pulumi config set --secret verl-gke:hfToken <token>",
            code=EXIT_MODEL_ACCESS,
            retry=False,
        ) from e


def stage_model(args: argparse.Namespace) -> tuple[bool, str]:
    source = os.path.abspath(args.model_source) if args.model_source else "huggingface"
    identity = {"model_id": args.model_id, "revision": args.model_revision, "source": source}
    if is_complete(args.model_dir, args.marker_name, identity):
        return True, f"{args.model_dir} holds {args.model_id}@{args.model_revision}"
    # Not wiped: tens of GB; the download resumes and overwrites what changed.
    remove_marker(args.model_dir, args.marker_name)
    os.makedirs(args.model_dir, exist_ok=True)
    if args.model_source:
        copy_tree(args.model_source, args.model_dir, exclude={args.marker_name})
    else:
        with_retries(f"download of {args.model_id}", args, lambda: hub_download(args))
    if not os.path.isfile(os.path.join(args.model_dir, "config.json")):
        raise StepError(f"{args.model_id} staged into {args.model_dir} but it has no config.json")
    write_marker(args.model_dir, args.marker_name, identity)
    return False, f"{args.model_id}@{args.model_revision} from {source} into {args.model_dir}"


def stage_dataset(args: argparse.Namespace) -> tuple[bool, str]:
    if not os.path.isfile(os.path.join(args.verl_dir, args.marker_name)):
        raise StepError(f"verl source in {args.verl_dir} is not staged; run the verl step first")
    with open(os.path.join(args.verl_dir, GSM8K_SCRIPT)) as f:
        script = f.read()
    # The same preprocessing script gives the same data, whatever the verl tag.
    identity = {"dataset": "gsm8k", "script_sha256": hashlib.sha256(script.encode()).hexdigest()}
    if is_complete(args.dataset_dir, args.marker_name, identity, required=DATASET_FILES):
        return True, f"{args.dataset_dir} holds gsm8k"
    # verl >= 0.6 names the output flag --local_save_dir, older versions --local_dir.
    quoted = [q + f + q for f in ("--local_save_dir", "--local_dir") for q in "\"'"]
    flag = next((q[1:-1] for q in quoted if q in script), None)
    if flag is None:
        raise StepError(f"{GSM8K_SCRIPT} in {args.verl_dir} has neither --local_save_dir nor --local_dir")
    pythonpath = os.pathsep.join(p for p in (args.verl_dir, os.environ.get("PYTHONPATH")) if p)
    # No __pycache__ written into the bucket's verl source.
    env = dict(os.environ, PYTHONPATH=pythonpath, PYTHONDONTWRITEBYTECODE="1")
    with tempfile.TemporaryDirectory(prefix="gsm8k-", dir=args.work_dir) as tmp:

        def preprocess() -> str:
            out = tempfile.mkdtemp(dir=tmp)  # fresh per attempt: no leftovers count as output
            cmd = [sys.executable, GSM8K_SCRIPT, flag, out]
            proc = subprocess.run(cmd, check=False, cwd=args.verl_dir, env=env)
            if proc.returncode:
                raise StepError(f"{GSM8K_SCRIPT} exited with code {proc.returncode} (its output is above)")
            missing = [n for n in DATASET_FILES if not os.path.isfile(os.path.join(out, n))]
            if missing:
                raise StepError(f"{GSM8K_SCRIPT} did not write {', '.join(missing)}", retry=False)
            return out

        out = with_retries("gsm8k preprocessing", args, preprocess)
        wipe(args.dataset_dir)
        copy_tree(out, args.dataset_dir, exclude={args.marker_name}, atomic=True)
    write_marker(args.dataset_dir, args.marker_name, identity)
    return False, f"gsm8k ({flag}) into {args.dataset_dir}"


# --- the stack's gs:// task files --------------------------------------------------------------


class GcsError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message = status, message


class AccessDeniedError(StepError):
    """403: the read grant is missing or has not propagated yet (IAM takes minutes)."""

    def __init__(self, message: str):
        super().__init__(message, code=EXIT_TASK, retry=False)


class GcsReader:
    """Reads objects through the JSON API (objects.get, alt=media pinned to one generation) with the
    pod's Workload Identity token from the metadata server. Every network fault is an exception the
    retry loop sees; a 404 is the only answer that means "not there"."""

    def __init__(self, api: str, token_url: str, timeout: float = 60.0):
        self.api, self.token_url, self.timeout = api.rstrip("/"), token_url, timeout
        self._token, self._expires = "", 0.0

    def _bearer(self) -> str:
        if time.monotonic() >= self._expires:
            req = urllib.request.Request(self.token_url, headers={"Metadata-Flavor": "Google"})
            with urllib.request.urlopen(req, timeout=30) as r:
                body = json.load(r)
            self._token = body["access_token"]
            self._expires = time.monotonic() + max(0.0, float(body.get("expires_in", 300)) - 60)
        return self._token

    def _open(self, bucket: str, name: str, query: dict):
        url = (f"{self.api}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o/"
               f"{urllib.parse.quote(name, safe='')}?{urllib.parse.urlencode(query)}")
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self._bearer()}"})
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read() or b"{}").get("error", {}).get("message", "")
            except ValueError:
                message = ""
            raise GcsError(e.code, message or e.reason) from None

    def metadata(self, bucket: str, name: str) -> dict:
        with self._open(bucket, name, {"alt": "json"}) as r:
            return json.load(r)

    def download(self, bucket: str, name: str, generation: str, out) -> tuple[int, str]:
        """Stream one generation of the object into `out`; returns (bytes, base64 MD5)."""
        md5, size = hashlib.md5(), 0
        with self._open(bucket, name, {"alt": "media", "generation": generation}) as r:
            for chunk in iter(lambda: r.read(8 << 20), b""):  # a short body raises http.client.IncompleteRead
                md5.update(chunk)
                out.write(chunk)
                size += len(chunk)
        return size, base64.b64encode(md5.digest()).decode()


def _split_gs(url: str) -> tuple[str, str]:
    bucket, _, name = url.removeprefix("gs://").partition("/")
    return bucket, name


def copy_object(reader: GcsReader, f: dict, args: argparse.Namespace) -> dict:
    """One attempt: the object's metadata, then that generation's bytes to a temp name, checked
    (size, MD5) and renamed into place. Returns what the marker records."""
    url, dest = f["source"], f["path"]
    bucket, name = _split_gs(url)
    try:
        meta = reader.metadata(bucket, name)
    except GcsError as e:
        if e.status == 404:
            raise StepError(f"{f['key']}: {url} does not exist (HTTP 404: {e.message}); check the bucket and "
                            "object name", code=EXIT_TASK, retry=False) from None
        if e.status in (401, 403):
            raise AccessDeniedError(f"{f['key']}: permission denied reading {url} (HTTP {e.status}: {e.message}). The "
                               f"staging identity needs {f.get('grant') or f'roles/storage.objectViewer on gs://{bucket}'}"
                               "; `pulumi up` grants it, which needs you to be allowed to set IAM policy on that "
                               "bucket (in another project too) and no organization policy that refuses members "
                               "from this project's Workload Identity pool") from None
        raise StepError(f"{url}: {e}") from None
    generation, size = str(meta["generation"]), int(meta["size"])
    tmp = f"{dest}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as out:
            got, md5 = reader.download(bucket, name, generation, out)
    except GcsError as e:
        if e.status == 404:  # that generation is gone: the object was replaced while we read it
            raise StepError(f"{url} changed while being copied (generation {generation} is gone)") from None
        raise StepError(f"{url}: {e}") from None
    if got != size or (meta.get("md5Hash") and md5 != meta["md5Hash"]):
        raise StepError(f"{url}: copy does not match the object (got {got} of {size} bytes, MD5 {md5}, object MD5 "
                        f"{meta.get('md5Hash')})")
    os.replace(tmp, dest)
    return {"generation": generation, "size": size, "md5": meta.get("md5Hash", "")}


def copy_with_grant_wait(reader: GcsReader, f: dict, args: argparse.Namespace) -> dict:
    """Retries network faults and 5xx (with_retries); a 403 is asked again until --grant-wait has
    passed, since a grant `pulumi up` just made can take minutes to reach Cloud Storage."""
    deadline = time.monotonic() + args.grant_wait
    while True:
        try:
            return with_retries(f"copy of {f['source']}", args, lambda: copy_object(reader, f, args))
        except AccessDeniedError as e:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StepError(f"{e} (still denied after {args.grant_wait:g} s for IAM to propagate)",
                                code=EXIT_TASK, retry=False) from None
            log(f"  {f['source']}: permission denied; waiting for the read grant to propagate ({left:.0f} s left)",
                err=True)
            time.sleep(min(args.grant_poll, left))


def stage_task(args: argparse.Namespace) -> tuple[bool, str]:
    spec = args.task
    reader = GcsReader(args.gcs_api, args.gcs_token_url, args.gcs_timeout)
    copied: dict[str, dict] = {}
    for f in spec["files"]:
        folder, file_name = os.path.split(f["path"])
        if is_complete(folder, args.marker_name, {"source": f["source"]}, required=(file_name,)):
            log(f"  {f['source']}: already copied to {f['path']}")
            continue
        wipe(folder)  # this URL's own folder: a killed run's half file and temp files go
        os.makedirs(folder, exist_ok=True)
        copied[f["path"]] = copy_with_grant_wait(reader, f, args)
        log(f"  copied {f['source']} to {f['path']} ({copied[f['path']]['size']:,} bytes)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # task_check.py ships next to this script
    import task_check

    problems, notes = task_check.check_staged(spec)
    for note in notes:
        log(f"  {note}")
    if problems:
        raise StepError("the task files fail verl's checks (nothing marked complete; the GRPO job is not "
                        "submitted):\n  " + "\n  ".join(problems), code=EXIT_TASK, retry=False)
    if spec.get("reward"):
        if problems := smoke_test_reward(spec["reward"], args.reward_timeout):
            raise StepError("the reward function fails its smoke test (the GRPO job is not submitted):\n  "
                            + "\n  ".join(problems), code=EXIT_TASK, retry=False)
    for f in spec["files"]:  # marked only once checked: an unchecked copy is copied and checked again
        if f["path"] in copied:
            write_marker(os.path.dirname(f["path"]), args.marker_name, {"source": f["source"]}, **copied[f["path"]])
    checked = [*(f["source"] for f in spec["files"]), *([spec["reward"]["label"]] if spec.get("reward") else [])]
    return not copied and not spec.get("reward"), f"{', '.join(checked)} (checked)"


def smoke_test_reward(reward: dict, timeout_s: float) -> list[str]:
    """The stack's reward called on the first rows of its data as the pods see them, in the jail of
    reward_jail.py (shipped next to this script; the Job's HF_TOKEN is in no environment the reward gets):
    the problems, after logging what contained it, its output (bounded, escaped) and the notes."""
    import reward_check
    import reward_jail
    import task_check

    samples = {}
    for f in reward["data"]:
        reading, problems = task_check.read_parquet(f["key"], f["path"], scan_rows=task_check.PROBE_ROWS,
                                                    label=f["label"])
        if problems:
            return problems
        samples[f["split"]] = reading.samples
    calls = reward_check.cases(samples, task_check.PROBE_ROWS)
    run = reward_jail.run(reward["path"], reward["function"], list(reward_check.KEYWORDS),
                          [c["kwargs"] for c in calls], timeout_s)
    held, missing = run.containment()
    for line in held:
        log(f"  jail: {line}")
    for line in missing:
        log(f"  NOT contained: {line}", err=True)
    for line in reward_check.output_lines(run.output, run.output_bytes):
        log(f"  {line}")
    names = reward_check.Names(
        reward_key=reward["key"], reward_label=reward["label"], function_key=reward["function_key"],
        function=reward["function"], packages=tuple(reward["packages"]),
        files={f["split"]: (f["key"], f["label"]) for f in reward["data"]})
    result = reward_check.verdict(run.report, len(calls), timeout_s)
    problems, warnings, notes = reward_check.judge(result, names, calls, here="in the image", missing_is_problem=True)
    for line in (*notes, *warnings):
        log(f"  {line}")
    return problems


def parse_task(value: str) -> dict:
    """--task: the JSON that stacks.dataset.staging_check writes."""
    spec = json.loads(value)
    if not spec["files"] and not spec.get("reward"):
        raise ValueError("neither gs:// files to copy nor a reward to smoke-test")
    reward = spec.get("reward")
    if reward is not None and (not os.path.isabs(reward["path"]) or not reward["function"].isidentifier()
                               or {f["split"] for f in reward["data"]} != {"train", "val"}):
        raise ValueError(f"reward {reward['path']!r}: needs an absolute path, a function name and train/val data")
    for f in spec["files"]:
        bucket, name = _split_gs(f["source"])
        if not f["source"].startswith("gs://") or not bucket or not name or not os.path.isabs(f["path"]):
            raise ValueError(f"file {f['source']!r} -> {f['path']!r}: needs a gs://bucket/object and an absolute path")
        if f["split"] not in ("train", "val"):
            raise ValueError(f"split {f['split']!r}: must be train or val")
    for k in ("train_batch_size", "max_prompt_length", "rows_key", "reward_key"):
        spec[k]  # noqa: B018 - KeyError names the missing field
    return spec


# --- lease ---------------------------------------------------------------------------------------


class FileStore:
    """A local file with generation preconditions: the stand-in for the bucket object in tests."""

    def __init__(self, path: str):
        self.path = path

    def _locked(self, fn):
        with open(self.path + ".guard", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            return fn()

    def _gen(self) -> str | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return f"{st.st_ino}.{st.st_mtime_ns}"

    def _write(self, data: bytes) -> str:
        tmp = f"{self.path}.{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)
        return self._gen()

    def create(self, data: bytes) -> str | None:
        return self._locked(lambda: None if self._gen() else self._write(data))

    def read(self) -> tuple[bytes, str] | None:
        def do():
            gen = self._gen()
            if gen is None:
                return None
            with open(self.path, "rb") as f:
                return f.read(), gen
        return self._locked(do)

    def replace(self, data: bytes, gen: str) -> str | None:
        return self._locked(lambda: self._write(data) if self._gen() == gen else None)

    def delete(self, gen: str) -> bool:
        def do():
            if self._gen() != gen:
                return False
            os.remove(self.path)
            return True
        return self._locked(do)


class GcsStore:
    """One object in the bucket through the JSON API, every change conditional on its generation
    (ifGenerationMatch=0 creates only if absent). Credentials: the pod's Workload Identity token."""

    API = "https://storage.googleapis.com"
    TOKEN_URL = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"

    def __init__(self, bucket: str, name: str):
        self.bucket, self.name = bucket, name

    def _call(self, method: str, url: str, data: bytes | None = None) -> tuple[int, bytes, dict]:
        req = urllib.request.Request(self.TOKEN_URL, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(req, timeout=30) as r:
            token = json.load(r)["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            if e.code in (404, 412):
                return e.code, b"", {}
            raise

    def _object(self) -> str:
        return urllib.parse.quote(self.name, safe="")

    def _upload(self, data: bytes, if_gen: str) -> str | None:
        query = urllib.parse.urlencode({"uploadType": "media", "name": self.name, "ifGenerationMatch": if_gen})
        status, body, _ = self._call("POST", f"{self.API}/upload/storage/v1/b/{self.bucket}/o?{query}", data)
        return None if status == 412 else str(json.loads(body)["generation"])

    def create(self, data: bytes) -> str | None:
        return self._upload(data, "0")

    def read(self) -> tuple[bytes, str] | None:
        status, body, headers = self._call("GET", f"{self.API}/storage/v1/b/{self.bucket}/o/{self._object()}?alt=media")
        if status == 404:
            return None
        return body, headers.get("x-goog-generation") or headers.get("X-Goog-Generation", "")

    def replace(self, data: bytes, gen: str) -> str | None:
        return self._upload(data, gen)

    def delete(self, gen: str) -> bool:
        url = f"{self.API}/storage/v1/b/{self.bucket}/o/{self._object()}?ifGenerationMatch={gen}"
        return self._call("DELETE", url)[0] not in (404, 412)


class Lease:
    """Held while renewed every ttl/4; stale (taken over) once unrenewed for ttl seconds."""

    def __init__(self, store, ttl: float, wait: float, poll: float):
        self.store, self.ttl, self.wait, self.poll = store, ttl, wait, poll
        self.holder = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.gen: str | None = None
        self.lost = threading.Event()
        self._stop = threading.Event()

    def _body(self) -> bytes:
        return json.dumps({"holder": self.holder, "renewed": time.time()}).encode()

    def acquire(self) -> None:
        deadline = time.monotonic() + self.wait
        while True:
            self.gen = self.store.create(self._body())
            if self.gen:
                break
            current = self.store.read()
            if current is None:
                continue  # released in between: try again at once
            data, gen = current
            try:
                info = json.loads(data)
                age = time.time() - float(info["renewed"])
            except (ValueError, KeyError, TypeError):
                info, age = {"holder": "unreadable lease"}, float("inf")
            if age > self.ttl:
                log(f"[lease] taking over a stale lease of {info.get('holder')} (unrenewed for {age:.0f} s)")
                self.store.delete(gen)  # only if still that generation: a racing taker wins once
                continue
            if time.monotonic() >= deadline:
                raise StepError(f"another staging run ({info.get('holder')}) holds the bucket's staging lease, "
                                f"renewed {age:.0f} s ago; it is taken over once unrenewed for {self.ttl:.0f} s",
                                code=EXIT_LEASE, retry=False)
            time.sleep(self.poll)
        threading.Thread(target=self._renew, daemon=True).start()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            gen = self.store.replace(self._body(), self.gen)
            if gen is None:
                self.lost.set()
                return
            self.gen = gen

    def release(self) -> None:
        self._stop.set()
        if self.gen and not self.lost.is_set():
            self.store.delete(self.gen)


def make_lease(args: argparse.Namespace) -> Lease | None:
    if args.lease_file:
        store = FileStore(args.lease_file)
    elif args.lease_gcs:
        bucket, _, name = args.lease_gcs.removeprefix("gs://").partition("/")
        store = GcsStore(bucket, name)
    else:
        return None
    return Lease(store, args.lease_ttl, args.lease_wait, args.lease_poll)


def termination_message(path: str | None, message: str) -> None:
    """What Kubernetes shows as the container's termination message (and Pulumi in the Job error)."""
    if not path:
        return
    try:
        with open(path, "w") as f:
            f.write(scrub(message)[-4000:])  # the kubelet keeps at most 4096 bytes
    except OSError:
        pass


# --- shipped scripts --------------------------------------------------------------------------


def ship(pairs: list[str]) -> None:
    """Copy small files (scripts the Ray job runs) into the bucket: SRC=DEST, written to a temp name
    and renamed, so a job reading DEST never sees half a file; skipped when DEST already matches."""
    for pair in pairs:
        src, dest = pair.split("=", 1)
        with open(src, "rb") as f:
            data = f.read()
        try:
            with open(dest, "rb") as f:
                if f.read() == data:
                    log(f"[ship] skipped: {dest} (same content)")
                    continue
        except OSError:
            pass
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = f"{dest}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
        log(f"[ship] wrote {dest}")


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default=",".join(DEFAULT_STEPS), help="comma-separated subset of: " + ", ".join(STEPS))
    p.add_argument("--verl-repo", default="https://github.com/volcengine/verl.git")
    p.add_argument("--verl-ref", help="git tag (or branch/commit) to stage, e.g. v0.6.1")
    p.add_argument("--verl-dir", help="bucket folder for the verl source, e.g. /data/verl/v0.6.1")
    p.add_argument("--model-id", help="Hugging Face model id, e.g. Qwen/Qwen2.5-32B-Instruct")
    p.add_argument("--model-revision", default="main")
    p.add_argument("--model-dir", help="bucket folder for the weights, e.g. /data/models/<model-id>")
    p.add_argument("--model-source", help="copy the weights from this local folder instead of the hub")
    p.add_argument("--dataset-dir", help="bucket folder for train.parquet/test.parquet")
    p.add_argument("--marker-name", default=".verl-gke-complete", help="completion marker file name")
    p.add_argument("--retries", type=int, default=3, help="retries after a failed network attempt")
    p.add_argument("--backoff", type=float, default=10.0, help="first retry delay in s, doubled each time")
    p.add_argument("--work-dir", default=tempfile.gettempdir(), help="local scratch for clone/preprocessing")
    p.add_argument("--max-workers", type=int, default=4, help="weight files downloaded at once (sequentially each)")
    p.add_argument("--lease-gcs", help="gs://bucket/object: the staging lease, in the bucket written to")
    p.add_argument("--lease-file", help="a local file as the lease (tests, a local run)")
    p.add_argument("--lease-ttl", type=float, default=600.0, help="s without renewal after which a lease is stale")
    p.add_argument("--lease-wait", type=float, default=900.0, help="s to wait for a held lease before failing")
    p.add_argument("--lease-poll", type=float, default=15.0, help="s between looks at a held lease")
    p.add_argument("--termination-log", default=None, help="file for the failure reason (/dev/termination-log)")
    p.add_argument("--ship", action="append", default=[], metavar="SRC=DEST",
                   help="also copy the file SRC to DEST (e.g. the run supervisor into the bucket)")
    p.add_argument("--task", help="JSON: the gs:// task files to copy and check and the reward to smoke-test "
                   "(stacks.dataset.staging_check)")
    p.add_argument("--reward-timeout", type=float, default=120.0,
                   help="s for the reward's import and every smoke-test call (reward_jail.py)")
    p.add_argument("--gcs-api", default=GcsStore.API, help="Cloud Storage JSON API root (tests: a stand-in)")
    p.add_argument("--gcs-token-url", default=GcsStore.TOKEN_URL, help="metadata server token URL (tests: a stand-in)")
    p.add_argument("--gcs-timeout", type=float, default=60.0, help="s without an answer before a request is retried")
    p.add_argument("--grant-wait", type=float, default=600.0,
                   help="s a 403 on a task file is asked again (a new IAM grant takes minutes to apply)")
    p.add_argument("--grant-poll", type=float, default=30.0, help="s between those asks")
    args = p.parse_args(argv)
    if args.task:
        try:
            args.task = parse_task(args.task)
        except (ValueError, KeyError, TypeError) as e:
            p.error(f"--task: must be the JSON of stacks.dataset.staging_check ({e})")
    for pair in args.ship:
        src, sep, dest = pair.partition("=")
        if not sep or not src or not dest.startswith("/"):
            p.error(f"--ship {pair!r}: must be SRC=DEST with an absolute DEST")
    args.steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    if not args.steps or set(args.steps) - set(STEPS):
        p.error(f"--steps must be a comma-separated subset of {','.join(STEPS)}")
    needs = {
        "verl": ("verl_ref", "verl_dir"),
        "model": ("model_id", "model_dir"),
        "dataset": ("verl_dir", "dataset_dir"),
        "task": ("task",),
    }
    for step in args.steps:
        for name in needs[step]:
            if not getattr(args, name):
                p.error(f"step {step} needs --{name.replace('_', '-')}")
    if args.retries < 0:
        p.error("--retries must be >= 0")
    if args.max_workers < 1:
        p.error("--max-workers must be >= 1")
    if args.grant_wait < 0 or args.grant_poll <= 0 or args.gcs_timeout <= 0:
        p.error("--grant-wait must be >= 0, --grant-poll and --gcs-timeout > 0")
    if args.lease_ttl <= 0 or args.lease_wait < 0 or args.lease_poll <= 0:
        p.error("--lease-ttl and --lease-poll must be > 0, --lease-wait >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lease = make_lease(args)
    try:
        if lease:
            lease.acquire()
            log(f"[lease] held by {lease.holder}")
        return run_steps(args, lease)
    except StepError as e:
        log(f"[lease] FAILED: {e}", err=True)
        termination_message(args.termination_log, str(e))
        return e.code
    finally:
        if lease:
            lease.release()


def run_steps(args: argparse.Namespace, lease: Lease | None) -> int:
    functions = {"verl": stage_verl, "model": stage_model, "dataset": stage_dataset, "task": stage_task}
    try:
        ship(args.ship)
    except OSError as e:
        log(f"[ship] FAILED: {e}", err=True)
        return EXIT_FAILED
    for step in STEPS:
        if step not in args.steps:
            continue
        if lease and lease.lost.is_set():
            raise StepError("lost the staging lease to another run (not renewed in time); stopping", code=EXIT_LEASE)
        start = time.monotonic()
        try:
            skipped, what = functions[step](args)
        except StepError as e:
            log(f"[{step}] FAILED: {e}", err=True)
            termination_message(args.termination_log, f"staging step {step}: {e}")
            return e.code
        except Exception as e:  # noqa: BLE001 - disk full, permissions, ...: show the underlying error
            log(f"[{step}] FAILED: {type(e).__name__}: {e}", err=True)
            termination_message(args.termination_log, f"staging step {step}: {type(e).__name__}: {e}")
            return EXIT_FAILED
        if skipped:
            log(f"[{step}] skipped: {what} (marker matches)")
        else:
            log(f"[{step}] staged {what} in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
