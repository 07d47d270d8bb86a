"""Issue 45 item 6: `--config` naming something that is not a stack file gets an error that says what it is.

A FIFO, /dev/zero or a folder was "no such stack file"; a FIFO must not block the tools and /dev/zero must not
be read forever. Each tool that takes --config (the plan, the destroy order, the reward check) refuses with
exit 2, no traceback and nothing written.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from tools import check_reward, destroy, stack_file
from tools import plan as plan_tool

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def fifo_rescue(path: Path):
    """A FIFO at `path`, and a writer that unblocks any reader after 20 s, so a tool that opens it cannot hang
    the suite; yields whether the rescue was needed (it must not be)."""
    os.mkfifo(path)
    needed: list[bool] = []
    stop = threading.Event()

    def rescue() -> None:
        if stop.wait(20):
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO until a reader has it open
                needed.append(True)
                return
            except OSError:
                time.sleep(0.05)

    thread = threading.Thread(target=rescue, daemon=True)
    thread.start()
    try:
        yield needed
    finally:
        stop.set()
        thread.join()


def _big(tmp_path: Path) -> Path:
    path = tmp_path / "Pulumi.big.yaml"
    with open(path, "wb") as f:
        f.truncate(stack_file.MAX_BYTES + 1)  # sparse: the size is what counts
    return path


KINDS = {
    "fifo": (None, "is a FIFO (named pipe), not a regular file"),
    "dev-zero": (lambda tmp: Path("/dev/zero"), "is a character device, not a regular file"),
    "folder": (lambda tmp: tmp, "is a folder, not a stack file"),
    "too-large": (_big, f"is {stack_file.MAX_BYTES + 1:,} bytes; a stack file is at most {stack_file.MAX_BYTES:,}"),
}
TOOLS = {
    "plan": lambda config, out: plan_tool.main(["--stack", "dev", "--config", str(config), "--out", str(out)]),
    "destroy": lambda config, out: destroy.main(["--stack", "dev", "--config", str(config)]),
    "check_reward": lambda config, out: check_reward.main(["--stack", "dev", "--config", str(config)]),
}


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_config_that_is_not_a_stack_file_is_named_for_what_it_is(tmp_path, capsys, kind, tool):
    make, said = KINDS[kind]
    out = tmp_path / "out"
    with fifo_rescue(tmp_path / "Pulumi.fifo.yaml") as rescued:
        config = tmp_path / "Pulumi.fifo.yaml" if make is None else make(tmp_path)
        rc = TOOLS[tool](config, out)
    err = capsys.readouterr().err
    assert not rescued, "the tool blocked on the FIFO"
    assert rc == 2 and f"--config {config}: {said}" in err and "Traceback" not in err, err
    assert "no such stack file" not in err and not out.exists()


def test_the_default_stack_file_as_a_fifo_is_refused_without_blocking(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plan_tool, "ROOT", tmp_path)
    with fifo_rescue(tmp_path / "Pulumi.dev.yaml") as rescued:
        rc = plan_tool.main(["--stack", "dev", "--out", str(tmp_path / "out")])
    assert not rescued and rc == 2
    assert "Pulumi.dev.yaml: is a FIFO (named pipe), not a regular file" in capsys.readouterr().err


def test_the_reader_itself_neither_blocks_on_a_fifo_nor_reads_without_bound(tmp_path):
    """What a stat cannot rule out (the file replaced between the stat and the open) the read refuses too."""
    with fifo_rescue(tmp_path / "Pulumi.x.yaml") as rescued:
        with pytest.raises(stack_file.StackFileError, match="is a FIFO"):
            stack_file.read(tmp_path / "Pulumi.x.yaml", "x")
    assert not rescued
    with pytest.raises(stack_file.StackFileError, match="is a character device"):
        stack_file.read(Path("/dev/zero"), "x")
    with pytest.raises(stack_file.StackFileError, match="a stack file is at most"):
        stack_file.read(_big(tmp_path), "big")


def test_a_missing_file_is_still_no_such_stack_file(tmp_path, capsys):
    assert plan_tool.main(["--stack", "dev", "--config", str(tmp_path / "nowhere.yaml")]) == 2
    assert f"--config {tmp_path / 'nowhere.yaml'}: no such stack file" in capsys.readouterr().err
