"""`prefilltui exporter` as a process and a command: SIGTERM flushes the run files and
exits 0, the API key never leaks, usage errors and a busy port give their exit codes."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from prefilltui.measure.runfile import read_run
from tests.unit.test_exporter import _get, _wait, prefill_server

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def _start_exporter(args, env=None, tmp_path=None):
    """``prefilltui exporter ARGS --listen 127.0.0.1:0`` (its stderr in
    tmp_path/stderr.txt): (proc, port) once it serves, port None if it ended first;
    killed on the way out if it still runs."""
    err = open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "prefilltui", "exporter", *args,
                             "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=err,
                            stdin=subprocess.DEVNULL, cwd=str(ROOT),
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    port = None

    def ready():
        nonlocal port
        m = re.search(r"serving http://127\.0\.0\.1:(\d+)/", (tmp_path / "stderr.txt").read_text())
        port = int(m.group(1)) if m else None
        return port is not None or proc.poll() is not None
    assert _wait(ready, timeout=30)
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()


def test_sigterm_flushes_and_exits_cleanly_and_key_never_leaks(fake_server, tmp_path):
    srv = prefill_server(fake_server)
    key = "sk-exporter-SECRET-0123456789"
    runs = tmp_path / "runs"
    with _start_exporter(
        [srv.base_url, "--interval", "0.05", "--lengths", "16,64", "--run-dir", str(runs),
         "--api-key-env", "MY_KEY"], env={"MY_KEY": key}, tmp_path=tmp_path) as (proc, port):
        assert port is not None
        assert _wait(lambda: len([r for r in srv.requests if r.path == "/v1/completions"]) >= 9)
        status, text = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "stopping" in stderr and "Traceback" not in stderr
    files = list(runs.iterdir())
    assert len(files) == 1
    back, problems = read_run(files[0])
    assert problems == [] and len(back) >= 6  # every line whole after SIGTERM
    assert all(r.headers.get("authorization") == f"Bearer {key}"
               for r in srv.requests if r.path == "/v1/completions")
    for where in (stderr, text, files[0].read_text()):
        assert key not in where


def test_cli_usage_errors(tmp_path, monkeypatch, capsys):
    from prefilltui.cli import main

    monkeypatch.setenv("BAD_KEY", "sk-\x01hidden-part")
    assert main(["exporter", "http://127.0.0.1:9", "--api-key-env", "BAD_KEY",
                 "--listen", "127.0.0.1:0", "--run-dir", str(tmp_path)]) == 2
    assert "hidden-part" not in capsys.readouterr().err

    assert main(["exporter"]) == 2
    bad = tmp_path / "t.toml"
    bad.write_text('[[target]]\nurl = "http://a"\napi_key = "x"\n')
    assert main(["exporter", "--config", str(bad)]) == 2
    with pytest.raises(SystemExit):
        main(["exporter", "http://a", "--interval", "0.001"])


def test_busy_port_is_exit_1(tmp_path):
    import socket

    from prefilltui.cli import main

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        assert main(["exporter", "http://127.0.0.1:9", "--listen", f"127.0.0.1:{port}",
                     "--run-dir", str(tmp_path)]) == 1
    finally:
        s.close()


def test_the_first_probe_comes_at_once_at_a_long_interval(fake_server, tmp_path):
    """``prefilltui exporter URL --interval 600``: ready and probed at once, not
    'connecting' with no probe for the first ten minutes."""
    srv = prefill_server(fake_server)
    with _start_exporter([srv.base_url, "--interval", "600", "--run-dir",
                          str(tmp_path / "runs")], tmp_path=tmp_path) as (proc, port):
        url = f"http://127.0.0.1:{port}/metrics"

        def probed():
            page = _get(url)[1]
            ok = re.search(r'^prefilltui_probes_total\{[^}]*outcome="ok"[^}]*\} (\S+)$', page, re.M)
            ready = re.search(r"^prefilltui_target_ready\{[^}]*\} 1\.0$", page, re.M)
            return bool(ok and float(ok.group(1)) >= 1 and ready)
        assert port is not None
        assert _wait(probed, timeout=60), (tmp_path / "stderr.txt").read_text()
        page = _get(url)[1]
        assert re.search(r"^prefilltui_target_up\{[^}]*\} 1\.0$", page, re.M)
        assert re.search(r"^prefilltui_probe_interval_seconds\{[^}]*\} 600\.0$", page, re.M)
        probes = [r for r in srv.requests if r.path == "/v1/completions"]
        assert len(probes) == 3  # two calibration requests, then the first probe only
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
