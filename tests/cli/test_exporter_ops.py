"""The exporter as a process under a careless operator: /metrics from the first
moment with targets coming up in the background, SIGHUP reloads the targets (never
kills), and the target count and open-file limit are checked up front."""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import sys
import time

from prefilltui.cli import main
from tests.cli.test_exporter_cli import ROOT, _start_exporter
from tests.fakeserver import Reply
from tests.unit.test_exporter import _get, _wait, prefill_server


def _targets(path, urls_names):
    path.write_text("".join(f'[[target]]\nname = "{n}"\nurl = "{u}"\ninterval = 0.2\n'
                            f"lengths = [16, 64]\n\n" for u, n in urls_names))


def _stderr(tmp_path) -> str:
    return (tmp_path / "stderr.txt").read_text()


def test_metrics_is_served_at_once_and_ready_says_which_targets_wait(fake_server, tmp_path):
    """7: with 60 targets whose discovery hangs, /metrics answers at once, listing
    every target, each with prefilltui_target_ready 0."""
    stall = fake_server({"GET /v1/models": Reply.sse([(60.0, b"")])})
    cfg = tmp_path / "t.toml"
    _targets(cfg, [(stall.base_url, f"t{i:02d}") for i in range(60)])
    with _start_exporter(["--config", str(cfg), "--run-dir", str(tmp_path / "r")],
                         tmp_path=tmp_path) as (proc, port):
        assert port is not None, _stderr(tmp_path)
        t0 = time.monotonic()
        status, text = _get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert status == 200 and time.monotonic() - t0 < 3
        assert len(re.findall(r"^prefilltui_target_ready\{.*\} 0\.0$", text, re.M)) == 60


def test_sighup_reloads_the_targets_and_a_bad_file_is_refused(fake_server, tmp_path):
    """11: SIGHUP reads --config again (Prometheus' convention) instead of exiting 129."""
    srv = prefill_server(fake_server)
    cfg = tmp_path / "t.toml"
    _targets(cfg, [(srv.base_url, "a")])
    with _start_exporter(["--config", str(cfg), "--run-dir", str(tmp_path / "r")],
                         tmp_path=tmp_path) as (proc, port):
        url = f"http://127.0.0.1:{port}/metrics"

        def up(name):
            return re.search(rf'prefilltui_target_up{{model="[^"]*",target="{name}"}} 1\.0',
                             _get(url)[1]) is not None
        assert _wait(lambda: up("a"), timeout=30)
        _targets(cfg, [(srv.base_url, "a"), (srv.base_url, "b")])
        proc.send_signal(signal.SIGHUP)
        assert _wait(lambda: "reloaded" in _stderr(tmp_path), timeout=10)
        assert "1 added, 0 removed, 0 changed (restarted), 1 unchanged" in _stderr(tmp_path)
        assert _wait(lambda: up("b"), timeout=30) and proc.poll() is None
        # a's probing went on: its counters were kept across the reload
        cfg.write_text('[[target]]\nurl = "http://a"\ngpu = 7\n')
        proc.send_signal(signal.SIGHUP)
        assert _wait(lambda: "reload refused" in _stderr(tmp_path), timeout=10)
        assert "gpu = 7: must be a non-empty string" in _stderr(tmp_path)
        assert proc.poll() is None and up("a") and up("b")
        _targets(cfg, [(srv.base_url, "b")])
        proc.send_signal(signal.SIGHUP)
        assert _wait(lambda: "1 removed" in _stderr(tmp_path), timeout=10)
        assert _wait(lambda: 'target="a"' not in _get(url)[1], timeout=10)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert "Traceback" not in _stderr(tmp_path)


def test_too_many_targets_is_a_usage_error(tmp_path, capsys):
    cfg = tmp_path / "t.toml"
    _targets(cfg, [("http://127.0.0.1:9", f"t{i}") for i in range(1201)])
    assert main(["exporter", "--config", str(cfg), "--run-dir", str(tmp_path)]) == 2
    assert "1201 targets: one exporter probes at most 1200" in capsys.readouterr().err


def test_an_open_file_limit_too_low_for_the_targets_is_said_up_front(tmp_path):
    """7: the systemd default soft limit of 1,024 crashed the old exporter at target 172
    ('Too many open files'); now a short soft limit is raised to the hard one, and a
    hard limit too low is refused at start, with the figures."""
    cfg = tmp_path / "t.toml"
    _targets(cfg, [("http://127.0.0.1:9", f"t{i}") for i in range(200)])

    def limit(n):
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    p = subprocess.run([sys.executable, "-m", "prefilltui", "exporter", "--config", str(cfg),
                        "--listen", "127.0.0.1:0", "--run-dir", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=60, cwd=str(ROOT),
                       preexec_fn=limit(1024))
    assert p.returncode == 2
    assert "200 targets may need 1680 open files" in p.stderr
    assert "the limit is 1024: raise LimitNOFILE=" in p.stderr


def test_a_short_soft_file_limit_is_raised_to_the_hard_one(fake_server, tmp_path):
    stall = fake_server({"GET /v1/models": Reply.sse([(60.0, b"")])})
    cfg = tmp_path / "t.toml"
    _targets(cfg, [(stall.base_url, f"t{i}") for i in range(100)])
    err = open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefilltui", "exporter", "--config", str(cfg), "--listen",
         "127.0.0.1:0", "--run-dir", str(tmp_path / "r")], stdout=subprocess.DEVNULL,
        stderr=err, cwd=str(ROOT),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (512, 4096)))
    try:
        assert _wait(lambda: "serving" in _stderr(tmp_path), timeout=30), _stderr(tmp_path)
        limits = open(f"/proc/{proc.pid}/limits").read()
        assert re.search(r"Max open files\s+4096\s+4096", limits), limits
    finally:
        proc.kill()
        proc.wait()
        err.close()
