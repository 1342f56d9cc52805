"""Drift: Welch's t with each fit's own standard error, and one verdict for report,
sweep --baseline and the TUI on the same pair of run files."""

from __future__ import annotations

import json
import math
import random

import pytest

from prefilltui.cli import build_parser, main
from prefilltui.commands.common import session_options
from prefilltui.model.diagnosis import baseline as DR
from prefilltui.model.diagnosis import summarize_diagnosis
from prefilltui.model.fit import fit_ols
from prefilltui.model.fit import t_ppf
from prefilltui.measure.runfile import RunWriter
from prefilltui.measure.runfile import read_run
from prefilltui.model.fit import RunningFit
from prefilltui.model.types import ProbeResult
from prefilltui.session import build_session
from prefilltui.tui.viewmodel import drift_warning

X6 = [100, 200, 400, 800, 1600, 3200]
E6 = [0.012, -0.009, -0.006, 0.009, 0.003, -0.009]  # the same residuals in both runs


def _six(b: float):
    return fit_ols(X6, [0.05 + b * x + e for x, e in zip(X6, E6)])


def test_welch_t_at_six_points():
    # 6 points, 2 parameters: 4 degrees of freedom per fit; equal errors give nu = 8
    assert DR.welch_df(1.0, 4, 1.0, 4) == pytest.approx(8.0)
    assert t_ppf(0.975, 8) == pytest.approx(2.306004, abs=1e-6)
    base = _six(1e-4)
    se = base.slope_se
    assert base.df == 4
    assert DR.threshold(se, 4, se, 4) == pytest.approx(2.306004 * math.sqrt(2) * se, rel=1e-6)
    # the 95 % interval is t(0.975, 4) = 2.776 wide in se units, so reading an se back
    # from it with z = 1.96 (the old rule) overstated it 1.42x
    lo, hi = base.slope_ci
    assert (hi - lo) / (2 * 1.959964) / se == pytest.approx(2.776445 / 1.959964, rel=1e-6)


def test_drift_at_six_points_uses_t_and_the_fits_own_se():
    base = _six(1e-4)
    se = base.slope_se
    # a slope rise of 3.5 se: above t(8)·√2 = 3.26 se (warns), below the old rule's
    # 1.96·√2·1.4166 = 3.93 se (which said nothing)
    live = _six(1e-4 + 3.5 * se)
    assert live.slope_se == pytest.approx(se, rel=1e-9)
    msg = DR.drift(base, live)
    assert msg is not None and msg.startswith("prefill throughput −")
    assert DR.drift(base, _six(1e-4 + 3.0 * se)) is None  # below the t threshold


def _run(path, b: float, seed: int, knee: int = 300) -> list[ProbeResult]:
    """A run with a flat start (TTFT constant below ``knee`` tokens) and 3 % noise."""
    rng = random.Random(seed)
    out = []
    with RunWriter(path) as w:
        for i in range(60):
            n = rng.choice([64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096])
            t = (0.02 + b * max(n, knee)) * (1 + rng.gauss(0, 0.03))
            r = ProbeResult(seq=i, ok=True, requested_tokens=n, prompt_tokens=n, ttft_s=t,
                            started_at=1000.0 + i)
            w.append(r)
            out.append(r)
    return out


@pytest.mark.parametrize("slower", [1.0, 1.3])
def test_report_sweep_and_tui_give_one_verdict(tmp_path, capsys, slower):
    base_path, live_path = tmp_path / "base.jsonl", tmp_path / "live.jsonl"
    _run(base_path, 1e-4, seed=1)
    _run(live_path, 1e-4 * slower, seed=2)
    live = read_run(live_path)[0]

    # report --baseline
    assert main(["report", str(live_path), "--baseline", str(base_path), "--format", "json",
                 "--no-plot"]) == 0
    from_report = json.loads(capsys.readouterr().out)["diagnosis"]["drift"]

    # sweep --baseline: the session loads the baseline, the diagnosis compares
    args = build_parser().parse_args(["sweep", "http://127.0.0.1:9", "--no-telemetry",
                                      "--out", str(tmp_path / "s.jsonl"),
                                      "--baseline", str(base_path)])
    session = build_session(session_options(args), args.url)
    session.close()
    from_sweep = summarize_diagnosis(live, baseline=str(base_path),
                                     baseline_fit=session.baseline).drift

    # the TUI: the app's RunningFit snapshot against the session's baseline
    rf = RunningFit()
    for r in live:
        rf.add(r)
    warning = drift_warning(session.baseline, rf.snapshot("all", "robust").fit)
    from_tui = warning.removeprefix("⚠ ") if warning else None

    assert from_report == from_sweep == from_tui
    if slower == 1.0:
        assert from_report is None
    else:
        assert from_report is not None and from_report.startswith("prefill throughput −2")
