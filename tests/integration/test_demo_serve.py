"""``prefilltui demo --serve`` against the built llama-server: the CLI
prints the URL and the commands to try, the target answers while it runs (a
``prefilltui sweep URL`` in a second process gets a fit), and Ctrl-C or SIGTERM stops
it cleanly: exit 0, and no llama-server left behind."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from tests.procwait import gone

pytestmark = [pytest.mark.component, pytest.mark.timeout(300)]


def _start(llama_server_binary, demo_gguf, tmp_path) -> tuple[subprocess.Popen, list[str]]:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    child = subprocess.Popen(
        [sys.executable, "-m", "prefilltui", "demo", "--serve", "--llama-server",
         str(llama_server_binary), "--gguf", str(demo_gguf), "--threads", "1", "--ctx", "1024"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env)
    lines: list[str] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith("Ctrl-C stops it"):
            return child, lines
    child.kill()
    pytest.fail(f"no serve banner: {lines} {child.stderr.read()}")


def _command(lines: list[str], url: str) -> str:
    """How the banner says to run prefilltui: "prefilltui" when it is on PATH, else the
    script's path (the first command to try is "<command> URL")."""
    first = lines[lines.index("try, in another terminal:") + 1]
    assert first.startswith("  ") and first.endswith(f" {url}"), first
    return first[2:-len(url) - 1]


def _url(lines: list[str]) -> str:
    first = lines[0]
    assert first.startswith("prefilltui: demo target (llama.cpp, ") and " serving at " in first
    return first.rsplit(" ", 1)[1]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_serve_keeps_the_target_running_until_stopped(llama_server_binary, demo_gguf,
                                                      tmp_path, sig):
    child, lines = _start(llama_server_binary, demo_gguf, tmp_path)
    server = None
    try:
        url = _url(lines)
        cmd = _command(lines, url)
        assert f"  {cmd} sweep {url}" in lines and f"  {cmd} cache-check {url}" in lines
        server = next(p for p in psutil.Process(child.pid).children(recursive=True)
                      if "llama-server" in " ".join(p.cmdline()))
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            assert r.status == 200
        if sig == signal.SIGINT:  # one command of the banner, as printed, from a second
            out = tmp_path / "run.jsonl"  # process
            sweep = subprocess.run(
                [*shlex.split(cmd), "sweep", url, "--lengths", "16,64",
                 "--warmup", "0", "--no-telemetry", "--out", str(out), "--format", "json"],
                capture_output=True, text=True, timeout=120)
            assert sweep.returncode == 0, sweep.stderr
            assert child.poll() is None  # still serving after the sweep
        child.send_signal(sig)
        rc = child.wait(timeout=60)
        rest = child.stdout.read()
        assert rc == 0, child.stderr.read()
        assert "prefilltui: stopping llama-server" in rest
        assert gone(server.pid), f"llama-server {server.pid} outlived --serve"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
