"""tools.watch: parsing verl's console lines, and the command against a real local Ray head.

The job is tests/data/verl_metrics_job.py, which prints what verl 0.6.1 prints. RAY_ADDRESS points
nowhere in every test: the watch must use the address it was given.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import uuid
from pathlib import Path

import pytest
import requests

from tests.ray_fixtures import RayNode, ServiceProxy, wait_for_line, wait_status
from tools import watch

DATA = Path(__file__).parent / "data"
JOB_SCRIPT = DATA / "verl_metrics_job.py"
VAL = "val-core/openai/gsm8k/reward/mean@1"


pytestmark = pytest.mark.usefixtures("bogus_ray_address")


@pytest.fixture(scope="module")
def head(zero_gpu_head):
    return zero_gpu_head


def submit(head: RayNode, steps: int, total: int, hold: float, code: int = 0, job_id: str | None = None) -> str:
    job_id = job_id or f"verl-grpo-watch-{uuid.uuid4().hex[:8]}"
    body = {"entrypoint": f"{sys.executable} {JOB_SCRIPT} {steps} {total} {hold} {code}", "submission_id": job_id}
    requests.post(f"{head.address}/api/jobs/", json=body, timeout=30).raise_for_status()
    return job_id


def stop(head: RayNode, job_id: str) -> None:
    requests.post(f"{head.address}/api/jobs/{job_id}/stop", timeout=30)
    wait_status(head.address, job_id, {"STOPPED", "SUCCEEDED", "FAILED"}, timeout=120)


# ----------------------------------------------------------------------------- pure parsing


def test_parse_log_reads_verl_console_lines():
    text = (DATA / "verl_console_sample.log").read_text()
    p = watch.parse_log(text)
    assert p.total_steps == 10
    assert p.step == 4
    assert p.series("critic/score/mean") == [(1, 0.15), (2, 0.2), (3, 0.25), (4, 0.3)]
    assert p.val_key() == VAL
    assert p.series(VAL) == [(0, 0.12), (3, 0.27)]  # np.float64(...) values, initial validation at step 0
    assert p.metrics[1]["actor/lr"] == 1e-06
    assert p.eta_s() == 6 * 30.0  # 6 steps left at 30 s each
    rows = dict(watch.summary_rows(watch.Snapshot("verl-grpo-x-r3", "RUNNING", "", 3, p)))
    assert rows["step"] == "4 of 10 (40%)" and rows["ETA"] == "3m 00s"
    assert rows["attempt"] == "3 (2 recoveries)"
    assert rows["train score"].startswith("0.3000 at step 4")
    assert rows["val score"].startswith("0.2700 at step 3")


def test_parse_log_before_training_and_after_resume():
    assert watch.parse_log("Loading model...\n").step == 0
    assert watch.parse_log("Loading model...\n").eta_s() is None
    # verl resumes from a checkpoint and prints the steps after it again: the newest value wins
    resumed = watch.parse_log("step:5 - critic/score/mean:0.5\nstep:5 - critic/score/mean:0.6\n")
    assert resumed.series("critic/score/mean") == [(5, 0.6)]


def test_attempts():
    assert watch.attempt_of("verl-grpo-b200-abc") == ("verl-grpo-b200-abc", 1)
    assert watch.attempt_of("verl-grpo-b200-abc-r4") == ("verl-grpo-b200-abc", 4)
    jobs = ["verl-grpo-b-abc", "verl-grpo-b-abc-r2", "verl-grpo-b-abc-r10", "other", "verl-grpo-b-abcd-r11"]
    assert watch.newest_attempt(jobs, "verl-grpo-b-abc") == "verl-grpo-b-abc-r10"


# ----------------------------------------------------------------------------- a real Ray head


def test_watch_once_on_a_running_job_and_its_png(head, tmp_path, capsys):
    job_id = submit(head, steps=6, total=10, hold=600)
    try:
        wait_for_line(head.address, job_id, "step:6 ", timeout=120)
        png = tmp_path / "scores.png"
        code = watch.main(["--address", head.address, "--job", job_id, "--once", "--png", str(png)])
        out = capsys.readouterr().out
        assert code == 0
        assert "RUNNING" in out and "6 of 10" in out and "2m 00s" in out  # 4 steps x 30 s
        assert "0.4000 at step 6" in out and "0.4200 at step 6" in out
        assert "1 (0 recoveries)" in out
        from PIL import Image

        with Image.open(png) as image:
            assert image.format == "PNG" and image.size == (800, 450)
            colors = {c for _, c in image.convert("RGB").getcolors(1 << 20)}
        # both curves were drawn: matplotlib's tab:blue (31,119,180) and tab:orange (255,127,14)
        assert (31, 119, 180) in colors and (255, 127, 14) in colors
        # keep a copy to look at
        keep = Path(os.environ.get("WATCH_PNG_KEEP", tmp_path / "kept.png"))
        keep.write_bytes(png.read_bytes())
    finally:
        stop(head, job_id)


def test_watch_picks_the_newest_attempt_and_reports_failure(head, tmp_path, capsys):
    base = f"verl-grpo-watch-{uuid.uuid4().hex[:8]}"
    submit(head, steps=2, total=10, hold=0, code=1, job_id=base)
    wait_status(head.address, base, {"FAILED"}, timeout=120)
    retry = submit(head, steps=3, total=10, hold=0, code=1, job_id=f"{base}-r2")
    wait_status(head.address, retry, {"FAILED"}, timeout=120)
    # the stack output still names attempt 1; the head has attempt 2
    code = watch.main(["--address", head.address, "--job", base, "--once", "--png", str(tmp_path / "p.png")])
    out = capsys.readouterr().out
    assert code == 1
    assert retry in out and "FAILED" in out and "2 (1 recoveries)" in out and "3 of 10" in out


def test_watch_through_the_api_server_proxy_from_stack_outputs(head, tmp_path, capsys, monkeypatch):
    """--stack: the outputs from `pulumi stack output --json`, then the provider's route (proxy, token, CA)."""
    token = "ya29.watch-" + uuid.uuid4().hex
    monkeypatch.setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", token)
    job_id = submit(head, steps=5, total=10, hold=0)
    wait_status(head.address, job_id, {"SUCCEEDED"}, timeout=120)
    with ServiceProxy(head.address, token) as proxy:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        outputs = {"rayDashboardProxy": proxy.gke(), "jobId": job_id, "kubeconfig": "[secret]"}
        fake = bin_dir / "pulumi"  # stands in for the CLI: prints the outputs as `--json` does
        fake.write_text(f"#!/bin/sh\n[ \"$1 $2 $3 $4\" = 'stack output --json --stack=b200' ] || exit 9\n"
                        f"cat <<'EOF'\n{json.dumps(outputs)}\nEOF\n")
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        code = watch.main(["--stack", "b200", "--once", "--png", str(tmp_path / "s.png")])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "SUCCEEDED" in out and "5 of 10" in out and job_id in out
        assert proxy.seen_auth and set(proxy.seen_auth) == {f"Bearer {token}"}
        assert token not in out


def test_watch_says_why_it_cannot_reach(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi CLI
    assert watch.main(["--stack", "b200", "--once"]) == 2
    assert "--address" in capsys.readouterr().out


def test_the_default_png_goes_under_build_which_git_ignores(tmp_path, monkeypatch):
    """Issue 25: without --png the watch wrote `<job id>-scores.png` into the repository root, which git did
    not ignore. Now build/watch/, made on first use; git ignores it (and a PNG an older watch left at the root)."""
    import subprocess

    root = Path(watch.__file__).resolve().parent.parent
    assert watch.default_png("verl-grpo-b200-0123abcd").parent == root / "build" / "watch"
    for rel in ("build/watch/verl-grpo-b200-0123abcd-scores.png", "verl-grpo-b200-0123abcd-scores.png"):
        ignored = subprocess.run(["git", "check-ignore", "-q", rel], cwd=root, capture_output=True, text=True)
        assert ignored.returncode == 0, f"{rel} is not ignored by git: {ignored.stderr}"
    monkeypatch.setattr(watch, "PNG_DIR", tmp_path / "build" / "watch")
    png = watch.png_path(None, "job-1")
    assert png == tmp_path / "build" / "watch" / "job-1-scores.png" and png.parent.is_dir()
    assert watch.png_path(tmp_path / "mine.png", "job-1") == tmp_path / "mine.png"
