"""Widget helpers that need no running app: history bucketing, stats text, ticks."""

from __future__ import annotations

from tests.tui.fakes import fixed_results, make_result

from prefilltui.tui.viewmodel import Counters, RooflineView, build_stats, status_line
from prefilltui.tui.widgets.gauges import bucket_history, window_mask
from prefilltui.tui.widgets.probe_log import probe_message, probe_status
from prefilltui.tui.viewmodel import StatsView
from prefilltui.tui.widgets.stats import short_model, si, stats_text
from prefilltui.tui.widgets.ttft_plot import nice_ticks, tick_label


def test_bucket_history_peaks_by_time():
    hist = [(0.5, 10.0), (1.2, 90.0), (1.4, 30.0), (2.5, None), (9.9, 5.0)]
    assert bucket_history(hist, now=10.0, span=10.0, width=10) == [
        10.0, 90.0, None, None, None, None, None, None, None, 5.0]
    assert bucket_history([(-5.0, 1.0)], now=10.0, span=10.0, width=2) == [None, None]


def test_window_mask_marks_probe_columns():
    assert window_mask([(2.0, 3.5)], now=10.0, span=10.0, width=10) == [
        False, False, True, True, False, False, False, False, False, False]


def test_stats_text_without_and_with_fit():
    v = StatsView()
    assert "needs ≥3 probes" in stats_text(v).plain
    from prefilltui.core.running_fit import RunningFit

    fit = RunningFit()
    for r in fixed_results():
        fit.add(r)
    c = Counters()
    for r in fixed_results():
        c.add(r)
    ok = [r for r in fixed_results() if r.ok][-1]
    v = build_stats(fit.snapshot(), which="all", method="robust", info=None, last=ok,
                    counters=c, device="CPU", roof=None)
    text = stats_text(v).plain
    assert "intercept 20.3 ms" in text.replace("  ", " ")
    assert "µs/tok" in text and "tok/s" in text and "R²" in text
    assert "cached tokens in 1 probe" in text
    # TTFT breakdown: readable labels, one per line
    assert "overhead  3.0 ms\nqueue     N/A\nprefill   23.1 ms" in text
    assert "95%     19.0–21.5 ms" in text or "ms\n  95%" in text  # intercept interval
    assert "µs/tok\n  95%" in text and "tok/s\n  95%" in text
    assert text.count(" 95% ") == 3 and "ms/tok" not in text


def test_stats_units_noise_queue_and_model():
    """Slope stays in µs/tok above 1000 µs; intervals carry units; an intercept
    whose interval spans 0 is flagged; queue marked estimated; model shortened."""
    from prefilltui.core.types import ServerInfo

    v = StatsView(intercept_s=-0.195, intercept_ci=(-0.4, 0.01), slope_s=6.775e-3,
                  slope_ci=(6.5e-3, 7.0e-3), prefill_tokens_per_s=147.6, prefill_tokens_per_s_ci=(46, 64),
                  r2=0.99)
    text = stats_text(v).plain
    assert "intercept \u2212195 ms" in text
    assert "\n          ≈0: within noise\n" in text
    assert "\u2212400 to 10.0 ms" in text
    assert "slope     6,775 µs/tok" in text and "6,500–7,000 µs/tok" in text
    assert "95%     46.0–64.0 tok/s" in text
    assert "≈0" not in stats_text(StatsView(intercept_s=0.02, intercept_ci=(0.01, 0.03),
                                             slope_s=1e-4)).plain
    last = make_result(1, 512)
    last.queue_s = 0.0
    last.extra["queue_source"] = "idle"
    info = ServerInfo(base_url="http://x", kind="llama.cpp",
                      model="/home/u/.cache/prefilltui/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    v = build_stats(None, which="all", method="robust", info=info, last=last,
                    counters=Counters(), device="CPU", roof=None)
    text = stats_text(v).plain
    assert "queue     0.0 ms (est.)" in text
    assert "\nSmolLM2-135M-Instruct.Q4_1\n" in text
    assert short_model("a/" + "x" * 40 + ".gguf") == "x" * 25 + "…"


def test_verdict_not_repeated_in_notes():
    roof = RooflineView(achieved_tflops=0.00604, verdict="MFU needs --peak-tflops", notes=[
        "Peak unknown (CPU or unlisted GPU): 22 prompt tok/s (estimate). MFU needs "
        "--peak-tflops (and --gpu / --params if not detected).",
        "GPU 'X' is not in the catalog; MFU needs --peak-tflops"])
    v = build_stats(None, which="all", method="robust", info=None, last=None,
                    counters=Counters(), device=None, roof=roof)
    text = stats_text(v).plain
    assert text.count("--peak-tflops") == 1
    assert "0.00604 TFLOP/s" in text and "GFLOP" not in text


def test_status_line_words():
    c = Counters()
    c.add(make_result(1, 100))
    c.add(make_result(2, 100, ok=False))
    s = status_line("retrying", "connect refused; retrying in 2 s", c, (32, 4096), "all", False)
    assert "retrying" in s and "connect refused" in s and "1 failed" in s
    assert "paused" in status_line("probing", "", c, (32, 4096), "window", True)
    s = status_line("probing", "", c, (32, 4096), "all", False,
                    ("sent without stream_options", "lengths estimated"))
    assert s.endswith("[$warning]sent without stream_options[/]  [$warning]lengths estimated[/]")


def test_probe_status_and_message():
    rs = fixed_results()
    assert probe_status(rs[0]) == "warm-up"
    assert probe_status(rs[-2]) == "cached 1000"
    assert probe_status(rs[-1]) == "timeout"
    assert "failed: timeout" in probe_message(rs[-1])


def test_ticks_and_si():
    assert nice_ticks(4300) == [0, 2000, 4000]
    assert nice_ticks(4300, 6) == [0, 1000, 2000, 3000, 4000]
    assert nice_ticks(230, 4) == [0, 100, 200]
    assert tick_label(4000) == "4k" and tick_label(1500) == "1.5k" and tick_label(40) == "40"
    assert si(22400) == "22.4k" and si(None) == "N/A"


def test_baseline_drift_warning_in_stats():
    from tests.tui.fakes import make_result as mk

    from prefilltui.core.fit import fit_robust
    from prefilltui.core.running_fit import RunningFit
    from prefilltui.tui.viewmodel import RooflineView, with_baseline

    xs = [32, 64, 128, 256, 512, 1024, 2048, 4096]
    base = fit_robust(xs, [0.02 + 20e-6 * n + (1e-4 if i % 2 else -1e-4) for i, n in enumerate(xs)])
    live = RunningFit()
    for i, n in enumerate(xs * 2):
        live.add(mk(i + 1, n, b=45e-6, noise=(1e-4 if i % 2 else -1e-4)))
    analysis = with_baseline(lambda *_: RooflineView(), base)
    roof = analysis(live.snapshot(), None, [])
    v = build_stats(live.snapshot(), which="all", method="robust", info=None, last=None,
                    counters=Counters(), device=None, roof=roof)
    text = stats_text(v).plain
    assert "⚠" in text and "baseline" in text
