"""The session's shared compositions (tests/session_files.py): made once across processes, read back by the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.session_files import SHARED_ENV, session_shared

REPO = Path(__file__).resolve().parents[1]

ASK = """
import json, sys, time
from tests.session_files import session_shared

def make():
    with open(sys.argv[1], "a") as made:
        made.write("made\\n")
    time.sleep(1)  # the others ask while this one makes it
    return {"value": [1, 2, 3]}

print(json.dumps(session_shared("the key", make)))
"""


def ask_at_once(tmp_path: Path, env: dict[str, str], processes: int = 3) -> list[str]:
    counter = tmp_path / "made.txt"
    procs = [subprocess.Popen([sys.executable, "-c", ASK, str(counter)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(processes)]
    answers = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert answers == [{"value": [1, 2, 3]}] * processes
    return counter.read_text().splitlines()


def test_processes_of_one_session_make_a_value_once(tmp_path):
    folder = tmp_path / "session"
    folder.mkdir()
    assert ask_at_once(tmp_path, {**os.environ, SHARED_ENV: str(folder)}) == ["made"]


@pytest.mark.parametrize("folder", [None, "gone"])
def test_a_process_on_its_own_makes_its_own(tmp_path, folder):
    """No session folder named, or one that is gone (a process that outlived its session)."""
    env = {k: v for k, v in os.environ.items() if k != SHARED_ENV}
    if folder:
        env[SHARED_ENV] = str(tmp_path / folder)
    assert ask_at_once(tmp_path, env) == ["made"] * 3


def test_this_session_has_its_folder():
    """tests/conftest.py made it before the test processes started, so every process of the session names it."""
    folder = Path(os.environ[SHARED_ENV])
    assert folder.is_dir()
    key = f"test_session_files {os.getpid()}"
    assert session_shared(key, lambda: {"pid": os.getpid()}) == {"pid": os.getpid()}
    assert session_shared(key, lambda: {"pid": -1}) == {"pid": os.getpid()}  # read back, not made again
