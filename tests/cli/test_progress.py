"""The progress line of the ``opcount`` command: drawn on stderr only when stderr is a terminal
(a pseudo-terminal here), erased when the run ends, never in stdout and never in a pipe."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opcount.cli.progress import Progress

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "opcount", "tests.fixtures.report_models:tiny", "--hardware", "h100-sxm", "-q"]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def screen(text: str) -> list[str]:
    """The lines a terminal shows after ``text``: a carriage return goes back to the start of the
    line and what follows overwrites it (tqdm erases with spaces)."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    lines, col = [[]], 0  # type: ignore[var-annotated]
    for ch in text:
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append([])
            col = 0
        else:
            line = lines[-1]
            line[col : col + 1] = [ch]
            col += 1
    return ["".join(line) for line in lines]


def test_screen_emulation() -> None:
    assert screen("abc\rx") == ["xbc"]
    assert screen("abc\r   \r") == ["   "]
    assert screen("a\r\nb") == ["a", "b"]


def test_nothing_is_drawn_on_a_stream_that_is_not_a_terminal() -> None:
    stream = io.StringIO()
    with Progress(stream) as progress:
        progress.update("tracing")
        progress.update("plotting")
    assert not progress.enabled
    assert stream.getvalue() == ""


def test_the_line_names_the_step_and_is_erased() -> None:
    stream = io.StringIO()
    with Progress(stream, enabled=True) as progress:
        progress.update("tracing resnet50")
        progress.update("roofline on h100-sxm")
    written = stream.getvalue()
    assert "tracing resnet50" in written and "roofline on h100-sxm" in written
    assert "00:00" in written  # the elapsed time
    assert screen(written)[-1].strip() == ""


def test_command_in_a_pipe_and_on_a_terminal() -> None:
    pty = pytest.importorskip("pty")
    import fcntl
    import struct
    import termios

    piped = subprocess.Popen(COMMAND, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    tty = subprocess.Popen(COMMAND, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # read as it comes: a full terminal buffer would block the run
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the command closed its end
                break
            if not data:
                break
            chunks.append(data)
        elif tty.poll() is not None:
            break
    os.close(master)
    out = tty.communicate(timeout=60)[0].decode()  # reads and closes the pipe, then waits
    assert tty.returncode == 0
    piped_out, piped_err = piped.communicate(timeout=300)
    assert piped.returncode == 0

    # Not a terminal: nothing on stderr, and the same output as on a terminal.
    assert piped_err == ""
    assert piped_out == out and "model" in out
    # A terminal: each step named on stderr, the line erased at the end, stdout untouched.
    drawn = b"".join(chunks).decode()
    assert "tracing" in drawn and "roofline on h100-sxm" in drawn
    assert screen(drawn)[-1].strip() == ""
    assert "tracing" not in out and "\r" not in out
