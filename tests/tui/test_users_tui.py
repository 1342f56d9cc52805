"""The users' requests on the dashboard: their own glyph on the TTFT plot (the probes
unchanged), the legend, and the users' window in the stats panel."""

from __future__ import annotations

import time

from prefilltui.measure.otlp import UsersTrace
from prefilltui.model.users import UserRequest
from prefilltui.tui.widgets.stats import StatsPanel
from prefilltui.tui.widgets.ttft_plot import MARK_USER, TTFTPlot
from tests.tui.test_pilot import _app
from tests.tui.fakes import fixed_results


async def test_users_plotted_apart_and_summarised():
    trace = UsersTrace("t")
    now = time.time()
    for i, n in enumerate((300, 900, 2000, 2000, 3500)):
        trace.add(UserRequest(arrival_s=now - 10 + i, prompt_tokens=n, ttft_s=0.05 + n * 1e-4,
                              queue_s=0.01, prefill_s=n * 9e-5, end_s=now - 9 + i,
                              received_s=now - 8 + i, request_id=f"cmpl-u{i}-0"))
    results = fixed_results()
    app, _ = _app(preload=results, users=trace)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        plot = app.query_one("#plot", TTFTPlot)
        assert sorted(plot._users) == sorted((n, (0.05 + n * 1e-4) * 1e3)
                                             for n in (300, 900, 2000, 2000, 3500))
        assert plot.point_count == sum(1 for r in results if r.fit_eligible)  # probes as before
        assert f"{MARK_USER}[/]users" in plot.legend_markup()
        notes = app.query_one("#stats", StatsPanel).view.notes
        assert any(n.startswith("users: 5 request(s) in 60 s (from the server's traces)")
                   for n in notes), notes
        assert any("users' prompts p50 2,000" in n for n in notes), notes


async def test_no_users_no_change():
    app, _ = _app(preload=fixed_results())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        assert app.query_one("#plot", TTFTPlot)._users == []
        assert "users" not in app.query_one("#plot", TTFTPlot).legend_markup()
        assert not any("users" in n for n in app.query_one("#stats", StatsPanel).view.notes)


def _user(i: int, n: int, now: float) -> UserRequest:
    return UserRequest(arrival_s=now - 5, prompt_tokens=n, ttft_s=0.05 + n * 1e-4,
                       queue_s=0.01, prefill_s=n * 9e-5, end_s=now - 4, received_s=now,
                       request_id=f"cmpl-late{i}-0")


async def test_new_spans_are_drawn_without_waiting_for_a_probe():
    """With no probe coming (a long probe interval), users' spans that arrive reach the
    plot and the stats panel at the timer's next tick (its check is one int), at most
    once a second however many come; and the timer redraws nothing while none comes."""
    trace = UsersTrace("t")
    app, _ = _app(preload=fixed_results(), users=trace)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        plot = app.query_one("#plot", TTFTPlot)
        replots = []
        real = plot.replot
        plot.replot = lambda: replots.append(time.monotonic()) or real()
        await pilot.pause(1.6)  # nothing new: no redraw
        assert replots == [] and plot._users == []
        now = time.time()
        t0 = time.monotonic()
        for i in range(8):  # a batch of spans, then more, over ~1 s
            trace.add(_user(i, 500 + 100 * i, now))
            await pilot.pause(0.15)
        for _ in range(40):
            if len(plot._users) == 8:
                break
            await pilot.pause(0.1)
        assert len(plot._users) == 8, plot._users
        notes = app.query_one("#stats", StatsPanel).view.notes
        assert any(n.startswith("users: 8 request(s) in 60 s") for n in notes), notes
        # at most one redraw a second: ~1.2 s of spans is 2 or 3 redraws, not 8
        span_s = time.monotonic() - t0
        assert 1 <= len(replots) <= span_s + 1, (len(replots), span_s)
        drawn = len(replots)
        await pilot.pause(1.6)  # nothing new again: no redraw
        assert len(replots) == drawn
