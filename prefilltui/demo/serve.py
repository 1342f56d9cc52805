"""``prefilltui demo --serve``: keep the demo target running for other commands to use.

``serve_until_stopped(srv)`` prints the running server's URL and the commands to try
against it (``prefilltui URL``, ``prefilltui sweep URL``, ``prefilltui cache-check URL``,
spelled as the user can run them: ``prefilltui_command``), then waits until Ctrl-C (SIGINT), SIGTERM or SIGHUP (the latter two raised as
``SystemExit`` by ``server.exit_on_signals``), or until the server exits on its own.
The caller's ``with`` block stops the server on the way out.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import IO, Protocol

from prefilltui.exit_codes import ExitCode

#: How often the server's process is checked while serving (seconds).
POLL_S = 0.5
_sleep = time.sleep  # the wait between checks (tests replace it)

#: Exit statuses ``exit_on_signals`` raises for the signals that stop serving cleanly.
STOP_CODES = (128 + signal.SIGTERM, 128 + signal.SIGHUP)


class Served(Protocol):
    """What serving reads of a started demo target (``server.ManagedServer``)."""

    label: str
    base_url: str
    log_path: object
    pid: int | None

    @property
    def running(self) -> bool: ...

    def log_tail(self, lines: int = 20) -> str: ...


def prefilltui_command() -> str:
    """How to run this prefilltui from another terminal: ``prefilltui`` when that name
    on PATH is this install's script; else the script beside the running interpreter
    by its absolute path (``make demo`` installs it in .venv/bin, not on PATH); else
    ``<python> -m prefilltui`` (no script: run from a checkout)."""
    script = Path(sys.executable).parent / "prefilltui"  # the venv's bin, unresolved
    found = shutil.which("prefilltui")
    if not (script.is_file() and os.access(script, os.X_OK)):
        return f"{shlex.quote(sys.executable)} -m prefilltui"
    if found and Path(found).resolve() == script.resolve():
        return "prefilltui"
    return shlex.quote(str(script))


def try_lines(url: str, command: str = "prefilltui") -> list[str]:
    """The commands a newcomer can point at the demo target, one per line;
    ``command``: how prefilltui is run (``prefilltui_command``)."""
    return [f"{command} {url}", f"{command} sweep {url}", f"{command} cache-check {url}"]


def serve_until_stopped(srv: Served, *, what: str = "", out: IO[str] | None = None,
                        poll_s: float = POLL_S) -> int:
    """Print ``srv``'s URL and the commands to try, then block until a stop signal
    (``ExitCode.OK``) or until the server exits by itself (``ExitCode.FAILURE``, with
    its log's tail).  ``what`` describes the target (engine and model) in the first
    line.  Never stops the server itself: the caller's ``with`` does."""
    out = out or sys.stdout
    url = srv.base_url
    lines = [f"prefilltui: demo target {what + ' ' if what else ''}serving at {url}",
             "try, in another terminal:",
             *(f"  {c}" for c in try_lines(url, prefilltui_command())),
             f"Ctrl-C stops it ({srv.label} pid {srv.pid}, log {srv.log_path})"]
    print("\n".join(lines), file=out, flush=True)
    try:
        while srv.running:
            _sleep(poll_s)
    except KeyboardInterrupt:
        print(f"prefilltui: stopping {srv.label}", file=out, flush=True)
        return ExitCode.OK
    except SystemExit as e:
        if e.code in STOP_CODES:
            print(f"prefilltui: stopping {srv.label} (signal {int(e.code) - 128})",
                  file=out, flush=True)
            return ExitCode.OK
        raise
    tail = srv.log_tail(10)
    print(f"prefilltui: {srv.label} exited by itself; its log ends:\n{tail}",
          file=sys.stderr, flush=True)
    return ExitCode.FAILURE
