"""The TUI as a person runs it: `prefilltui demo` in tmux at 80x24 (then 160x48),
against the real llama-server + SmolLM2 target.  Waits for probes, reads the screen
with capture-pane, checks the fit line, the throughput figure and the CPU gauge,
quits with q and checks that no llama-server is left behind.

The captures are written to $PREFILLTUI_TUI_CAPTURE_DIR when set (for the closing
note) and printed (pytest -s shows them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest



@pytest.fixture(autouse=True)
def _tmux_component():
    from tests.components import require

    require("tmux")

BRAILLE = re.compile("[\u2801-\u28ff]")
THROUGHPUT = re.compile(r"prefill\s+[\d.]+k?\s+tok/s")


class Tmux:
    """A private tmux server (its own socket), so the session gets our environment."""

    def __init__(self, tmp: Path) -> None:
        self.sock = str(tmp / "tmux.sock")
        self.name = "prefilltui-test"

    def __call__(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True,
                             text=True, timeout=20)
        if check and out.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def capture(self) -> str:
        return self("capture-pane", "-p", "-t", self.name)

    def kill(self) -> None:
        self("kill-server", check=False)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _wait_for(tmux: Tmux, pred, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux.capture()
        if pred(screen):
            return screen
        time.sleep(1.0)
    raise AssertionError("timed out waiting for the screen; last capture:\n" + screen)


def _save(name: str, screen: str) -> None:
    print(f"\n----- {name} -----\n{screen}")
    out = os.environ.get("PREFILLTUI_TUI_CAPTURE_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.txt").write_text(screen)


def test_demo_in_tmux(tmp_path, llama_server_binary, demo_gguf):
    tmux = Tmux(tmp_path)
    run = tmp_path / "run.jsonl"
    done = tmp_path / "exit-code"
    cmd = (f"{sys.executable} -m prefilltui demo --llama-server {llama_server_binary} "
           f"--gguf {demo_gguf} --threads 2 --min-tokens 16 --max-tokens 512 --points 5 "
           f"--out {run}; echo $? > {done}; sleep 60")
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    try:
        subprocess.run(["tmux", "-S", tmux.sock, "new-session", "-d", "-s", tmux.name,
                        "-x", "80", "-y", "24", cmd], check=True, env=env, timeout=20)
        pane_pid = int(tmux("display-message", "-p", "-t", tmux.name, "#{pane_pid}").strip())

        # the fit needs three usable probes at different lengths (after 1 warm-up)
        screen = _wait_for(tmux, lambda s: THROUGHPUT.search(s) and "CPU util" in s, 240)
        servers = [p for p in _descendants(pane_pid) if "llama-server" in p.name()]
        assert servers, "no llama-server under the demo process"
        _save("tui-80x24", screen)
        lines = screen.splitlines()
        assert len(lines) <= 24 and max(len(l) for l in lines) <= 80
        assert "TTFT ms" in screen and "prompt tokens" in screen  # axes with units
        assert BRAILLE.search(screen), "no fit line drawn in the plot"
        assert "─fit" in screen  # legend
        assert "CPU util" in screen and re.search(r"CPU util\s+\d+ %", screen)
        assert any(w in screen.splitlines()[0] for w in ("probing", "idle", "paused"))

        # pause: the status line says so
        tmux("send-keys", "-t", tmux.name, "space")
        _wait_for(tmux, lambda s: "paused" in s.splitlines()[0], 30)
        tmux("send-keys", "-t", tmux.name, "space")

        # the same run at 160x48
        tmux("resize-window", "-t", tmux.name, "-x", "160", "-y", "48")
        wide = _wait_for(tmux, lambda s: max(map(len, s.splitlines())) > 100
                         and THROUGHPUT.search(s), 30)
        _save("tui-160x48", wide)
        assert "CPU util" in wide and BRAILLE.search(wide)

        tmux("send-keys", "-t", tmux.name, "q")
        deadline = time.monotonic() + 30
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert done.exists(), "prefilltui did not exit after q:\n" + tmux.capture()
        assert done.read_text().strip() == "0"
        for p in servers:
            try:
                p.wait(timeout=10)
            except psutil.TimeoutExpired:
                pytest.fail(f"llama-server pid {p.pid} still running after quit")
            except psutil.NoSuchProcess:
                pass
        assert not [p for p in _descendants(pane_pid) if "llama-server" in p.name()]
        # every probe is on disk
        assert run.exists() and len(run.read_text().splitlines()) >= 4
    finally:
        tmux.kill()
