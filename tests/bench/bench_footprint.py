"""Footprint: RSS growth over 10,000 probes of the live app and of the headless sweep,
both against the instant fast server.  Also the pty harness the TUI benchmark uses.

    python -m tests.bench.bench_footprint [--quick] [--probes N]

Each program runs as the user runs it (``python -m prefilltui watch URL`` in a pseudo
terminal of 120x40 with TERM=xterm-256color and COLORTERM=truecolor, or ``python -m
prefilltui sweep URL``) with ``--pause 0 --no-telemetry`` (the sampler's wait for the
sample after each probe caps a sweep near 10 probes/s); the run file's line count
tells how many probes are done.  RSS (psutil) is read after ``BASELINE_PROBES`` probes
(buffers, caches and the plot warmed up) and again ``probes`` later; the difference is
the growth.  A run that does not reach the count in ``max_s`` reports the growth per
probe scaled to ``probes`` and says so.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

import psutil

from tests.bench import Row
from tests.bench.fastserver import FastServerProcess
from tests.procwait import stop

SECTION = "5 footprint"
#: Probes before the baseline RSS reading (app: fewer, it sustains ~10x fewer probes/s).
BASELINE_PROBES = {"app": 150, "sweep": 500}
LENGTHS = "64,128,256,512"
REPO = Path(__file__).resolve().parents[2]


def bench_env(tmp: str) -> dict[str, str]:
    """Environment for a child prefilltui: a colour terminal, user dirs in ``tmp``."""
    env = dict(os.environ)
    env.update(TERM="xterm-256color", COLORTERM="truecolor", XDG_DATA_HOME=f"{tmp}/data",
               XDG_CONFIG_HOME=f"{tmp}/config", XDG_STATE_HOME=f"{tmp}/state")
    env.pop("NO_COLOR", None)
    env.pop("TEXTUAL", None)
    return env


def lines(path: str | Path) -> int:
    """Probe lines in a run file so far (session and calibration lines not counted)."""
    try:
        with open(path, "rb") as f:
            return sum(1 for x in f if not x.startswith(b'{"record":'))
    except OSError:
        return 0


def wait_lines(path: str | Path, n: int, timeout: float, proc: subprocess.Popen) -> int:
    """Poll the run file until it has ``n`` lines, the child exits or time runs out."""
    deadline = time.monotonic() + timeout
    k = lines(path)
    while k < n and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.25)
        k = lines(path)
    return k


class PtyApp:
    """A child process on a pseudo terminal of ``cols`` x ``rows``; every byte it writes
    is counted (``bytes_out``, with (perf_counter, total) marks via ``mark()``)."""

    def __init__(self, argv: list[str], *, cols: int = 120, rows: int = 40,
                 env: dict[str, str] | None = None) -> None:
        self.argv, self.cols, self.rows, self.env = argv, cols, rows, env
        self.bytes_out = 0
        self.tail = b""
        self.t_start: float | None = None  # perf_counter() at spawn
        #: (marker bytes, perf_counter() when first written or None), see ``watch_for``
        self._marker: tuple[bytes, float | None] | None = None
        self.proc: subprocess.Popen | None = None
        self._master = -1
        self._thread: threading.Thread | None = None

    def start(self) -> "PtyApp":
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", self.rows, self.cols, 0, 0))
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, stdin=slave, stdout=slave, stderr=slave,
                                     env=self.env, cwd=str(REPO), start_new_session=True,
                                     close_fds=True)
        os.close(slave)
        self._master = master
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:
                return
            if not data:
                return
            self.bytes_out += len(data)
            if self._marker is not None and self._marker[1] is None:
                mark = self._marker[0]
                if mark in self.tail[-len(mark):] + data:
                    self._marker = (mark, time.perf_counter())
            self.tail = (self.tail + data)[-4096:]

    def watch_for(self, marker: bytes) -> None:
        """Note when ``marker`` is first written (call before ``start``)."""
        self._marker = (marker, None)

    def seen_at(self, timeout: float) -> float | None:
        """Seconds from spawn to the marker's first write (None: not within ``timeout``
        or the child exited)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._marker is not None and self._marker[1] is not None:
                return self._marker[1] - (self.t_start or 0.0)
            if self.proc is not None and self.proc.poll() is not None:
                return None
            time.sleep(0.01)
        return None

    def send(self, data: bytes) -> None:
        try:
            os.write(self._master, data)
        except OSError:
            pass

    def quit(self, timeout: float = 15.0) -> int | None:
        """Press q; SIGTERM then SIGKILL if the app does not exit."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            self.send(b"q")
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self._thread is not None:
            self._thread.join(2)
        try:
            os.close(self._master)
        except OSError:
            pass
        return p.returncode


def prefilltui_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "prefilltui", *args]


def rss_growth(mode: str, url: str, probes: int, max_s: float, tmp: str) -> dict:
    """RSS after BASELINE_PROBES and after BASELINE_PROBES + probes (MiB)."""
    out = f"{tmp}/rss-{mode}.jsonl"
    # --no-telemetry: the sampler's after_probe waits for the next sample (up to 3
    # periods), which caps a sweep near 10 probes/s; this figure is about the probes.
    common = ["--lengths", LENGTHS, "--pause", "0", "--seed", "1", "--out", out,
              "--no-telemetry"]
    env = bench_env(tmp)
    app = None
    if mode == "app":
        app = PtyApp(prefilltui_cmd("watch", url, *common), env=env).start()
        proc = app.proc
    else:
        proc = subprocess.Popen(prefilltui_cmd("sweep", url, *common, "--repeats", "100000"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                cwd=str(REPO), start_new_session=True)
    assert proc is not None
    try:
        ps = psutil.Process(proc.pid)
        t0 = time.monotonic()
        base = BASELINE_PROBES[mode]
        n0 = wait_lines(out, base, 90, proc)
        if n0 < base:
            tail = app.tail[-300:] if app else b""
            raise RuntimeError(f"{mode}: only {n0} probes in 90 s (terminal tail {tail!r})")
        rss0 = ps.memory_info().rss
        n0 = lines(out)
        t0 = time.monotonic()
        n1 = wait_lines(out, n0 + probes, max_s, proc)
        rss1 = ps.memory_info().rss
        n1 = lines(out)
        wall = time.monotonic() - t0
    finally:
        if app is not None:
            app.quit()
        else:
            stop(proc, 10, signal.SIGINT)
    done = n1 - n0
    growth = (rss1 - rss0) / 2**20
    scaled = growth * probes / done if done else float("nan")
    return {"mode": mode, "probes_measured": done, "rss0_mib": rss0 / 2**20,
            "rss1_mib": rss1 / 2**20, "growth_mib": growth, "growth_mib_per_target": scaled,
            "extrapolated": done < probes, "probes_per_s": (n1 - n0) / wall if wall else None}


def run(opts) -> list[Row]:
    probes = getattr(opts, "rss_probes", None) or (2000 if opts.quick else 10_000)
    max_s = {"app": 40 if opts.quick else 100, "sweep": 40 if opts.quick else 150}
    rows = []
    with tempfile.TemporaryDirectory(prefix="prefilltui-bench-") as tmp, \
            FastServerProcess() as srv:
        for mode, label in (("app", "TUI app"), ("sweep", "headless sweep")):
            try:
                d = rss_growth(mode, srv.base_url, probes, max_s[mode], tmp)
            except Exception as e:  # one failing mode must not hide the other
                rows.append(Row(SECTION, f"RSS growth over {probes:,} probes, {label}",
                                f"error: {str(e)[:70]}", "< 5 MB", False, {"error": str(e)}))
                continue
            g = d["growth_mib_per_target"]
            note = (f" (from {d['probes_measured']:,}, scaled)" if d["extrapolated"] else "")
            rows.append(Row(SECTION, f"RSS growth over {probes:,} probes, {label}",
                            f"{g:.1f} MiB{note}", "< 5 MB", g * 2**20 < 5e6, d))
            rows.append(Row(SECTION, f"probes/s sustained, {label} (instant server)",
                            f"{d['probes_per_s']:.0f}", "", None))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--probes", dest="rss_probes", type=int, default=None)
    opts = ap.parse_args(argv)
    from tests.bench import format_table

    rows = run(opts)
    print(format_table(rows))
    for r in rows:
        print(r.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
