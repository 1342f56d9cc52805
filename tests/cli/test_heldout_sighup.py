"""Held-out variant of the SIGHUP kind: a SIGHUP sent while the exporter starts
(a service manager's ``reload`` right after ``start``, config management touching the
file at deploy).  The reload handler was installed only after the configuration was
read and the port opened: such a SIGHUP killed the exporter (exit 129; measured by hand
with a HUP 0.3 s after the start).  It is now held from the first moment of
``cli.main`` and the exporter reloads once when it is up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.cli.test_exporter_cli import ROOT
from tests.fakeserver import Reply, models_reply, sse_done, sse_text
from tests.unit.test_exporter import _wait


def _catches_sighup(pid: int) -> bool:
    """Whether the process runs prefilltui (it has exec'd: a forked child shows its
    parent's handlers until then) and has a handler for SIGHUP (bit 0 of SigCgt)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"prefilltui\x00exporter" not in f.read():
                return False
        with open(f"/proc/{pid}/status") as f:
            caught = next(ln for ln in f if ln.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(caught, 16) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status") or not hasattr(os, "mkfifo"),
                    reason="needs /proc and FIFOs (Linux)")
def test_a_sighup_while_the_exporter_starts_is_a_reload_not_a_death(fake_server, tmp_path):
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": Reply.sse(
        [(0.01, sse_text("x")), (0.02, sse_done())])})
    cfg = tmp_path / "targets.toml"
    os.mkfifo(cfg)  # the exporter blocks reading it: it is caught starting, deterministically
    body = f'[[target]]\nname = "a"\nurl = "{srv.base_url}"\ninterval = 1\nlengths = [16]\n'
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "prefilltui", "exporter", "--config",
                                 str(cfg), "--listen", "127.0.0.1:0", "--run-dir",
                                 str(tmp_path / "r")], stdout=subprocess.DEVNULL, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=str(ROOT),
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            _wait(lambda: _catches_sighup(proc.pid), timeout=20)
            time.sleep(0.2)  # inside startup: reading the file, before serving
            proc.send_signal(signal.SIGHUP)
            time.sleep(0.2)
            assert proc.poll() is None, "killed by the SIGHUP while starting"
            cfg.write_text(body)  # the start's read of the file
            # the reload's writer only once the start has read to the end (a second writer
            # opened while the first read still runs joins the same read: "listed twice")
            assert _wait(lambda: "serving http" in err_path.read_text(), timeout=30), \
                err_path.read_text()
            writer = threading.Thread(target=cfg.write_text, args=(body,), daemon=True)
            writer.start()  # the reload's read
            assert _wait(lambda: "reloaded" in err_path.read_text(), timeout=30), \
                err_path.read_text()
            assert proc.poll() is None
            assert re.search(r"serving http://127\.0\.0\.1:\d+/metrics", err_path.read_text())
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in err_path.read_text()


def test_an_early_sighup_is_counted_not_fatal():
    from prefilltui.commands import signals

    old = signal.getsignal(signal.SIGHUP)
    try:
        restore = signals.defer_sighup(["exporter", "--config", "x"])
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)
        assert signals.take_early_sighups() is True
        assert signals.take_early_sighups() is False
        restore()
        assert signal.getsignal(signal.SIGHUP) is old  # main() leaves no handler behind
    finally:
        signal.signal(signal.SIGHUP, old)
