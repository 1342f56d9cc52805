"""Pilot tests: keys change state, runner callbacks become messages, pause stops probes."""

from __future__ import annotations

import asyncio
import json
import threading


from tests.tui.fakes import (FAKE_RANGE, NOW, FakeRunner, FakeSampler, fixed_results,
                             gpu_snapshot, make_result)

from prefilltui.tui.app import PrefillApp, build_app
from prefilltui.tui.help import HelpScreen
from prefilltui.tui.messages import ProbeDone, RunnerStateChanged
from prefilltui.tui.widgets.probe_log import ProbeLog
from prefilltui.tui.widgets.ttft_plot import TTFTPlot


def _app(preload=(), interval=None, **kw) -> tuple[PrefillApp, dict]:
    holder: dict = {}

    def factory(on_result, on_state):
        holder["runner"] = FakeRunner(on_result, on_state, preload=preload, interval=interval)
        return holder["runner"]

    kw.setdefault("clock", lambda: NOW)
    kw.setdefault("sweep_range", FAKE_RANGE)
    return build_app(factory, kw.pop("sampler", FakeSampler()), **kw), holder


def _status(app) -> str:
    return str(app.query_one("#status").render())


async def test_keys_change_state():
    app, h = _app(preload=fixed_results())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        runner = h["runner"]
        assert app.live.total == len(fixed_results())
        await pilot.press("space")
        assert app.paused and ("pause",) in runner.calls
        await pilot.pause()
        assert "paused" in _status(app)
        await pilot.press("space")
        assert not app.paused and ("resume",) in runner.calls
        await pilot.press("w")
        assert app.which == "window"
        await pilot.press("w")
        assert app.which == "all"
        await pilot.press("b")
        assert ("burst",) in runner.calls
        await pilot.press("plus")
        # 4096 x 2 = 8192, capped below the 8192-token context of the fake server
        assert runner.calls[-1] == ("set_range", 32, 8023)
        await pilot.press("minus")
        assert runner.calls[-1] == ("set_range", 32, 4011)
        first = app.theme
        await pilot.press("t")
        assert app.theme != first and app.theme in app.theme_set.names()
        app.flush()
        assert app.query_one("#plot", TTFTPlot).point_count > 0
        await pilot.press("r")
        assert app.fit.snapshot() is None
        assert app.query_one("#plot", TTFTPlot).point_count == 0
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
    assert app.return_code == 0
    assert ("stop",) in runner.calls


async def test_ctrl_c_quits_like_q():
    app, h = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0
    assert ("stop",) in h["runner"].calls


async def test_runner_thread_callbacks_become_messages():
    seen: list = []
    app, h = _app()
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await pilot.pause()
        runner = h["runner"]
        results = fixed_results()

        def from_thread():
            runner.on_state("retrying", "connect: refused; retrying in 2 s")
            for r in results:
                runner.emit(r)

        t = threading.Thread(target=from_thread)
        t.start()
        t.join()
        for _ in range(20):
            await pilot.pause(0.05)
            if app.live.total == len(results):
                break
        done = [m for m in seen if isinstance(m, ProbeDone)]
        assert [m.result.seq for m in done] == [r.seq for r in results]
        assert any(isinstance(m, RunnerStateChanged) and m.state == "retrying" for m in seen)
        assert app.live.failed == 1 and app.live.cache_hits == 1
        app.flush()
        # failed probe is not plotted; warm-up and cache hit are not in the fit
        plot = app.query_one("#plot", TTFTPlot)
        assert plot.point_count == len(results) - 3
        assert app.last_fit is not None and app.last_fit.fit.n == len(results) - 3
        assert app.query_one("#log", ProbeLog).row_count == len(results)


async def test_state_line_shows_retrying_reason():
    app, h = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        h["runner"].on_state("retrying", "server unreachable; retrying in 2 s")
        await pilot.pause()
        assert "retrying" in _status(app) and "unreachable" in _status(app)


async def test_state_line_says_rejected_fields_and_estimated_lengths():
    app, h = _app()
    async with app.run_test(size=(160, 24)) as pilot:
        h["runner"].notices.update({
            "sent without stream_options": "the server rejected stream_options (...)",
            "lengths estimated": "the server reports no prompt token count (...)"})
        h["runner"].emit(make_result(1, 100))
        for _ in range(20):
            await pilot.pause(0.05)
            if app.live.total:
                break
        app.flush()
        status = _status(app)
        assert status.count("sent without stream_options") == 1
        assert status.count("lengths estimated") == 1


async def test_pause_stops_probes():
    app, h = _app(interval=0.02)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(50):
            await pilot.pause(0.05)
            if app.live.total >= 3:
                break
        assert app.live.total >= 3
        await pilot.press("space")
        await pilot.pause(0.1)
        before = h["runner"].emitted
        await asyncio.sleep(0.3)
        await pilot.pause()
        assert h["runner"].emitted == before
        await pilot.press("space")
        for _ in range(50):
            await pilot.pause(0.05)
            if h["runner"].emitted > before:
                break
        assert h["runner"].emitted > before


async def test_replot_is_throttled():
    app, h = _app(replot_hz=4.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        plot = app.query_one("#plot", TTFTPlot)
        start = plot.replots
        for i in range(300):
            h["runner"].emit(make_result(i + 1, 32 + 13 * i))
        await pilot.pause(0.6)
        assert app.live.total == 300
        # 300 probes in well under a second: a handful of redraws, not 300
        assert plot.replots - start <= 6


async def test_row_selection_shows_message():
    """Enter on the failed probe's row says why it failed.  Each step waits for its
    condition (the rows drawn, the cursor on the last one, the message posted and
    handled), never for one Pilot pause: under load the Selected message and its
    notification take more than one turn of the app's loop."""
    app, h = _app(preload=fixed_results())
    notes: list[str] = []
    said = lambda: any("failed: timeout" in n and "no first token" in n for n in notes)  # noqa: E731
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.flush()  # the preloaded rows, without waiting for the next tick
        app.notify = lambda msg, **kw: notes.append(msg)  # capture
        log = app.query_one("#log", ProbeLog)
        for _ in range(400):  # up to 20 s
            if log.row_count == len(fixed_results()):
                break
            await pilot.pause(0.05)
        assert log.row_count == len(fixed_results())
        log.focus()
        log.move_cursor(row=log.row_count - 1)
        for _ in range(400):
            if log.cursor_row == log.row_count - 1 and log.has_focus:
                break
            await pilot.pause(0.05)
        await pilot.press("enter")
        for _ in range(400):
            if said():
                break
            await pilot.pause(0.05)
    assert said(), notes


async def test_export_writes_csv_and_summary(tmp_path):
    from prefilltui.commands.exports import make_exporter
    from prefilltui.measure.runfile import RunWriter

    run = tmp_path / "run.jsonl"
    w = RunWriter(run)
    for r in fixed_results():
        w.append(r)
    w.close()
    notice = {"lengths estimated": "the server reports no prompt token count"}
    app, h = _app(preload=fixed_results(), run_path=run,
                  exporter=make_exporter(run, lambda: None, None, lambda: notice))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        for _ in range(40):
            await pilot.pause(0.05)
            if (tmp_path / "run.summary.json").exists():
                break
        await app.workers.wait_for_complete()
    csv_text = (tmp_path / "run.csv").read_text()
    assert csv_text.splitlines()[0].startswith("seq,")
    assert len(csv_text.splitlines()) == len(fixed_results()) + 1
    summary = json.loads((tmp_path / "run.summary.json").read_text())
    # the summary report prints (schema 2), with the session's notices as the live notes
    assert summary["schema"] == "prefilltui.summary/2" and summary["run_file"] == str(run)
    assert summary["live"]["notes"].count("the server reports no prompt token count") == 1
    assert summary["probes"]["total"] == len(fixed_results())


async def test_gauges_show_na_and_gpu_rows():
    snap = gpu_snapshot(3)
    app, _ = _app(sampler=FakeSampler(snap))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        texts = [str(w.render()) for w in app.query(".gauge-text")]
        assert any("GPU 2 util" in t for t in texts)
        assert any("612 W / 700 W" in t for t in texts)


async def test_cpu_gauge_na_reason_and_unavailable():
    app, _ = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        texts = [str(w.render()) for w in app.query(".gauge-text")]
        assert any(t.startswith("CPU util") for t in texts)
        assert "power N/A (no RAPL)" in texts  # short on the gauge ...
        await pilot.press("question_mark")
        await pilot.pause()
        details = str(app.screen.query_one("#help-details").render())
        assert "CPU power N/A: RAPL not readable" in details  # ... full in the help
        await pilot.press("escape")
    from tests.tui.fakes import fake_snapshot

    app, _ = _app(sampler=FakeSampler(fake_snapshot(kind="none", available=False,
                                                    reason="NVML unavailable: driver not loaded")))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        status = str(app.query_one(".gauge-status").render())
        assert status == "telemetry unavailable: NVML unavailable: driver not loaded"


async def test_cache_check_runs_in_worker_and_resumes():
    calls = []

    from prefilltui.model.fleet import CacheFinding

    def checker():
        calls.append("check")
        return CacheFinding("off", "prefix cache: no reuse seen (2 identical prompts, "
                            "cached_tokens 0)")

    app, h = _app(cache_checker=checker)
    notes = []
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.notify = lambda msg, **kw: notes.append(msg)
        await pilot.press("c")
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert calls == ["check"]
    assert ("pause",) in h["runner"].calls and ("resume",) in h["runner"].calls
    assert any("prefix cache" in n for n in notes)
    assert app.feed.cache is not None and app.feed.cache.verdict == "off"  # for the advisor


async def test_quit_code_3_when_never_reached():
    app, h = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        h["runner"].on_state("failed", "server unreachable: connection refused")
        await pilot.pause()
        await pilot.press("q")
    assert app.return_code == 3


async def test_cpu_fallback_reason_notified_and_shown_when_wide():
    from tests.tui.fakes import cpu_history, fake_device, fake_snapshot

    reason = "NVML unavailable: NVML Shared Library Not Found — showing CPU"
    snap = fake_snapshot(reason=reason, devices=(fake_device(history=cpu_history()),))
    for size, shown in (((80, 24), False), ((160, 48), True)):
        app, _ = _app(sampler=FakeSampler(snap))
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await pilot.pause()
            status = app.query_one(".gauge-status")
            assert (status.styles.display != "none") is shown
            assert any(n.message == reason for n in app._notifications)


async def test_plot_redraw_without_new_data_reuses_text():
    """A refresh with no replot (a toast over the plot, focus) reuses the built text."""
    app, _ = _app(preload=fixed_results())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        plot = app.query_one("#plot", TTFTPlot)
        first = plot.render()
        plot.refresh()
        await pilot.pause()
        assert plot.render() is first
        app.notify("a toast over the plot")
        await pilot.pause(0.2)


async def test_probe_log_batches_caps_and_follows():
    """Rows arrive on the tick (one update for many probes), the oldest go beyond
    max_rows, the view follows the newest row, and the cursor keys move the cursor."""
    app, h = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        log = app.query_one("#log", ProbeLog)
        for i in range(250):
            h["runner"].emit(make_result(i + 1, 32 + i))
        await pilot.pause()
        app.flush()
        await pilot.pause()
        assert log.row_count == log.max_rows == 200
        assert log.scroll_y == log.max_scroll_y > 0
        assert "282" in log.render_line(log.size.height - 1).text  # newest: 32+249+1 tokens
        log.focus()
        log.move_cursor(row=log.row_count - 1)
        await pilot.press("up")
        assert log.cursor_row == log.row_count - 2
        await pilot.press("home")
        assert log.cursor_row == 0 and log.scroll_y == 0


async def test_focused_probe_log_keeps_following_new_probes():
    # the log is often the focused widget; it must still show the newest probes
    app, h = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        log = app.query_one("#log", ProbeLog)
        log.focus()
        for i in range(12):
            h["runner"].emit(make_result(i + 1, 100 + i))
            await pilot.pause()
            app.flush()
            await pilot.pause()
        assert log.cursor_row == log.row_count - 1
        assert log.scroll_y == log.max_scroll_y > 0
        assert "112" in log.render_line(log.size.height - 1).text  # newest: 100+11+1 tokens


def _toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_burst_toast_names_the_longest_length_as_it_is():
    app, h = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("b")
        assert ("burst",) in h["runner"].calls
        assert "burst: 4,096 tokens back to back" in _toasts(app)
        await pilot.press("plus")  # before the burst started: said again, new length
        assert "burst: 8,023 tokens back to back" in _toasts(app)
        h["runner"]._set("burst", "#1 at 8,023 tokens, ≥ 2.2 s")
        await pilot.pause()
        assert "▲ burst #1 at 8,023 tokens, ≥ 2.2 s" in _status(app)
        app.clear_notifications()
        await pilot.press("minus")  # burst running: no more burst toasts
        assert not any(t.startswith("burst") for t in _toasts(app))
        h["runner"]._set("burst", "done: 3 × 8,023 tokens, 2.4 s")
        h["runner"]._set("idle", "2.4 s after burst: 3 × 8,023 tokens, 2.4 s")
        await pilot.pause()
        assert "burst: 3 × 8,023 tokens, 2.4 s" in _toasts(app)  # not merged away
        assert "○ idle 2.4 s after burst: 3 × 8,023 tokens, 2.4 s" in _status(app)


async def test_header_shows_the_runners_capped_range():
    """After discovery the runner caps its lengths at the context (runner.lengths):
    the status line shows that range, picked up with the runner's next message."""
    app, h = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "32–4096 tok" in _status(app)
        runner = h["runner"]
        runner.lengths = [32, 64, 128, 256, 512, 1024, 2048, 4007]
        runner._set("probing", "context limit: capping prompts at 4007 tokens")
        await pilot.pause()
        assert "32–4007 tok" in _status(app)
        assert app.sweep_range == (32, 4007)


async def test_help_close_hint_visible_at_small_sizes():
    for size in ((80, 24), (80, 14)):
        app, _ = _app()
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            hint = app.screen.query_one("#help-close")
            assert "Ctrl-C quits" in str(hint.render())
            assert 0 < hint.region.bottom <= size[1] - 1 and hint.region.height == 1


async def test_capped_lengths_and_until_ci_progress_are_shown():
    """The runner's cap note becomes a notification and "(context cap)" on the status
    line; its repeat-until-confident progress shows as "CI ±x→±target %" and the
    final "done" line (how many probes it took) is notified."""
    from prefilltui.model.fit import Progress

    app, h = _app()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        runner = h["runner"]
        runner.lengths = [4, 64, 1024, 4007]
        runner.notes = ["length 5000 is over the longest prompt the server takes "
                        "(the server's context is 4096 tokens; ...): capped to 4007 tokens"]
        runner.cap_note = "context cap"
        runner.progress = Progress(target_pct=2.0, half_width_pct=3.4, probes=12, fit_points=11,
                                   elapsed_s=9.0, done=False, reason=None)
        runner._set("probing", "1024 tokens")
        await pilot.pause()
        status = _status(app)
        assert "(context cap)" in status and "CI ±3.4→±2 %" in status
        assert any("capped to 4007" in n.message for n in app._notifications)
        runner.progress = Progress(target_pct=2.0, half_width_pct=1.9, probes=40, fit_points=39,
                                   elapsed_s=30.0, done=True, reason="target reached")
        runner._set("done", runner.progress.line())
        await pilot.pause()
        assert "target reached" in _status(app)
        assert any("40 probes" in n.message for n in app._notifications)


async def test_probes_faster_than_replot_hz_are_drawn_together():
    """Probes arriving 5 times a second are drawn at most replot_hz (1) times a second:
    the data redraw (fit, stats, plot, log) is what costs the app its CPU."""
    app, h = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        plot = app.query_one("#plot", TTFTPlot)
        before, t0 = plot.replots, asyncio.get_running_loop().time()
        for i in range(10):
            h["runner"].emit(make_result(100 + i, 512))
            await pilot.pause(0.2)
        elapsed = asyncio.get_running_loop().time() - t0
        drawn = plot.replots - before
        assert 1 <= drawn <= elapsed * app.replot_hz + 1, (drawn, elapsed)
        await pilot.pause(1.2)
        assert app.live.total == 10 and app.query_one("#log", ProbeLog).row_count == 10
