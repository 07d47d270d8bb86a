"""The end of the dynamic-provider process, noticed while a provider method waits, so a create can release its GPUs.

Pulumi runs the job provider in `python -m pulumi.dynamic` (pulumi/pulumi v3.276.0,
sdk/python/lib/pulumi/dynamic/__main__.py), behind a `sh` wrapper in a process group of its own. Three things end
a wait there; each reaches the process differently (seen under the real CLI: tests/test_engine_dynamic.py):

- **the engine's Cancel** (a first Ctrl-C, or SIGTERM, to `pulumi`): the engine sends the Cancel RPC to every
  provider and waits for the steps in flight. The SDK's servicer answers it and does nothing, so a create waiting
  for GPUs would wait out its whole readiness deadline; `watch` makes that answer set the stop too.
- **SIGINT to the process group** (a second Ctrl-C: the engine kills its plugins, sdk/go/common/resource/plugin/
  plugin.go `execPlugin`, and sends SIGKILL 5 s later): the server's main thread stops the gRPC server and the
  interpreter starts to exit, joining the thread that runs the provider method. A threading atexit hook (run
  before that join) sets the stop, with a deadline inside those 5 s.
- **the engine gone** (`pulumi` killed): nothing is signalled, but the pipe the engine holds as the provider's
  stdin reads end-of-file. The stop is set, and the server is asked to exit (nobody will call it again; before,
  it waited out the create and then idled for good).

`pause` (components.ray_client) is where every provider wait sleeps: it wakes at once when the stop is set.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
import time

# What the engine leaves of its 5 s between SIGINT and SIGKILL for the release (a GET and a PATCH of the
# RayCluster, a list of the jobs), after the interpreter has begun to exit.
KILL_GRACE_S = 3.5
SDK_MAIN = "pulumi.dynamic.__main__"

_stop = threading.Event()
_lock = threading.Lock()
_state: dict[str, object] = {"why": None, "deadline": None, "exiting": False, "watching": False}


def stop(why: str, within_s: float | None = None) -> None:
    """Set the stop (the first reason wins); `within_s`: the process is killed that many seconds from now."""
    with _lock:
        if _state["why"] is None:
            _state["why"] = why
        if within_s is not None:
            deadline = time.monotonic() + within_s
            _state["deadline"] = min(deadline, _state["deadline"] or deadline)
    _stop.set()


def reason() -> str | None:
    """Why the provider process is stopping, or None."""
    return _state["why"] if _stop.is_set() else None  # type: ignore[return-value]


def deadline() -> float | None:
    """time.monotonic() by which the process will be killed, when that is known."""
    return _state["deadline"]  # type: ignore[return-value]


def wait(seconds: float) -> bool:
    """Sleep up to `seconds`; True (at once) when the process is stopping."""
    return _stop.wait(max(seconds, 0))


def in_provider_process() -> bool:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == SDK_MAIN


def watch() -> None:
    """In the dynamic-provider process, start noticing the three ends (idempotent); elsewhere (a test calling the
    provider in its own process) nothing."""
    with _lock:
        if _state["watching"] or not in_provider_process():
            return
        _state["watching"] = True
    _hook_cancel(sys.modules["__main__"])
    _register_exit_hook()
    _watch_stdin()


def _sdk_cancel(self, request, context):  # becomes the SDK servicer's Cancel: runs with that module's globals
    self._verl_gke_on_cancel()
    return empty_pb2.Empty()  # noqa: F821 - the SDK module imports it


def _hook_cancel(sdk_main) -> None:
    """Make the SDK servicer's Cancel set the stop. gRPC holds the bound method it registered, so the function's
    code is what can change; only the SDK's own no-op (`return empty_pb2.Empty()`) is replaced."""
    servicer = getattr(sdk_main, "DynamicResourceProviderServicer", None)
    cancel = getattr(servicer, "Cancel", None)
    code = getattr(cancel, "__code__", None)
    if code is None or code.co_names != ("empty_pb2", "Empty") or not hasattr(sdk_main, "empty_pb2"):
        print("[verl-gke] this Pulumi SDK's dynamic provider Cancel is not the one known: a Ctrl-C waits for the "
              "step in flight", file=sys.stderr, flush=True)
        return
    servicer._verl_gke_on_cancel = staticmethod(
        lambda: stop("the engine cancelled the update (Ctrl-C or SIGTERM to pulumi)"))
    cancel.__code__ = _sdk_cancel.__code__


def _register_exit_hook() -> None:
    """The interpreter begins to exit after the SIGINT: threading calls its atexit hooks, newest first, before it
    joins the non-daemon threads (concurrent.futures' pool, which runs the provider method, is joined by one)."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return

    def exiting() -> None:  # in the main thread, which may still set signal handlers
        with _lock:
            _state["exiting"] = True
        # Another SIGINT now (the engine closes its plugins with one more once the update has failed) would raise
        # KeyboardInterrupt in the join and end the process before the release: SIGKILL alone ends it from here.
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop("the engine is killing the provider (a second Ctrl-C)", within_s=KILL_GRACE_S)

    register(exiting)


def _watch_stdin() -> None:
    try:
        is_pipe = stat.S_ISFIFO(os.fstat(0).st_mode)
    except OSError:
        is_pipe = False
    if not is_pipe:
        return

    def read_until_eof() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            return
        stop("the engine went away (pulumi was killed)")
        # The server's main thread waits on a lock that only a signal delivered to that thread interrupts
        # (_thread.interrupt_main does not wake it). Not once the interpreter is exiting: a KeyboardInterrupt
        # there would cut short its join of the thread still releasing.
        with _lock:
            if not _state["exiting"]:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=read_until_eof, name="verl-gke-engine-pipe", daemon=True).start()
