"""Benchmark of the TTFT fit (prints figures; not a timed test).

    python -m tests.bench.bench_fit [--seeds 200] [--quick]

Synthetic runs with known a, b, c: TTFT = (a + b*n + c*n^2) * (1 + 0.05*N(0,1)),
and 5 % of probes multiplied by 3 (queueing outliers).  Prompt lengths cycle through
8 log-spaced lengths in shuffled order, as a sweep does.  Reported:
  * median relative error of the prefill throughput 1/b after 10, 30, 100 probes;
  * coverage of the 95 % interval of 1/b (and of c) over ``seeds`` seeds;
  * fit update cost per probe (add + all-time and window snapshots) at 10k and 100k points.
``run_benchmark()`` returns the figures as a dict (for the benchmark suite).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from prefilltui.core.fit import fit_ols, fit_quadratic, fit_robust
from prefilltui.core.running_fit import RunningFit, analyze_points

NOISE = 0.05
OUTLIER_P = 0.05
OUTLIER_X = 3.0

SCENARIOS = {
    # GPU-like: 25k prompt tok/s, 30 ms fixed cost, no visible attention term.
    "linear": dict(a=0.030, b=1 / 25000, c=0.0, lo=128, hi=8192),
    # CPU-like small model (SmolLM2-135M-ish): 4k tok/s, attention adds 50 % at 4k.
    "quadratic": dict(a=0.015, b=1 / 4000, c=0.5 * (1 / 4000) / 4096, lo=64, hi=4096),
}


def synth(rng, n_probes, a, b, c, lo, hi, points=8):
    """(tokens, seconds) of one synthetic run."""
    lengths = np.unique(np.round(np.geomspace(lo, hi, points)))
    reps = -(-n_probes // len(lengths))
    x = np.concatenate([rng.permutation(lengths) for _ in range(reps)])[:n_probes]
    y = (a + b * x + c * x * x) * (1 + NOISE * rng.standard_normal(n_probes))
    y = np.where(rng.random(n_probes) < OUTLIER_P, y * OUTLIER_X, y)
    return x, y


def _covers(ci, v):
    lo, hi = ci
    return lo is not None and lo <= v and (hi is None or v <= hi)


def accuracy_and_coverage(seeds=200, sizes=(10, 30, 100)):
    out = {}
    for name, sc in SCENARIOS.items():
        true_tp = 1 / sc["b"]
        res = {}
        for n in sizes:
            errs = {"robust": [], "ols": [], "shown": [], "quadratic": []}
            cov = {"robust": 0, "ols": 0, "shown": 0, "quadratic": 0, "quadratic_c": 0}
            counted = {k: 0 for k in cov}
            knees = quads = 0
            for seed in range(seeds):
                rng = np.random.default_rng(10_000 * n + seed)
                x, y = synth(rng, n, **sc)
                fits = {"robust": fit_robust(x, y), "ols": fit_ols(x, y),
                        "quadratic": fit_quadratic(x, y)}
                snap = analyze_points(x, y)
                fits["shown"] = snap.quadratic if (snap and snap.quadratic_applies) else (snap and snap.fit)
                knees += bool(snap and snap.knee_tokens is not None)
                quads += bool(snap and snap.quadratic_applies)
                for k, f in fits.items():
                    if f is None or f.prefill_tokens_per_s is None:
                        continue
                    errs[k].append(abs(f.prefill_tokens_per_s / true_tp - 1))
                    counted[k] += 1
                    cov[k] += _covers(f.prefill_tokens_per_s_ci, true_tp)
                q = fits["quadratic"]
                if q is not None and q.c_ci is not None:
                    counted["quadratic_c"] += 1
                    cov["quadratic_c"] += q.c_ci[0] <= sc["c"] <= q.c_ci[1]
            res[n] = {
                "median_abs_err_pct": {k: round(100 * float(np.median(v)), 2) for k, v in errs.items() if v},
                "p90_abs_err_pct": {k: round(100 * float(np.quantile(v, 0.9)), 2) for k, v in errs.items() if v},
                "coverage_95_pct": {k: round(100 * cov[k] / counted[k], 1) for k in cov if counted[k]},
                "knee_found_pct": round(100 * knees / seeds, 1),
                "quadratic_applies_pct": round(100 * quads / seeds, 1),
            }
        out[name] = res
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
    for name, res in r["accuracy"].items():
        print(f"\n[{name}] {SCENARIOS[name]}")
        for n, v in res.items():
            print(f"  {n:>4} probes  median |err| %: {v['median_abs_err_pct']}")
            print(f"              p90 |err| %:    {v['p90_abs_err_pct']}")
            print(f"              95% coverage %: {v['coverage_95_pct']}")
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
