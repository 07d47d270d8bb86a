"""Runs components/scripts/stage_data.py for real against a temp folder standing in for /data.

The network is replaced by a local git repository (the verl source, with stand-in gsm8k.py
scripts), a local model folder (--model-source) and a stub huggingface_hub package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "components" / "scripts" / "stage_data.py"
MARKER = ".verl-gke-complete"
TOKEN = "hf_DistinctiveTestToken9f3a7c"
MODEL_ID = "Qwen/Tiny-Instruct"
WEIGHTS = b"\x00\x01fake-weights" * 1000

# Stand-in for verl's examples/data_preprocess/gsm8k.py. Logs each run (argv, cwd) to STUB_LOG.
GSM8K = """\
import argparse, json, os, sys
import verl  # importable only through the PYTHONPATH stage_data sets

parser = argparse.ArgumentParser()
{arguments}
args = parser.parse_args()
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps({{"gsm8k": sys.argv, "cwd": os.getcwd()}}) + "\\n")
{body}
out = args.local_save_dir if getattr(args, "local_save_dir", None) else args.local_dir
for split in ("train", "test"):
    with open(os.path.join(out, split + ".parquet"), "wb") as f:
        f.write(b"PAR1-" + split.encode() + b"-" + verl.VERSION.encode())
"""
# verl >= 0.6 has both flags (--local_dir deprecated); older verl only --local_dir (single quotes).
NEW_FLAGS = (
    'parser.add_argument("--local_dir", default=None)\n'
    'parser.add_argument("--local_save_dir", default="~/data/gsm8k")'
)
OLD_FLAGS = "parser.add_argument('--local_dir', default='~/data/gsm8k')"

# Stub huggingface_hub: logs each call (with the token it got) to STUB_LOG; STUB_HUB_MODE picks
# success, a gated repo, or one connection failure before success.
HUB = """\
import json, os
__version__ = "0.35.0"
# huggingface_hub reads these once, at import (constants.py): record what it would have seen.
ENV_AT_IMPORT = ("HF_HUB_DISABLE_XET", "HF_HUB_ENABLE_HF_TRANSFER")
IMPORT_ENV = {k: os.environ.get(k) for k in ENV_AT_IMPORT}

class HfHubHTTPError(Exception):
    pass

class RepositoryNotFoundError(HfHubHTTPError):
    pass

class GatedRepoError(RepositoryNotFoundError):
    pass

def snapshot_download(repo_id, revision=None, local_dir=None, token=None, **kwargs):
    log = os.environ["STUB_LOG"]
    with open(log, "a") as f:
        f.write(json.dumps({"hub": repo_id, "revision": revision, "token": token,
                            "kwargs": sorted(kwargs), "max_workers": kwargs.get("max_workers"),
                            "env": {k: os.environ.get(k) for k in ENV_AT_IMPORT}, "import_env": IMPORT_ENV,
                            "local_dir": local_dir}) + "\\n")
    calls = sum('"hub"' in line for line in open(log))
    mode = os.environ.get("STUB_HUB_MODE", "ok")
    if mode == "gated":
        raise GatedRepoError(f"401 Client Error: access to {repo_id} is restricted (token {token})")
    if mode == "flaky" and calls == 1:
        raise ConnectionError(f"connection reset (sent token {token})")
    os.makedirs(local_dir, exist_ok=True)
    with open(os.path.join(local_dir, "config.json"), "w") as f:
        f.write('{"model_type": "qwen2"}')
    return local_dir
"""


def git(repo: Path, *argv: str) -> None:
    subprocess.run(["git", *argv], cwd=repo, env=base_env(repo.parent), check=True, capture_output=True)


def base_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "PYTHONPATH")}
    env.update(
        STUB_LOG=str(tmp / "stub.log"),
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    return env


def commit_verl(repo: Path, tag: str, flags: str = NEW_FLAGS, body: str = "", version: str = "0.6.1"):
    script = repo / "examples" / "data_preprocess" / "gsm8k.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(GSM8K.format(arguments=flags, body=body))
    (repo / "verl").mkdir(exist_ok=True)
    (repo / "verl" / "__init__.py").write_text(f'VERSION = "{version}"\n')
    (repo / "README.md").write_text(f"verl {version}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", version)
    git(repo, "tag", tag)


@pytest.fixture
def env(tmp_path: Path):
    """A repo tagged v0.6.1, a local model folder and the stub hub; returns a runner."""
    repo = tmp_path / "verl-repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "docs").mkdir()
    (repo / "docs" / "readme-link.md").symlink_to("../README.md")
    commit_verl(repo, "v0.6.1")
    model_src = tmp_path / "model-src"
    model_src.mkdir()
    (model_src / "config.json").write_text('{"model_type": "qwen2"}')
    (model_src / "model.safetensors").write_bytes(WEIGHTS)
    stubs = tmp_path / "stubs" / "huggingface_hub"
    stubs.mkdir(parents=True)
    (stubs / "__init__.py").write_text(HUB)
    (tmp_path / "work").mkdir()
    data = tmp_path / "data"

    class Env:
        pass

    e = Env()
    e.tmp, e.repo, e.data = tmp_path, repo, data
    e.verl = data / "verl" / "v0.6.1"
    e.model = data / "models" / MODEL_ID
    e.dataset = data / "datasets" / "gsm8k"

    def run(*extra: str, ref: str = "v0.6.1", source: bool = True, token: str | None = None, **env_vars):
        argv = [
            sys.executable,
            str(SCRIPT),
            "--verl-repo",
            str(repo),
            "--verl-ref",
            ref,
            "--verl-dir",
            str(e.verl),
            "--model-id",
            MODEL_ID,
            "--model-dir",
            str(e.model),
            "--dataset-dir",
            str(e.dataset),
            "--backoff",
            "0",
            "--work-dir",
            str(tmp_path / "work"),
        ]
        if source:
            argv += ["--model-source", str(model_src)]
        run_env = base_env(tmp_path)
        run_env.update(PYTHONPATH=str(stubs.parent), **env_vars)
        if token:
            run_env["HF_TOKEN"] = token
        return subprocess.run(
            argv + list(extra), check=False, env=run_env, capture_output=True, text=True, timeout=60
        )

    e.run = run
    return e


def stub_log(e) -> list[dict]:
    path = e.tmp / "stub.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def gsm8k_runs(e) -> list[dict]:
    return [entry for entry in stub_log(e) if "gsm8k" in entry]


def marker(folder: Path) -> dict:
    return json.loads((folder / MARKER).read_text())


def mtimes(folder: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_stages_everything_then_skips_everything(env):
    first = env.run()
    assert first.returncode == 0, first.stderr
    for step in ("verl", "model", "dataset"):
        assert f"[{step}] staged" in first.stdout

    assert marker(env.verl)["verl_ref"] == "v0.6.1" and marker(env.verl)["repo"] == str(env.repo)
    assert (env.verl / "examples" / "data_preprocess" / "gsm8k.py").is_file()
    assert not (env.verl / ".git").exists()  # only the source goes to the bucket
    link = env.verl / "docs" / "readme-link.md"
    assert not link.is_symlink() and link.read_text() == "verl 0.6.1\n"  # symlinks become copies

    assert marker(env.model)["model_id"] == MODEL_ID
    assert (env.model / "model.safetensors").read_bytes() == WEIGHTS

    assert (env.dataset / "train.parquet").read_bytes() == b"PAR1-train-0.6.1"
    assert (env.dataset / "test.parquet").is_file()
    assert "script_sha256" in marker(env.dataset)
    runs = gsm8k_runs(env)
    assert len(runs) == 1
    assert "--local_save_dir" in runs[0]["gsm8k"] and runs[0]["cwd"] == str(env.verl)
    assert not list(env.data.rglob("__pycache__")) and not list(env.data.rglob("*.tmp"))
    for folder in (env.verl, env.model, env.dataset):  # the marker is written last
        times = mtimes(folder)
        assert max(times.values()) == times[folder / MARKER]

    before = mtimes(env.data)
    second = env.run()
    assert second.returncode == 0, second.stderr
    for step in ("verl", "model", "dataset"):
        assert f"[{step}] skipped" in second.stdout
    assert "staged" not in second.stdout
    assert len(gsm8k_runs(env)) == 1  # the preprocessing script did not run again
    assert mtimes(env.data) == before


def test_half_finished_folders_are_redone(env):
    env.verl.mkdir(parents=True)
    (env.verl / "leftover.py").write_text("partial")
    env.model.mkdir(parents=True)
    (env.model / "model.safetensors").write_bytes(WEIGHTS[:100])
    env.dataset.mkdir(parents=True)
    (env.dataset / "train.parquet").write_bytes(b"PAR")
    (env.dataset / "test.parquet").write_bytes(b"PAR")

    result = env.run()
    assert result.returncode == 0, result.stderr
    assert "skipped" not in result.stdout
    assert not (env.verl / "leftover.py").exists()  # wiped, not merged
    assert (env.verl / MARKER).is_file()
    assert (env.model / "model.safetensors").read_bytes() == WEIGHTS
    assert (env.dataset / "train.parquet").read_bytes() == b"PAR1-train-0.6.1"
    assert len(gsm8k_runs(env)) == 1


def test_other_identity_restages(env):
    assert env.run().returncode == 0
    commit_verl(env.repo, "v0.7.0", version="0.7.0")
    model_marker = marker(env.model)
    (env.model / MARKER).write_text(json.dumps({**model_marker, "revision": "older-revision"}))

    result = env.run(ref="v0.7.0")  # same folder, other ref
    assert result.returncode == 0, result.stderr
    assert "[verl] staged v0.7.0" in result.stdout
    assert marker(env.verl)["verl_ref"] == "v0.7.0"
    assert (env.verl / "README.md").read_text() == "verl 0.7.0\n"
    assert "[model] staged" in result.stdout and marker(env.model)["revision"] == "main"
    # Same preprocessing script, so the same data: not redone.
    assert "[dataset] skipped" in result.stdout and len(gsm8k_runs(env)) == 1


def test_old_local_dir_flag(env):
    commit_verl(env.repo, "v0.4.1", flags=OLD_FLAGS, version="0.4.1")
    env.verl = env.data / "verl" / "v0.4.1"
    result = env.run("--steps", "verl,dataset", ref="v0.4.1")
    assert result.returncode == 0, result.stderr
    (run,) = gsm8k_runs(env)
    assert "--local_dir" in run["gsm8k"] and "--local_save_dir" not in run["gsm8k"]
    assert (env.dataset / "train.parquet").read_bytes() == b"PAR1-train-0.4.1"
    assert (env.dataset / MARKER).is_file()


def test_failing_preprocessing_fails_the_job(env):
    commit_verl(env.repo, "v0.6.2", body='sys.exit("boom: could not reach the hub")', version="0.6.2")
    env.verl = env.data / "verl" / "v0.6.2"
    result = env.run("--retries", "1", ref="v0.6.2")
    assert result.returncode == 1
    assert "boom: could not reach the hub" in result.stderr  # the script's own error
    assert "[dataset] FAILED" in result.stderr and "exited with code 1" in result.stderr
    assert len(gsm8k_runs(env)) == 2  # one retry
    assert not (env.dataset / MARKER).exists()
    assert (env.verl / MARKER).exists() and (env.model / MARKER).exists()


def test_dataset_needs_staged_verl(env):
    result = env.run("--steps", "dataset")
    assert result.returncode == 1
    assert "run the verl step first" in result.stderr


def test_hub_download_reads_token_from_env_and_never_shows_it(env):
    result = env.run(source=False, token=TOKEN, STUB_HUB_MODE="flaky")
    assert result.returncode == 0, result.stderr
    calls = [entry for entry in stub_log(env) if "hub" in entry]
    assert len(calls) == 2  # one failure, one retry
    assert all(c["token"] == TOKEN and c["local_dir"] == str(env.model) for c in calls)
    assert all(c["revision"] == "main" and c["kwargs"] == ["max_workers"] for c in calls)
    assert "retry 1/3" in result.stderr
    assert marker(env.model)["source"] == "huggingface"
    for run in gsm8k_runs(env):
        assert TOKEN not in " ".join(run["gsm8k"])
    assert TOKEN not in result.stdout + result.stderr
    assert "***" in result.stderr  # the stub's error echoed the token; it was scrubbed


def test_gated_model_gives_actionable_error(env):
    result = env.run("--steps", "model", source=False, token=TOKEN, STUB_HUB_MODE="gated")
    assert result.returncode == 3
    assert MODEL_ID in result.stderr
    assert "pulumi config set --secret verl-gke:hfToken" in result.stderr
    assert f"huggingface.co/{MODEL_ID}" in result.stderr
    assert len([e for e in stub_log(env) if "hub" in e]) == 1  # not retried
    assert TOKEN not in result.stdout + result.stderr
    assert not (env.model / MARKER).exists()


def test_token_is_not_an_argument(env):
    result = env.run("--hf-token", TOKEN)
    assert result.returncode == 2


def test_missing_arguments_are_usage_errors(env):
    argv = [sys.executable, str(SCRIPT), "--steps", "verl"]
    result = subprocess.run(argv, check=False, capture_output=True, text=True)
    assert result.returncode == 2 and "--verl-ref" in result.stderr


# --- issue 11: sequential writes, failure reasons, the bucket lease ---------------------------


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("stage_data_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_downloads_sequentially_even_when_the_image_turns_hf_transfer_on(env):
    # verl's base image sets HF_HUB_ENABLE_HF_TRANSFER=1; xet would be on by default in the hub client.
    result = env.run("--steps", "model", "--max-workers", "3", source=False, HF_HUB_ENABLE_HF_TRANSFER="1")
    assert result.returncode == 0, result.stderr
    (hub,) = [e for e in stub_log(env) if "hub" in e]
    assert hub["import_env"] == {"HF_HUB_DISABLE_XET": "1", "HF_HUB_ENABLE_HF_TRANSFER": "0"}
    assert hub["max_workers"] == 3


def test_gated_model_failure_reason_goes_to_the_termination_log(env):
    log = env.tmp / "termination-log"
    result = env.run("--steps", "model", "--termination-log", str(log), source=False, STUB_HUB_MODE="gated")
    assert result.returncode == 3
    message = log.read_text()
    assert "hfToken" in message and "no hfToken is set" in message and MODEL_ID in message


def lease_body(holder: str, age_s: float) -> str:
    import time

    return json.dumps({"holder": holder, "renewed": time.time() - age_s})


def test_a_live_lease_keeps_a_second_run_out(env):
    lease, log = env.tmp / "staging.lease", env.tmp / "termination-log"
    lease.write_text(lease_body("other-pod/7/abc", age_s=5))
    result = env.run("--lease-file", str(lease), "--lease-ttl", "600", "--lease-wait", "0",
                     "--termination-log", str(log))
    assert result.returncode == 4, result.stderr
    assert "other-pod/7/abc" in result.stderr and "other-pod/7/abc" in log.read_text()
    assert not env.data.exists()  # nothing written by the run that did not get the lease
    assert json.loads(lease.read_text())["holder"] == "other-pod/7/abc"  # and the holder keeps it


def test_a_stale_lease_is_taken_over_and_released(env):
    lease = env.tmp / "staging.lease"
    lease.write_text(lease_body("crashed-pod/1/dead", age_s=3600))
    result = env.run("--lease-file", str(lease), "--lease-ttl", "600", "--lease-wait", "0")
    assert result.returncode == 0, result.stderr
    assert "taking over a stale lease of crashed-pod/1/dead" in result.stdout
    assert (env.verl / MARKER).is_file()
    assert not lease.exists()  # released at the end


def test_lease_store_changes_only_the_generation_it_was_given(tmp_path):
    store = load_script().FileStore(str(tmp_path / "lease"))
    gen = store.create(b"a")
    assert gen and store.create(b"b") is None  # ifGenerationMatch=0: only if absent
    assert store.read() == (b"a", gen)
    new = store.replace(b"c", gen)
    assert new and new != gen and store.replace(b"d", gen) is None  # a stale generation loses
    assert not store.delete(gen) and store.delete(new) and store.read() is None


def test_two_takers_of_one_stale_lease_get_it_once(tmp_path):
    module = load_script()
    path = str(tmp_path / "lease")
    (tmp_path / "lease").write_text(lease_body("gone/1/x", age_s=3600))
    first = module.Lease(module.FileStore(path), ttl=600, wait=0, poll=0.01)
    second = module.Lease(module.FileStore(path), ttl=600, wait=0, poll=0.01)
    first.acquire()
    with pytest.raises(module.StepError) as err:
        second.acquire()
    assert err.value.code == 4 and first.holder in str(err.value)
    first.release()
    second.acquire()  # released: free again
    second.release()


def test_ship_copies_the_supervisor_once_and_whole(tmp_path):
    """--ship SRC=DEST (issue 14: the run supervisor into the bucket): written via a temp name, skipped
    when the same; a relative DEST is a usage error."""
    src = tmp_path / "supervise.py"
    src.write_text("print('supervise')\n")
    dest = tmp_path / "data" / "scripts" / "supervise-abc.py"

    def ship(*extra):
        return subprocess.run([sys.executable, str(SCRIPT), "--steps", "verl", "--verl-ref", "v0",
                               "--verl-dir", str(tmp_path / "nowhere"), "--retries", "0", *extra],
                              capture_output=True, text=True, check=False)

    first = ship("--ship", f"{src}={dest}")
    assert dest.read_text() == src.read_text() and f"[ship] wrote {dest}" in first.stdout
    assert not list(dest.parent.glob("*.tmp-*"))
    second = ship("--ship", f"{src}={dest}")
    assert f"[ship] skipped: {dest} (same content)" in second.stdout
    assert ship("--ship", f"{src}=relative/path").returncode == 2
