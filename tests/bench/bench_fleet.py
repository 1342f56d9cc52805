"""The fleet overview's own cost: CPU and RSS with 8 and 100 targets.

    python -m tests.bench.bench_fleet [--quick] [--targets 8,100] [--measure-s S]

Targets: ``targets`` entries of a TOML file (the exporter's format), each its own name,
spread over two fast servers (tests/bench/fastserver.py in their own processes, a
simulated prefill of 5 ms + 20 us/token, slept: the servers cost no CPU worth counting).
The app: ``python -m prefilltui --config FILE`` on a 120x40 pseudo terminal, the
defaults of the overview (each target's probe starts >= 4 s apart, stretched so the
whole fleet stays under 2 probe starts per second; telemetry on: the targets are local,
so this machine's sampler at 10 Hz, shared), lengths 16..2048 (8 points).
Figures, after ``warm_s`` of start-up (every target staggered in and probing):
  * CPU share of the app process (psutil user+system seconds / wall seconds over
    ``measure_s``), as % of one core; the probes per second it made in that time;
  * RSS of the app process at the end (MiB);
  * bytes the app wrote to the terminal per second.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.bench import Row
from tests.bench.bench_footprint import PtyApp, bench_env, prefilltui_cmd
from tests.bench.fastserver import FastServerProcess

SECTION = "5 footprint"
LENGTHS = "16,32,64,128,256,512,1024,2048"


def _toml(path: Path, n: int, urls: list[str]) -> None:
    lines = ["[defaults]", f"lengths = [{LENGTHS}]", ""]
    for i in range(n):
        lines += ["[[target]]", f'url = "{urls[i % len(urls)]}"', f'name = "t{i:03d}"', ""]
    path.write_text("\n".join(lines))


def _cpu(ps: psutil.Process) -> float:
    t = ps.cpu_times()
    return t.user + t.system


def _probes(run_dir: Path) -> int:
    n = 0
    for f in run_dir.glob("*.jsonl"):
        with open(f, "rb") as fh:
            n += sum(1 for line in fh if b'"seq"' in line)
    return n


def measure(n: int, urls: list[str], tmp: str, warm_s: float, measure_s: float) -> dict:
    cfg = Path(tmp) / f"fleet-{n}.toml"
    runs = Path(tmp) / f"runs-{n}"
    _toml(cfg, n, urls)
    app = PtyApp(prefilltui_cmd("--config", str(cfg), "--run-dir", str(runs)),
                 cols=120, rows=40, env=bench_env(tmp)).start()
    assert app.proc is not None
    try:
        ps = psutil.Process(app.proc.pid)
        time.sleep(warm_s)
        if app.proc.poll() is not None:
            raise RuntimeError(f"the app exited: {app.tail[-300:]!r}")
        c0, w0, b0, p0 = _cpu(ps), time.perf_counter(), app.bytes_out, _probes(runs)
        time.sleep(measure_s)
        c1, w1, b1, p1 = _cpu(ps), time.perf_counter(), app.bytes_out, _probes(runs)
        rss = ps.memory_info().rss
        threads = ps.num_threads()
    finally:
        app.quit()
    wall = w1 - w0
    return {"targets": n, "cpu_share": (c1 - c0) / wall, "rss_mib": rss / 2**20,
            "term_bytes_per_s": (b1 - b0) / wall, "probes_per_s": (p1 - p0) / wall,
            "threads": threads, "wall_s": wall, "warm_s": warm_s}


def run(opts) -> list[Row]:
    sizes = [int(x) for x in (getattr(opts, "targets", None) or "8,100").split(",")]
    measure_s = getattr(opts, "measure_s", None) or (20.0 if opts.quick else 40.0)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="prefilltui-bench-fleet-") as tmp, \
            FastServerProcess(a=0.005, b=20e-6) as s1, FastServerProcess(a=0.005, b=20e-6) as s2:
        for n in sizes:
            # every target started (staggered over one interval: 4 s for 8 targets, 50 s
            # for 100 at 2 probe starts/s) and past its warm-up
            warm = 20.0 if n <= 10 else 75.0
            d = measure(n, [s1.base_url, s2.base_url], tmp, warm, measure_s)
            rows += [
                Row(SECTION, f"CPU, fleet overview, {n} targets ({d['probes_per_s']:.2f} probes/s)",
                    f"{d['cpu_share'] * 100:.1f} % of a core", "", None, d),
                Row(SECTION, f"RSS, fleet overview, {n} targets ({d['threads']} threads)",
                    f"{d['rss_mib']:.0f} MiB", "", None),
                Row(SECTION, f"terminal output, fleet overview, {n} targets, 120x40",
                    f"{d['term_bytes_per_s'] / 1024:.1f} KiB/s", "", None),
            ]
    return rows


def main(argv: list[str] | None = None) -> int:
    from tests.bench import format_table

    ap = argparse.ArgumentParser(prog="python -m tests.bench.bench_fleet")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--targets", default="8,100", metavar="N,N")
    ap.add_argument("--measure-s", type=float, default=None, metavar="S")
    opts = ap.parse_args(argv)
    print(format_table(run(opts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
