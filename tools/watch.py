"""Watch the GRPO job: status, step N of M with ETA, recoveries, scores, and a PNG of the score curves.

    python -m tools.watch --stack b200            # reads `pulumi stack output --json`; follows
    python -m tools.watch --stack b200 --once     # one snapshot, for scripts (exit 1: job failed)
    python -m tools.watch --address http://localhost:8265 [--job ID]   # a local head or port-forward

With --stack the job is reached the way the job provider reaches it: the Kubernetes API server's
service proxy (stack output `rayDashboardProxy`), a token minted from your Google credentials
(CLOUDSDK_AUTH_ACCESS_TOKEN, else Application Default Credentials) and TLS against the cluster CA;
no port-forward. Progress comes from verl's console logger lines in the job's log
(`step:N - key:value - ...`, verl/utils/logger/aggregate_logger.py) and "Total training steps: N"
(verl/trainer/ppo/ray_trainer.py), read through Ray's job client. RAY_ADDRESS and
RAY_API_SERVER_ADDRESS are ignored (Ray's client would let them replace the address given).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.attempts import attempt_number, split_attempt
from components.ray_client import ACTIVE, TERMINAL, Dashboard, RayJobError, base_url

TRAIN_SCORE = "critic/score/mean"  # verl trainer/ppo/metric_utils.py compute_data_metrics
VAL_SCORE_PREFIX = "val-core/"  # val-core/<data_source>/<var>/mean@<n>, e.g. .../openai/gsm8k/reward/mean@1
STEP_TIME = "timing_s/step"  # seconds per training step (verl ray_trainer.py marked_timer("step"))
PROXY_OUTPUT = "rayDashboardProxy"
JOB_OUTPUT = "jobId"
# Ray's JobSubmissionClient reads these before the address it is given (ray/dashboard/utils.py
# get_address_for_submission_client); the watch must talk to the cluster it was pointed at.
RAY_ADDRESS_VARS = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")

_STEP_LINE = re.compile(r"\bstep:(\d+) - (.*)$")
_TOTAL = re.compile(r"Total training steps: (\d+)")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)")


# ----------------------------------------------------------------------------- the log


@dataclass
class Progress:
    """What verl's console logger has printed so far."""

    total_steps: int | None = None
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> key -> value

    @property
    def step(self) -> int:
        """The last training step logged (0: none yet, or only the initial validation)."""
        return max(self.metrics, default=0)

    def series(self, key: str) -> list[tuple[int, float]]:
        return [(s, m[key]) for s, m in sorted(self.metrics.items()) if key in m and math.isfinite(m[key])]

    def val_key(self) -> str | None:
        """The core validation score (one per data source; GSM8K has one)."""
        keys = sorted({k for m in self.metrics.values() for k in m if k.startswith(VAL_SCORE_PREFIX)
                       and "/mean@" in k})
        return keys[0] if keys else None

    def latest(self, key: str | None) -> tuple[int, float] | None:
        found = self.series(key) if key else []
        return found[-1] if found else None

    def eta_s(self, window: int = 5) -> float | None:
        """Seconds left: the mean step time of the last `window` steps times the steps left."""
        if not self.total_steps:
            return None
        times = [t for _, t in self.series(STEP_TIME)][-window:]
        if not times:
            return None
        return max(0, self.total_steps - self.step) * sum(times) / len(times)


def _number(text: str) -> float | None:
    """'0.5', '1e-06', 'np.float64(0.52)', 'np.int64(3)' -> float; anything else -> None."""
    text = text.strip()
    if text.startswith(("np.", "numpy.")) and text.endswith(")"):
        text = text[text.index("(") + 1 : -1]
    match = _NUMBER.fullmatch(text)
    return float(match.group(0)) if match else None


def parse_log(text: str) -> Progress:
    """Progress from the job's log; a resumed run prints the same steps again, the newest wins."""
    progress = Progress()
    for line in text.splitlines():
        if total := _TOTAL.search(line):
            progress.total_steps = int(total.group(1))
            continue
        found = _STEP_LINE.search(line)
        if not found:
            continue
        values: dict[str, float] = {}
        for pair in found.group(2).split(" - "):
            key, sep, raw = pair.partition(":")
            value = _number(raw) if sep else None
            if value is not None:
                values[key.strip()] = value
        progress.metrics.setdefault(int(found.group(1)), {}).update(values)
    return progress


def attempt_of(job_id: str) -> tuple[str, int]:
    """(base id, attempt): the provider resubmits a dead job as `<base>-r<k>` (components.scripts.verl_gke_protocol)."""
    return split_attempt(job_id)


def newest_attempt(job_ids: list[str], base: str) -> str | None:
    """The newest attempt of `base` among the jobs on the head: after a recovery the stack output
    still names the old attempt until the next `pulumi up --refresh`."""
    numbered = [(n, j) for j in job_ids if (n := attempt_number(j, base)) is not None]
    return max(numbered)[1] if numbered else None


# ----------------------------------------------------------------------------- reaching the job


@dataclass
class Target:
    """Where the Ray dashboard is: a plain address, or the API server proxy of a stack."""

    address: str | None = None
    gke: dict[str, Any] | None = None
    job_id: str | None = None
    label: str = ""

    @property
    def inputs(self) -> dict[str, Any]:
        return {"address": self.address} if self.address else {"gke": self.gke}


def stack_outputs(stack: str, cwd: Path | None = None) -> dict[str, Any]:
    """`pulumi stack output --json` of a stack (no secrets: the watch needs none)."""
    pulumi = shutil.which("pulumi")
    if not pulumi:
        raise RayJobError("the Pulumi CLI is not on PATH: install it, or pass --address http://... "
                          "(e.g. with `$(pulumi stack output dashboardCommand)` running elsewhere)")
    done = subprocess.run([pulumi, "stack", "output", "--json", f"--stack={stack}"], capture_output=True,
                          text=True, cwd=cwd, check=False)
    if done.returncode != 0:
        raise RayJobError(f"`pulumi stack output --json --stack {stack}` failed: {done.stderr.strip()}")
    return json.loads(done.stdout or "{}")


def target_from_outputs(outputs: dict[str, Any], stack: str) -> Target:
    proxy = outputs.get(PROXY_OUTPUT)
    if not isinstance(proxy, dict) or not proxy.get("endpoint"):
        raise RayJobError(f"stack {stack} has no `{PROXY_OUTPUT}` output: run `pulumi up` with this "
                          "version of the program, or pass --address")
    return Target(gke=proxy, job_id=outputs.get(JOB_OUTPUT), label=f"stack {stack}")


@contextmanager
def job_client(dash: Dashboard) -> Iterator[Any]:
    """Ray's JobSubmissionClient for the dashboard `dash` reaches, with its token and CA."""
    from ray.job_submission import JobSubmissionClient

    saved = {k: os.environ.pop(k) for k in RAY_ADDRESS_VARS if k in os.environ}
    try:
        yield JobSubmissionClient(dash.url, headers=dash.headers() or None, verify=dash.verify)
    finally:
        os.environ.update(saved)


@dataclass
class Snapshot:
    job_id: str
    status: str
    message: str
    attempt: int
    progress: Progress
    start_time_ms: int | None = None
    end_time_ms: int | None = None


def snapshot(target: Target, job_id: str | None) -> Snapshot:
    """One look at the job: its newest attempt's status and the progress in its log."""
    with Dashboard(target.inputs) as dash, job_client(dash) as client:
        jobs = sorted((j for j in client.list_jobs() if j.submission_id), key=lambda j: j.start_time or 0)
        if job_id:
            base, _ = attempt_of(job_id)
            job_id = newest_attempt([j.submission_id for j in jobs], base) or job_id
        else:  # a bare head: its most recently started job
            if not jobs:
                raise RayJobError(f"no submitted job on the Ray head at {base_url(target.inputs)}")
            job_id = jobs[-1].submission_id
        info = client.get_job_info(job_id)
        logs = client.get_job_logs(job_id)
    _, attempt = attempt_of(job_id)
    return Snapshot(job_id=job_id, status=str(info.status.value if hasattr(info.status, "value") else info.status),
                    message=info.message or "", attempt=attempt, progress=parse_log(logs),
                    start_time_ms=info.start_time, end_time_ms=info.end_time)


# ----------------------------------------------------------------------------- showing it


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def summary_rows(snap: Snapshot) -> list[tuple[str, str]]:
    """The facts shown, as (label, text): the table in the terminal and the test read the same rows."""
    p = snap.progress
    total = f"{p.total_steps} ({100 * p.step // p.total_steps}%)" if p.total_steps else "?"
    train, val_key = p.latest(TRAIN_SCORE), p.val_key()
    val = p.latest(val_key)
    rows = [
        ("job", snap.job_id),
        ("status", snap.status + (f" ({snap.message})" if snap.message and snap.status not in ACTIVE else "")),
        ("attempt", f"{snap.attempt} ({snap.attempt - 1} recoveries)"),
        ("step", f"{p.step} of {total}"),
        ("ETA", duration(p.eta_s()) if snap.status in ACTIVE else "-"),
        ("train score", f"{train[1]:.4f} at step {train[0]} ({TRAIN_SCORE})" if train else "none yet"),
        ("val score", f"{val[1]:.4f} at step {val[0]} ({val_key})" if val else "none yet"),
    ]
    return rows


def render(snap: Snapshot, png: Path | None):
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")  # a long path or message wraps instead of being cut
    for label, text in summary_rows(snap):
        table.add_row(label, text)
    if png:
        table.add_row("curves", str(png))
    total = snap.progress.total_steps
    bar = ProgressBar(total=float(total or 1), completed=float(snap.progress.step if total else 0), width=60)
    return Group(table, bar)


def plot(progress: Progress, path: Path, title: str) -> bool:
    """The training and validation score curves as a PNG; False when there is nothing to plot yet."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    train, val_key = progress.series(TRAIN_SCORE), progress.val_key()
    val = progress.series(val_key) if val_key else []
    if not train and not val:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        if train:
            ax.plot(*zip(*train, strict=True), label=f"train {TRAIN_SCORE}", color="tab:blue", linewidth=1.5)
        if val:
            ax.plot(*zip(*val, strict=True), label=f"validation {val_key}", color="tab:orange",
                    marker="o", linewidth=1.5)
        if progress.total_steps:
            ax.set_xlim(0, progress.total_steps)
        ax.set_xlabel("training step")
        ax.set_ylabel("score (reward)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        fig.tight_layout()
        png_problem(path, raise_it=True)  # checked again: the path may have changed since the start
        # A file of our own (O_EXCL, beside the target), then one rename: a viewer never sees half a
        # file, and nothing but a regular file is ever written or replaced.
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp.png", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "wb") as out:
                fig.savefig(out, format="png")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    finally:
        plt.close(fig)
    return True


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# The PNG's default folder: the repository's build/, which git ignores (.gitignore), never its root.
PNG_DIR = Path(__file__).resolve().parent.parent / "build" / "watch"


def default_png(job_id: str) -> Path:
    """`build/watch/<job id>-scores.png` in the repository. The id comes from the Ray head (anyone who can
    submit there picks it: `../../x`, `/tmp/y`), so it becomes one plain file name, never a path."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", job_id).lstrip(".")[:200] or "job"
    return PNG_DIR / f"{name}-scores.png"


def png_path(given: Path | None, job_id: str) -> Path:
    """--png as given, else the default, its folder made."""
    if given is not None:
        return given
    path = default_png(job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class PngPathError(OSError):
    """--png names something the watch must not write: exit 2 with this message."""


def png_problem(path: Path, raise_it: bool = False) -> str | None:
    """Why the watch must not write `path`: it exists and is not a PNG file (a device, a folder, a
    link, someone's document), or its folder is missing or not writable. None when it may."""
    problem = None
    if path.is_symlink():
        problem = "is a symbolic link; name a new file"
    elif path.exists():
        if not path.is_file():
            problem = "exists and is not a regular file (a device, a folder, a pipe?); name a new .png file"
        else:
            try:
                with path.open("rb") as f:
                    head = f.read(len(PNG_SIGNATURE))
            except OSError as err:
                head, problem = b"", f"cannot be read ({err.strerror}); name a new .png file"
            if problem is None and head != PNG_SIGNATURE:
                problem = "exists and is not a PNG image; the watch replaces only its own PNG: name a new file"
    if problem is None:
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            problem = f"its folder {folder} does not exist"
        elif not os.access(folder, os.W_OK | os.X_OK):
            problem = f"its folder {folder} is not writable"
    if problem and raise_it:
        raise PngPathError(f"--png {path}: {problem}")
    return problem


# ----------------------------------------------------------------------------- the command


def exit_code(status: str) -> int:
    return 1 if status in TERMINAL - {"SUCCEEDED"} else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.watch", description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", help="read the stack's outputs with `pulumi stack output --json`")
    where.add_argument("--address", help="Ray dashboard URL, e.g. http://localhost:8265 (port-forward or local head)")
    parser.add_argument("--job", help="job (submission) id; default: the stack's jobId, else the newest job")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit (1 if the job failed)")
    parser.add_argument("--png", type=Path, help="score curve PNG (default: build/watch/<job id>-scores.png)")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between polls (default 30)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    # argparse drops a value that is exactly "--" (CPython argparse _get_values removes '--' from an
    # option's arguments), and `--` is a stack name the CLI accepts: take `--stack=NAME` as written.
    given = [a.split("=", 1)[1] for a in argv if a.startswith("--stack=")]
    if given:
        args.stack = given[-1]

    from rich.console import Console
    from rich.live import Live
    from rich.markup import escape

    console = Console()
    if args.png and (problem := png_problem(args.png)):
        console.print(f"[red]error:[/red] {escape(f'--png {args.png}: {problem}')}", soft_wrap=True)
        return 2
    try:
        if args.stack:
            target = target_from_outputs(stack_outputs(args.stack), args.stack)
        else:
            target = Target(address=args.address.rstrip("/"), label=args.address)
        job_id = args.job or target.job_id
        snap = snapshot(target, job_id)
    except (RayJobError, OSError) as err:
        console.print(f"[red]cannot reach the job:[/red] {err}")
        return 2
    except Exception as err:  # Ray's client raises bare RuntimeError/ConnectionError for HTTP failures
        console.print(f"[red]cannot read the job:[/red] {type(err).__name__}: {err}")
        return 2

    def draw(s: Snapshot):
        png = png_path(args.png, s.job_id)
        return render(s, png if plot(s.progress, png, f"{s.job_id} ({s.status})") else None)

    if args.once:
        try:
            console.print(draw(snap))
        except OSError as err:  # PngPathError, or a disk that filled up
            console.print(f"[red]error:[/red] {escape(str(err))}", soft_wrap=True)
            return 2
        return exit_code(snap.status)
    try:
        with Live(draw(snap), console=console, refresh_per_second=1) as live:
            while snap.status not in TERMINAL:
                time.sleep(args.interval)
                try:
                    snap = snapshot(target, snap.job_id)
                except Exception as err:  # a blip (token refresh, API server): keep watching
                    console.print(f"[yellow]poll failed, retrying:[/yellow] {err}")
                    continue
                live.update(draw(snap))
    except OSError as err:  # the PNG's path became unwritable or not ours (PngPathError)
        console.print(f"[red]error:[/red] {escape(str(err))}", soft_wrap=True)
        return 2
    return exit_code(snap.status)


if __name__ == "__main__":
    sys.exit(main())
