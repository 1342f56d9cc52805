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
