"""``python -m tests.bench``: every benchmark, one table (see tests/bench/__init__.py).

Order: client overhead, fit accuracy, telemetry sampler, TUI vs headless (+ app CPU and
terminal bytes), server agreement (llama-server), RSS growth, the fleet overview's CPU and
RSS with 8 and 100 targets, soak.  A benchmark that
raises becomes one FAIL row with the error; the others still run.  Exit code: 0 when
no row failed, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
import traceback

from tests.bench import Row, format_table

#: (name, module, section label) in running order.
BENCHES = [
    ("overhead", "tests.bench.bench_overhead", "1 client overhead"),
    ("fit", "tests.bench.bench_fit", "3 fit accuracy"),
    ("telemetry", "tests.bench.bench_telemetry", "5 footprint"),
    ("tui", "tests.bench.bench_tui", "2 TUI vs headless"),
    ("agreement", "tests.bench.bench_server_agreement", "4 server agreement"),
    ("rss", "tests.bench.bench_footprint", "5 footprint"),
    ("fleet", "tests.bench.bench_fleet", "5 footprint"),
    ("soak", "tests.bench.bench_soak", "6 soak"),
]
SECTION_ORDER = ["1 client overhead", "2 TUI vs headless", "3 fit accuracy",
                 "4 server agreement", "5 footprint", "6 soak"]


def fit_rows(opts) -> list[Row]:
    """Figures of the analysis benchmark (tests/bench/bench_fit.py)."""
    from tests.bench import bench_fit

    d = bench_fit.run_benchmark(seeds=200, quick=opts.quick)
    seeds = d["setup"]["seeds"]
    rows = []
    sec = "3 fit accuracy"
    for name, designs in d["accuracy"].items():
        res = designs["anchored"]  # the default sweep's design
        sizes = sorted(res, key=int)
        tag = "/".join(str(n) for n in sizes)
        err = " / ".join(f"{res[n]['median_abs_err_pct'].get('shown', float('nan')):.1f}"
                         for n in sizes)
        rows.append(Row(sec, f"{name}: median |throughput error| after {tag} probes",
                        f"{err} %", "", None, {"accuracy": d["accuracy"]} if not rows else {}))
        gated = [n for n in sizes if int(n) >= 30]
        for key, what in (("coverage_95_pct", "1/b"), ("intercept_coverage_95_pct", "a")):
            cov = {n: res[n][key].get("shown") for n in sizes}
            ok = all(cov[n] is not None and cov[n] >= 90 for n in gated)
            # 40 seeds (--quick) measure a coverage to +-5 %: shown, not judged
            rows.append(Row(sec, f"{name}: 95 % interval coverage of {what}, {seeds} seeds ({tag})",
                            " / ".join(f"{cov[n]:.0f}" for n in sizes) + " %",
                            f">= 90 % (at {'/'.join(str(n) for n in gated)})"
                            + (", judged at 200 seeds" if seeds < 200 else ""),
                            ok if seeds >= 200 else None))
        n30 = next((n for n in sizes if int(n) == 30), sizes[-1])
        cmp_ = " ".join(f"{k} {res[n30]['intercept_coverage_95_pct'].get(k, 0):.0f}/"
                        f"{res[n30]['coverage_95_pct'].get(k, 0):.0f}"
                        for k in ("robust", "robust-rel", "wls", "ols"))
        rows.append(Row(sec, f"{name}: coverage a/1b at {n30} probes by estimator", cmp_ + " %"))
    cost = d.get("update_cost") or {}
    if cost:
        big = max(cost, key=int)
        rows.append(Row("3 fit accuracy", f"fit update per probe at {int(big):,} points",
                        f"{cost[big]['per_probe_ms']} ms", "", None, {"update_cost": cost}))
    return rows


def telemetry_rows(opts) -> list[Row]:
    """Figures of the telemetry benchmark (tests/bench/bench_telemetry.py)."""
    from tests.bench import bench_telemetry

    d = bench_telemetry.run(quick=opts.quick, prefill=False)
    frac = d["cost_core_frac_10hz"]
    growth = d["rss_growth_mb_1h"]
    span = "10 min" if opts.quick else "1 h"
    return [
        Row("5 footprint", "sampler thread at 10 Hz, 8 fake GPUs", f"{frac * 100:.2f} % of a core",
            "<= 1 %", frac <= 0.01, d),
        Row("5 footprint", f"sampler RSS growth over {span} of samples (simulated)",
            f"{growth:.1f} MiB", "flat (< 1 MiB)", growth < 1.0),
    ]


def run_one(name: str, module: str, section: str, opts) -> list[Row]:
    if name == "fit":
        return fit_rows(opts)
    if name == "telemetry":
        return telemetry_rows(opts)
    return importlib.import_module(module).run(opts)


def main(argv: list[str] | None = None) -> int:
    names = [b[0] for b in BENCHES]
    ap = argparse.ArgumentParser(
        prog="python -m tests.bench",
        description="prefilltui's own benchmarks: fidelity, overhead and footprint, one table.")
    ap.add_argument("--quick", action="store_true",
                    help="shorter runs (about 4 minutes instead of 9-12)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    ap.add_argument("--soak-seconds", type=float, default=None, metavar="S",
                    help="soak length (default 120, 30 with --quick; at most 600)")
    ap.add_argument("--only", default=None, metavar="NAME,...",
                    help="run only these: " + ",".join(names))
    ap.add_argument("--skip", default="", metavar="NAME,...", help="skip these")
    ap.add_argument("--llama-server", default=None, metavar="PATH",
                    help="llama-server binary for the agreement check (default: the cache)")
    ap.add_argument("--gguf", default=None, metavar="PATH", help="model for it")
    opts = ap.parse_args(argv)
    if opts.soak_seconds is not None and not 1 <= opts.soak_seconds <= 600:
        ap.error("--soak-seconds must be between 1 and 600")
    only = set(opts.only.split(",")) if opts.only else set(names)
    skip = set(filter(None, opts.skip.split(",")))
    bad = (only | skip) - set(names)
    if bad:
        ap.error(f"unknown benchmark(s): {', '.join(sorted(bad))}; known: {', '.join(names)}")

    rows: list[Row] = []
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    for name, module, section in BENCHES:
        if name not in only or name in skip:
            continue
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            rows += run_one(name, module, section, opts)
        except Exception as e:  # one broken benchmark must not hide the rest
            tb = traceback.format_exc(limit=4)
            rows.append(Row(section, f"{name}: benchmark error", f"{type(e).__name__}: {e}"[:90],
                            "runs", False, {"traceback": tb}))
        timings[name] = time.perf_counter() - t0
        print(f"[bench] {name} done in {timings[name]:.0f} s", file=sys.stderr, flush=True)
    rows.sort(key=lambda r: SECTION_ORDER.index(r.section) if r.section in SECTION_ORDER else 99)
    total = time.perf_counter() - t_all
    failed = sum(r.ok is False for r in rows)
    if opts.json:
        print(json.dumps({"rows": [r.to_json() for r in rows], "seconds": timings,
                          "total_s": total, "quick": opts.quick, "failed": failed,
                          "machine": {"python": platform.python_version(),
                                      "cpus": __import__("os").cpu_count()}},
                         indent=2, default=str))
    else:
        print(format_table(rows))
        print(f"\n{len(rows)} figures, {failed} failed; {total / 60:.1f} min "
              f"({', '.join(f'{k} {v:.0f} s' for k, v in timings.items())})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
