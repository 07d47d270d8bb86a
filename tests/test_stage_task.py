"""Issue 27, gs:// task files: the staging Job's "task" step (components/scripts/stage_data.py) run for
real against a local stand-in for the GCS JSON API and the metadata server's token endpoint.

The stand-in answers as the JSON API does (googleapis/google-api-go-client storage/v1/storage-api.json
@019d4a1c578c: objects.get returns the Object resource, `generation` and `size` as decimal strings,
`md5Hash` base64; `alt=media` returns the bytes, `generation=` pins one version; errors are
{"error": {"code", "message"}}), plus the faults: a missing object (404), no read grant (403), a 503,
a connection cut half-way through the bytes, a checksum mismatch and a killed earlier run.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog.datasets import VERL_SCORED_PREFIXES, VERL_SCORED_SOURCES

SCRIPT = Path(__file__).resolve().parents[1] / "components" / "scripts" / "stage_data.py"
MARKER = ".verl-gke-complete"
TOKEN = "ya29.fake-access-token"
ROWS_KEY, REWARD_KEY = "verl-gke:dataTrainRows", "verl-gke:rewardFile"


def row(i: int, **changes) -> dict:
    base = {"data_source": "my/task", "prompt": [{"role": "user", "content": f"question {i}"}],
            "ability": "x", "reward_model": {"style": "rule", "ground_truth": str(i)}, "extra_info": {"index": i}}
    return {**base, **changes}


def parquet(rows: list[dict], tmp: Path, name: str) -> bytes:
    path = tmp / name
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path.read_bytes()


class FakeGcs:
    """objects: (bucket, name) -> bytes. faults: (bucket, name) -> list of faults used up one per request
    ("503", "cut", "corrupt") or a standing one ("403")."""

    def __init__(self):
        self.objects: dict[tuple[str, str], bytes] = {}
        self.generations: dict[tuple[str, str], int] = {}
        self.faults: dict[tuple[str, str], list[str]] = {}
        self.requests: list[tuple[str, str]] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, code: int, body: bytes, ctype: str = "application/json", length: int | None = None):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                self.wfile.write(body)

            def error(self, code: int, message: str):
                self.send(code, json.dumps({"error": {"code": code, "message": message}}).encode())

            def do_GET(self):  # noqa: N802 - http.server's name
                url = urllib.parse.urlparse(self.path)
                query = urllib.parse.parse_qs(url.query)
                if url.path == "/token":
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self.error(403, "missing Metadata-Flavor")
                    return self.send(200, json.dumps({"access_token": TOKEN, "expires_in": 3599,
                                                      "token_type": "Bearer"}).encode())
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self.error(401, "no token")
                parts = url.path.split("/")  # /storage/v1/b/<bucket>/o/<object>
                bucket, name = parts[4], urllib.parse.unquote(parts[6])
                media = query.get("alt") == ["media"]
                fake.requests.append(("media" if media else "meta", f"gs://{bucket}/{name}"))
                faults = fake.faults.get((bucket, name), [])
                if "403" in faults:
                    return self.error(403, "staging@example.iam does not have storage.objects.get access to the "
                                           "Google Cloud Storage object. Permission 'storage.objects.get' denied "
                                           "on resource (or it may not exist).")
                if faults and faults[0] == "503":
                    faults.pop(0)
                    return self.error(503, "Backend Error")
                if faults and faults[0] == "slow":  # answers long after the client's timeout
                    faults.pop(0)
                    time.sleep(10)
                    return None  # the client gave up long ago
                if faults and faults[0] == "stray404" and media:  # a 404 for an object that is there
                    faults.pop(0)
                    return self.error(404, "No such object")
                if (bucket, name) not in fake.objects:
                    return self.error(404, "No such object: " + f"{bucket}/{name}")
                data, gen = fake.objects[(bucket, name)], fake.generations[(bucket, name)]
                if query.get("generation", [str(gen)]) != [str(gen)]:
                    return self.error(404, "No such object (generation)")
                if not media:
                    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
                    return self.send(200, json.dumps({"kind": "storage#object", "bucket": bucket, "name": name,
                                                      "generation": str(gen), "size": str(len(data)),
                                                      "md5Hash": md5}).encode())
                if faults and faults[0] == "cut":  # the connection drops half-way through the bytes
                    faults.pop(0)
                    return self.send(200, data[: len(data) // 2], "application/octet-stream", length=len(data))
                if faults and faults[0] == "corrupt":
                    faults.pop(0)
                    return self.send(200, b"X" * len(data), "application/octet-stream")
                return self.send(200, data, "application/octet-stream")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def put(self, url: str, data: bytes) -> None:
        bucket, _, name = url.removeprefix("gs://").partition("/")
        self.objects[(bucket, name)] = data
        self.generations[(bucket, name)] = self.generations.get((bucket, name), 1000) + 1

    def media_reads(self, url: str) -> int:
        return sum(1 for kind, u in self.requests if kind == "media" and u == url)


@pytest.fixture
def gcs():
    fake = FakeGcs()
    yield fake
    fake.server.shutdown()


TRAIN = "gs://their-data/sets/train.parquet"
VAL = "gs://their-data/sets/val.parquet"


@pytest.fixture
def stage(tmp_path, gcs):
    """Puts a good 40/8-row task in the fake bucket; returns a runner of the task step."""
    data = tmp_path / "data"
    gcs.put(TRAIN, parquet([row(i) for i in range(40)], tmp_path, "t.parquet"))
    gcs.put(VAL, parquet([row(i) for i in range(8)], tmp_path, "v.parquet"))

    def run(*extra: str, train_rows: int | None = 40, batch: int = 16, reward: bool = True, files=None,
            grant_wait: str = "0"):
        spec = {"files": files or [
            {"key": "verl-gke:dataTrainFile", "split": "train", "source": TRAIN,
             "path": str(data / "tasks" / "gs-a" / "train.parquet"), "rows": train_rows},
            {"key": "verl-gke:dataValFile", "split": "val", "source": VAL,
             "path": str(data / "tasks" / "gs-b" / "val.parquet"), "rows": None}],
            "train_batch_size": batch, "max_prompt_length": 512,
            "scored_sources": None if reward else sorted(VERL_SCORED_SOURCES),
            "scored_prefixes": list(VERL_SCORED_PREFIXES), "rows_key": ROWS_KEY, "reward_key": REWARD_KEY}
        argv = [sys.executable, str(SCRIPT), "--steps", "task", "--task", json.dumps(spec),
                "--gcs-api", gcs.url, "--gcs-token-url", gcs.url + "/token", "--backoff", "0",
                "--grant-wait", grant_wait, "--grant-poll", "0.05", "--termination-log", str(tmp_path / "term"),
                *extra]
        return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)

    run.train = data / "tasks" / "gs-a" / "train.parquet"
    run.val = data / "tasks" / "gs-b" / "val.parquet"
    run.term = tmp_path / "term"
    return run


def test_copies_checks_and_marks_then_skips(stage, gcs):
    first = stage()
    assert first.returncode == 0, first.stderr
    assert pq.ParquetFile(stage.train).metadata.num_rows == 40 and pq.ParquetFile(stage.val).metadata.num_rows == 8
    assert stage.train.read_bytes() == gcs.objects[("their-data", "sets/train.parquet")]
    marker = json.loads((stage.train.parent / MARKER).read_text())
    assert marker["source"] == TRAIN and marker["generation"] == "1001" and marker["size"] > 0
    assert f"({TRAIN}): 40 rows" in first.stdout  # the checker's note
    assert not list(stage.train.parent.glob("*.tmp*"))
    reads = gcs.media_reads(TRAIN)
    second = stage()
    assert second.returncode == 0, second.stderr
    assert gcs.media_reads(TRAIN) == reads  # the copy is not made twice
    assert "skipped" in second.stdout and f"({TRAIN}): 40 rows" in second.stdout  # but checked again


def test_missing_source_object_names_the_url(stage, gcs):
    del gcs.objects[("their-data", "sets/val.parquet")]
    result = stage()
    assert result.returncode == 5, result.stderr
    assert f"verl-gke:dataValFile: {VAL} does not exist" in result.stderr
    assert VAL in stage.term.read_text()
    assert not (stage.val.parent / MARKER).exists()


def test_permission_denied_names_the_grant_and_waits_for_iam(stage, gcs):
    gcs.faults[("their-data", "sets/train.parquet")] = ["403"]
    result = stage(grant_wait="0.3")
    assert result.returncode == 5, result.stderr
    err = result.stderr
    assert f"permission denied reading {TRAIN}" in err and "roles/storage.objectViewer" in err
    assert "gs://their-data" in err and "does not have storage.objects.get access" in err
    metas = [u for kind, u in gcs.requests if kind == "meta" and u == TRAIN]
    assert len(metas) >= 2  # asked again while IAM propagates, then gave up
    assert "roles/storage.objectViewer" in stage.term.read_text()


def test_server_errors_and_a_cut_connection_are_retried(stage, gcs):
    gcs.faults[("their-data", "sets/train.parquet")] = ["503", "cut", "corrupt"]
    result = stage("--retries", "4")
    assert result.returncode == 0, result.stderr
    assert stage.train.read_bytes() == gcs.objects[("their-data", "sets/train.parquet")]
    assert result.stderr.count("retry") >= 3


def test_retries_run_out_on_a_persistent_5xx(stage, gcs):
    gcs.faults[("their-data", "sets/train.parquet")] = ["503"] * 10
    result = stage("--retries", "1")
    assert result.returncode == 1, result.stderr
    assert "503" in result.stderr and TRAIN in result.stderr
    assert not (stage.train.parent / MARKER).exists()


def test_a_half_done_copy_is_redone_on_rerun(stage, gcs):
    stage.train.parent.mkdir(parents=True)
    stage.train.write_bytes(b"PAR1 half")  # a killed run: no marker
    (stage.train.parent / "train.parquet.tmp-77").write_bytes(b"partial")
    result = stage()
    assert result.returncode == 0, result.stderr
    assert stage.train.read_bytes() == gcs.objects[("their-data", "sets/train.parquet")]
    assert not (stage.train.parent / "train.parquet.tmp-77").exists()
    assert (stage.train.parent / MARKER).is_file()


def test_bad_rows_fail_the_job_naming_file_row_and_column(stage, gcs, tmp_path):
    rows = [row(i) for i in range(40)]
    rows[7] = row(7, reward_model={"style": "rule", "ground_truth": None})
    gcs.put(TRAIN, parquet(rows, tmp_path, "bad.parquet"))
    result = stage()
    assert result.returncode == 5, result.stderr
    assert f"verl-gke:dataTrainFile ({TRAIN}), row 7, column reward_model.ground_truth" in result.stderr
    assert "row 7" in stage.term.read_text()
    assert not (stage.train.parent / MARKER).exists()  # an unchecked copy is never marked complete


def test_missing_column_and_wrong_row_count_and_batch(stage, gcs, tmp_path):
    gcs.put(VAL, parquet([{k: v for k, v in row(i).items() if k != "prompt"} for i in range(8)], tmp_path, "n.parquet"))
    result = stage(train_rows=4000, batch=64)
    assert result.returncode == 5
    assert f"verl-gke:dataValFile ({VAL}), column prompt: missing" in result.stderr
    assert f"has 40 rows, the stack declares 4,000 ({ROWS_KEY}" in result.stderr
    assert "the train loader needs a full batch of 64" in result.stderr


def test_unscored_data_source_without_reward_file(stage):
    result = stage(reward=False)
    assert result.returncode == 5
    assert "row 0, column data_source: 'my/task' has no built-in scorer" in result.stderr
    assert REWARD_KEY in result.stderr


def test_task_step_needs_its_spec():
    result = subprocess.run([sys.executable, str(SCRIPT), "--steps", "task"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 2 and "--task" in result.stderr
    bad = json.dumps({"files": [{"key": "k", "split": "train", "source": "s3://x/y", "path": "rel", "rows": 1}]})
    result = subprocess.run([sys.executable, str(SCRIPT), "--steps", "task", "--task", bad], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 2 and "gs://" in result.stderr


def test_one_url_as_both_train_and_val(stage, gcs, tmp_path):
    from catalog.paths import task_copy

    files = [{"key": "verl-gke:dataTrainFile", "split": "train", "source": TRAIN, "rows": 40,
              "path": str(tmp_path / "data") + task_copy(TRAIN, "train.parquet")},
             {"key": "verl-gke:dataValFile", "split": "val", "source": TRAIN, "rows": None,
              "path": str(tmp_path / "data") + task_copy(TRAIN, "val.parquet")}]
    assert Path(files[0]["path"]).parent != Path(files[1]["path"]).parent  # one folder and marker per copy
    result = stage(files=files)
    assert result.returncode == 0, result.stderr
    assert all(Path(f["path"]).is_file() and (Path(f["path"]).parent / MARKER).is_file() for f in files)


def test_a_slow_answer_and_a_stray_404_on_the_bytes_are_retried_not_taken_as_gone(stage, gcs):
    gcs.faults[("their-data", "sets/train.parquet")] = ["slow", "stray404"]
    result = stage("--gcs-timeout", "2")  # the stand-in answers after 10 s
    assert result.returncode == 0, result.stderr
    assert "timed out" in result.stderr and "changed while being copied" in result.stderr
    assert stage.train.read_bytes() == gcs.objects[("their-data", "sets/train.parquet")]


def test_a_refused_connection_is_retried_then_fails_naming_the_file(stage, gcs):
    gcs.server.shutdown()
    gcs.server.server_close()  # nothing listens on the port any more
    result = stage("--retries", "1")
    assert result.returncode == 1
    assert "retry 1/1" in result.stderr and "Connection refused" in result.stderr
    assert TRAIN in result.stderr and not stage.train.parent.joinpath(MARKER).exists()


# --- issue 45: the reward's smoke test, in the staging Job ---------------------------------------------


def smoke(tmp_path: Path, body: str, env: dict | None = None, packages: tuple = ()) -> subprocess.CompletedProcess:
    """Step "task" with no gs:// file and a reward: the uploaded files as the pods see them (local paths here)."""
    data = tmp_path / "data"
    data.mkdir()
    parquet([row(i) for i in range(40)], data, "train.parquet")
    parquet([row(i) for i in range(8)], data, "val.parquet")
    (data / "reward.py").write_text(body)
    spec = {"files": [], "train_batch_size": 16, "max_prompt_length": 512, "scored_sources": None,
            "scored_prefixes": [], "rows_key": ROWS_KEY, "reward_key": REWARD_KEY,
            "reward": {"path": str(data / "reward.py"), "function": "compute_score", "packages": list(packages),
                       "key": REWARD_KEY, "label": "reward.py", "function_key": "verl-gke:rewardFunction",
                       "data": [{"split": "train", "key": "verl-gke:dataTrainFile", "label": "train.parquet",
                                 "path": str(data / "train.parquet")},
                                {"split": "val", "key": "verl-gke:dataValFile", "label": "val.parquet",
                                 "path": str(data / "val.parquet")}]}}
    argv = [sys.executable, str(SCRIPT), "--steps", "task", "--task", json.dumps(spec), "--termination-log",
            str(tmp_path / "term"), "--reward-timeout", "30"]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


SIG = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"


def test_the_reward_is_smoke_tested_in_staging_without_the_jobs_token(tmp_path):
    token = "hf_" + "a1b2c3d4" * 4
    result = smoke(tmp_path, (
        "import os\nloot = []\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try:\n        loot.append(open(f'/proc/{pid}/environ', 'rb').read())\n    except OSError:\n        pass\n"
        "print('LOOT', loot, dict(os.environ))\n" + SIG + "    return 1.0 if solution_str else 0.0\n"),
        env={"HF_TOKEN": token})
    assert result.returncode == 0, result.stderr
    assert "reward smoke test passed: reward.py:compute_score answered 1.0, 0.0" in result.stdout
    assert "LOOT" in result.stdout and token not in result.stdout + result.stderr


def test_a_reward_that_raises_fails_the_job_naming_row_and_response(tmp_path):
    result = smoke(tmp_path, SIG + "    return 1 / len(solution_str)\n")
    assert result.returncode == 5
    said = (tmp_path / "term").read_text()
    assert "the reward function fails its smoke test (the GRPO job is not submitted)" in said
    assert "compute_score raised on verl-gke:dataTrainFile (train.parquet) row 0 with the made-up response '': " \
           "ZeroDivisionError" in said


def test_a_module_the_image_lacks_fails_the_job_even_if_declared(tmp_path):
    """In the image, a missing module is what verl would meet: rewardPackages no longer excuses it."""
    result = smoke(tmp_path, "import not_in_the_image_pkg\n" + SIG + "    return 1.0\n",
                   packages=("not_in_the_image_pkg",))
    assert result.returncode == 5
    assert "imports 'not_in_the_image_pkg', which is not installed in the image" in (tmp_path / "term").read_text()

