"""Repeat until confident (core.until_ci): progress, budgets, where repeats go."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prefilltui.model.types import ProbeResult
from prefilltui.model.fit.until_ci import SPREAD_EVERY
from prefilltui.model.fit import ConfidenceTarget

LENGTHS = [4, 16, 64, 256, 1024]


def _r(n, ttft, ok=True, **kw) -> ProbeResult:
    return ProbeResult(ok=ok, requested_tokens=n, prompt_tokens=n, ttft_s=ttft, **kw)


def _feed(t, rounds, noise=0.05, seed=0, a=0.01, b=1 / 170):
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        for n in LENGTHS:
            t.add(_r(n, (a + b * n) * (1 + noise * rng.standard_normal())))


def test_no_fit_then_target_reached_on_clean_data():
    t = ConfidenceTarget(2.0)
    assert t.progress().half_width_pct is None and not t.progress().done
    _feed(t, 4, noise=0.005)
    p = t.progress()
    assert p.done and p.reason == "target reached" and p.half_width_pct <= 2.0
    assert p.probes == 20 and p.fit_points == 20
    assert "target reached" in p.line() and "±" not in p.line()  # plain text: +-


def test_noisy_data_is_not_done_until_a_budget():
    t = ConfidenceTarget(0.5, budget_probes=12)
    _feed(t, 2, noise=0.2)
    p = t.progress()
    assert not p.done and p.half_width_pct > 0.5
    t.add(_r(4, 0.02))
    t.add(_r(4, 0.0, ok=False))  # a failed probe still spends the budget
    p = t.progress()
    assert p.done and p.reason == "probe budget spent" and p.probes == 12
    assert p.to_json()["budget_probes"] == 12


def test_time_budget_and_warmups_count():
    now = [100.0]
    t = ConfidenceTarget(None, budget_s=30.0, clock=lambda: now[0])
    t.add(_r(4, 0.02, warmup=True))
    assert not t.progress().done and t.progress().fit_points == 0
    now[0] = 131.0
    p = t.progress()
    assert p.done and p.reason == "time budget spent" and p.elapsed_s == pytest.approx(31.0)
    assert p.half_width_pct is None and p.target_pct is None


def test_repeats_go_where_they_shrink_the_interval_and_stay_spread():
    """Once the intercept is pinned the scored picks go to the long end (the most slope
    per probe); every SPREAD_EVERY-th pick is the least-probed length, so the anchors
    and the middle keep getting repeats."""
    t = ConfidenceTarget(0.1)
    _feed(t, 2, noise=0.05, seed=3)
    for _ in range(4):
        t.add(_r(4, 0.0335))  # the intercept is pinned: only the slope is open
    fit = t._fit()
    assert (fit.intercept_ci[1] - fit.intercept_ci[0]) / 2 <= 0.010
    picks = []
    for _ in range(3 * SPREAD_EVERY):
        n = t.next_length(LENGTHS)
        picks.append(n)
        t.add(_r(n, (0.01 + n / 170) * 1.01))
    scored = [p for i, p in enumerate(picks, 1) if i % SPREAD_EVERY]
    spread = [p for i, p in enumerate(picks, 1) if i % SPREAD_EVERY == 0]
    assert all(p >= 256 for p in scored), picks
    assert set(spread) & {16, 64}, picks


def test_short_noisy_anchors_do_not_draw_the_repeats():
    """A busy machine: short probes swing several-fold (a noise floor that does not
    shrink with the prompt).  The scored picks go to lengths that carry the slope."""
    t = ConfidenceTarget(1.0)
    rng = np.random.default_rng(7)
    for _ in range(3):
        for n in LENGTHS:
            t.add(_r(n, 0.01 + n / 170 + abs(0.3 * rng.standard_normal())))
    picks = [t.next_length(LENGTHS) for _ in range(SPREAD_EVERY - 1)]
    assert all(p >= 256 for p in picks), picks


def test_picks_stay_above_a_knee():
    """Below a knee TTFT is flat and left out of the fit: repeats there shrink nothing."""
    t = ConfidenceTarget(0.1)
    rng = np.random.default_rng(5)
    lengths = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    for _ in range(3):
        for n in lengths:
            t.add(_r(n, (0.05 + max(0, n - 128) * 2e-4) * (1 + 0.01 * rng.standard_normal())))
    knee = t._fit().knee_tokens
    assert knee is not None
    picks = [t.next_length(lengths) for _ in range(SPREAD_EVERY - 1)]
    assert all(p >= knee for p in picks), (knee, picks)


def test_first_picks_without_a_fit_cover_the_lengths():
    t = ConfidenceTarget(1.0)
    seen = []
    for _ in range(len(LENGTHS)):
        n = t.next_length(LENGTHS)
        seen.append(n)
        t.add(_r(n, 0.01 + n / 170))
    assert sorted(seen[:3]) == seen[:3] and len(set(seen[:3])) == 3


@pytest.mark.parametrize("bad", [dict(pct=0), dict(pct=-1), dict(pct=1, budget_probes=0),
                                 dict(pct=1, budget_s=math.inf)])
def test_bad_targets_raise(bad):
    pct = bad.pop("pct")
    with pytest.raises(ValueError):
        ConfidenceTarget(pct, **bad)
