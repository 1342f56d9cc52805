"""Widget helpers that need no running app: history bucketing, stats text, ticks."""

from __future__ import annotations

import pytest

from tests.tui.fakes import fixed_results, make_result

from prefilltui.model import units
from prefilltui.model.summary import LiveSummary
from prefilltui.model.summary import ProbeCounts
from prefilltui.model.types import ServerInfo
from prefilltui.tui.viewmodel import build_stats, status_line
from prefilltui.tui.widgets.gauges import bucket_history, window_mask
from prefilltui.tui.widgets.probe_log import probe_message, probe_status
from prefilltui.tui.viewmodel import StatsView
from prefilltui.tui.widgets.stats import short_model, si, stats_text
from prefilltui.render.ticks import nice_ticks, tick_label


def test_bucket_history_means_by_time():
    """Each reading stands for the time since the one before it (a bucket at most):
    90 at 1.2 s covers 0.5-1.2 s, half in the first bucket; 5 at 9.9 s covers 8.9-9.9."""
    hist = [(0.5, 10.0), (1.2, 90.0), (1.4, 30.0), (2.5, None), (9.9, 5.0)]
    assert bucket_history(hist, now=10.0, span=10.0, width=10) == pytest.approx([
        50.0, 60.0, None, None, None, None, None, None, 5.0, 5.0])
    assert bucket_history([(-5.0, 1.0)], now=10.0, span=10.0, width=2) == [None, None]
    # readings with no time between them count as points: their mean, in their bucket
    assert bucket_history([(3.0, 7.0), (3.0, 9.0)], now=10.0, span=10.0, width=10)[2:4] == [
        None, pytest.approx(8.0)]


def test_bucket_history_is_a_time_average_at_any_sample_rate():
    """The sampler reads at 10 Hz around a probe and at 2 Hz between (the app's own cost): a
    device busy 0.3 s of every second is 30 % busy on the sparkline, not the 50 % of
    its readings that say busy."""
    hist, t = [], 0.0
    while t < 60.0:
        for v in (100.0, 100.0, 100.0, 0.0, 0.0):  # 0.5 s at 10 Hz around the probe
            t = round(t + 0.1, 6)
            hist.append((t, v))
        t = round(t + 0.5, 6)
        hist.append((t, 0.0))  # 0.5 s idle: one reading at 2 Hz
    assert bucket_history(hist, now=60.0, span=60.0, width=6) == pytest.approx([30.0] * 6)


def test_window_mask_marks_probe_columns():
    assert window_mask([(2.0, 3.5)], now=10.0, span=10.0, width=10) == [
        False, False, True, True, False, False, False, False, False, False]


def test_stats_text_without_and_with_fit():
    v = StatsView()
    assert "needs ≥3 probes" in stats_text(v).plain
    live = LiveSummary()
    for r in fixed_results():
        live.add(r)
    ok = [r for r in fixed_results() if r.ok][-1]
    v = build_stats(live.summary(None), which="all", method="robust", last=ok, device="CPU")
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
    from prefilltui.model.types import ServerInfo

    v = StatsView(intercept_s=-0.195, intercept_ci=(-0.4, 0.01), slope_s=6.775e-3,
                  slope_ci=(6.5e-3, 7.0e-3), prefill_tokens_per_s=147.6, prefill_tokens_per_s_ci=(46, 64),
                  r2=0.99)
    text = stats_text(v).plain
    # +-205 ms is wider than the pin bound: no confident negative number, the interval
    assert "intercept not pinned" in text and "\u2212195" not in text
    assert "add short prompts/repeats" in text
    # the interval is cut at 0 on screen: a fixed cost is never negative
    assert "0.0–10.0 ms" in text and "\u2212400" not in text
    # pinned but below 0: shown as 0 with the fit's value beside it
    pinned = stats_text(StatsView(intercept_s=-0.002, intercept_ci=(-0.005, 0.001),
                                  slope_s=1e-4)).plain
    assert "intercept 0.0 ms" in pinned and "≈0: fit \u22122.0 ms" in pinned
    spans = stats_text(StatsView(intercept_s=0.002, intercept_ci=(-0.001, 0.005),
                                 slope_s=1e-4)).plain
    assert "\nintercept ≈0: within noise" in spans
    assert "slope     6,775 µs/tok" in text and "6,500–7,000 µs/tok" in text
    assert "95%     46.0–64.0 tok/s" in text
    assert "≈0" not in stats_text(StatsView(intercept_s=0.02, intercept_ci=(0.01, 0.03),
                                             slope_s=1e-4)).plain
    last = make_result(1, 512)
    last.queue_s = 0.0
    last.queue_source = "idle"
    info = ServerInfo(base_url="http://x", kind="llama.cpp",
                      model="/home/u/.cache/prefilltui/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    v = build_stats(LiveSummary().summary(info), which="all", method="robust", last=last,
                    device="CPU")
    text = stats_text(v).plain
    assert "queue     0.0 ms (est.)" in text
    assert "\nSmolLM2-135M-Instruct.Q4_1\n" in text
    assert short_model("a/" + "x" * 40 + ".gguf") == "x" * 25 + "…"


def test_verdict_not_repeated_in_notes():
    """A CPU target: the summary's verdict "unknown-peak" is the word, its sentence a
    note without the repeated words."""
    live = LiveSummary()
    for r in fixed_results():
        live.add(r)
    info = ServerInfo(base_url="http://x", kind="llama.cpp", model="SmolLM2-135M-Instruct")
    s = live.summary(info, gpu_names=("CPU (2 cores)",))
    assert s.verdict.level == "unknown-peak"
    v = build_stats(s, which="all", method="robust", last=None, device=None)
    text = stats_text(v).plain
    assert text.count("--peak-tflops") == 1
    assert f"{units.flops(s.roofline.achieved_flops)} achieved" in text


def test_status_line_words():
    c = ProbeCounts(total=2, ok=1, failed=1)
    s = status_line("retrying", "connect refused; retrying in 2 s", c, (32, 4096), "all", False)
    assert "retrying" in s and "connect refused" in s and "1 failed" in s
    assert "paused" in status_line("probing", "", c, (32, 4096), "window", True)
    s = status_line("probing", "", c, (32, 4096), "all", False,
                    ("sent without stream_options", "lengths estimated"))
    assert s.endswith("[$warning]sent without stream_options[/]  [$warning]lengths estimated[/]")


def test_status_line_until_ci_and_context_cap():
    from prefilltui.model.fit import Progress

    c = ProbeCounts()
    prog = Progress(target_pct=2.0, half_width_pct=3.14, probes=40, fit_points=39,
                    elapsed_s=12.0, done=False, reason=None)
    s = status_line("probing", "1024 tokens", c, (4, 4007), "all", False, progress=prog,
                    cap_note="context cap")
    assert "CI ±3.1→±2 %" in s and "4–4007 tok [$warning](context cap)" in s
    done = status_line("done", "throughput +-1.9 % (target 2 %), 57 probes, target reached",
                       c, (4, 1024), "all", False, progress=prog)
    assert "target reached" in done and "CI ±" not in done


def test_stats_percentiles_and_server_fixed_cost():
    """The panel shows p50/p90/p99 overall and at the last probe's length, with the
    counts, and the server-side fixed cost under the intercept."""
    live = LiveSummary()
    rs = []
    for i, n in enumerate([4, 16, 64, 256, 1024] * 4):
        r = make_result(i + 1, n)
        r.server_prefill_s = 0.002 + n * 1e-4
        r.ttft_s = r.server_prefill_s + 0.008 + 0.0005 * (i % 3)
        rs.append(r)
        live.add(r)
    v = build_stats(live.summary(None), which="all", method="robust", last=rs[-1], device=None)
    assert v.pct_all[0] == 20 and v.pct_len[:2] == (1024, 4)
    assert v.server_fixed_s is not None and abs(v.server_fixed_s - 0.0105) < 0.002
    text = stats_text(v).plain
    assert "TTFT ms   p50/p90/p99" in text and "\n all 20 " in text and "\n 1024 ×4 " in text
    assert "\nintercept server " in text


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

    from prefilltui.model.fit import fit_robust
    from prefilltui.tui.viewmodel import drift_warning

    xs = [32, 64, 128, 256, 512, 1024, 2048, 4096]
    base = fit_robust(xs, [0.02 + 20e-6 * n + (1e-4 if i % 2 else -1e-4) for i, n in enumerate(xs)])
    live = LiveSummary()
    for i, n in enumerate(xs * 2):
        live.add(mk(i + 1, n, b=45e-6, noise=(1e-4 if i % 2 else -1e-4)))
    s = live.summary(None)
    v = build_stats(s, which="all", method="robust", last=None, device=None,
                    warnings=(drift_warning(base, s.fit),))
    text = stats_text(v).plain
    assert "⚠" in text and "baseline" in text


def test_stats_say_a_miss_the_server_counted():
    from prefilltui.model.types import ProbeResult

    live = LiveSummary()
    for n in range(4):
        live.add(ProbeResult(ok=True, ttft_s=0.1, prompt_tokens=100 + n, cached_tokens=0,
                             cached_tokens_source="metrics"))
    live.add(ProbeResult(ok=True, ttft_s=0.1, prompt_tokens=90))  # the server counted nothing
    v = build_stats(live.summary(None), which="all", method="robust", last=None, device=None)
    assert (v.cache_counted, v.ok_probes) == (4, 5)
    text = stats_text(StatsView(cache_counted=v.cache_counted, ok_probes=v.ok_probes)).plain
    assert "0 hits, server-counted on 4/5" in text
    assert "server-counted" not in stats_text(StatsView(ok_probes=5)).plain


def test_a_fit_whose_slope_interval_includes_zero_says_too_noisy():
    """A new user's early fit on a loaded machine: R² -3.185, slope 95% -8,285 to
    46,162 µs/token, shown as "prefill 52.8 tok/s" with no warning.  The panel and the
    text summary now say the throughput is not measured yet."""
    from prefilltui.model.fit import fit_ols
    from prefilltui.render.text import format_fit_lines

    noisy = fit_ols([4, 8, 16, 32, 64], [0.9, 0.1, 1.4, 0.2, 1.1])
    assert noisy.unresolved and noisy.slope_ci[0] < 0
    clean = fit_ols([4, 8, 16, 32, 64], [0.012, 0.014, 0.018, 0.026, 0.042])
    assert not clean.unresolved
    v = StatsView(slope_s=noisy.slope_s_per_token, slope_ci=noisy.slope_ci,
                  prefill_tokens_per_s=noisy.prefill_tokens_per_s, r2=noisy.r2, unresolved=True)
    assert "too noisy yet" in stats_text(v).plain
    assert "too noisy yet" not in stats_text(StatsView(slope_s=1e-3, slope_ci=(5e-4, 2e-3),
                                                       prefill_tokens_per_s=1e3)).plain
    assert any("too noisy yet" in ln for ln in format_fit_lines(noisy))
    assert not any("too noisy yet" in ln for ln in format_fit_lines(clean))


def test_a_noisy_fit_headline_and_details_state_no_throughput():
    """The slope's 95% interval includes 0: the headline said "prefill 1.4k tok/s" above
    "95% too noisy yet", and the details' verdict note quoted "1,438 prompt tok/s"; both
    now say too noisy yet, with no number (fit.throughput_text's rule)."""
    from prefilltui.model.spec import AnalysisOptions
    from prefilltui.model.summary import analyze
    from prefilltui.model.types import ServerInfo
    from prefilltui.tui.widgets.stats import detail_text, headline_text
    from tests.unit.test_fit_analysis import _noisy

    si = ServerInfo(model="/x/SmolLM2-135M-Instruct.Q4_1.gguf", params=134515008, hidden=576,
                    layers=30)
    d = analyze(_noisy(), si, AnalysisOptions())
    v = build_stats(d, which="all", method="robust", last=None, device=None)
    head, details = headline_text(v).plain, detail_text(v).plain
    assert head.splitlines()[:2] == ["prefill   too noisy yet", "  95%     slope includes 0"]
    assert "Peak unknown (CPU or unlisted GPU): throughput too noisy yet, the slope's 95% " \
        "interval includes 0." in details
    assert "1.4k" not in head and "1,438" not in details and "tok/s" not in head + details


def test_plot_ticks_never_share_a_row():
    from prefilltui.render.ticks import apart

    # the demo at 80x24: TTFT up to 7.2 s on 3 canvas rows: 2.5k and 5k on one row
    assert apart([0.0, 2500.0, 5000.0], 7234.0, 3) == [0.0, 5000.0]
    assert apart([0.0, 100.0, 200.0], 220.0, 3) == [0.0, 100.0, 200.0]  # one a row
    assert apart([0.0, 1.0], 2.0, 1) == [0.0]


def test_details_say_which_slope_flops_and_mfu_come_from():
    """TTFT curving up: the headline's prefill is the line's, FLOP/s and MFU the
    quadratic's linear term's; the details name it with that slope's throughput."""
    from tests.unit.test_fit_analysis import run
    from prefilltui.model.roofline import flops, lookup_model
    from prefilltui.model.summary import analyze

    smol = lookup_model("smollm2-135m")
    b = 1 / 4000
    c = flops.quadratic_coefficient(smol) / (flops.linear_coefficient(smol) / b)
    s = analyze(run(n=64, a=0.01, b=b, c=c, lengths=[64, 128, 256, 512, 1024, 2048, 4096, 8192]),
                ServerInfo(model="SmolLM2-135M"), None)
    v = build_stats(s, which="all", method="robust", last=None, device=None)
    text = stats_text(v).plain
    paired = s.quadratic.fit.prefill_tokens_per_s
    assert (f"FLOP/s, MFU: the quadratic fit's linear term, {paired:,.0f} tok/s"
            in text.replace("\n", " "))
    plain = build_stats(analyze(run(b=1 / 3000), ServerInfo(model="SmolLM2-135M"), None),
                        which="all", method="robust", last=None, device=None)
    assert plain.flops_from is None


def test_details_curvature_in_the_summarys_unit():
    """The details' quadratic note: the text summary's unit and format (was
    'c=1.52e+03 ns/tok²' for a CPU's curvature)."""
    from tests.unit.test_fit_analysis import run
    from prefilltui.model.summary import analyze

    s = analyze(run(n=40, a=0.05, b=1 / 340, c=1.5e-6,
                    lengths=[4, 9, 19, 40, 87, 188, 406, 878, 1896, 4007]),
                ServerInfo(model="SmolLM2-135M"), None)
    v = build_stats(s, which="all", method="robust", last=None, device=None)
    c = s.quadratic.fit.c_s_per_token2
    assert v.quadratic_note == f"quadratic: c = {c * 1e9:,.0f} ms per (1k tokens)²"
    assert "e+" not in stats_text(v).plain


def _as_expected(rows, idle=False):
    from prefilltui.model.diagnosis import TtftVerdict

    return TtftVerdict(cause="none", headline="nothing stands out", evidence=(), ttft_s=0.1,
                       probes=6, idle=idle, expected=tuple(rows))


def test_the_headlines_verdict_line_fits_its_width():
    """"TTFT as expected: ..." in the headline: the longest form that fits the panel
    (28 columns at 80x24, 40 from 120), the whole line where it fits and in the details;
    it was cut after the first length at 80x24 ("TTFT as expected: 33 tok 22…")."""
    from prefilltui.tui.viewmodel import verdict_forms
    from prefilltui.tui.widgets.stats import headline_text

    v = _as_expected([(33, 0.022, 0.005), (512, 0.05, 0.006), (4097, 0.204, 0.007)])
    forms = verdict_forms(v)
    assert forms == ("TTFT as expected: 33 tok 22 ± 5 ms, 4,097 tok 204 ± 7 ms",
                     "TTFT as expected: 33→22 ms, 4.1k→204 ms",
                     "TTFT ok: 33→22, 4.1k→204 ms", "TTFT ok: 4.1k→204 ms")
    stats = StatsView(slope_s=4.5e-5, why=forms[0], why_forms=forms)

    def why(width):
        return headline_text(stats, width).plain.splitlines()[-1]
    assert why(28) == "TTFT ok: 33→22, 4.1k→204 ms" and len(why(28)) <= 28
    assert why(40) == "TTFT as expected: 33→22 ms, 4.1k→204 ms"
    assert why(80) == forms[0]  # nothing lost where there is room
    assert stats_text(stats).plain.endswith(forms[0])  # the details: whole
    # TTFT in seconds at the long end: the units of each, then the longest alone
    long = verdict_forms(_as_expected([(128, 1.04, 0.01), (32768, 12.3, 0.2)], idle=True))
    assert long[1:] == ("TTFT as expected (idle): 128→1,040 ms, 33k→12.3 s",
                        "TTFT ok: 128→1,040 ms, 33k→12.3 s", "TTFT ok: 33k→12.3 s")
    assert headline_text(StatsView(slope_s=1e-4, why=long[0], why_forms=long), 28
                         ).plain.endswith("\nTTFT ok: 33k→12.3 s")
    # a length the fit does not pin: left out of the short forms ("4→?" told a person
    # nothing), its uncertainty in the whole line only
    pinless = verdict_forms(_as_expected([(4, 0.035, 12.6), (512, 0.04, 0.003),
                                          (4097, 0.204, 0.007)]))
    assert pinless[0].startswith("TTFT as expected: 4 tok not pinned (± 12,600 ms)")
    assert pinless[2] == "TTFT ok: 512→40, 4.1k→204 ms"
    alone = verdict_forms(_as_expected([(4, 0.035, 12.6), (4097, 0.204, 0.007)]))
    assert alone[1:] == ("TTFT as expected: 4.1k→204 ms", "TTFT ok: 4.1k→204 ms",
                         "TTFT ok: 4.1k→204 ms")
    # no length pinned (a loaded CPU's demo read "TTFT as expected: 4→?, 1k→?"): it says
    # the probes are too noisy to judge, the uncertainties in the whole line
    noisy = verdict_forms(_as_expected([(4, 0.035, 0.04), (1024, 2.8, 3.1)]))
    assert noisy[0] == ("TTFT too noisy to judge yet: 4 tok not pinned (± 40 ms), "
                        "1,024 tok not pinned (± 3,100 ms)")
    assert noisy[1:] == ("TTFT too noisy to judge yet", "TTFT too noisy to judge")
    # a cause is one line, as it was
    from dataclasses import replace
    alarm = replace(v, cause="queueing", above=True, headline="queueing: 40 ms of 70 ms")
    assert verdict_forms(alarm) == ("why TTFT: queueing: 40 ms of 70 ms",)


def test_achieved_flops_read_the_same_in_headline_details_and_text():
    """0.105 TFLOP/s read "0.105 TFLOP/s" in the headline, "0.1 TFLOP/s est." at 0.1
    and "98.4 GFLOP/s" below: one spelling (units.flops) in the headline, the details,
    the text summary and the roofline verdict."""
    from prefilltui.model.roofline import verdict
    from prefilltui.tui.widgets.stats import headline_text

    for tflops, shown in ((0.105, "105 GFLOP/s"), (0.1, "100 GFLOP/s"),
                          (0.0984, "98.4 GFLOP/s"), (0.091, "91.0 GFLOP/s"),
                          (7.93, "7.93 TFLOP/s")):
        head = headline_text(StatsView(achieved_tflops=tflops, estimate=True)).plain
        assert f"achieved  {shown} est." in head, head
        details = stats_text(StatsView(achieved_tflops=tflops, mfu=0.3, estimate=True)).plain
        assert f"achieved  {shown} est." in details, details
        assert f"{shown} achieved" in verdict(None, achieved=tflops * 1e12)[1]


def test_fit_title_says_how_many_of_the_ok_probes_and_the_details_say_why():
    """The fit panel's title read "robust fit · all · n 14" beside the status line's
    "16 ok", with no reason: it counts the fit's probes of the ok ones, and the details
    name the ones left out (a warm-up and a cache hit here)."""
    from prefilltui.tui.widgets.stats import detail_text, stats_title

    live = LiveSummary()
    for r in fixed_results():
        live.add(r)
    s = live.summary(None)
    assert s.probes.ok == 16 and s.probes.left_out == {"warm-up": 1, "cache hit": 1}
    v = build_stats(s, which="all", method="robust", last=None, device=None)
    assert stats_title(v) == "robust fit · all · n 14 of 16 ok"
    assert stats_title(v, 26) == "robust fit · n 14 of 16 ok"  # 80 columns: 32-wide box
    assert stats_title(v, 20) == "fit n 14 of 16 ok"
    assert v.fit_counts == "fit n 14 of 16 ok: left out 1 warm-up, 1 cache hit"
    assert detail_text(v).plain.splitlines()[0] == v.fit_counts  # the details open with it
    # the robust fit's outliers and, for the window, the probes older than it
    from dataclasses import replace

    from prefilltui.tui.viewmodel import fit_counts

    fit = replace(s.fit, n=10, n_offered=12)
    assert fit_counts(s.probes, fit, "window") == (
        "fit n 10 of 16 ok: left out 1 warm-up, 1 cache hit, 2 outliers (robust fit), "
        "2 older than the window")
