"""LiveSummary (model/summary/live.py): the same RunSummary as analyze() on the same probes,
built incrementally; bounded buffers beyond ``recent``."""

from __future__ import annotations

import random

import pytest

from prefilltui.model.summary import analyze
from prefilltui.model.summary import LiveSummary
from prefilltui.model.spec import AnalysisOptions, RooflineSpec
from prefilltui.model.types import ProbeResult, ServerInfo

INFO = ServerInfo(base_url="http://127.0.0.1:1", kind="llama.cpp",
                  model="SmolLM2-135M-Instruct", context_tokens=8192)
LENGTHS = (16, 64, 256, 1024, 2048)


def run(n: int = 60, seed: int = 1, a: float = 0.02, b: float = 50e-6) -> list[ProbeResult]:
    """Probes on TTFT = a + b*n with 3 % noise and the server's own prefill time; a
    warm-up, two failures and a cache hit among them."""
    rng = random.Random(seed)
    out = [ProbeResult(seq=0, requested_tokens=512, prompt_tokens=513, ttft_s=0.3, ok=True,
                       warmup=True)]
    for i in range(1, n + 1):
        tok = LENGTHS[i % len(LENGTHS)]
        ttft = (a + b * tok) * (1 + rng.gauss(0, 0.03))
        r = ProbeResult(seq=i, started_at=1000.0 + i, requested_tokens=tok,
                        prompt_tokens=tok + 1, prompt_tokens_source="usage", ttft_s=ttft,
                        server_prefill_s=ttft - 0.004, ok=True)
        if i in (7, 31):
            r = ProbeResult(seq=i, requested_tokens=tok, ok=False, error_kind="timeout",
                            error_message="no first token")
        if i == 12:
            r.cached_tokens = tok - 8
        out.append(r)
    return out


def _live(results, options=None) -> LiveSummary:
    ls = LiveSummary(options)
    for r in results:
        ls.add(r)
    return ls


@pytest.mark.parametrize("options", [
    AnalysisOptions(),
    AnalysisOptions(fit="ols", window=20, roofline=RooflineSpec(params=135e6, peak_tflops=2.0)),
])
def test_same_summary_as_analyze(options):
    results = run()
    full = analyze(results, INFO, options)
    live = _live(results, options).summary(INFO, recent=results)
    assert live.ttft_verdict == full.ttft_verdict and live.ttft_verdict is not None
    assert live.probes == full.probes
    assert live.fit == full.fit and live.ols == full.ols and live.robust == full.robust
    assert live.knee_tokens == full.knee_tokens and live.quadratic == full.quadratic
    assert live.fixed_cost == full.fixed_cost
    assert live.percentiles == full.percentiles
    assert live.overhead_median_s == pytest.approx(full.overhead_median_s)
    assert live.window == full.window
    assert live.model == full.model and live.hardware == full.hardware
    assert live.roofline == full.roofline
    assert live.verdict == full.verdict
    assert live.notes == full.notes
    assert live.depth is None and live.diagnosis is None  # left to analyze (module docstring)
    assert live.load is None


def test_summary_cached_until_next_probe():
    results = run(20)
    ls = _live(results[:-1])
    s1 = ls.summary(INFO)
    assert ls.summary(INFO) is s1
    ls.add(results[-1])
    s2 = ls.summary(INFO)
    assert s2 is not s1 and s2.probes.total == s1.probes.total + 1


def test_window_scope_and_reset():
    results = run(40)
    ls = _live(results, AnalysisOptions(window=10))
    win = ls.summary(INFO, which="window")
    assert win.fit is not None and win.fit.n <= 10
    ls.reset_fit()
    after = ls.summary(INFO)
    assert after.fit is None and after.probes.total == len(results)  # counts stay
    assert after.verdict.level == "insufficient"


def test_percentiles_bounded_to_recent_and_said():
    results = run(80)
    ls = LiveSummary(recent=30)
    for r in results:
        ls.add(r)
    s = ls.summary(INFO)
    assert s.percentiles.overall.n == 30
    assert all(row.ttft.n <= 30 for row in s.percentiles.by_length)
    assert "TTFT percentiles over the last 30 probes" in s.notes


def test_every_probe_failed_verdict():
    bad = [ProbeResult(seq=i, requested_tokens=64, ok=False, error_kind="connect")
           for i in range(4)]
    s = _live(bad).summary(None)
    assert s.verdict.level == "failed" and s.probes.errors == {"connect": 4}
    assert s.server is None and s.fit is None


@pytest.mark.parametrize("method", ["robust", "ols"])
def test_window_fit_is_the_window_snapshot_without_its_quadratic(method):
    """The summary's window part reads RunningFit.window_fit (no quadratic fit): the
    same linear fits, knee and point count as the full window snapshot."""
    from prefilltui.model.fit import RunningFit

    results = run(60)
    lite, full = RunningFit(window=20), RunningFit(window=20)
    for r in results:
        lite.add(r)
        full.add(r)
    w, s = lite.window_fit(method), full.snapshot("window", method)
    assert w is not None and s is not None
    assert (w.fit, w.ols, w.robust, w.knee_tokens, w.n_points, w.method) == \
        (s.fit, s.ols, s.robust, s.knee_tokens, s.n_points, s.method)
    assert w.quadratic is None and not w.quadratic_applies
    assert full.window_fit(method) is s  # the full snapshot when it is cached
