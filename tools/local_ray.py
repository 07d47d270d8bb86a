"""Local Ray nodes started by `ray start` (CPU only, GPUs declared), for the tests and the bench.

Each node runs in a session of its own, with its own temp dir and ports, so it can be stopped on its
own: `ray stop` would stop every head on the machine.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")


# Ports we choose lie outside the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
# default), from which it hands out every port-0 bind and every outgoing connection's source port, and above
# Ray's default worker ports (10002-19999). Each pytest-xdist worker draws from its own slice.
_LOWEST_PORT = 20000
_SLICES = 8
_handed_out: set[int] = set()
_random = random.SystemRandom()  # a random.seed() elsewhere must not make the workers draw the same ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _port_range() -> range:
    """This process's slice of the ports outside the ephemeral range (below it, or above it where it starts low)."""
    low, high = _ephemeral_range()
    below, above = range(_LOWEST_PORT, low), range(high + 1, 65536)
    # A machine whose ephemeral range leaves too little room outside gets the old race, not a failure.
    whole = next((r for r in (below, above) if len(r) >= 8000), range(_LOWEST_PORT, 65536))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) % (_SLICES - 1) if worker[2:].isdigit() else _SLICES - 1  # the last: no xdist
    size = len(whole) // _SLICES
    return range(whole.start + index * size, whole.start + (index + 1) * size)


def free_port() -> int:
    """A port to give a Ray process to listen on: free on every address now, outside the ephemeral range, never
    handed out before by this process. A port from the ephemeral range could be taken by any other process's
    port-0 bind or outgoing connection in the seconds before Ray binds it; a dashboard agent whose HTTP port
    was taken stays alive without it, and its node never serves jobs (ray-project/ray, tag ray-2.60.0,
    python/ray/dashboard/agent.py, `DashboardAgent.run`)."""
    ports = _port_range()
    for _ in range(200):
        port = _random.choice(ports)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")


# Set in the environment of each node's processes, and so inherited by all they start: which node a process
# belongs to (its temp dir) when nothing else in it says so.
NODE_MARK = "VERL_GKE_LOCAL_RAY_NODE"


def ray_env() -> dict[str, str]:
    """The environment for `ray start`: without the bogus RAY_ADDRESS the tests set for the provider."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # A raylet starts an idle worker process for each CPU when the first driver connects, to be ready for
    # its tasks; every job's driver here starts an actor or two at most, so those processes (~0.4
    # CPU-seconds each) are mostly never used.
    env["RAY_prestart_worker_first_driver"] = "0"
    # No metrics: every Ray process would export to its node's agent, which nothing here reads
    # (`enable_metrics_collection`, src/ray/common/ray_config_def.h, ray-2.60.0). Measured with a head and a
    # worker: their start 8.3 -> 7.1 CPU-seconds, idle 3.9 -> 3.3 CPU-seconds a minute.
    env["RAY_enable_metrics_collection"] = "0"
    return env


class RayNode:
    """One Ray node (a head, or a worker joining `join`), in its own process group and temp dir; `env` is
    added to the environment its processes start with (a container image's variables)."""

    def __init__(self, gpus: int, cpus: int = 1, join: RayNode | None = None, env: dict[str, str] | None = None):
        self.gpus, self.cpus, self.join, self.env = gpus, cpus, join, dict(env or {})
        # Short root: Ray's unix socket paths must stay under 108 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="rj-", dir="/tmp")
        self.gcs_port = join.gcs_port if join else free_port()
        self.dashboard_port = join.dashboard_port if join else free_port()
        self.pgid: int | None = None

    @property
    def address(self) -> str:
        """The dashboard base URL."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def command(self) -> list[str]:
        cmd = [
            RAY,
            "start",
            f"--num-cpus={self.cpus}",
            f"--num-gpus={self.gpus}",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
            # Ports each process binds itself (0: any free one), so no other process can take them first.
            # The agent publishes its port in the GCS (the metrics exporter, which would too, is off:
            # ray_env); workers bind any port, as Ray's
            # own multi-node test clusters do (python/ray/cluster_utils.py, `Cluster.add_node`, ray-2.60.0):
            # the default range hands the same ports out on every node of this machine.
            "--dashboard-agent-listen-port=0",
            "--min-worker-port=0",
            "--max-worker-port=0",
            # No log monitor: it forwards what remote workers print to the drivers (a Python process per
            # node, ~1 CPU-second each on this machine); nothing here reads a remote worker's print, and
            # the job logs are the driver's own output (the supervisor's lines, a task's returned text).
            "--include-log-monitor=false",
        ]
        if self.join:
            return [*cmd, f"--address=127.0.0.1:{self.gcs_port}"]
        return [
            *cmd,
            "--head",
            f"--port={self.gcs_port}",
            f"--dashboard-port={self.dashboard_port}",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            "--no-monitor",  # the autoscaler's monitor: these nodes never scale
            f"--ray-client-server-port={free_port()}",
        ]

    def start(self, timeout: float = 240, attempts: int = 2) -> RayNode:
        """Start the node; a failed `ray start` (a port another process took between free_port() and the
        bind, a join that timed out on a machine loaded by parallel test workers) is tried once more on
        fresh ports before it fails with the last log. Any failure (a `ray start` that hangs, a head that
        never turns healthy) stops what was started: the caller never gets the node to stop."""
        try:
            return self._start(timeout, attempts)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float, attempts: int) -> RayNode:
        for attempt in range(1, attempts + 1):
            log_path = Path(self.temp_dir) / "ray-start.log"
            with open(log_path, "wb") as log:
                env = {**ray_env(), **self.env, NODE_MARK: self.temp_dir}
                proc = subprocess.Popen(self.command(), env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            # The daemons `ray start` leaves behind keep its process group: that is how we stop this node only.
            self.pgid = proc.pid
            if proc.wait(timeout=timeout) == 0:
                break
            text = log_path.read_text(errors="replace")[-3000:]  # before stop() removes the temp dir
            self.stop()
            if attempt == attempts:
                raise RuntimeError(f"ray start failed {attempts} times; last log:\n{text}")
            self.temp_dir = tempfile.mkdtemp(prefix="rj-", dir="/tmp")
            if not self.join:
                self.gcs_port, self.dashboard_port = free_port(), free_port()
        if not self.join:
            self._wait_healthy(timeout)
        return self

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "nothing asked yet"
        while time.monotonic() < deadline:
            try:
                if not requests.get(f"{self.address}/api/gcs_healthz", timeout=2).ok:
                    last = "gcs_healthz not ok"
                elif not self._agent_serves():
                    last = "the head's dashboard agent does not serve"
                elif not requests.get(f"{self.address}/api/jobs/", timeout=5).ok:
                    last = "the job list not ok"
                else:
                    return
            except Exception as err:  # noqa: BLE001 - a refused, slow or malformed answer: ask again
                last = f"{type(err).__name__}: {err}"
            time.sleep(0.2)
        raise RuntimeError(f"Ray head at {self.address} did not become healthy in {timeout}s; last: {last}\n"
                           f"{self.log_tails()}")

    def log_tails(self, lines: int = 12) -> str:
        """The last lines of the node's own logs (the dashboard, its agent, the raylet, the GCS): what a
        failed start left to read before stop() removes the temp dir."""
        logs = Path(self.temp_dir) / "session_latest" / "logs"
        parts = []
        for path in [Path(self.temp_dir) / "ray-start.log", *(logs / name for name in (
                "dashboard.log", "dashboard.err", "dashboard_agent.log", "dashboard_agent.out", "dashboard_agent.err",
                "raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err", "runtime_env_agent.log"))]:
            try:
                text = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            if not text:
                continue
            # A port the agent could not bind is logged once, early: long scrolled out of the tail.
            early = [line for line in text[:-lines] if "Failed to bind" in line or "Failed to start HTTP" in line]
            parts.append(f"--- {path.name}\n" + "\n".join([*early[-3:], *text[-lines:]]))
        return "\n".join(parts) or f"(no logs under {logs})"

    def _agent_serves(self) -> bool:
        """The head's dashboard agent (which runs submitted jobs) is registered and answers: until then
        a submission fails with "No available agent". Listing its log files goes through that agent."""
        nodes = requests.get(f"{self.address}/api/v0/nodes?limit=100", timeout=10).json()["data"]["result"]["result"]
        head = next((n["node_id"] for n in nodes if n.get("is_head_node") and n["state"] == "ALIVE"), None)
        return head is not None and requests.get(
            f"{self.address}/api/v0/logs?node_id={head}&glob=dashboard_agent*&timeout=5", timeout=10).ok

    def _raylets(self, procs: dict[int, tuple[int, bytes]]) -> set[int]:
        """The pids of this node's raylet among `procs` (processes())."""
        return {pid for pid, (_, cmd) in procs.items() if b"raylet/raylet" in cmd and self.temp_dir.encode() in cmd}

    def agent_pid(self) -> int:
        """The pid of this node's dashboard agent: the raylet's child titled ray::DashboardAgent."""
        procs = processes()
        raylets = self._raylets(procs)
        for pid, (ppid, cmd) in procs.items():
            if ppid in raylets and cmd.startswith(b"ray::DashboardAgent"):
                return pid
        raise RuntimeError(f"no dashboard agent process for the node in {self.temp_dir}")

    def running(self) -> bool:
        """Whether this node's raylet still runs (a node whose raylet died is gone from the cluster)."""
        return bool(self._raylets(processes()))

    def stop(self) -> None:
        if self.pgid is not None:
            _kill_group(self.pgid)
            self.pgid = None
        _kill_leftovers(self.temp_dir)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _kill_group(pgid: int, grace: float = 1.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)


def processes() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process that can be read now."""
    procs = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        procs[int(proc.name)] = (ppid, cmdline)
    return procs


def _kill_leftovers(temp_dir: str) -> None:
    """Kill every process left of the node whose temp dir is `temp_dir`, in one walk of /proc: workers and
    drivers that left its process group (setsid) name the temp dir in their command line; what those started
    carries NODE_MARK in its environment. A job's entrypoint runs in a session of its own (ray-2.60.0,
    python/ray/dashboard/modules/job/job_supervisor.py, `_exec_entrypoint`), and one that outlived its stop or
    its supervisor (seen: a `sleep 600` left running after its job read STOPPED) is reparented to init."""
    needle, mark = temp_dir.encode(), f"{NODE_MARK}={temp_dir}\0".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "cmdline").read_bytes() or mark in (proc / "environ").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:  # gone meanwhile, or not ours to read or kill
            continue


def gpus_on(address: str) -> float:
    """Total GPUs on ALIVE nodes, straight from the state API (independent of the provider)."""
    nodes = requests.get(f"{address}/api/v0/nodes?limit=1000", timeout=10).json()["data"]["result"]["result"]
    return sum(n["resources_total"].get("GPU", 0) for n in nodes if n["state"] == "ALIVE")
