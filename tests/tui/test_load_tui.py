"""The TUI with background load (watch --load) against the simulated scheduler: the
decode row on the gauges' time axis with stalls marked, the status line, the l key,
probes under load plotted apart and kept out of the idle fit, the verdict line."""

from __future__ import annotations

import asyncio

from prefilltui.cli import build_parser
from prefilltui.commands.common import load_options, session_options
from prefilltui.commands.watch import display_options, make_watch_app
from prefilltui.tui.widgets.decode_row import STALL, DecodeRow, DecodeSpark
from prefilltui.tui.widgets.stats import StatsPanel
from prefilltui.tui.widgets.ttft_plot import TTFTPlot
from tests.schedserver import SchedServer


def _args(url, tmp_path, *extra):
    """The typed options of ``prefilltui watch URL ...`` (as the command builds them)."""
    args = build_parser().parse_args(
        ["watch", url, "--no-telemetry", "--out", str(tmp_path / "run.jsonl"),
         "--lengths", "24,124", "--warmup", "0", "--timeout", "10", "--pause", "0.1",
         "--duty", "1", *extra])
    return session_options(args, load=load_options(args)), display_options(args)


async def _until(cond, seconds=30.0):
    for _ in range(int(seconds / 0.05)):
        if cond():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_decode_row_status_toggle_and_plot(tmp_path):
    with SchedServer(budget=64, step_s=0.02, per_token_s=0.002) as srv:
        app, session = make_watch_app(*_args(srv.base_url, tmp_path, "--load", "decode:2"),
                                      srv.base_url)
        try:
            async with app.run_test(size=(120, 40)) as pilot:
                assert await _until(lambda: sum(1 for r in app.results
                                                if r.decode_stall_s is not None) >= 3)
                app.flush()
                await pilot.pause(0.3)
                row = app.query_one("#decode", DecodeRow)
                assert row.has_class("-on")
                head = str(row.query_one(".decode-head").render())
                detail = str(row.query_one(".decode-detail").render())
                assert head.startswith("load 2 decode streams · ITL p50 ")
                assert detail.startswith("last probe ") and ": stall " in detail
                assert "excess" in detail and "server ITL histogram: longest ≤ " in detail
                assert app.query_one("#stats-box").border_title.endswith(" · load 2")
                spark = row.query_one(DecodeSpark)
                assert STALL in spark._columns()[3]  # a stall column is marked
                assert "load 2 decode streams" in app.dashboard().query_one("#status").text
                plot = app.query_one("#plot", TTFTPlot)
                assert len(plot._load) >= 3 and not plot._ok  # apart, not in the fit
                assert app.fit.snapshot("all") is None  # the idle fit holds none of them
                notes = app.query_one("#stats", StatsPanel).view.notes
                assert any(n.startswith("under load 2: stall ") for n in notes)
                assert app.query_one("#stats", StatsPanel).view.why
                # l: the load pauses (level 0), probes become idle, l again resumes
                await pilot.press("l")
                assert session.load.level == 0
                assert await _until(lambda: session.load.in_flight == 0)
                assert await _until(lambda: app.live.ok > 0 and any(
                    r.ok and r.load_level == 0 for r in app.results))
                app.flush()
                assert "load paused" in app.dashboard().query_one("#status").text
                await pilot.press("l")
                assert session.load.level == 2.0
        finally:
            session.close()
    assert not session.load.alive


async def test_l_without_load_sends_nothing(tmp_path):
    with SchedServer(budget=64, step_s=0.01, per_token_s=0.0005) as srv:
        app, session = make_watch_app(*_args(srv.base_url, tmp_path), srv.base_url)
        try:
            async with app.run_test(size=(100, 30)) as pilot:
                assert await _until(lambda: app.live.ok >= 2)
                await pilot.press("l")
                await pilot.pause(0.3)
                assert session.load is None
                assert not app.query_one("#decode", DecodeRow).has_class("-on")
                assert "load" not in app.dashboard().query_one("#status").text
        finally:
            session.close()
    assert all(r.json["max_tokens"] == 1 for r in srv.requests if r.path == "/v1/completions")
