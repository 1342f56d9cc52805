"""No orphan llama-server, ever: with the real binary, a Python process that runs
LlamaServer is ended by a normal exit, an exception, SIGINT, SIGTERM and SIGKILL,
and each time the llama-server process must be gone afterwards.  (SIGKILL leaves
no Python code to run: PR_SET_PDEATHSIG has the kernel stop the server.)
"""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest
from tests.procwait import gone

CHILD = r'''
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
from prefilltui.demo.server import LlamaServer, exit_on_signals
binary, gguf, mode, log = sys.argv[1:5]
with exit_on_signals():
    with LlamaServer(binary, gguf, threads=1, ctx=512, startup_timeout=120,
                     log_path=log) as srv:
        print(srv.pid, flush=True)
        sys.stdin.readline()  # the parent has seen the server running
        if mode == "exception":
            raise RuntimeError("boom")
        if mode == "normal":
            sys.exit(0)
        time.sleep(300)
'''

EXPECTED_RC = {"normal": 0, "exception": 1, "SIGINT": -signal.SIGINT, "SIGTERM": 143,
               "SIGKILL": -signal.SIGKILL}


@pytest.mark.parametrize("mode", list(EXPECTED_RC))
def test_real_llama_server_never_orphaned(llama_server_binary, demo_gguf, mode, tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(llama_server_binary), str(demo_gguf), mode,
         str(tmp_path / "server.log")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server = None
    try:
        line = child.stdout.readline().strip()
        assert line.isdigit(), f"no server started: {line!r} {child.stderr.read()}"
        server = psutil.Process(int(line))
        assert "llama-server" in server.name() or "llama-server" in " ".join(server.cmdline())
        assert server.ppid() == child.pid
        sig = getattr(signal, mode, None) if mode.startswith("SIG") else None
        if sig is not None:
            child.send_signal(sig)
        else:
            child.stdin.write("go\n")
            child.stdin.flush()
        assert child.wait(timeout=60) == EXPECTED_RC[mode], child.stderr.read()
        assert gone(server.pid), f"llama-server {server.pid} outlived its parent ({mode})"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if server is not None and server.is_running() and \
                server.status() != psutil.STATUS_ZOMBIE:
            server.kill()
