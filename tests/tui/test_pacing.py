"""Pilot tests of duty-cycled probing and the burst: the real SweepRunner over a fake
client (no network), a fake sampler; the history marks each probe's window."""

from __future__ import annotations

import asyncio
import time

from tests.tui.fakes import NOW, FakeClient, FakeRunner, FakeSampler, make_result

from prefilltui.model.pacing import Pacing
from prefilltui.measure.sweep import SweepRunner
from prefilltui.measure.sweep import SweepConfig
from prefilltui.tui.app import build_app
from prefilltui.tui.widgets.gauges import HIGHLIGHT, HistorySpark
from prefilltui.tui.widgets.probe_log import ProbeLog

#: small numbers so the tests run in about a second: 2 ms TTFT per 100 tokens
PACING = Pacing(duty=0.5, idle_floor_s=0.05, burst_min_s=0.3)


def _real_app(pacing: Pacing = PACING, lengths=(100, 2000), **kw):
    holder: dict = {}

    def factory(on_result, on_state):
        holder["runner"] = SweepRunner(FakeClient, SweepConfig(
            list(lengths), warmup=0, continuous=True, pacing=pacing),
            on_result=on_result, on_state=on_state)
        return holder["runner"]

    return build_app(factory, FakeSampler(), clock=lambda: NOW, pacing=pacing, **kw), holder


async def _until(pilot, pred, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        await pilot.pause(0.02)
    assert pred(), "timed out"


def _status(app) -> str:
    return str(app.query_one("#status").render())


async def test_paused_b_starts_a_burst_at_once_that_lasts_the_minimum():
    app, h = _real_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: app.live.total >= 2)
        await pilot.press("space")
        await _until(pilot, lambda: h["runner"].state == "paused")
        await asyncio.sleep(0.2)
        before = app.live.total
        t_press = time.perf_counter()
        await pilot.press("b")
        # at once, while still paused: the runner bursts, it does not wait for resume
        await _until(pilot, lambda: h["runner"].last_burst is not None)
        assert app.paused
        await pilot.pause(0.1)
        burst = [r for r in list(app.results)[before:]]
        assert burst and all(r.burst and r.requested_tokens == 2000 for r in burst)
        assert burst[0].t_send - t_press < 0.5
        assert burst[-1].t_end - burst[0].t_send >= PACING.burst_min_s
        n, length, secs = h["runner"].last_burst
        text = f"burst: {n} × 2,000 tokens, {secs:.1f} s"
        await _until(pilot, lambda: text in [str(x.message) for x in app._notifications])
        await _until(pilot, lambda: h["runner"].state == "paused")
        assert text in _status(app) and "paused" in _status(app)
        await asyncio.sleep(0.3)
        assert app.live.total == before + n  # paused again: nothing else ran


async def test_idle_gap_follows_each_probe_by_default():
    app, h = _real_app(Pacing(duty=0.5, idle_floor_s=0.3))
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: app.live.total >= 4)
        res = list(app.results)
        for a, b in zip(res, res[1:]):
            assert b.t_send - a.t_end >= 0.3 - 0.005
        await _until(pilot, lambda: "idle" in _status(app))


def _spark(app, which: str = ".util-spark") -> HistorySpark:
    return app.query(which).first(HistorySpark)


async def test_history_marks_windows_and_the_selected_probe():
    """Columns inside a probe's t_send..t_end are marked; selecting the probe's row in
    the focused log highlights its window."""
    rs = [make_result(i, 512, t_send=NOW - 50 + 10 * i) for i in range(1, 5)]
    for r in rs:
        r.t_end = r.t_send + 3.0
    holder = {}

    def factory(on_result, on_state):
        holder["runner"] = FakeRunner(on_result, on_state, preload=rs)
        return holder["runner"]

    app = build_app(factory, FakeSampler(), clock=lambda: NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        spark = _spark(app)
        width = spark.size.width
        marks = spark._sig[3]
        step = 60.0 / width
        for r in rs:
            mid = int((r.t_send + 1.5 - (NOW - 60)) / step)
            assert marks[mid] == 1
        gap = int((rs[0].t_end + 3.5 - (NOW - 60)) / step)
        assert marks[gap] == 0
        log = app.query_one("#log", ProbeLog)
        log.focus()
        await pilot.pause()
        log.move_cursor(row=1)
        await pilot.pause()
        app.flush()
        await pilot.pause()
        assert app.highlight == (rs[1].t_send, rs[1].t_end)
        marks = _spark(app)._sig[3]
        assert marks[int((rs[1].t_send + 1.5 - (NOW - 60)) / step)] == HIGHLIGHT
        assert marks[int((rs[2].t_send + 1.5 - (NOW - 60)) / step)] == 1
        app.set_focus(None)
        await pilot.pause()
        assert app.highlight is None


async def test_log_rows_show_util_peak_mean_and_energy():
    r = make_result(1, 1024)
    r.util_peak_pct, r.util_mean_pct, r.energy_j = 97.0, 61.0, 12.5
    app = build_app(lambda a, b: FakeRunner(a, b, preload=[r]), FakeSampler(),
                    clock=lambda: NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        log = app.query_one("#log", ProbeLog)
        head = log.render_line(0).text
        row = log.render_line(1).text
        assert "util pk/avg" in head and " 97/ 61" in row and "12.5" in row
