"""Benchmark of the TTFT fit (prints figures; not a timed test).

    python -m tests.bench.bench_fit [--seeds 200] [--quick]

Synthetic runs with known a, b, c: TTFT = (a + b*n + c*n^2) * (1 + 0.05*N(0,1))
+ jitter*N(0,1) (an additive scheduling/network jitter that dominates the shortest
probes), and 5 % of probes multiplied by 3 (queueing outliers).  Prompt lengths cycle
through the design's lengths in shuffled order, as a sweep does.  Two designs: "plain"
(8 log-spaced lengths from the scenario's ``lo``, the old default) and "anchored"
(10 log-spaced lengths from 4 tokens, the default sweep now).  Estimators: OLS, WLS
(1/yhat^2), the robust fit on residuals relative to yhat ("robust-rel", the old
default), the robust fit with the estimated noise floor s0 ("robust", now), and
"shown" (what the analysis shows: the quadratic fit where it applies).  Reported:
  * median relative error of the prefill throughput 1/b after 10, 30, 100 probes;
  * coverage of the 95 % intervals of the intercept a and of 1/b (and of c) over
    ``seeds`` seeds; the median half-width of a's interval;
  * fit update cost per probe (add + all-time and window snapshots) at 10k and 100k points.
``run_benchmark()`` returns the figures as a dict (for the benchmark suite).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from prefilltui.model.fit import fit_ols
from prefilltui.model.fit.robust import fit_quadratic, fit_wls
from prefilltui.model.fit import fit_robust
from prefilltui.model.fit import RunningFit
from prefilltui.model.fit.running import analyze_points

NOISE = 0.05
OUTLIER_P = 0.05
OUTLIER_X = 3.0
ANCHOR_MIN = 4  # shortest length of the anchored design (the default sweep's)

SCENARIOS = {
    # GPU-like: 25k prompt tok/s, 30 ms fixed cost, 1 ms jitter, no attention term.
    "linear": dict(a=0.030, b=1 / 25000, c=0.0, lo=128, hi=8192, jitter=0.001),
    # CPU-like small model (SmolLM2-135M-ish): 4k tok/s, attention adds 50 % at 4k.
    "quadratic": dict(a=0.015, b=1 / 4000, c=0.5 * (1 / 4000) / 4096, lo=64, hi=4096,
                      jitter=0.002),
    # A fast local server: 5 ms fixed cost under 2 ms of jitter (40 % at 4 tokens).
    "fast": dict(a=0.005, b=1 / 50000, c=0.0, lo=128, hi=8192, jitter=0.002),
}
DESIGNS = ("plain", "anchored")
ESTIMATORS = ("ols", "wls", "robust-rel", "robust", "shown")


def design_lengths(design, lo, hi):
    if design == "anchored":
        return np.unique(np.round(np.geomspace(ANCHOR_MIN, hi, 10)))
    return np.unique(np.round(np.geomspace(lo, hi, 8)))


def synth(rng, n_probes, a, b, c, lo, hi, jitter=0.0, design="plain"):
    """(tokens, seconds) of one synthetic run."""
    lengths = design_lengths(design, lo, hi)
    reps = -(-n_probes // len(lengths))
    x = np.concatenate([rng.permutation(lengths) for _ in range(reps)])[:n_probes]
    y = (a + b * x + c * x * x) * (1 + NOISE * rng.standard_normal(n_probes))
    y = y + jitter * rng.standard_normal(n_probes)
    y = np.where(rng.random(n_probes) < OUTLIER_P, y * OUTLIER_X, y)
    return x, y


def _covers(ci, v):
    lo, hi = ci
    return lo is not None and lo <= v and (hi is None or v <= hi)


def _fits(x, y):
    snap = analyze_points(x, y)
    shown = snap.quadratic if (snap and snap.quadratic_applies) else (snap and snap.fit)
    return {"ols": fit_ols(x, y), "wls": fit_wls(x, y),
            "robust-rel": fit_robust(x, y, noise_floor_s=0.0), "robust": fit_robust(x, y),
            "shown": shown}, snap


def accuracy_and_coverage(seeds=200, sizes=(10, 30, 100)):
    """{scenario: {design: {size: figures}}}; see the module docstring."""
    out = {}
    for name, sc in SCENARIOS.items():
        true_tp = 1 / sc["b"]
        out[name] = {}
        for design in DESIGNS:
            res = {}
            for n in sizes:
                errs = {k: [] for k in ESTIMATORS}
                half = {k: [] for k in ESTIMATORS}
                cov_tp = dict.fromkeys(ESTIMATORS, 0)
                cov_a = dict.fromkeys(ESTIMATORS, 0)
                counted = dict.fromkeys(ESTIMATORS, 0)
                cov_c = counted_c = knees = quads = 0
                for seed in range(seeds):
                    rng = np.random.default_rng(10_000 * n + seed)
                    x, y = synth(rng, n, **sc, design=design)
                    fits, snap = _fits(x, y)
                    knees += bool(snap and snap.knee_tokens is not None)
                    quads += bool(snap and snap.quadratic_applies)
                    for k, f in fits.items():
                        if f is None or f.prefill_tokens_per_s is None:
                            continue
                        errs[k].append(abs(f.prefill_tokens_per_s / true_tp - 1))
                        counted[k] += 1
                        cov_tp[k] += _covers(f.prefill_tokens_per_s_ci, true_tp)
                        cov_a[k] += _covers(f.intercept_ci, sc["a"])
                        half[k].append((f.intercept_ci[1] - f.intercept_ci[0]) / 2)
                    q = fit_quadratic(x, y)
                    if q is not None and q.c_ci is not None:
                        counted_c += 1
                        cov_c += q.c_ci[0] <= sc["c"] <= q.c_ci[1]
                pct = lambda d, counted=counted: {k: round(100 * d[k] / counted[k], 1)  # noqa: E731
                                 for k in ESTIMATORS if counted[k]}
                res[n] = {
                    "median_abs_err_pct": {k: round(100 * float(np.median(v)), 2)
                                           for k, v in errs.items() if v},
                    "p90_abs_err_pct": {k: round(100 * float(np.quantile(v, 0.9)), 2)
                                        for k, v in errs.items() if v},
                    "coverage_95_pct": pct(cov_tp),
                    "intercept_coverage_95_pct": pct(cov_a),
                    "intercept_half_width_ms": {k: round(1e3 * float(np.median(v)), 2)
                                                for k, v in half.items() if v},
                    "quadratic_c_coverage_95_pct": (round(100 * cov_c / counted_c, 1)
                                                    if counted_c else None),
                    "knee_found_pct": round(100 * knees / seeds, 1),
                    "quadratic_applies_pct": round(100 * quads / seeds, 1),
                }
            out[name][design] = res
    return out


def update_cost(sizes=(10_000, 100_000), probes=50):
    """Seconds per probe for add + snapshot(all) + snapshot(window), at each run length."""
    out = {}
    sc = SCENARIOS["linear"]
    for size in sizes:
        rng = np.random.default_rng(size)
        x, y = synth(rng, size + probes, **sc)
        rf = RunningFit(window=50)
        t0 = time.perf_counter()
        for i in range(size):
            rf.add_point(float(x[i]), float(y[i]))
        fill = (time.perf_counter() - t0) / size
        rf.snapshot("all")
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(size, size + probes):
            rf.add_point(float(x[i]), float(y[i]))
            rf.snapshot("all", "robust")
            rf.snapshot("all", "ols")
            rf.snapshot("window", "robust")
        per = (time.perf_counter() - t0) / probes
        per_cpu = (time.process_time() - c0) / probes
        c0 = time.process_time()
        fit_robust(x[:size], y[:size], max_points=None)
        full = time.process_time() - c0
        out[size] = {"add_only_us": round(fill * 1e6, 2), "per_probe_ms": round(per * 1e3, 2),
                     "per_probe_cpu_ms": round(per_cpu * 1e3, 2),
                     "full_robust_refit_cpu_ms": round(full * 1e3, 1)}
    return out


def run_benchmark(seeds: int = 200, quick: bool = False) -> dict:
    """All figures as a dict: {"accuracy": {...}, "update_cost": {...}, "setup": {...}}."""
    if quick:
        seeds = min(seeds, 40)
    t0 = time.perf_counter()
    acc = accuracy_and_coverage(seeds=seeds)
    cost = update_cost(sizes=(10_000,) if quick else (10_000, 100_000))
    return {"setup": {"seeds": seeds, "noise": NOISE, "outlier_p": OUTLIER_P,
                      "outlier_x": OUTLIER_X, "scenarios": SCENARIOS},
            "accuracy": acc, "update_cost": cost, "bench_s": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    r = run_benchmark(a.seeds, a.quick)
    if a.json:
        print(json.dumps(r, indent=2, default=str))
        return 0
    print(f"fit benchmark: {r['setup']['seeds']} seeds, {NOISE:.0%} multiplicative noise, "
          f"{OUTLIER_P:.0%} outliers x{OUTLIER_X:g}")
    for name, designs in r["accuracy"].items():
        print(f"\n[{name}] {SCENARIOS[name]}")
        for design, res in designs.items():
            print(f"  design {design}:")
            for n, v in res.items():
                print(f"  {n:>4} probes  median |err 1/b| %: {v['median_abs_err_pct']}")
                print(f"              1/b 95% coverage %: {v['coverage_95_pct']}")
                print(f"              a   95% coverage %: {v['intercept_coverage_95_pct']}")
                print(f"              a   95% half-width ms: {v['intercept_half_width_ms']}")
                print(f"              knee found in {v['knee_found_pct']} %, quadratic used in "
                      f"{v['quadratic_applies_pct']} % of runs")
    print("\nupdate cost per probe (add + snapshot all robust/ols + window):")
    for size, v in r["update_cost"].items():
        print(f"  {size:>7,} points: {v['per_probe_cpu_ms']} ms CPU/probe ({v['per_probe_ms']} ms wall), "
              f"add alone {v['add_only_us']} us; a full robust refit would take "
              f"{v['full_robust_refit_cpu_ms']} ms CPU")
    print(f"\n(benchmark took {r['bench_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
