"""A spike people can see: `prefilltui demo` in tmux at 80x24 against the real
llama-server.  Probes run duty-cycled; the test pauses, lets the gauges settle,
presses b and reads the llama-server CPU history off the screen (colours included,
``capture-pane -e``): inside the burst's window (tinted columns) the history reaches
>= 80 %, in the idle gap before it it stays <= 30 %.

The spike is read from the server process's own CPU (the demo's second gauge row):
on a shared machine the whole-CPU figure may sit at 100 % whatever the demo does.
When the operating system gives llama-server less than 80 % of the CPU during the
burst (other work on the machine; the run file's attribution says so), the >= 80 %
check is skipped with the measured figures; the idle gap and the agreement between
the screen and the run file are still checked.
The capture is saved to $PREFILLTUI_TUI_CAPTURE_DIR when set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_tui_tmux import Tmux, _save, _wait_for



@pytest.fixture(autouse=True)
def _tmux_component():
    from tests.components import require

    require("tmux")

BARS = "▁▂▃▄▅▆▇█"
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def screen_cells(screen_e: str) -> list[list[tuple[str, str | None]]]:
    """(character, background) per cell of each line of a ``capture-pane -e``
    screen; background as the SGR parameters that set it (e.g. "48;2;71;60;41"), None
    = default.  tmux writes only changes, so the state carries over line ends."""
    rows: list[list[tuple[str, str | None]]] = []
    bg: str | None = None
    for line in screen_e.split("\n"):
        out: list[tuple[str, str | None]] = []
        pos = 0
        for m in list(SGR.finditer(line)) + [None]:
            end = m.start() if m is not None else len(line)
            out.extend((ch, bg) for ch in line[pos:end])
            if m is None:
                break
            pos = m.end()
            params = m.group(1).split(";") if m.group(1) else ["0"]
            i = 0
            while i < len(params):
                p = params[i]
                if p in ("0", "", "49"):
                    bg = None
                elif p == "48" and i + 1 < len(params):
                    n = 5 if params[i + 1] == "2" else 3
                    bg = ";".join(params[i:i + n])
                    i += n - 1
                elif p == "38" and i + 1 < len(params):
                    i += 4 if params[i + 1] == "2" else 2
                i += 1
        rows.append(out)
    return rows


def level(top: str, bottom: str) -> int:
    """Sixteenths of the scale drawn in one 2-row history column: the value lies in
    [level/16, (level+1)/16) (0 for an empty column)."""
    if top in BARS:
        return 8 + BARS.index(top) + 1
    return BARS.index(bottom) + 1 if bottom in BARS else 0


def read_history(screen_e: str, label: str) -> list[tuple[int, bool]]:
    """(level, inside a probe window) per column of the util history under ``label``."""
    grid = screen_cells(screen_e)
    plain = ["".join(ch for ch, _ in r) for r in grid]
    row = next(i for i, ln in enumerate(plain) if label in ln)
    width = plain[row].index("power")  # the util history spans the left half
    top, bottom = grid[row + 1], grid[row + 2]
    cols = range(1, min(width - 1, len(bottom)))
    # the plain background is the label row's, above the history (never tinted): not
    # the history's most common one, which is the tint once probes slowed by a loaded
    # machine fill more than half of the 60 s
    label_bgs = [grid[row][c][1] for c in cols if c < len(grid[row])]
    base = max(set(label_bgs), key=label_bgs.count)
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


#: Untinted history columns after the last probe window before the burst is pressed
#: (one column is span/width of the ~60 s history, ~1.6 s at 80 columns: ~10 s idle).
IDLE_COLUMNS = 6


def _colour_screen_until(tmux: Tmux, pred, timeout: float, what: str) -> str:
    """The ``capture-pane -e`` screen once ``pred(history)`` holds for the llama-server
    row's history (``read_history``): a condition on what is drawn, never a sleep that
    a loaded machine's slower redraws outlast."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-e", "-t", tmux.name)
        try:
            if pred(read_history(screen, "llama-server (pid")):
                return screen
        except (StopIteration, ValueError):  # the row not drawn (yet)
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last capture:\n" + SGR.sub("", screen))


def _after_last_window(hist: list[tuple[int, bool]]) -> int:
    """History columns drawn after the last probe window (the newest column is now)."""
    windows = runs([m for _, m in hist])
    return len(hist) - windows[-1][1] if windows else len(hist)


def test_burst_from_pause_spikes_the_server_history(tmp_path, llama_server_binary,
                                                    demo_gguf):
    """Each step waits for what it needs on the screen or in the run file (the probes
    counted, paused, the run file still, ``IDLE_COLUMNS`` idle columns drawn, the
    burst's window followed by its covering sample), so a loaded machine's slow
    redraws make it slower, not wrong."""
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
        _colour_screen_until(tmux, lambda h: _after_last_window(h) >= IDLE_COLUMNS, 120,
                             f"{IDLE_COLUMNS} idle history columns")
        tmux("send-keys", "-t", tmux.name, "b")
        _wait_for(tmux, lambda s: "▲ burst" in s.splitlines()[0], 60)  # at once, paused
        _wait_for(tmux, lambda s: re.search(r"paused burst: \d+ × 256 tokens",
                                            s.splitlines()[0]), 180)
        # the covering sample (the first after the burst) is in the column after its
        # window: wait until two columns follow the window
        screen = _colour_screen_until(tmux, lambda h: _after_last_window(h) >= 2, 60,
                                      "the burst's covering sample")
        plain = SGR.sub("", screen)
        _save("tui-burst-80x24", plain)
        out = os.environ.get("PREFILLTUI_TUI_CAPTURE_DIR")
        if out:  # with colours, for a look at the tinted windows (less -R)
            (Path(out) / "tui-burst-80x24.ansi").write_text(screen)
        hist = read_history(screen, "llama-server (pid")
        windows = runs([m for _, m in hist])
        assert len(windows) >= 2, plain
        p1, (b0, b1) = windows[-2][1], windows[-1]
        burst = [lv for lv, _ in hist[b0:b1 + 1]]  # + the column of the covering sample
        gap = [lv for lv, _ in hist[p1 + 1:b0]]  # the tail of the last probe excluded
        assert len(gap) >= 3, plain
        assert max(gap) <= 3, (gap, plain)  # < 4/16: below 25 %
        # the screen shows what the run file attributes to the burst (the server's CPU
        # over the burst's window, %): a column is a 1.6 s mean, and the burst (>= 2
        # columns long, model/pacing.burst_min_s) holds at least one whole column, so
        # the highest column reaches the burst's own mean: its probes' means weighted
        # by their durations (the busiest probe's mean alone is above the burst's
        # whenever the CPU the machine gives the server varies within the burst)
        rows = [json.loads(x) for x in run.read_text().splitlines()]
        parts = [(r["util_mean_pct"], r.get("total_s") or r["ttft_s"]) for r in rows
                 if r.get("burst") and r.get("util_mean_pct") is not None]
        assert parts, rows
        mean = sum(m * d for m, d in parts) / sum(d for _, d in parts)
        assert max(burst) >= mean * 16 / 100 - 1.5, (burst, mean, plain)
        tmux("send-keys", "-t", tmux.name, "q")
        if max(burst) < 13 and mean < 80:  # the OS gave the server less than 80 %
            pytest.skip(f"llama-server got {mean:.0f} % of the CPU during the burst "
                        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): "
                        "the machine is busy with other work; spike and idle gap read fine")
        assert max(burst) >= 13, (burst, plain)  # >= 13/16 of the scale: >= 81 %
    finally:
        tmux.kill()
