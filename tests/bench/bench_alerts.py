"""How fast the shipped alerts fire and resolve, how small a slowdown pages, and how many
false pages ±20 % jitter makes: the real pipeline of tests/alertstack.py (fake targets
-> ``prefilltui exporter`` -> Prometheus -> Alertmanager -> webhook), time-scaled.

    python -m tests.bench.bench_alerts times --factor 15        # ~2.5 min
    python -m tests.bench.bench_alerts times --factor 5         # ~7 min
    python -m tests.bench.bench_alerts sensitivity --factor 15  # ~2.5 min

``times``: one event per target once the learned baselines exist (t = 0): a 2x slowdown
on the learned baseline and on an explicit one (each recovers 5 scaled minutes after it
fired), a hang and an outage of HTTP 500s (each lasting 7 scaled minutes), two targets
with jitter only.  ``sensitivity``: targets slow from their first probe by 1.20x ..
2x against an explicit baseline of the healthy throughput, plus jitter-only targets on
learned baselines, for 25 scaled minutes.  Every target's TTFT = (20 ms + 0.1 ms x
tokens) x U(0.8, 1.2).  Times are read by polling Prometheus' ALERTS every 0.25 s
(fire/resolve) and from the webhook's arrivals (page/resolved notification); each is
printed in real seconds and x factor (the default-interval equivalent).  Needs
``prometheus`` and ``prometheus-alertmanager`` on PATH.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from tests.alertstack import AlertStack, FakePrefill, TargetSpec, wait_for


def _poll(st: AlertStack, until: float, events: dict, t1: float, actions) -> None:
    """Poll ALERTS until ``until`` (monotonic); record first firing / resolved times
    (s after t1) per (alertname, target); run ``actions(now, firing)`` each poll."""
    firing_now: set = set()
    while time.monotonic() < until:
        try:
            firing = st.firing()
        except OSError:
            time.sleep(0.25)
            continue
        now = time.monotonic() - t1
        for k in firing - firing_now:
            events.setdefault(k, {}).setdefault("fired", []).append(round(now, 2))
        for k in firing_now - firing:
            events.setdefault(k, {}).setdefault("resolved", []).append(round(now, 2))
        firing_now = firing
        actions(now, firing)
        time.sleep(0.25)


def times(factor: float, workdir: Path) -> dict:
    s = 60.0 / factor  # real seconds per scaled minute
    fakes = {n: FakePrefill(seed=i) for i, n in enumerate(
        ("slow-learned", "slow-config", "hang", "down", "steady-1", "steady-2"))}
    specs = [TargetSpec(n, f, "expected_throughput = 10000" if n == "slow-config" else "")
             for n, f in fakes.items()]
    events: dict = {}
    marks: dict = {}
    with AlertStack(workdir, specs, factor=factor) as st:
        wait_for(lambda: len(st.query("prefilltui:prefill_throughput_learned:tokens_per_second")) >= 5,
                 10 * s + 30, "the learned baselines")
        t1 = time.monotonic()
        fakes["slow-learned"].b_s = fakes["slow-config"].b_s = 2e-4
        fakes["hang"].hang = True
        fakes["down"].down = True

        def act(now: float, firing: set) -> None:
            if now >= 7 * s and fakes["hang"].hang:
                fakes["hang"].hang = fakes["down"].down = False
                marks["hang_down_end"] = now
            for n in ("slow-learned", "slow-config"):
                k = ("PrefillThroughputBelowBaseline", n)
                fired = events.get(k, {}).get("fired")
                if fired and fakes[n].b_s > 1e-4 and now >= fired[0] + 5 * s:
                    fakes[n].b_s = 1e-4
                    marks[f"{n}_end"] = now

        _poll(st, t1 + 30 * s, events, t1, act)
        pages = [(round(at - t1, 2), a["labels"]["alertname"], a["labels"].get("target"), a["status"])
                 for n in st.webhook.notifications for at, a in [(n.at, x) for x in n.alerts]]
    return {"factor": factor, "events_s": {f"{a} {t}": v for (a, t), v in sorted(events.items())},
            "marks_s": marks, "notifications_s": pages}


def sensitivity(factor: float, workdir: Path, slowdowns: list[float], minutes: float) -> dict:
    s = 60.0 / factor
    specs = [TargetSpec(f"x{k:.2f}", FakePrefill(seed=int(k * 100), b_s=1e-4 * k),
                        "expected_throughput = 10000") for k in slowdowns]
    specs += [TargetSpec(f"jitter-{i}", FakePrefill(seed=100 + i)) for i in range(3)]
    events: dict = {}
    ratios: dict[str, list[float]] = {}
    with AlertStack(workdir, specs, factor=factor) as st:
        t1 = time.monotonic()

        def act(now: float, firing: set) -> None:
            for r in st.query("prefilltui:prefill_throughput:ratio_to_baseline"):
                if now > 3 * s:  # past the first fits
                    ratios.setdefault(r["metric"]["target"], []).append(float(r["value"][1]))

        _poll(st, t1 + minutes * s, events, t1, act)
        pages = [(round(at - t1, 2), a["labels"]["alertname"], a["labels"].get("target"), a["status"])
                 for n in st.webhook.notifications for at, a in [(n.at, x) for x in n.alerts]]
    rows = {}
    for spec in specs:
        r = ratios.get(spec.name, [])
        fired = events.get(("PrefillThroughputBelowBaseline", spec.name), {}).get("fired")
        rows[spec.name] = {"fired_s": fired[0] if fired else None,
                           "ratio_min": round(min(r), 3) if r else None,
                           "ratio_median": round(sorted(r)[len(r) // 2], 3) if r else None,
                           "ratio_max": round(max(r), 3) if r else None}
    false = [p for p in pages if p[2] and p[2].startswith("jitter-")]
    return {"factor": factor, "scaled_minutes": minutes, "targets": rows,
            "jitter_pages": false, "notifications_s": pages}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_alerts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=("times", "sensitivity"))
    p.add_argument("--factor", type=float, default=15.0, help="speed-up over the defaults")
    p.add_argument("--slowdowns", default="1.2,1.25,1.3,1.33,1.4,1.5,2.0")
    p.add_argument("--minutes", type=float, default=25.0, help="scaled run length (sensitivity)")
    p.add_argument("--workdir", help="keep logs and data here (default: a temp dir)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-alerts-") as tmp:
        wd = Path(a.workdir or tmp)
        if a.scenario == "times":
            out = times(a.factor, wd)
        else:
            out = sensitivity(a.factor, wd, [float(x) for x in a.slowdowns.split(",")], a.minutes)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
