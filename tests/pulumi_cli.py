"""The real Pulumi CLI for the `cli` tier: built by tools/pulumi-cli/build.sh, run offline on a file backend.

`Workspace` is one project folder with its own state backend, plugin home and passphrase; `run()` runs one CLI
command there and returns its exit code and output, bounded in time. A command that runs a program (`preview`,
`up`) is given a language host serving a program named `module:function` (tests/cli_host.py).

What the CLI would reach and how it is kept offline (pulumi/pulumi pkg/v3 v3.276.0):
- its update check: `PULUMI_SKIP_UPDATE_CHECK`;
- plugin downloads (the gcp provider, before our program even runs): `PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION`;
- the Pulumi Cloud backend: a `file://` backend in `PULUMI_BACKEND_URL`, secrets from `PULUMI_CONFIG_PASSPHRASE`;
- anything else over HTTP(S) goes to a proxy address where nothing listens, so it fails at once and shows in
  the output instead of waiting on a network that is not there; loopback (a local Ray head) is exempt.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "pulumi-cli" / "bin"
CLI = BIN / "pulumi"
PASSPHRASE = "verl-gke-tests"
# Bounds for a loaded 2-core machine: a preview of the b200 stack imports the SDKs (~5 s of CPU).
COMMAND_TIMEOUT_S = 240
HOST_START_TIMEOUT_S = 60


def available() -> bool:
    return CLI.is_file() and os.access(CLI, os.X_OK)


MISSING = "the real Pulumi CLI is not built: run tools/pulumi-cli/build.sh (.ci/run always does)"


@dataclass
class Result:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def __str__(self) -> str:
        return f"pulumi {' '.join(self.args)} -> exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


class CliTimeoutError(AssertionError):
    pass


class Workspace:
    """One project folder with its own backend, plugin home and passphrase."""

    def __init__(self, project: Path, scratch: Path, env: dict[str, str] | None = None):
        self.project = project
        self.scratch = scratch
        (scratch / "state").mkdir(parents=True, exist_ok=True)
        (scratch / "home").mkdir(parents=True, exist_ok=True)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "RAY_ADDRESS"))},
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PULUMI_HOME": str(scratch / "home"),
            "PULUMI_BACKEND_URL": f"file://{scratch / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_SKIP_CONFIRMATIONS": "true",
            "HTTP_PROXY": "http://127.0.0.1:9",
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "127.0.0.1,localhost",
            "NO_COLOR": "1",
            **runtime_options_env(project),
            **(env or {}),
        }

    def run(self, *args: str, program: str | None = None, timeout: float = COMMAND_TIMEOUT_S,
            host_env: dict[str, str] | None = None) -> Result:
        """Runs `pulumi ARGS` in the project folder; with `program`, behind a language host serving it."""
        proc, host = self.start(*args, program=program, host_env=host_env)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            raise CliTimeoutError(f"pulumi {' '.join(args)} ran past {timeout} s\n{out}\n{err}") from None
        finally:
            if host:
                stop_host(host[0])
        return Result(tuple(args), proc.returncode, out, err)

    def start(self, *args: str, program: str | None = None, host_env: dict[str, str] | None = None):
        """Starts `pulumi ARGS` and returns (process, host) without waiting: for a test that interrupts it."""
        host = self._start_host(program, host_env) if program else None
        client = [f"--client=127.0.0.1:{host[1]}"] if host else []
        proc = subprocess.Popen([str(CLI), *args, "--non-interactive", *client], cwd=self.project, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        return proc, host

    def _start_host(self, program: str, env: dict[str, str] | None) -> tuple[subprocess.Popen, int]:
        host_env = {**self.env, "PYTHONPATH": str(ROOT), **(env or {})}
        proc = subprocess.Popen([sys.executable, "-m", "tests.cli_host", program], cwd=self.project, env=host_env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        deadline = time.monotonic() + HOST_START_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            if line.strip():
                break
        if not line.strip().isdigit():
            stop_host(proc)
            raise AssertionError(f"the language host for {program} did not start: {line}{proc.stderr.read()}")
        return proc, int(line)


def runtime_options_env(project: Path) -> dict[str, str]:
    """Pulumi.yaml's runtime options as the engine hands them to a provider plugin (`PULUMI_RUNTIME_<KEY>`,
    pkg/v3 v3.276.0 resource/plugin/provider_plugin.go): the dynamic-provider script finds the venv through
    them. With `--client` the CLI replaces the project's runtime by the client one (engine/deployment.go), so
    the tier sets them itself, as the real language host's project would."""
    import yaml

    if not (project / "Pulumi.yaml").is_file():
        return {}
    runtime = yaml.safe_load((project / "Pulumi.yaml").read_text()).get("runtime", {})
    options = runtime.get("options", {}) if isinstance(runtime, dict) else {}
    return {f"PULUMI_RUNTIME_{k.upper()}": str(v) for k, v in options.items()}


def stop_host(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.wait()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def project_copy(dest: Path, stack_files: list[str] | None = None) -> Path:
    """The repository's project (Pulumi.yaml and the named stack files copied, the rest linked) in `dest`: the
    CLI writes stack files and the tests must never touch the repository's own."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name in {"build", ".git"} or entry.name.startswith("Pulumi."):
            continue
        (dest / entry.name).symlink_to(entry)
    shutil.copy(ROOT / "Pulumi.yaml", dest / "Pulumi.yaml")
    for name in stack_files or []:
        shutil.copy(ROOT / name, dest / name)
    return dest


def program_workspace(tmp: Path, env: dict[str, str] | None = None) -> Workspace:
    """A workspace for a test program of this project (`verl-gke`, tests/ served by cli_host): the
    dynamic-provider plugin finds the venv through the runtime options and imports providers from ROOT."""
    project = tmp / "project"
    project.mkdir(parents=True)
    (project / "Pulumi.yaml").write_text(
        f"name: verl-gke\nruntime:\n  name: python\n  options:\n    virtualenv: {ROOT / 'venv'}\n")
    return Workspace(project, tmp / "scratch", env={"PYTHONPATH": str(ROOT), **(env or {})})
