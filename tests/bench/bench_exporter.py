"""Long run of ``prefilltui exporter``: CPU share, flat memory, clean SIGTERM.

    python -m tests.bench.bench_exporter [--seconds S] [--interval S] [--json FILE]

Starts the fast server (tests/bench/fastserver.py: 5 ms + 20 us x tokens) and the
exporter as a real process (``python -m prefilltui exporter``) probing it every
``--interval`` seconds (default 1: 15x the default rate) plus a second target that
refuses connections (a dead server must not disturb the live one), with a small
run-file size cap so rotation happens during the run.  Every 15 s it scrapes
``/metrics`` as Prometheus would and samples the exporter's RSS and CPU time.
At the end: SIGTERM, then checks the exit code and time, and that the run files
account for every probe the exporter counted.

Reports: CPU share (CPU seconds / wall seconds after a 60 s warm-up), RSS at
warm-up end and at the end (and the max), the slowest scrape, probes ok/failed,
rotations, and the shutdown time.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from tests.bench.fastserver import FastServerProcess

WARMUP_S = 60.0
SCRAPE_EVERY_S = 15.0


def _scrape(url: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read().decode()
    return body, time.perf_counter() - t0


def _value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run(seconds: float, interval: float, tmp: str) -> dict:
    srv = FastServerProcess(a=0.005, b=20e-6).start()
    run_dir = Path(tmp) / "runs"
    cmd = [sys.executable, "-m", "prefilltui", "exporter", srv.base_url, "http://127.0.0.1:9",
           "--listen", "127.0.0.1:0", "--interval", str(interval), "--run-dir", str(run_dir),
           "--run-file-max-mb", "0.25", "--run-file-keep", "2", "--seed", "1",
           "--lengths", "64,128,256,512,1024,2048"]
    err_path = Path(tmp) / "exporter.stderr"
    err = open(err_path, "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                            cwd=str(Path(__file__).resolve().parents[2]))
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            m = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", err_path.read_text())
            port = int(m.group(1)) if m else None
            time.sleep(0.2)
        if port is None:
            raise RuntimeError("exporter did not start: " + err_path.read_text()[-500:])
        url = f"http://127.0.0.1:{port}/metrics"
        ps = psutil.Process(proc.pid)
        t_start = time.monotonic()
        samples = []
        warm = None
        slowest = 0.0
        text = ""
        while time.monotonic() - t_start < seconds:
            time.sleep(SCRAPE_EVERY_S)
            text, dt = _scrape(url)
            slowest = max(slowest, dt)
            ct = ps.cpu_times()
            s = {"t": time.monotonic() - t_start, "rss": ps.memory_info().rss,
                 "cpu": ct.user + ct.system, "scrape_s": dt,
                 "ok": _value(text, "prefilltui_probes_total", outcome="ok")}
            samples.append(s)
            if warm is None and s["t"] >= WARMUP_S:
                warm = s
        end = samples[-1]
        live = srv.base_url
        counted_ok = _value(text, "prefilltui_probes_total", outcome="ok", target=live)
        counted_failed = _value(text, "prefilltui_probes_total", outcome="failed", target=live)
        dead_failed = _value(text, "prefilltui_probes_total", outcome="failed",
                             target="http://127.0.0.1:9")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        stop_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()
        srv.stop()
    files = sorted(run_dir.glob("*.jsonl*"))
    lines = {f.name: sum(1 for _ in open(f)) for f in files}
    live_files = [f for f in files if f.name.startswith("127.0.0.1_" + str(srv.port))]
    live_lines = sum(lines[f.name] for f in live_files)
    w = warm or samples[0]
    span = end["t"] - w["t"]
    return {
        "seconds": round(end["t"], 1), "interval_s": interval,
        "cpu_share_pct": round(100 * (end["cpu"] - w["cpu"]) / span, 2) if span > 0 else None,
        "rss_mib_after_warmup": round(w["rss"] / 2**20, 1),
        "rss_mib_end": round(end["rss"] / 2**20, 1),
        "rss_mib_max": round(max(s["rss"] for s in samples) / 2**20, 1),
        "probes_ok": counted_ok, "probes_failed": counted_failed,
        "probes_per_s": round(counted_ok / end["t"], 3),
        "dead_target_failed": dead_failed,
        "slowest_scrape_ms": round(slowest * 1e3, 1),
        "sigterm_exit_code": rc, "sigterm_stop_s": round(stop_s, 2),
        "run_files": lines,
        # the last probe may complete between the final scrape and SIGTERM
        "run_file_lines_live": live_lines,
        "rotated": any(f.name.endswith((".1", ".2")) for f in live_files),
        "samples": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()}
                    for s in samples],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.bench_exporter")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--json", metavar="FILE")
    opts = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        d = run(opts.seconds, opts.interval, tmp)
    summary = {k: v for k, v in d.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    if opts.json:
        Path(opts.json).write_text(json.dumps(d, indent=2))
    ok = d["sigterm_exit_code"] == 0 and d["rss_mib_end"] <= d["rss_mib_after_warmup"] * 1.2 + 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
