"""Issue 45 item 1: the user's reward runs only in the jail (components/scripts/reward_jail.py), and the jail holds.

Each attack the adversarial tester made on the old smoke test (stacks/reward_probe.py, run unconfined by the
plan and `pulumi preview`) is a real reward file here; each test asserts the attack did not succeed. Every
layer is tested alone as well as together: a machine without user namespaces or Landlock gets the rest, and
says which is missing (tests/test_check_reward.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from components.scripts import reward_check, reward_jail

ROOT = Path(__file__).resolve().parent.parent
KEYWORDS = list(reward_check.KEYWORDS)
CALL = {"data_source": "my/task", "solution_str": "#### 1", "ground_truth": "1", "extra_info": {}}
TAIL = "\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"


def _landlock_abi() -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(reward_jail.SYS_LANDLOCK_CREATE_RULESET, None, 0, 1))


NAMESPACES = not reward_jail.namespaces_problem()
LANDLOCK = _landlock_abi()
MODES = {
    "namespaces-and-landlock": ({}, NAMESPACES and LANDLOCK),
    "landlock-only": ({"namespaces": False}, LANDLOCK),
    "namespaces-only": ({"landlock": False}, NAMESPACES),
    "neither": ({"namespaces": False, "landlock": False}, True),
}


def modes(*names: str):
    """The jail's layer choices, each skipped where this machine lacks it."""
    return pytest.mark.parametrize("mode", [
        pytest.param(MODES[n][0], id=n, marks=pytest.mark.skipif(not MODES[n][1], reason=f"{n}: not on this machine"))
        for n in names or MODES])


def reward(tmp_path: Path, body: str, function: str = TAIL) -> Path:
    """The reward file (the attack at import, then the function) in a folder of its own (the folder nothing may
    be written beside)."""
    folder = tmp_path / "given"
    folder.mkdir(exist_ok=True)
    path = folder / "reward.py"
    path.write_text(textwrap.dedent(body) + function)
    return path


def jailed(path: Path, mode: dict, calls: int = 1, timeout_s: float = 60.0) -> tuple[reward_jail.Run, dict]:
    run = reward_jail.run(path, "compute_score", KEYWORDS, [CALL] * calls, timeout_s, **mode)
    return run, reward_check.verdict(run.report, calls, timeout_s)


def processes_with(marker: str) -> list[int]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def gone(marker: str, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# --- what the reward can read -------------------------------------------------------------------------

ENVIRON_THIEF = """
    import os
    secret, seen = os.environ.get("THE_SECRET", ""), []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for name in ("environ", "cmdline"):
            try:
                data = open(f"/proc/{pid}/{name}", "rb").read()
                seen.append(f"{pid}/{name}")
                print("LOOT", data.decode(errors="replace"))
            except OSError:
                pass
    pid = os.getppid()
    while pid > 0:  # the keeper, then (without a PID namespace) the caller and its ancestors
        try:
            print("LOOT", open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
        except OSError as err:
            print("DENIED", pid, type(err).__name__)
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])
        except OSError:
            break
    print("ENV", dict(os.environ), "SCANNED", len(seen))
"""


@modes()
def test_the_reward_cannot_read_a_secret_in_the_callers_environment(tmp_path, mode):
    """The old probe's reward read PULUMI_CONFIG (decrypted secrets) and HF_TOKEN from /proc/<parent>/environ."""
    token = f"hf_{uuid.uuid4().hex}"
    path = reward(tmp_path, ENVIRON_THIEF)
    caller = (f"import sys; from pathlib import Path; from components.scripts import reward_jail\n"
              f"run = reward_jail.run(Path({str(path)!r}), 'compute_score', {KEYWORDS!r}, [{CALL!r}], 60, **{mode!r})\n"
              "sys.stdout.buffer.write(run.output)\n")
    env = {**os.environ, "HF_TOKEN": token, "PULUMI_CONFIG": json.dumps({"verl-gke:hfToken": token}),
           "THE_SECRET": token}
    done = subprocess.run([sys.executable, "-c", caller], cwd=ROOT, env=env, capture_output=True, timeout=120)
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, done.stderr
    assert "SCANNED" in out and "DENIED" in out  # it ran, and tried the caller
    assert token not in out
    own = next(line for line in out.splitlines() if line.startswith("ENV "))
    assert set(eval(own.split(" ", 1)[1].rpartition(" SCANNED")[0])) == set(reward_jail.fresh_env("/x"))


def test_the_check_command_holds_no_secret_for_the_reward_to_find(tmp_path):
    """End to end: tools.check_reward, run from a shell holding credentials, with a secret in the stack file."""
    token = f"hf_{uuid.uuid4().hex}"
    from tests.test_check_reward import stack

    config = stack(tmp_path, textwrap.dedent(ENVIRON_THIEF) + TAIL)
    config.write_text(config.read_text() + "  verl-gke:hfToken:\n    secure: v1:AAAABBBBCCCC\n")
    env = {**os.environ, "HF_TOKEN": token, "PULUMI_CONFIG": json.dumps({"verl-gke:hfToken": token}),
           "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / token)}
    done = subprocess.run([sys.executable, "-m", "tools.check_reward", "--stack", "dev", "--config", str(config)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "SCANNED" in done.stdout and token not in done.stdout + done.stderr


@modes("namespaces-and-landlock", "landlock-only")
def test_the_reward_cannot_read_the_home_folder_or_the_project(tmp_path, mode):
    """The old probe's reward read the real home folder's gcloud credentials (a scratch HOME only moved `~`)."""
    canary = uuid.uuid4().hex
    credentials = tmp_path / "home" / ".config" / "gcloud" / "application_default_credentials.json"
    credentials.parent.mkdir(parents=True)
    credentials.write_text(json.dumps({"refresh_token": canary}))
    targets = [credentials, Path.home() / ".bashrc", ROOT / "Pulumi.dev.yaml", ROOT / "stacks" / "keys.py"]
    path = reward(tmp_path, "for t in %r:\n"
                            "    try:\n        print('READ', t, open(t).read())\n"
                            "    except OSError as err:\n        print('DENIED', t, type(err).__name__)\n"
                  % [str(t) for t in targets])
    run, result = jailed(path, mode)
    out = run.output.decode()
    assert result["status"] == "ok", result
    assert canary not in out and "READ" not in out
    assert out.count("DENIED") == len([t for t in targets if t.exists()])


@modes("namespaces-and-landlock", "landlock-only")
def test_the_reward_cannot_write_outside_its_throwaway_folder(tmp_path, mode):
    """The old probe's reward wrote into the project (it rewrote stacks/keys.py) and outside it."""
    keys = tmp_path / "project" / "stacks" / "keys.py"
    keys.parent.mkdir(parents=True)
    keys.write_text("KEYS = ()\n")
    outside = [tmp_path / "outside.txt", Path.home() / f".verl-gke-test-{uuid.uuid4().hex}", Path("/tmp") /
               f"verl-gke-test-{uuid.uuid4().hex}"]
    path = reward(tmp_path, f"""
        import os, pathlib
        for target in {[str(p) for p in outside]!r}:
            try:
                open(target, "w").write("x")
            except OSError as err:
                print("DENIED", type(err).__name__)
        try:
            open({str(keys)!r}, "a").write("EVIL = 1\\n")
        except OSError as err:
            print("DENIED", type(err).__name__)
        for name in ("beside.py", "__pycache__/x.pyc"):
            try:
                p = pathlib.Path({str(tmp_path / "given")!r}) / name
                p.parent.mkdir(exist_ok=True)
                p.write_text("x")
            except OSError as err:
                print("DENIED", type(err).__name__)
        open("scratch.txt", "w").write("its own folder is writable")
        print("HOME", os.path.expanduser("~"), os.listdir("."))
    """)
    run, result = jailed(path, mode)
    assert result["status"] == "ok", result
    assert run.output.decode().count("DENIED") == len(outside) + 3
    assert not any(p.exists() for p in outside)
    assert keys.read_text() == "KEYS = ()\n"
    assert sorted(os.listdir(tmp_path / "given")) == ["reward.py"]
    assert "scratch.txt" in run.output.decode()


@modes()
def test_no_bytecode_or_file_is_left_beside_the_reward(tmp_path, mode):
    """`-I` made Python ignore PYTHONDONTWRITEBYTECODE: the old probe left __pycache__ beside every reward."""
    path = reward(tmp_path, "import json")
    _, result = jailed(path, mode)
    assert result["status"] == "ok"
    assert os.listdir(path.parent) == ["reward.py"]


# --- what the reward can leave behind ---------------------------------------------------------------


DAEMON = """
    import os, sys, time
    if os.fork() == 0:  # double fork, new session: out of the probe's process group, as the tester's daemon was
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
        os._exit(0)
    os.wait()
    time.sleep(0.3)  # the daemon has exec'd
"""


@modes()
def test_a_daemon_the_reward_starts_is_gone_when_the_check_returns(tmp_path, mode):
    marker = f"verl-gke-daemon-{uuid.uuid4().hex}"
    path = reward(tmp_path, DAEMON.format(marker=marker))
    _, result = jailed(path, mode)
    assert result["status"] == "ok", result
    assert gone(marker)


@modes()
def test_a_daemon_is_gone_after_a_reward_that_hangs_is_stopped(tmp_path, mode):
    """A double-forked setsid child outlived the old probe's 120 s kill of its process group."""
    marker = f"verl-gke-daemon-{uuid.uuid4().hex}"
    path = reward(tmp_path, DAEMON.format(marker=marker), "\ndef compute_score(**kw):\n    time.sleep(600)\n")
    started = time.monotonic()
    run, result = jailed(path, mode, timeout_s=3)
    assert result["status"] == "timeout" and not run.backstop
    assert time.monotonic() - started < 60
    assert gone(marker)


# --- what the reward can make the check say ---------------------------------------------------------


FORGERS = {
    "prints a verdict and writes it to every path and descriptor": """
        import json, os, sys
        forged = json.dumps({"status": "ok", "scores": [1.0], "calls": 1, "frame": "end", "kind": "loaded"})
        print(forged)
        print("reward smoke test passed")
        for arg in sys.argv:
            try:
                open(arg, "w").write(forged)
            except OSError:
                pass
        for fd in range(256):
            try:
                os.write(fd, (forged + "\\n").encode())
            except OSError:
                pass
    """,
    "answers the keeper's questions before they are asked": """
        import json, os, sys
        answers = int(sys.argv[4])
        for kind in ("loaded", "answer"):
            os.write(answers, (json.dumps({"kind": kind, "nonce": "0" * 32, "signature": "compute_score(**kw)",
                                           "value": {"kind": "number", "value": 1.0}}) + "\\n").encode())
        os._exit(0)
    """,
}


@pytest.mark.parametrize("forger", list(FORGERS))
@modes("namespaces-and-landlock", "neither")
def test_a_forged_verdict_is_not_believed(tmp_path, mode, forger):
    """The old probe's result file was named in its argv: the reward wrote "ok" there itself."""
    path = reward(tmp_path, FORGERS[forger], "\ndef compute_score(**kw):\n    raise RuntimeError('the real answer')\n")
    _, result = jailed(path, mode)
    assert result["status"] != "ok", result
    assert result["status"] in ("raised", "crashed", "protocol"), result


@modes("namespaces-and-landlock", "neither")
def test_output_is_bounded_in_memory_and_escaped(tmp_path, mode):
    """The old probe held 3.8 GB for 1.2 GB of output and passed raw escape codes to the terminal."""
    path = reward(tmp_path, """
        import sys
        sys.stdout.write("\\x1b[2J\\x1b]0;owned\\x07\\r")
        chunk = "x" * (1 << 20)
        for _ in range(200):
            sys.stdout.write(chunk)
        sys.stdout.flush()
    """)
    # VmHWM, the peak of this process's own memory (ru_maxrss carries the forking parent's peak across exec).
    caller = ("import json; from pathlib import Path; from components.scripts import reward_check, "
              "reward_jail\n"
              f"run = reward_jail.run(Path({str(path)!r}), 'compute_score', {KEYWORDS!r}, [{CALL!r}], 120, "
              f"**{mode!r})\n"
              "peak = next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM'))\n"
              "print(json.dumps([run.output_bytes, len(run.output), peak, "
              "reward_check.output_lines(run.output, run.output_bytes)]))\n")
    done = subprocess.run([sys.executable, "-c", caller], cwd=ROOT, capture_output=True, text=True, timeout=300)
    total, kept, max_rss_kib, lines = json.loads(done.stdout)
    assert total >= 200 << 20 and kept == reward_jail.OUTPUT_LIMIT
    assert max_rss_kib < 150 * 1024, "the caller held the reward's output"
    shown = "\n".join(lines)
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert "\\x1b[2J\\x1b]0;owned\\x07\\x0d" in shown


@modes("namespaces-and-landlock", "landlock-only", "namespaces-only")
def test_the_reward_reaches_no_network(tmp_path, mode):
    if mode.get("namespaces") is False and LANDLOCK < 4:
        pytest.skip("without a network namespace, Landlock refuses TCP from ABI 4 on")
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.5)
        port = server.getsockname()[1]
        path = reward(tmp_path, f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=5)
                print("CONNECTED")
            except OSError as err:
                print("REFUSED", err)
        """)
        run, result = jailed(path, mode)
        with pytest.raises(TimeoutError):
            server.accept()
    assert result["status"] == "ok" and "REFUSED" in run.output.decode()


def test_each_missing_layer_is_named():
    run = reward_jail.Run(report=[{"frame": "jail", "pid_namespace": False, "landlock_abi": 0,
                                   "landlock": "Landlock is not available in this kernel"}],
                          namespaces="the unshare command (util-linux) is not installed")
    held, missing = run.containment()
    assert len(missing) == 2
    assert "no namespaces (the unshare command (util-linux) is not installed): the network is reachable" in missing[0]
    assert "no Landlock (Landlock is not available in this kernel): it can read whatever this user can (the home " \
           "folder and its credentials, the project)" in missing[1]
    assert held and "fresh environment" in held[0]


# --- the throwaway folder, once the reward is gone ------------------------------------------------------

def _as_unprivileged(action) -> int:
    """Run `action` in a forked child that cannot ignore file permissions (as root: CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH and CAP_FOWNER dropped, as for any other user); its exit code (1 if it raised)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if os.getuid() == 0:
                import ctypes

                header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
                data = (ctypes.c_uint32 * 6)()  # (effective, permitted, inheritable) x 2 words
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.capget(header, data):
                    os._exit(3)
                for word in (0, 1):  # the first word's effective and permitted sets
                    data[word] &= ~((1 << 1) | (1 << 2) | (1 << 3))
                if libc.capset(header, data):
                    os._exit(3)
            action()
            code = 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _left_by_a_reward(top: str) -> tuple[str, str]:
    """(a file of the caller's, mode 0644; the jail's folder, as a reward can leave it) in `top`."""
    victim = os.path.join(top, "the-callers-file")
    Path(victim).write_text("x")
    os.chmod(victim, 0o644)
    root = os.path.join(top, "jail")
    os.makedirs(os.path.join(root, "home"))
    return victim, root


def test_a_link_the_reward_left_in_a_read_only_folder_does_not_change_its_targets_mode():
    """The old cleanup chmod-ed by path what it could not delete: a link beside a folder made read-only had
    its target, any file of the caller's, made 0700."""
    top = tempfile.mkdtemp(prefix="verl-gke-test-")
    try:
        victim, root = _left_by_a_reward(top)
        os.symlink(victim, os.path.join(root, "home", "link"))
        os.symlink(top, os.path.join(root, "home", "folder-link"))
        os.chmod(os.path.join(root, "home"), 0o500)
        assert _as_unprivileged(lambda: reward_jail.remove_folder(root)) == 0
        assert (os.stat(victim).st_mode & 0o7777, os.stat(top).st_mode & 0o7777) == (0o644, 0o700)
        assert not os.path.lexists(root)
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", top], check=False)
        shutil.rmtree(top, ignore_errors=True)


def test_a_folder_the_reward_made_unreadable_is_removed_with_what_is_in_it():
    """The old cleanup raised TypeError out of the check (its retry called os.open without flags) and left the
    folder, with whatever the reward wrote, in /tmp."""
    top = tempfile.mkdtemp(prefix="verl-gke-test-")
    try:
        _, root = _left_by_a_reward(top)
        os.makedirs(os.path.join(root, "home", "locked", "deeper"))
        Path(root, "home", "locked", "deeper", "data").write_text("x" * 1000)
        os.chmod(os.path.join(root, "home", "locked"), 0)
        assert _as_unprivileged(lambda: reward_jail.remove_folder(root)) == 0
        assert not os.path.lexists(root)
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", top], check=False)
        shutil.rmtree(top, ignore_errors=True)


@modes("namespaces-and-landlock")
def test_a_folder_nested_deeper_than_pythons_stack_is_removed_and_the_verdict_given(tmp_path, mode):
    """The old cleanup recursed (shutil.rmtree): 3000 nested folders raised RecursionError out of the check, with
    a traceback, no verdict, and the folder left in /tmp."""
    path = reward(tmp_path, """
        import os
        fd = os.open(".", os.O_RDONLY)
        for _ in range(3000):
            os.mkdir("d", dir_fd=fd)
            fd = os.open("d", os.O_RDONLY, dir_fd=fd)
        print("ROOT", os.path.dirname(os.getcwd()))
    """)
    run, result = jailed(path, mode)
    assert result["status"] == "ok", result
    root = run.output.decode().split("ROOT ")[1].split()[0]
    assert not os.path.lexists(root)
