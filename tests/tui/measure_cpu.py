"""CPU and terminal bytes of the live app, fake probes + real sampler
(the budget: <= 5 % of a core at 1 probe/s with 10 Hz sampling).

    .venv/bin/python -m tests.tui.measure_cpu [--seconds 60] [--cols 80] [--rows 24]
        [--probe-s 1.0] [--hz 10] [--warmup-s 8] [--profile OUT.prof] [--no-sampler]

Runs the real app (``build_app``, the default roofline analysis for a model the catalog
knows, a real ``make_sampler(hz=...)``) in a child process on a pseudo terminal of
``cols`` x ``rows`` (the pty harness of tests/bench/bench_footprint.py), fed by a fake
runner that emits one probe every ``probe_s`` seconds with real clock stamps (so the
gauges tint each probe's window).  After ``warmup_s`` it reads the child's user+system
CPU seconds (psutil) and the bytes written to the terminal, waits ``seconds``, and
prints CPU as % of one core (whole process, and the UI's main thread alone) and
KiB/s.  ``--profile`` runs the child under cProfile
and writes the stats file there on exit (profiling inflates the CPU figure).

Not a test (no ``test_`` prefix): run it by hand before and after a change, same
options, on a machine that is as quiet as you can get it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

ROOT_CHILD = "--child"


def _cpu(ps) -> float:
    t = ps.cpu_times()
    return t.user + t.system


def measure(seconds: float = 60.0, *, cols: int = 80, rows: int = 24, probe_s: float = 1.0,
            hz: float = 10.0, warmup_s: float = 8.0, profile: str | None = None,
            sampler: bool = True) -> dict:
    """One measurement; returns {"cpu_pct", "term_bytes_per_s", "probes", ...}."""
    import psutil

    from tests.bench.bench_footprint import PtyApp, bench_env

    with tempfile.TemporaryDirectory(prefix="prefilltui-cpu-") as tmp:
        counter = f"{tmp}/probes"
        argv = [sys.executable, "-m", "tests.tui.measure_cpu", ROOT_CHILD,
                "--probe-s", str(probe_s), "--hz", str(hz), "--counter", counter]
        if profile:
            argv += ["--profile", os.path.abspath(profile)]
        if not sampler:
            argv.append("--no-sampler")
        app = PtyApp(argv, cols=cols, rows=rows, env=bench_env(tmp))
        app.watch_for(b"Quit")  # the footer: the first whole frame is written
        app.start()
        try:
            ps = psutil.Process(app.proc.pid)
            time.sleep(warmup_s)
            if app.proc.poll() is not None:
                raise RuntimeError(f"app exited early: {app.tail[-600:]!r}")
            n0 = _read_count(counter)
            c0, w0, b0, m0 = _cpu(ps), time.perf_counter(), app.bytes_out, _main_cpu(ps)
            time.sleep(seconds)
            c1, w1, b1, m1 = _cpu(ps), time.perf_counter(), app.bytes_out, _main_cpu(ps)
            n1 = _read_count(counter)
            first_frame_s = app.seen_at(0.05)
        finally:
            app.quit()
    wall = w1 - w0
    return {"cpu_pct": 100 * (c1 - c0) / wall, "term_bytes_per_s": (b1 - b0) / wall,
            "ui_thread_cpu_pct": 100 * (m1 - m0) / wall,
            "probes": n1 - n0, "wall_s": wall, "cols": cols, "rows": rows,
            "probe_s": probe_s, "hz": hz, "load_avg": os.getloadavg(),
            "first_frame_s": first_frame_s}


def _main_cpu(ps) -> float:
    """CPU seconds of the process's main thread (the UI's event loop); the rest is the
    sampler, the fake runner and Textual's input thread."""
    for t in ps.threads():
        if t.id == ps.pid:
            return t.user_time + t.system_time
    return 0.0


def _read_count(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


# ----------------------------------------------------------------------- child side
def _child(opts) -> int:
    from prefilltui.model.types import ServerInfo
    from prefilltui.tui.app import build_app
    from tests.tui.fakes import LENGTHS, FakeRunner, make_result

    class LiveRunner(FakeRunner):
        """FakeRunner whose probes carry real clock stamps and a little noise."""

        def _loop(self):
            seq, rng = 1, random.Random(1)
            while not self._stop.wait(self.interval):
                if self.paused:
                    continue
                n = LENGTHS[rng.randrange(len(LENGTHS))]
                noise = rng.gauss(0, 0.002)
                ttft = 0.020 + 45e-6 * n + noise
                r = make_result(seq, n, noise=noise, t_send=time.perf_counter() - ttft)
                r.started_at = time.time() - ttft
                self.emit(r)
                seq += 1
                try:
                    with open(opts.counter, "w") as f:
                        f.write(str(seq - 1))
                except OSError:
                    pass

    info = ServerInfo(base_url="http://127.0.0.1:8080", kind="llama.cpp",
                      model="SmolLM2-135M-Instruct", context_tokens=8192)

    def factory(on_result, on_state):
        return LiveRunner(on_result, on_state, interval=opts.probe_s, info=info)

    smp = None
    if not opts.no_sampler:
        from prefilltui.measure.telemetry import make_sampler

        smp = make_sampler(None, hz=opts.hz).start()
    app = build_app(factory, smp,
                    sweep_range=(min(LENGTHS), max(LENGTHS)))
    prof = None
    if opts.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    try:
        app.run()
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(opts.profile)
        if smp is not None:
            smp.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(ROOT_CHILD, dest="child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--counter", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cols", type=int, default=80)
    ap.add_argument("--rows", type=int, default=24)
    ap.add_argument("--probe-s", type=float, default=1.0)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=8.0)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--no-sampler", action="store_true")
    opts = ap.parse_args(argv)
    if opts.child:
        return _child(opts)
    res = measure(opts.seconds, cols=opts.cols, rows=opts.rows, probe_s=opts.probe_s,
                  hz=opts.hz, warmup_s=opts.warmup_s, profile=opts.profile,
                  sampler=not opts.no_sampler)
    print(f"CPU {res['cpu_pct']:.1f} % of a core (UI thread {res['ui_thread_cpu_pct']:.1f} %),"
          f" terminal {res['term_bytes_per_s'] / 1024:.2f}"
          f" KiB/s, {res['probes']} probes in {res['wall_s']:.0f} s at {opts.cols}x{opts.rows}"
          f" (load avg {res['load_avg'][0]:.1f}); startup to first frame "
          f"{res['first_frame_s'] if res['first_frame_s'] is None else round(res['first_frame_s'], 2)} s")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
