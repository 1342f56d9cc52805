"""Process and file plumbing shared by the demo target's build and download steps:
the user cache dir, an ``flock`` lock, logged subprocesses in their own process
group, ``pip download`` commands, and a one-line progress bar.

Every step writes into a temporary name next to its destination and moves it into
place with ``os.replace`` (atomic on one file system), under an ``flock`` lock
file, so two concurrent runs never build or download twice and never see half a
file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Callable, Iterator


class DemoSetupError(RuntimeError):
    """The demo target could not be obtained; ``str()`` is a one-line reason for
    the user, ``log_path`` (when set) holds the full output of the failed step."""

    def __init__(self, message: str, log_path: Path | None = None):
        super().__init__(message)
        self.log_path = log_path


# --------------------------------------------------------------------------- paths

def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/prefilltui`` (not created)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "prefilltui"


@contextlib.contextmanager
def file_lock(path: Path, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created); calls ``on_wait`` once
    if another process holds it, then blocks until it is released."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait:
                on_wait()
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ------------------------------------------------------------------------ progress

_MAKE_PCT = re.compile(r"^\[\s*(\d{1,3})%\]")
_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def parse_progress(line: str) -> int | None:
    """Percentage done from one build output line, or None.

    Understands CMake's Makefile lines (``[ 42%] Building CXX object ...``) and
    Ninja's (``[12/345] ...``).
    """
    m = _MAKE_PCT.match(line)
    if m:
        return min(100, int(m.group(1)))
    m = _NINJA_STEP.match(line)
    if m and int(m.group(2)) > 0:
        return min(100, int(m.group(1)) * 100 // int(m.group(2)))
    return None


class ProgressLine:
    """One updating progress bar on a stream.

    On a terminal it is Rich's progress bar (``rich.progress``; Rich comes with
    Textual): label, a bar that takes the width left, the percentage and the time
    elapsed, redrawn in place and fitted to the terminal's width, whatever it is (the
    old hand-drawn bar was 85 columns and wrapped, a new line per update, in an
    80-column terminal).  Anywhere else (a CI log, a pipe) it is a plain line every
    10 %, so a log gets ten lines, not one per compiler step.

    ``console``: the Rich console to draw on (a test's, at a fixed width); default one
    on ``stream``.
    """

    def __init__(self, label: str, stream: IO[str] | None = None, width: int = 30, *,
                 console=None):
        from rich.console import Console

        self.label = label
        self.stream = (stream if stream is not None
                       else console.file if console is not None else sys.stderr)
        self.width = width  # the plain line's bar, in characters
        self.t0 = time.monotonic()
        self.pct = -1
        self._last_printed = -10
        self.console = console if console is not None else Console(file=self.stream)
        self.tty = self.console.is_terminal and not self.console.is_dumb_terminal
        self._bar = None  # the Rich Progress, started at the first update
        self._task = None

    def render(self, pct: int) -> str:
        """The plain line (not a terminal)."""
        filled = self.width * pct // 100
        el = int(time.monotonic() - self.t0)
        return (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                f"{pct:3d}%  {el // 60}:{el % 60:02d} elapsed")

    def _start(self) -> None:
        from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn,
                                   TimeElapsedColumn)

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=None),
                             TaskProgressColumn(), TimeElapsedColumn(),
                             console=self.console, transient=True)
        self._task = self._bar.add_task(self.label, total=100)
        self._bar.start()

    def update(self, pct: int) -> None:
        if pct <= self.pct:
            return
        self.pct = pct
        if self.tty:
            if self._bar is None:
                self._start()
            self._bar.update(self._task, completed=pct)
        elif pct >= self._last_printed + 10 or pct == 100:
            self._last_printed = pct - pct % 10
            self.stream.write(self.render(pct) + "\n")
            self.stream.flush()

    def done(self, message: str) -> None:
        """Take the bar off the screen (a terminal) and say ``message`` (when given)."""
        if self._bar is not None:
            self._bar.stop()  # transient: the bar's lines are erased
            self._bar = None
        if message:
            self.stream.write(message + "\n")
            self.stream.flush()


# ------------------------------------------------------------------------- pip

def pip_download_cmd(spec: str, dest: Path, *, sdist: bool = False) -> list[str]:
    """``python -m pip download`` for one pinned package, no dependencies.

    ``sdist=True`` asks for the source distribution of that package only
    (``--no-binary NAME``; ``:all:`` would also rebuild pip's build tools).
    """
    name = re.split(r"[=<>!~ ]", spec, maxsplit=1)[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "off", "-d", str(dest)]
    if sdist:
        cmd += ["--no-binary", name]
    return cmd + [spec]


def run_logged(cmd: list[str], log: IO[str], *, cwd: Path | None = None,
                on_line: Callable[[str], None] | None = None) -> int:
    """Run ``cmd`` with stdout+stderr appended to ``log``; returns the exit code."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    # own process group: on Ctrl-C / SIGTERM / an error here, the whole build
    # (cmake, make, the compilers) is stopped instead of running on unseen
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace",
                            bufsize=1, start_new_session=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if on_line:
                on_line(line)
        rc = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        if proc.stdout:
            proc.stdout.close()
    log.write(f"[exit {rc}]\n")
    log.flush()
    return rc


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


