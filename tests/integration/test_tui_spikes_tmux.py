"""A spike people can see: `prefilltui demo` in tmux at 80x24 against the real
llama-server.  Probes run duty-cycled; the test pauses, lets the gauges settle,
presses b and reads the llama-server CPU history off the screen (colours included,
``capture-pane -e``): inside the burst's window (tinted columns) the history reaches
>= 80 %, in the idle gap before it it stays <= 30 %.

The spike is read from the server process's own CPU (the demo's second gauge row):
on a shared machine the whole-CPU figure may sit at 100 % whatever the demo does.
The capture is saved to $PREFILLTUI_TUI_CAPTURE_DIR when set.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.integration.test_tui_tmux import Tmux, _save, _wait_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

BARS = "▁▂▃▄▅▆▇█"
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def cells(line: str) -> list[tuple[str, str | None]]:
    """(character, background) per cell of one ``capture-pane -e`` line; background
    as the SGR parameters that set it (e.g. "48;2;71;60;41"), None = default."""
    out: list[tuple[str, str | None]] = []
    bg: str | None = None
    pos = 0
    for m in SGR.finditer(line + "\x1b[m"):
        out.extend((ch, bg) for ch in line[pos:m.start()])
        pos = m.end()
        params = m.group(1).split(";") if m.group(1) else ["0"]
        i = 0
        while i < len(params):
            p = params[i]
            if p in ("0", ""):
                bg = None
            elif p == "49":
                bg = None
            elif p == "48" and i + 1 < len(params):
                n = 5 if params[i + 1] == "2" else 3
                bg = ";".join(params[i:i + n])
                i += n - 1
            elif p == "38" and i + 1 < len(params):
                i += 4 if params[i + 1] == "2" else 2
            i += 1
    return out


def level(top: str, bottom: str) -> int:
    """Sixteenths of the scale drawn in one 2-row history column: the value lies in
    [level/16, (level+1)/16) (0 for an empty column)."""
    if top in BARS:
        return 8 + BARS.index(top) + 1
    return BARS.index(bottom) + 1 if bottom in BARS else 0


def read_history(screen_e: str, label: str) -> list[tuple[int, bool]]:
    """(level, inside a probe window) per column of the util history under ``label``."""
    lines = screen_e.splitlines()
    plain = [SGR.sub("", ln) for ln in lines]
    row = next(i for i, ln in enumerate(plain) if label in ln)
    width = plain[row].index("power")  # the util history spans the left half
    top, bottom = cells(lines[row + 1]), cells(lines[row + 2])
    cols = range(1, min(width - 1, len(bottom)))
    bgs = [bottom[c][1] for c in cols]
    base = max(set(bgs), key=bgs.count)  # most columns are idle: the plain background
    return [(level(top[c][0] if c < len(top) else " ", bottom[c][0]), bottom[c][1] != base)
            for c in cols]


def runs(marks: list[bool]) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    out, start = [], None
    for i, m in enumerate(marks + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


def test_burst_from_pause_spikes_the_server_history(tmp_path, llama_server_binary,
                                                    demo_gguf):
    tmux = Tmux(tmp_path)
    run = tmp_path / "run.jsonl"
    cmd = (f"{sys.executable} -m prefilltui demo --llama-server {llama_server_binary} "
           f"--gguf {demo_gguf} --threads 2 --lengths 16,64,256 --out {run}; sleep 60")
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(TERM="xterm-256color", COLORTERM="truecolor")
    try:
        subprocess.run(["tmux", "-S", tmux.sock, "new-session", "-d", "-s", tmux.name,
                        "-x", "80", "-y", "24", cmd], check=True, env=env, timeout=20)
        _wait_for(tmux, lambda s: re.search(r"\b[3-9] ok\b|\b\d\d+ ok\b", s)
                  and "llama-server (pid" in s, 300)
        tmux("send-keys", "-t", tmux.name, "space")
        _wait_for(tmux, lambda s: "paused" in s.splitlines()[0], 30)
        # the probe in flight finishes, then the gauges settle: >= 6 columns of idle
        n = len(run.read_text().splitlines())
        time.sleep(2.0)
        deadline = time.monotonic() + 120
        while len(run.read_text().splitlines()) != n and time.monotonic() < deadline:
            n = len(run.read_text().splitlines())
            time.sleep(2.0)
        time.sleep(10.0)
        tmux("send-keys", "-t", tmux.name, "b")
        _wait_for(tmux, lambda s: "▲ burst" in s.splitlines()[0], 10)  # at once, paused
        _wait_for(tmux, lambda s: re.search(r"paused burst: \d+ × 256 tokens",
                                            s.splitlines()[0]), 180)
        time.sleep(1.5)  # the covering sample reaches the history
        screen = tmux("capture-pane", "-p", "-e", "-t", tmux.name)
        plain = SGR.sub("", screen)
        _save("tui-burst-80x24", plain)
        hist = read_history(screen, "llama-server (pid")
        windows = runs([m for _, m in hist])
        assert len(windows) >= 2, plain
        p1, (b0, b1) = windows[-2][1], windows[-1]
        burst = [lv for lv, _ in hist[b0:b1 + 1]]  # + the column of the covering sample
        gap = [lv for lv, _ in hist[p1 + 1:b0]]  # the tail of the last probe excluded
        assert len(gap) >= 3, plain
        assert max(burst) >= 13, (burst, plain)  # >= 13/16 of the scale: >= 81 %
        assert max(gap) <= 3, (gap, plain)  # < 4/16: below 25 %
        tmux("send-keys", "-t", tmux.name, "q")
    finally:
        tmux.kill()
