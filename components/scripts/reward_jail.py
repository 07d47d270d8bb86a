"""The jail the user's reward runs in for its smoke test (tools.check_reward, the staging Job's "task" step).

The reward file is the user's code and a shared file is how such code travels, so the smoke test runs it
with nothing of the caller's within reach. Three processes:

- the caller (`run`, in tools.check_reward or stage_data.py): makes itself non-dumpable, so reading its
  /proc/<pid>/environ or memory takes CAP_SYS_PTRACE (kernel/ptrace.c __ptrace_may_access), which no process
  of the jail has; makes a throwaway folder with a copy of the reward; starts the keeper with a fresh
  environment (nothing inherited), that folder as HOME and working directory, in a new session (no
  controlling terminal) and, where the kernel lets an unprivileged user, in new user, PID, mount and network
  namespaces (`unshare`, no uid mapped: no capability in them; the keeper is PID 1, so every process the reward
  starts dies with it, /proc shows only the jail's processes, and there is no network). It reads the keeper's
  report and the reward's output, each bounded in bytes, and kills the keeper's process group at a backstop.
- the keeper (this file run as a script: trusted code, never the reward's): non-dumpable too, and a child
  subreaper, so nothing the reward starts can leave its tree; it starts the reward's process, asks it the
  questions (load the file, then call the function once per case, each question with a fresh nonce its answer
  must echo) and writes the answers into its report, a pipe the reward's process never holds: the reward can
  only answer the questions it is asked, never write a verdict. At its deadline, or once the answers are in,
  it kills the reward's session and every process left below it, then reports the exit status and the sweep.
- the reward's process (components/scripts/reward_run.py, `python -I -B`: no user site, no PYTHON*
  variables, no bytecode): every capability dropped from its bounding set (as root too: it then cannot read
  another root process's memory or environment), no core files, files of at most FILE_SIZE_LIMIT bytes, and,
  where the kernel has Landlock, confined before it starts: it may read only the system's and Python's
  folders, and read and write only the throwaway folder (not the home folder, the project, the caller's
  files or /tmp); from ABI 4 on no TCP, from ABI 6 on no signal or abstract socket outside the jail.

Whatever a layer cannot have on this machine (no `unshare`, user namespaces off, no Landlock), `Run.jail`
says, and the caller prints, which containment is missing. The verdict is not made here: the trusted side
(components/scripts/reward_check.py) judges the keeper's report. Standard library only: shipped to the
staging Job with stage_data.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "reward_run.py"
DEFAULT_TIMEOUT_S = 120.0  # import + a handful of calls; generous for a loaded machine
BACKSTOP_S = 20.0  # the caller kills the keeper's process group this long after the keeper's own deadline
OUTPUT_LIMIT = 64 * 1024  # bytes of the reward's stdout/stderr kept; the rest is counted, not kept
ANSWER_LIMIT = 64 * 1024  # bytes of one answer of the reward's process
REPORT_LIMIT = 4 * 1024 * 1024  # bytes of the keeper's whole report
FILE_SIZE_LIMIT = 64 * 1024 * 1024  # RLIMIT_FSIZE of the reward's process
SWEEP_S = 5.0
UNSHARE = ("unshare", "--user", "--pid", "--fork", "--mount-proc", "--net", "--kill-child", "--")
PATH = "/usr/local/bin:/usr/bin:/bin"

# Linux prctl options and Landlock (include/uapi/linux/prctl.h, include/uapi/linux/landlock.h).
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 4, 24, 38, 36
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_ALL_V1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
READ_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/proc", "/sys")
READ_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
              "/etc/os-release", "/etc/mime.types")
DEVICES = {"/dev/null": "rw", "/dev/zero": "r", "/dev/urandom": "r", "/dev/random": "r"}


@dataclass
class Run:
    """What the caller saw: the keeper's report (its frames, in order), the reward's output, and how it ended."""

    report: list[dict] = field(default_factory=list)
    output: bytes = b""  # the first OUTPUT_LIMIT bytes the reward's processes wrote to stdout/stderr
    output_bytes: int = 0  # all they wrote
    keeper_exit: int | None = None
    backstop: bool = False  # the caller had to kill the keeper
    namespaces: str = ""  # why the keeper ran without its own namespaces ("" when it has them)

    @property
    def jail(self) -> dict:
        """The keeper's account of the jail it set up (its first frame)."""
        return self.report[0] if self.report and self.report[0].get("frame") == "jail" else {}

    def containment(self) -> tuple[list[str], list[str]]:
        """(what held the reward, what did not): the second list is what the caller must say out loud."""
        jail = self.jail
        held = ["a fresh environment (nothing inherited), a throwaway HOME and working folder with a copy of the "
                "reward, no bytecode, no capability; the caller and the keeper non-dumpable (their environment "
                "and memory unreadable)"]
        missing = []
        if jail.get("pid_namespace"):
            held.append("its own user, PID, mount and network namespaces: no network, only the jail's processes "
                        "in /proc, every process it starts ended with the jail")
        else:
            tcp = " (but TCP: Landlock refuses it)" if jail.get("tcp_refused") else ""
            unless = "" if jail.get("signals_scoped") else " (unless it kills the keeper first)"
            missing.append(f"no namespaces ({self.namespaces or 'the keeper is not PID 1'}): the network is "
                           f"reachable{tcp}, other processes are visible in /proc, and what it starts is ended by the "
                           f"keeper's sweep (a child subreaper){unless} instead of with a PID namespace")
        if jail.get("landlock_abi"):
            extra = ("; TCP refused" if jail.get("tcp_refused") else "") + \
                ("; no signal or abstract socket outside the jail" if jail.get("signals_scoped") else "")
            held.append(f"Landlock (ABI {jail['landlock_abi']}): reads only the system's and Python's folders, "
                        f"writes only its throwaway folder{extra}")
        else:
            missing.append(f"no Landlock ({jail.get('landlock') or 'unknown'}): it can read whatever this user can "
                           "(the home folder and its credentials, the project) and write wherever this user can")
        return held, missing


# --- the caller ------------------------------------------------------------------------------------


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def hide_self() -> None:
    """Non-dumpable: /proc/<pid>/environ, mem and fd of this process are then root's, and reading them needs
    CAP_SYS_PTRACE, which the reward's process does not have (kernel/ptrace.c __ptrace_may_access)."""
    if sys.platform.startswith("linux"):
        _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def fresh_env(home: str) -> dict[str, str]:
    """The jail's whole environment: nothing inherited (no token, no proxy, no cloud or Pulumi variable)."""
    return {"PATH": PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
            "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}


_NAMESPACES: dict[str, str] = {}


def namespaces_problem() -> str:
    """Why the keeper cannot have its own user, PID, mount and network namespaces here ("" when it can)."""
    if "answer" not in _NAMESPACES:
        if shutil.which(UNSHARE[0], path=PATH) is None:
            why = "the unshare command (util-linux) is not installed"
        else:
            try:
                done = subprocess.run([*UNSHARE, sys.executable, "-I", "-c", ""], env={"PATH": PATH},
                                      stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
                said = done.stderr.decode(errors="replace").strip().splitlines() or [f"exit code {done.returncode}"]
                why = "" if done.returncode == 0 else (
                    f"unshare refused ({said[0][:200]}): unprivileged user "
                    "namespaces are off here (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, "
                    "Ubuntu's kernel.apparmor_restrict_unprivileged_userns, or a container's seccomp profile)")
            except (OSError, subprocess.TimeoutExpired) as err:
                why = f"unshare could not be run ({err})"
        _NAMESPACES["answer"] = why
    return _NAMESPACES["answer"]


def run(reward: Path, function: str, keywords: list[str], cases: list[dict], timeout_s: float = DEFAULT_TIMEOUT_S,
        *, namespaces: bool = True, landlock: bool = True) -> Run:
    """Load the reward file in the jail, check that `function` takes `keywords`, and call it on each of `cases`
    (its keyword arguments, one dict per call). `namespaces`/`landlock` False leave that layer out (the
    fallbacks' tests)."""
    hide_self()
    result = Run(namespaces=namespaces_problem() if namespaces else "not asked for")
    root = tempfile.mkdtemp(prefix="verl-gke-reward-")
    try:
        os.chmod(root, 0o700)
        home = os.path.join(root, "home")
        os.mkdir(home)
        shutil.copyfile(reward, os.path.join(root, "reward.py"))
        shutil.copyfile(RUNNER, os.path.join(root, RUNNER.name))
        request = os.path.join(root, "request.json")
        with open(request, "w") as f:
            json.dump({"root": root, "function": function, "keywords": keywords, "cases": cases, "timeout_s": timeout_s,
                       "landlock": landlock}, f, default=str)
        keeper = [sys.executable, "-I", "-B", str(Path(__file__).resolve()), request]
        _watch(result, [*UNSHARE, *keeper] if not result.namespaces else keeper, home, timeout_s + BACKSTOP_S)
    finally:
        remove_folder(root)
    return result


def remove_folder(root: str) -> None:
    """Delete the throwaway folder however the reward left it, every process of the jail gone by now. Each folder
    is made ours again (0700) before it is read, reached by a descriptor that never follows a link (a chmod by
    path follows one: the reward could have had any file of the caller's made 0700), and the tree is walked
    without recursion (a reward can nest folders deeper than Python's stack). What cannot be deleted is left."""
    try:
        fd = _open_ours(root)
    except OSError:
        return
    pending, names = [_empty(fd)], []  # per level, the folders left to delete; the names from root down
    while pending:
        if pending[-1]:
            name = pending[-1].pop()
            try:
                sub = _open_ours(name, fd)
            except OSError:
                continue
            os.close(fd)
            fd = sub
            names.append(name)
            pending.append(_empty(fd))
            continue
        pending.pop()
        if names:
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = parent
            with contextlib.suppress(OSError):
                os.rmdir(names.pop(), dir_fd=fd)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(root)


def _open_ours(name: str, dir_fd: int | None = None) -> int:
    """The folder `name` (never a link) made 0700 and opened for reading."""
    path = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.chmod(f"/proc/self/fd/{path}", 0o700)  # the folder itself, not a link's target
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=path)
    finally:
        os.close(path)


def _empty(fd: int) -> list[str]:
    """Delete all but the folders in the folder `fd`; the folders' names."""
    folders = []
    with contextlib.suppress(OSError), os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.name, dir_fd=fd)
    return folders


def _watch(result: Run, command: list[str], home: str, backstop_s: float) -> None:
    out_r, out_w = os.pipe()
    rep_r, rep_w = os.pipe()
    try:
        proc = subprocess.Popen([*command, str(rep_w)], stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                pass_fds=(rep_w,), env=fresh_env(home), cwd=home, start_new_session=True)
    finally:
        os.close(out_w)
        os.close(rep_w)
    report = bytearray()
    deadline = time.monotonic() + backstop_s
    with selectors.DefaultSelector() as sel:
        sel.register(out_r, selectors.EVENT_READ, "out")
        sel.register(rep_r, selectors.EVENT_READ, "report")
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                result.backstop = True
                break
            for key, _ in sel.select(min(left, 1.0)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                elif key.data == "out":
                    result.output += chunk[:max(0, OUTPUT_LIMIT - len(result.output))]
                    result.output_bytes += len(chunk)
                elif len(report) + len(chunk) > REPORT_LIMIT:
                    result.backstop = True  # the keeper never writes this much: something is wrong, stop
                    sel.unregister(key.fd)
                else:
                    report += chunk
    if not result.backstop:
        try:
            result.keeper_exit = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            result.backstop = True
    if result.backstop:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # unshare and the keeper: the PID namespace goes with them
        except ProcessLookupError:
            pass
        result.keeper_exit = proc.wait()
    os.close(out_r)
    os.close(rep_r)
    for line in bytes(report).splitlines():
        try:
            frame = json.loads(line)
        except ValueError:
            break  # a keeper killed half-way through a line
        if isinstance(frame, dict):
            result.report.append(frame)


# --- the keeper ------------------------------------------------------------------------------------


class _Landlock:
    """A Landlock ruleset (Documentation/userspace-api/landlock.rst): read-only system and Python folders, the
    jail's folder read-write, nothing else; TCP and out-of-jail signals refused where the ABI can."""

    def __init__(self, root: str):
        self.libc = _libc()
        self.libc.syscall.restype = ctypes.c_long
        self.abi = self.libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
        if self.abi < 1:
            err = ctypes.get_errno()
            raise OSError(err, f"Landlock is not available in this kernel ({os.strerror(err)})")
        fs = FS_ALL_V1 | (FS_REFER if self.abi >= 2 else 0) | (FS_TRUNCATE if self.abi >= 3 else 0) | \
            (FS_IOCTL_DEV if self.abi >= 5 else 0)
        net = NET_BIND_TCP | NET_CONNECT_TCP if self.abi >= 4 else 0
        scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if self.abi >= 6 else 0
        attr = (ctypes.c_uint64 * 3)(fs, net, scoped)
        size = 8 if self.abi < 4 else 16 if self.abi < 6 else 24
        self.fd = self.libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
        self.tcp, self.signals = bool(net), bool(scoped)
        read_dir, read_file = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR, FS_EXECUTE | FS_READ_FILE
        python = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable))}
        for path in (*READ_DIRS, *sorted(python)):
            self._allow(path, read_dir)
        for path in READ_FILES:
            self._allow(path, read_file)
        for path, mode in DEVICES.items():
            self._allow(path, FS_READ_FILE | ((FS_WRITE_FILE | (FS_TRUNCATE if self.abi >= 3 else 0))
                                              if mode == "rw" else 0))
        self._allow(root, fs)

    def _allow(self, path: str, access: int) -> None:
        class PathBeneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))

        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # not on this system (/lib32, /etc/mime.types, ...)
        try:
            rule = PathBeneath(access, fd)
            if self.libc.syscall(SYS_LANDLOCK_ADD_RULE, self.fd, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
        finally:
            os.close(fd)

    def restrict(self) -> None:
        """In the reward's process, before it runs anything: for good, and for every process it starts."""
        if self.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or \
                self.libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, self.fd, 0):
            os._exit(126)


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def _limits(landlock: _Landlock | None):
    libc, last = _libc(), _last_capability()

    def confine() -> None:  # the reward's process, after fork and setsid, before exec
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        # Every capability out of the bounding set: as root, the exec below then leaves none (no CAP_SYS_PTRACE
        # to read the non-dumpable caller, no CAP_DAC_OVERRIDE); without CAP_SETPCAP (any other user) a no-op.
        for cap in range(last + 1):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        if landlock is not None:
            landlock.restrict()

    return confine


class _Answers:
    """The reward process's answers: one JSON line each, bounded, by a deadline."""

    def __init__(self, fd: int, deadline: float):
        self.fd, self.deadline, self.buffer = fd, deadline, b""

    def next(self, nonce: str) -> tuple[dict | None, str]:
        """(the answer, "") or (None, why there is none)."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > ANSWER_LIMIT:
                return None, f"an answer longer than {ANSWER_LIMIT} bytes"
            left = self.deadline - time.monotonic()
            if left <= 0:
                return None, "timeout"
            with selectors.DefaultSelector() as sel:
                sel.register(self.fd, selectors.EVENT_READ)
                if not sel.select(left):
                    continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None, "its process ended without answering"
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        if len(line) > ANSWER_LIMIT:
            return None, f"an answer longer than {ANSWER_LIMIT} bytes"
        try:
            answer = json.loads(line)
        except ValueError:
            return None, "an answer that is not JSON"
        if not isinstance(answer, dict) or answer.pop("nonce", None) != nonce:
            return None, "an answer to a question it was not asked (its nonce does not match)"
        return answer, ""


def _send(fd: int, data: bytes, deadline: float) -> bool:
    """Write all of `data` to the non-blocking `fd` by the deadline; False if the reader is gone or too slow."""
    while data:
        try:
            data = data[os.write(fd, data):]
            continue
        except BlockingIOError:
            pass
        except OSError:
            return False
        left = deadline - time.monotonic()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_WRITE)
            if left <= 0 or not sel.select(left):
                return False
    return True


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
                found.append(int(entry))
    return found


def _sweep() -> tuple[int, int]:
    """Kill every process left below the keeper (orphans come to it: it is a subreaper or PID 1)."""
    swept, deadline = 0, time.monotonic() + SWEEP_S
    while time.monotonic() < deadline:
        left = _children(os.getpid())
        if not left:
            return swept, 0
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                swept += 1
            except ProcessLookupError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.01)
    return swept, len(_children(os.getpid()))


def keep(request_path: str, report_fd: int) -> int:
    hide_self()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # PID 1 ignores a signal it has no handler for
    _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    report = os.fdopen(report_fd, "w", encoding="utf-8")

    def say(frame: dict) -> None:
        report.write(json.dumps(frame, default=str) + "\n")
        report.flush()

    with open(request_path) as f:
        request = json.load(f)
    root = request["root"]
    landlock, why = None, "not asked for"
    if request["landlock"]:
        try:
            landlock, why = _Landlock(root), ""
        except (OSError, AttributeError) as err:
            why = str(err)
    say({"frame": "jail", "pid_namespace": os.getpid() == 1, "landlock_abi": landlock.abi if landlock else 0,
         "landlock": why, "tcp_refused": bool(landlock and landlock.tcp),
         "signals_scoped": bool(landlock and landlock.signals)})
    q_r, q_w = os.pipe()
    a_r, a_w = os.pipe()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", os.path.join(root, RUNNER.name), os.path.join(root, "reward.py"),
             request["function"], str(q_r), str(a_w)],
            stdin=subprocess.DEVNULL, pass_fds=(q_r, a_w), cwd=os.path.join(root, "home"),
            start_new_session=True, preexec_fn=_limits(landlock))  # noqa: PLW1509 - the keeper has no threads
    except (OSError, subprocess.SubprocessError) as err:
        say({"frame": "end", "started": False, "detail": str(err)})
        return 0
    finally:
        os.close(q_r)
        os.close(a_w)
        if landlock is not None:
            os.close(landlock.fd)
    answers = _Answers(a_r, start + float(request["timeout_s"]))
    os.set_blocking(q_w, False)  # a reward that stops reading must not hold the keeper past its deadline
    timed_out = False
    for case, kwargs in [(None, None), *enumerate(request["cases"])]:
        nonce = secrets.token_hex(16)
        question = ({"op": "load", "nonce": nonce, "keywords": request["keywords"]} if case is None
                    else {"op": "call", "nonce": nonce, "kwargs": kwargs})
        if not _send(q_w, (json.dumps(question, default=str) + "\n").encode(), answers.deadline):
            answer, why = None, "timeout" if time.monotonic() >= answers.deadline else "its process ended"
        else:
            answer, why = answers.next(nonce)
        if answer is None:
            timed_out = why == "timeout"
            say({"frame": "broken", "case": case, "why": why})
            break
        say({"frame": "answer", "case": case, "answer": answer})
        if answer.get("kind") not in ("loaded", "answer"):
            break
    _send(q_w, b'{"op": "exit"}\n', time.monotonic())
    os.close(q_w)
    try:
        exit_code = proc.wait(timeout=0 if timed_out else max(0.0, min(2.0, answers.deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        exit_code = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if exit_code is None:
        exit_code = proc.wait()
    swept, left = _sweep()
    say({"frame": "end", "started": True, "exit": exit_code, "timed_out": timed_out, "swept": swept,
         "left": left, "seconds": round(time.monotonic() - start, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(keep(sys.argv[1], int(sys.argv[2])))
