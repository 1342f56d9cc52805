"""LlamaServer and `prefilltui demo` against a stand-in llama-server (a small Python
HTTP server that takes llama-server's flags), so the life-cycle rules — free port,
/health wait, log tail on failure, stop on every way out, no orphan — are checked
in seconds.  tests/integration/test_demo_orphans.py repeats the orphan checks with
the real binary.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from prefilltui import cli
from prefilltui.demo import LlamaServer, ServerStartError, find_llama_server, ensure_gguf
from prefilltui.demo_build import DemoSetupError
from procwait import gone

FAKE_SERVER = r'''
import http.server, os, signal, sys, time
args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1]
mode = os.environ.get("FAKE_LLAMA_MODE", "ok")
print("fake llama-server", " ".join(args), flush=True)
if mode == "fail":
    print("llama_model_load: error loading model: bad magic", flush=True)
    sys.exit(1)
if mode == "bind_fail_once" and not os.path.exists(os.environ["FAKE_LLAMA_MARK"]):
    open(os.environ["FAKE_LLAMA_MARK"], "w").close()
    print("start: couldn't bind HTTP server socket, hostname: 127.0.0.1", flush=True)
    sys.exit(1)
if mode == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
delay = float(os.environ.get("FAKE_LLAMA_DELAY", "0"))
t0 = time.monotonic()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ready = time.monotonic() - t0 >= delay
        code = 200 if self.path == "/health" and ready else 503
        body = b'{"status":"ok"}' if code == 200 else b'{"error":"loading"}'
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer((opt("--host"), int(opt("--port"))), H).serve_forever()
'''

CHILD = r'''
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
from prefilltui.demo import LlamaServer, exit_on_signals
binary, gguf, mode, log = sys.argv[1:5]
with exit_on_signals():
    with LlamaServer(binary, gguf, threads=1, ctx=512, startup_timeout=60, log_path=log) as srv:
        print(srv.pid, flush=True)
        sys.stdin.readline()  # the parent has seen the server running
        if mode == "exception":
            raise RuntimeError("boom")
        if mode == "normal":
            sys.exit(0)
        time.sleep(120)
'''


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    p = tmp_path / "llama-server"
    p.write_text(f"#!{sys.executable}\n" + FAKE_SERVER)
    p.chmod(0o755)
    return p


@pytest.fixture
def fake_gguf(tmp_path: Path) -> Path:
    p = tmp_path / "model.gguf"
    p.write_bytes(b"GGUF")
    return p


def orphan_check(binary: Path, gguf: Path, mode: str, log: Path) -> None:
    """Start a Python child that runs LlamaServer, end it by ``mode`` (normal,
    exception, SIGINT, SIGTERM, SIGKILL), and assert the server process is gone."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(binary), str(gguf), mode, str(log)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    server_pid = None
    try:
        line = child.stdout.readline()
        assert line.strip().isdigit(), f"child did not start a server: {line!r} " \
                                       f"{child.stderr.read() if child.poll() is not None else ''}"
        server_pid = int(line)
        assert psutil.pid_exists(server_pid)
        sig = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM,
               "SIGKILL": signal.SIGKILL}.get(mode)
        if sig is not None:
            child.send_signal(sig)
        else:
            child.stdin.write("go\n")
            child.stdin.flush()
        rc = child.wait(timeout=30)
        expected = {"normal": 0, "exception": 1, "SIGINT": -2, "SIGTERM": 143, "SIGKILL": -9}
        assert rc == expected[mode], child.stderr.read()
        assert gone(server_pid), f"llama-server pid {server_pid} outlived its parent ({mode})"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if server_pid is not None and psutil.pid_exists(server_pid):
            with pytest.MonkeyPatch.context():
                try:
                    os.kill(server_pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


# ------------------------------------------------------------------ LlamaServer

def test_starts_on_loopback_with_metrics_and_flags(fake_binary, fake_gguf):
    with LlamaServer(fake_binary, fake_gguf, threads=3, ctx=2048,
                     extra_args=["--batch-size", "64"]) as srv:
        assert srv.base_url == f"http://127.0.0.1:{srv.port}"
        with urllib.request.urlopen(srv.base_url + "/health", timeout=5) as r:
            assert r.status == 200
        cmd = srv.command
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        assert "--metrics" in cmd
        assert cmd[cmd.index("-c") + 1] == "2048"
        assert cmd[cmd.index("-t") + 1] == "3"
        assert cmd[-2:] == ["--batch-size", "64"]
        assert cmd[cmd.index("-m") + 1] == str(fake_gguf)
        pid = srv.pid
        log = srv.log_path
        assert os.getpgid(pid) == pid, "server must lead its own process group"
    assert gone(pid)
    assert not srv.running
    assert not log.exists(), "a clean stop removes the temp log"


def test_waits_for_health(fake_binary, fake_gguf, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_DELAY", "0.8")
    t0 = time.monotonic()
    with LlamaServer(fake_binary, fake_gguf) as srv:
        assert time.monotonic() - t0 >= 0.8
        assert srv.running


def test_start_failure_reports_log_tail(fake_binary, fake_gguf, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "fail")
    with pytest.raises(ServerStartError) as ei:
        LlamaServer(fake_binary, fake_gguf).start()
    msg = str(ei.value)
    assert "exited during start-up (exit code 1)" in msg
    assert "error loading model: bad magic" in msg
    assert ei.value.log_path and ei.value.log_path.exists()
    ei.value.log_path.unlink()


def test_port_race_retries_on_a_new_port(fake_binary, fake_gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "bind_fail_once")
    monkeypatch.setenv("FAKE_LLAMA_MARK", str(tmp_path / "mark"))
    with LlamaServer(fake_binary, fake_gguf) as srv:
        assert srv.running
        assert srv.log_tail(50).count("$ ") == 2  # two launches in one log


def test_health_timeout_stops_server(fake_binary, fake_gguf, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_DELAY", "100")
    srv = LlamaServer(fake_binary, fake_gguf, startup_timeout=0.5)
    with pytest.raises(ServerStartError, match="did not become healthy within 0.5 s"):
        srv.start()
    assert gone(srv.pid)
    srv.log_path.unlink()


def test_stop_escalates_to_sigkill(fake_binary, fake_gguf, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "ignore_term")
    srv = LlamaServer(fake_binary, fake_gguf).start()
    pid = srv.pid
    t0 = time.monotonic()
    srv.stop(timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert gone(pid)
    assert srv.returncode == -signal.SIGKILL
    srv.stop()  # idempotent


def test_exception_inside_block_stops_server_and_keeps_log(fake_binary, fake_gguf):
    with pytest.raises(RuntimeError):
        with LlamaServer(fake_binary, fake_gguf) as srv:
            pid = srv.pid
            raise RuntimeError("boom")
    assert gone(pid)
    assert srv.log_path.exists()
    srv.log_path.unlink()


@pytest.mark.parametrize("mode", ["normal", "exception", "SIGINT", "SIGTERM", "SIGKILL"])
def test_no_orphan(fake_binary, fake_gguf, mode, tmp_path):
    orphan_check(fake_binary, fake_gguf, mode, tmp_path / "server.log")


# ------------------------------------------------------------------ finding pieces

def test_find_llama_server_order(fake_binary, tmp_path, monkeypatch):
    with pytest.raises(DemoSetupError, match="not an executable file"):
        find_llama_server(tmp_path / "nope")
    assert find_llama_server(fake_binary) == fake_binary.resolve()
    monkeypatch.setenv("PATH", str(fake_binary.parent) + os.pathsep + os.environ["PATH"])
    assert find_llama_server() == fake_binary
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DemoSetupError, match="prepare-only"):
        find_llama_server(build=False)
    cached = tmp_path / "cache/prefilltui/llama-server/11434.0.0/llama-server"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(fake_binary.read_bytes())
    cached.chmod(0o755)
    assert find_llama_server(build=False) == cached


def test_ensure_gguf_flag_and_missing(tmp_path, monkeypatch, fake_gguf):
    assert ensure_gguf(fake_gguf) == fake_gguf.resolve()
    with pytest.raises(DemoSetupError, match="no such file"):
        ensure_gguf(tmp_path / "missing.gguf")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DemoSetupError, match="not cached"):
        ensure_gguf(fetch=False)


# ------------------------------------------------------------------ the command

def test_demo_command_headless_runs_sweep_then_stops(fake_binary, fake_gguf, monkeypatch,
                                                     capsys):
    import prefilltui.commands.sweep as sweep_cmd

    seen = {}

    def fake_run_sweep(args, base_url):
        seen["url"] = base_url
        seen["lengths"] = (args.min_tokens, args.max_tokens, args.points)
        with urllib.request.urlopen(base_url + "/health", timeout=5) as r:
            seen["health"] = r.status
        # this test's server only: a session-scoped llama_server fixture may be a child too
        seen["pid"] = next(p.pid for p in psutil.Process().children()
                           if str(fake_binary) in " ".join(p.cmdline()))
        return 0

    monkeypatch.setattr(sweep_cmd, "run_sweep", fake_run_sweep, raising=False)
    rc = cli.main(["demo", "--headless", "--llama-server", str(fake_binary),
                   "--gguf", str(fake_gguf), "--threads", "1", "--llama-arg=--foo 1"])
    assert rc == 0
    assert seen["health"] == 200
    assert seen["lengths"] == (16, 1024, 8)
    assert seen["url"].startswith("http://127.0.0.1:")
    assert gone(seen["pid"])
    assert "llama-server ready at http://127.0.0.1:" in capsys.readouterr().err


def test_demo_command_tui_path(fake_binary, fake_gguf, monkeypatch):
    import prefilltui.commands.watch as watch_cmd

    calls = []
    monkeypatch.setattr(watch_cmd, "run_tui", lambda args, url: calls.append(url) or 0,
                        raising=False)
    assert cli.main(["demo", "--llama-server", str(fake_binary), "--gguf", str(fake_gguf)]) == 0
    assert len(calls) == 1


def test_demo_command_reports_start_failure(fake_binary, fake_gguf, monkeypatch, capsys):
    import prefilltui.commands.sweep as sweep_cmd

    monkeypatch.setattr(sweep_cmd, "run_sweep", lambda a, u: 0, raising=False)
    monkeypatch.setenv("FAKE_LLAMA_MODE", "fail")
    rc = cli.main(["demo", "--headless", "--llama-server", str(fake_binary),
                   "--gguf", str(fake_gguf)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "\nprefilltui: llama-server exited during start-up (exit code 1)" in err
    assert "  | llama_model_load: error loading model: bad magic" in err
    assert "Traceback" not in err
    log = Path(re.search(r"; log (\S+):", err).group(1))
    assert log.is_file(), "the log of a failed start is kept"
    log.unlink()


def test_demo_prepare_only_and_bad_flag(fake_binary, fake_gguf, capsys, tmp_path):
    assert cli.main(["demo", "--prepare-only", "--llama-server", str(fake_binary),
                     "--gguf", str(fake_gguf)]) == 0
    assert str(fake_binary.resolve()) in capsys.readouterr().out
    assert cli.main(["demo", "--llama-server", str(tmp_path / "x")]) == 1
    assert capsys.readouterr().err.strip() == \
        f"prefilltui: --llama-server {tmp_path / 'x'}: not an executable file"


def test_demo_command_sigterm_stops_server(fake_binary, fake_gguf):
    """SIGTERM to a running `prefilltui demo` exits 143 and takes the server down."""
    code = textwrap.dedent("""
        import sys, time
        import prefilltui.commands.sweep as s
        def slow(args, url):
            print("SWEEPING", flush=True)
            time.sleep(60)
            return 0
        s.run_sweep = slow
        from prefilltui.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    child = subprocess.Popen([sys.executable, "-c", code, "demo", "--headless",
                              "--llama-server", str(fake_binary), "--gguf", str(fake_gguf)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "SWEEPING"
        server = [p for p in psutil.Process(child.pid).children()]
        assert len(server) == 1
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 143
        assert "stopped by signal 15" in child.stderr.read()
        assert gone(server[0].pid)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ctrl_c_while_waiting_for_health_leaves_no_server(fake_binary, fake_gguf):
    code = textwrap.dedent("""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from prefilltui.demo import LlamaServer
        LlamaServer(sys.argv[1], sys.argv[2], startup_timeout=120).start()
    """)
    env = dict(os.environ, FAKE_LLAMA_DELAY="1000")
    child = subprocess.Popen([sys.executable, "-c", code, str(fake_binary), str(fake_gguf)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        server = None
        deadline = time.monotonic() + 30
        while server is None and time.monotonic() < deadline:
            kids = psutil.Process(child.pid).children()
            server = kids[0] if kids else None
            time.sleep(0.05)
        assert server is not None
        time.sleep(0.5)  # the fake is up and answering 503
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == -signal.SIGINT
        assert gone(server.pid)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
