"""What the test processes of one pytest session share on disk. Light (the conftest imports it, and so may a test
that starts processes of its own): no cloud SDK, no Ray."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

# The environment variable naming the session's folder: made by tests/conftest.py before the xdist workers
# start, so they inherit it.
SHARED_ENV = "VERL_GKE_TEST_COMPOSITIONS"
SHARED_PREFIX = "verl-gke-compositions-"  # the folder's name, in the system's temporary folder

T = TypeVar("T")


def session_shared(key: str, make: Callable[[], T]) -> T:
    """make(), made by the first test process of the session that asks for `key` and read back by the others
    from the session's folder; a process asking while another makes it waits for its file. Without that folder
    (a test process started on its own): made here. The value must pickle."""
    folder = os.environ.get(SHARED_ENV)
    if not folder or not os.path.isdir(folder):  # inherited by a process that outlived its session, say
        return make()
    path = Path(folder) / hashlib.sha256(key.encode()).hexdigest()[:32]
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until this process has read or written the value
        if path.exists():
            return pickle.loads(path.read_bytes())
        value = make()
        scratch = path.with_suffix(".part")
        scratch.write_bytes(pickle.dumps(value))
        scratch.replace(path)
        return value
