"""The fleet overview as a person runs it: `prefilltui URL URL URL` in tmux at 100x30
against the two real demo targets (llama.cpp's llama-server and vLLM, both with
SmolLM2-135M on the CPU) and one dead URL; the screen is read back with capture-pane,
then one target is opened (Enter) and closed (Esc).

vLLM is the session's shared demo server (``vllm_server``, tests/integration/conftest.py:
installed once into the cache, skipped with its install line where it cannot be),
stopped after the session's vLLM tests (it holds a core).  The captures are
written to $PREFILLTUI_TUI_CAPTURE_DIR when set (docs/fleet.md shows them).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest

from tests.integration.test_tui_tmux import Tmux, _save, _wait_for

pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def _tmux_component():
    from tests.components import require

    require("tmux")  # a missing tmux skips with its install line (fails in CI)

ROW = re.compile(r"^(\S+)\s+(● ok|▲ warn|✖ down|◌ conn|… wait)\s+(\S+)")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def vllm_url(vllm_server) -> str:
    """The session's shared vLLM demo server (tests/integration/conftest.py)."""
    return vllm_server.base_url


def _rows(screen: str) -> dict[str, tuple[str, str]]:
    out = {}
    for line in screen.splitlines()[2:]:
        m = ROW.match(line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def test_fleet_of_llama_cpp_vllm_and_a_dead_url(tmp_path, llama_server, vllm_url):
    tmux = Tmux(tmp_path)
    dead = f"http://127.0.0.1:{_free_port()}"
    llama = llama_server.base_url
    done = tmp_path / "exit-code"
    cmd = (f"{sys.executable} -m prefilltui {llama} {vllm_url} {dead} --interval 3 "
           f"--lengths 16,64,256,1024 --run-dir {tmp_path / 'runs'}; echo $? > {done}; "
           "sleep 60")
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    short = {u: u.removeprefix("http://") for u in (llama, vllm_url, dead)}
    try:
        subprocess.run(["tmux", "-S", tmux.sock, "new-session", "-d", "-s", tmux.name,
                        "-x", "100", "-y", "30", cmd], check=True, env=env, timeout=20)

        def ready(s: str) -> bool:
            rows = {k.removeprefix("http://"): v for k, v in _rows(s).items()}
            live = [rows.get(short[u]) for u in (llama, vllm_url)]
            return (all(r is not None and r[0] == "● ok" and r[1] != "N/A" for r in live)
                    and rows.get(short[dead], ("",))[0] == "✖ down")

        screen = _wait_for(tmux, ready, 420)
        _save("fleet-100x30", screen)
        lines = screen.splitlines()
        assert len(lines) <= 30 and max(map(len, lines)) <= 100
        assert "3 targets" in lines[0] and "load ≤" in lines[0]
        assert lines[2].startswith(dead)  # the dead one first
        assert "PrefillTargetDown" in screen  # the pane says why, for the row under the cursor
        assert "GPU: this machine's" in screen  # local targets: this machine's sampler

        # open the vLLM target: today's dashboard for it, then back
        order = [k.removeprefix("http://") for k in _rows(screen)]
        for _ in range(order.index(short[vllm_url])):
            tmux("send-keys", "-t", tmux.name, "Down")
        time.sleep(1)
        tmux("send-keys", "-t", tmux.name, "Enter")
        drill = _wait_for(tmux, lambda s: "TTFT vs prompt tokens" in s
                          and short[vllm_url] in s.splitlines()[0]
                          and re.search(r"prefill\s+[\d.]+k?\s+tok/s", s), 60)
        _save("fleet-drill-in-100x30", drill)
        assert "esc Back" in drill and f"{vllm_url} · TTFT vs prompt tokens" in drill
        tmux("send-keys", "-t", tmux.name, "Escape")
        _wait_for(tmux, lambda s: "3 targets" in s.splitlines()[0], 30)

        tmux("send-keys", "-t", tmux.name, "q")
        deadline = time.monotonic() + 30
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert done.exists() and done.read_text().strip() == "0", tmux.capture()
        runs = sorted((tmp_path / "runs").glob("*.jsonl"))
        assert len(runs) >= 2 and all(r.stat().st_size > 0 for r in runs[:2])
    finally:
        tmux.kill()
