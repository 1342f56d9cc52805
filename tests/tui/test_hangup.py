"""A terminal that hangs up without a SIGHUP (``kubectl exec -it`` or ``docker exec
-it`` whose client went, a ``setsid`` session) ends the live app, as the signal would,
instead of leaving Textual's input thread spinning on it (a whole core, measured)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from prefilltui.exit_codes import ExitCode
from prefilltui.measure.runfile import read_run
from prefilltui.tui import hangup
from tests.unit.test_exporter import prefill_server

ROOT = Path(__file__).resolve().parents[2]


def test_a_terminal_is_there_until_its_other_end_closes():
    master, slave = pty.openpty()
    try:
        assert hangup.terminals((slave,)) == (slave,)
        assert not hangup.hung_up((slave,))  # no event while the terminal is there
        os.write(master, b"x")  # a key waiting to be read is no hang-up either
        assert not hangup.hung_up((slave,), 0.05)
        os.close(master)
        assert hangup.hung_up((slave,))
        assert hangup.terminals((slave,)) == ()  # a hung-up terminal is no terminal
    finally:
        os.close(slave)


def test_only_terminals_are_watched():
    r, w = os.pipe()
    try:
        assert hangup.terminals((r, w, 987)) == ()  # a pipe, a closed fd
        assert not hangup.hung_up(())
        os.close(w)
        assert not hangup.hung_up((987,))  # never raises
    finally:
        os.close(r)


def test_the_watch_tells_the_app_then_ends_the_process_after_its_grace():
    master, slave = pty.openpty()
    told, ended = threading.Event(), threading.Event()
    watch = hangup.HangupWatch((slave,), told.set, grace_s=0.2, end=ended.set).start()
    try:
        assert not told.wait(0.2)  # nothing while the terminal is there
        os.close(master)
        assert told.wait(5) and ended.wait(5)
        watch.thread.join(5)
        assert not watch.thread.is_alive()
    finally:
        os.close(slave)


def test_nothing_to_watch_starts_no_thread():
    assert hangup.HangupWatch((), lambda: None).start().thread is None


def test_the_app_ends_with_129_when_its_terminal_hangs_up_without_a_signal(
        fake_server, tmp_path):
    srv = prefill_server(fake_server)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    run = tmp_path / "run.jsonl"
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)}
    # a session of its own and the terminal never made its controlling one: no SIGHUP
    proc = subprocess.Popen([sys.executable, "-m", "prefilltui", "watch", srv.base_url,
                             "--lengths", "8,32", "--pause", "0.2", "--out", str(run)],
                            stdin=slave, stdout=slave, stderr=slave, env=env, cwd=str(ROOT),
                            start_new_session=True)
    os.close(slave)
    try:
        screen, deadline = b"", time.monotonic() + 60
        while b"TTFT vs prompt tokens" not in screen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                screen += os.read(master, 1 << 16)
        assert b"TTFT vs prompt tokens" in screen, screen[-500:]
        deadline = time.monotonic() + 60
        while (not run.exists() or len(read_run(run)[0]) < 3) and time.monotonic() < deadline:
            while select.select([master], [], [], 0.1)[0]:
                os.read(master, 1 << 16)
        os.close(master)
        master = -1
        rc = proc.wait(30)  # the grace is 10 s: the app ends by itself well before
    finally:
        if master >= 0:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == ExitCode.HANGUP == 128 + signal.SIGHUP
    results, _ = read_run(run)
    assert len(results) >= 3 and all(r.ok for r in results if not r.warmup)
