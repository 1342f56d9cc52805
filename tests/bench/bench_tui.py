"""TUI vs headless: does the running app distort TTFT, and what does it cost the machine?

    python -m tests.bench.bench_tui [--quick] [--segment-s S] [--pairs K]

Target: the fast server in its own process with a simulated prefill
(TTFT = 5 ms + 20 us x tokens, slept, so it costs no CPU and reports its own time as
``timings.prompt_ms``).  Alternating segments (headless, TUI, headless, TUI, ...) of
``segment_s`` seconds each, one probe a second (``--pause``), lengths 128, 512, 2048,
then one TUI segment at the app's default pacing (no ``--pause``: duty 50 % with the
sampler's 0.2 s idle floor, about 3 probes a second against this server):
  headless  ``python -m prefilltui sweep URL`` (the same SweepRunner, no display);
  TUI       ``python -m prefilltui watch URL`` in a 120x40 pseudo terminal (build_app +
            the real SweepRunner + the CPU/GPU sampler at 10 Hz + the metrics hook).
Figures (warm-up and the first ``WARMUP_S`` = 10 s after each segment's first probe
excluded; the app's CPU in those 10 s is printed on its own):
  * median TTFT per length, TUI minus headless, averaged over lengths (target within
    1 ms + 2 % of the headless median), and the same for TTFT minus the server's own
    time (client + loopback only);
  * CPU share of each process (psutil user+system CPU seconds / wall seconds over the
    segment after the warm-up), as % of one core (targets for the app: <= 3 % at
    one probe a second, <= 5 % at the default pacing);
  * bytes the app wrote to the terminal per second over the same window;
  * startup to first frame: from spawning ``python -m prefilltui watch URL`` (interpreter
    start and imports included) to the first write of the plot's border title, which
    comes with the first full screen; the median of ``STARTS`` starts.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time

import psutil

from tests.bench import Row, median, ms
from tests.bench.bench_footprint import (
    REPO, PtyApp, bench_env, lines, prefilltui_cmd, wait_lines,
)
from tests.bench.fastserver import FastServerProcess
from tests.procwait import stop

SECTION_TUI = "2 TUI vs headless"
SECTION_FP = "5 footprint"
A_S, B_S = 0.005, 20e-6  # simulated prefill: 5 ms + 20 us/token (50k tokens/s)
LENGTHS = "128,512,2048"
PAUSE_S = 0.97  # + ~20 ms mean TTFT = one probe a second
#: Seconds after a segment's first probe before its figures start: the app's start-up
#: work still running then (the first redraws and layouts as the panels fill, the
#: lazy imports, the collection before ``tui.heap`` freezes the start-up heap) is
#: reported on its own ("first 10 s"), not averaged into the steady cost that a
#: monitor left running pays.
WARMUP_S = 10.0
#: Starts timed for the startup figure, and what marks the first frame.
STARTS = 3
FIRST_FRAME = b"TTFT vs prompt tokens"


def _cpu(ps: psutil.Process) -> float:
    t = ps.cpu_times()
    return t.user + t.system


def segment(mode: str, url: str, seconds: float, out: str, tmp: str) -> dict:
    """One segment; returns cpu share, terminal bytes/s (TUI), probes/s and the run-file
    path, measured ``seconds`` after a warm-up of ``WARMUP_S`` from the first probe (its
    CPU share returned too).  ``mode``: "headless", "tui" (one probe a second) or "tui-default" (the
    app's default duty-cycled pacing: no --pause)."""
    common = ["--lengths", LENGTHS, "--seed", "1", "--out", out]
    if mode != "tui-default":
        common += ["--pause", str(PAUSE_S)]
    env = bench_env(tmp)
    app = None
    if mode.startswith("tui"):
        app = PtyApp(prefilltui_cmd("watch", url, *common), env=env).start()
        proc = app.proc
    else:
        proc = subprocess.Popen(prefilltui_cmd("sweep", url, *common, "--repeats", "1000"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env, cwd=str(REPO), start_new_session=True)
    assert proc is not None
    try:
        ps = psutil.Process(proc.pid)
        if wait_lines(out, 2, 60, proc) < 2:  # warm-up + first probe done: start measuring
            tail = app.tail[-300:] if app else b""
            raise RuntimeError(f"{mode}: no probe within 60 s (terminal tail {tail!r})")
        time.sleep(0.2)
        cw, ww = _cpu(ps), time.perf_counter()
        time.sleep(WARMUP_S)
        c0, w0, b0 = _cpu(ps), time.perf_counter(), app.bytes_out if app else 0
        n0 = lines(out)
        time.sleep(seconds)
        c1, w1, b1 = _cpu(ps), time.perf_counter(), app.bytes_out if app else 0
        rss = ps.memory_info().rss
        n1 = lines(out)
    finally:
        if app is not None:
            app.quit()
        else:
            stop(proc, 10, signal.SIGINT)
    return {"mode": mode, "cpu_share": (c1 - c0) / (w1 - w0), "wall_s": w1 - w0,
            "warmup_cpu_share": (c0 - cw) / (w0 - ww),
            "term_bytes_per_s": (b1 - b0) / (w1 - w0) if app else None, "skip": n0,
            "probes_per_s": (n1 - n0) / (w1 - w0),
            "rss_mib": rss / 2**20, "out": out}


def first_frame(url: str, tmp: str) -> float:
    """Seconds from spawning the app to its first frame (see the module docstring)."""
    app = PtyApp(prefilltui_cmd("watch", url, "--lengths", LENGTHS, "--pause", "60",
                                "--out", f"{tmp}/start.jsonl"), env=bench_env(tmp))
    app.watch_for(FIRST_FRAME)
    app.start()
    try:
        t = app.seen_at(60)
    finally:
        app.quit()
    if t is None:
        raise RuntimeError(f"no first frame within 60 s (terminal tail {app.tail[-300:]!r})")
    return t


def _by_length(results, key) -> dict[int, list[float]]:
    d: dict[int, list[float]] = {}
    for r in results:
        v = key(r)
        if v is not None:
            d.setdefault(r.requested_tokens, []).append(v)
    return d


def compare(segs: list[dict]) -> dict:
    """Per-length medians of TTFT and of TTFT - server time, TUI minus headless."""
    from prefilltui.measure.runfile import read_run

    pools = {"tui": [], "headless": []}
    for s in segs:
        res, _ = read_run(s["out"])
        pools[s["mode"]] += [r for r in res[s["skip"]:] if r.ok and not r.warmup]
    out = {"n": {k: len(v) for k, v in pools.items()}}
    for name, key in (("ttft", lambda r: r.ttft_s),
                      ("client", lambda r: None if r.server_prefill_s is None
                       else r.ttft_s - r.server_prefill_s)):
        t, h = _by_length(pools["tui"], key), _by_length(pools["headless"], key)
        common = sorted(set(t) & set(h))
        if not common:
            raise RuntimeError("no length probed in both modes")
        diffs = [median(t[n]) - median(h[n]) for n in common]
        base = [median(h[n]) for n in common]
        out[name] = {"diff_s": sum(diffs) / len(diffs), "headless_median_s": sum(base) / len(base),
                     "per_length_diff_s": dict(zip(common, diffs))}
    return out


def run(opts) -> list[Row]:
    seg_s = getattr(opts, "segment_s", None) or (15.0 if opts.quick else 25.0)
    pairs = getattr(opts, "pairs", None) or (1 if opts.quick else 2)
    segs = []
    with tempfile.TemporaryDirectory(prefix="prefilltui-bench-") as tmp, \
            FastServerProcess(a=A_S, b=B_S) as srv:
        for i in range(pairs):
            for mode in ("headless", "tui"):
                segs.append(segment(mode, srv.base_url, seg_s, f"{tmp}/{mode}-{i}.jsonl", tmp))
        c = compare(segs)
        dflt = segment("tui-default", srv.base_url, seg_s, f"{tmp}/tui-default.jsonl", tmp)
        starts = [first_frame(srv.base_url, tmp) for _ in range(STARTS)]
    tui = [s for s in segs if s["mode"] == "tui"]
    hl = [s for s in segs if s["mode"] == "headless"]
    cpu_t = sum(s["cpu_share"] for s in tui) / len(tui)
    cpu_h = sum(s["cpu_share"] for s in hl) / len(hl)
    cpu_w = sum(s["warmup_cpu_share"] for s in tui) / len(tui)
    tbps = sum(s["term_bytes_per_s"] for s in tui) / len(tui)
    d, base = c["ttft"]["diff_s"], c["ttft"]["headless_median_s"]
    tol = 1e-3 + 0.02 * base
    cpu_d = dflt["cpu_share"]
    data = {"segments": [{k: v for k, v in s.items() if k != "out"} for s in segs + [dflt]],
            "compare": c, "segment_s": seg_s, "first_frame_s": starts, "pairs": pairs, "lengths": LENGTHS,
            "simulated_prefill": {"a_s": A_S, "b_s_per_token": B_S}}
    return [
        Row(SECTION_TUI, "median TTFT, TUI - headless (fake 5 ms + 20 us/tok)",
            f"{ms(d)} (of {ms(base, 1)}; n={c['n']['tui']}/{c['n']['headless']})",
            f"|d| <= {ms(tol)}", abs(d) <= tol, data),
        Row(SECTION_TUI, "median TTFT - server time, TUI - headless", ms(c["client"]["diff_s"]),
            "", None),
        Row(SECTION_FP, "CPU, app (TUI + 10 Hz sampler + 1 probe/s)",
            f"{cpu_t * 100:.1f} % of a core", "<= 3 %", cpu_t <= 0.03),
        Row(SECTION_FP, f"CPU, app in the first {WARMUP_S:.0f} s after its first probe (1 probe/s)",
            f"{cpu_w * 100:.1f} % of a core", "", None),
        Row(SECTION_FP, f"CPU, app at its default pacing (duty 50 %: "
            f"{dflt['probes_per_s']:.1f} probes/s here)", f"{cpu_d * 100:.1f} % of a core",
            "<= 5 %", cpu_d <= 0.05),
        Row(SECTION_FP, "CPU, headless sweep (1 probe/s)", f"{cpu_h * 100:.1f} % of a core",
            "", None),
        Row(SECTION_FP, "terminal output of the app, 120x40", f"{tbps / 1024:.1f} KiB/s", "",
            None),
        Row(SECTION_FP, f"startup to first frame, app (median of {STARTS})",
            f"{median(starts):.2f} s ({min(starts):.2f}-{max(starts):.2f})", "", None),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--segment-s", type=float, default=None)
    ap.add_argument("--pairs", type=int, default=None)
    from tests.bench import print_rows

    return print_rows(run(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
