"""The objective line on the dashboard (``--slo``): the worst objective's n_max and the
users' attainment in one row at 80 columns; hidden without an objective."""

from __future__ import annotations

import time

from prefilltui.measure.otlp import UsersTrace
from prefilltui.model.slo import parse_objective
from prefilltui.model.spec import AnalysisOptions
from prefilltui.model.users import UserRequest
from prefilltui.tui.widgets.slo_row import SloRow
from tests.tui.fakes import fixed_results
from tests.tui.test_pilot import _app

SLO = AnalysisOptions(slo=(parse_objective("ttft=200ms@p99"), parse_objective("ttft=1s@p90")))


def _users(now: float, slow: int) -> UsersTrace:
    """20 users' requests a second apart ending now, ``slow`` of them above 200 ms."""
    trace = UsersTrace("t")
    for i in range(20):
        n = 1000 + 100 * i
        ttft = 0.35 if i < slow else 0.02 + n * 45e-6
        trace.add(UserRequest(arrival_s=now - 20 + i, prompt_tokens=n, ttft_s=ttft,
                              queue_s=0.001, prefill_s=n * 4e-5, end_s=now - 19.5 + i,
                              received_s=now - 19 + i, request_id=f"cmpl-u{i}-0"))
    return trace


async def _drawn(app, size=(80, 24)) -> str:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        row = app.screen.query_one(SloRow)
        return row.text if row.display else ""


async def test_the_objective_line_at_80_columns():
    app, _ = _app(preload=fixed_results(), analysis=SLO, users=_users(time.time(), slow=2))
    text = await _drawn(app)
    assert len(text) <= 78, text
    # the 200 ms p99 objective is the worse one: 2 of 20 users missed it (budget 1 %)
    assert text.startswith("SLO 200 ms p99: "), text
    assert "users 90.0 % in" in text and "(+1)" in text, text


async def test_the_long_form_where_there_is_room():
    app, _ = _app(preload=fixed_results(), analysis=SLO, users=_users(time.time(), slow=0))
    text = await _drawn(app, size=(200, 40))
    assert "prompts ≤ " in text and "tokens meet it now, est." in text, text
    assert "users' p99 " in text and "100.0 % within" in text, text


async def test_no_objective_no_row():
    app, _ = _app(preload=fixed_results())
    assert await _drawn(app) == ""


async def test_the_details_count_the_users_above_n_max():
    from prefilltui.tui.widgets.stats import StatsPanel

    app, _ = _app(preload=fixed_results(), analysis=SLO, users=_users(time.time(), slow=0))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        notes = app.screen.query_one(StatsPanel).view.notes
    # the users' prompts run 1,000..2,900 tokens; n_max of 200 ms p99 is ~3.8k: none over
    assert "0.0 % of the users' prompts are longer than SLO 200 ms p99 allows at this " \
           "throughput" in notes, notes
    assert any(n.startswith("SLO 200 ms p99: n_max ") and "at the idle line (est.)" in n
               for n in notes), notes
