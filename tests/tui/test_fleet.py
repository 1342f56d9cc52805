"""Pilot tests of the fleet overview: eight fake targets, the worst first, sorting,
drill-in and back, a target that goes down and comes back, 100 targets."""

from __future__ import annotations

from tests.tui.fakes import FakeRunner, make_result
from tests.tui.fleet_fakes import WALL, fleet_app, many_configs

from prefilltui.tui.app import FeedConfig, build_fleet_app
from prefilltui.tui.dashboard import DashboardScreen
from prefilltui.tui.fleet_screen import FleetScreen
from prefilltui.tui.widgets.fleet_table import FleetTable


def _lines(app) -> list[str]:
    return [s.text.rstrip() for s in app.screen._compositor.render_strips()]


async def _settle(pilot):
    await pilot.pause()
    await pilot.pause(0.2)
    pilot.app.flush()
    await pilot.pause()


async def test_eight_targets_at_80x24_worst_first():
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        assert isinstance(app.screen, FleetScreen)
        lines = _lines(app)
        top = lines[0]
        assert "8 targets" in top and "1 down" in top and "2 warn" in top
        assert "load ≤ 2 probes/s" in top  # the monitor's own load, stated
        header = lines[1]
        for title in ("target", "status", "prefill tok/s", "fixed", "MFU", "verdict",
                      "TTFT@1k", "probes", "age"):
            assert title in header
        rows = lines[2:10]
        assert all(len(r) <= 80 for r in lines)
        names = [r.split()[0] for r in rows]
        assert sorted(names) == sorted(["gpu-01", "gpu-02", "gpu-03-slow", "gpu-04-flaky",
                                        "gpu-05-cache", "cpu-demo", "gpu-07", "gpu-08-down"])
        # worst first: down, then the targets the alert rules flag, healthy last
        assert names[0] == "gpu-08-down" and "✖ down" in rows[0]
        assert set(names[1:3]) == {"gpu-04-flaky", "gpu-07"}
        assert all("▲ warn" in r for r in rows[1:3])
        # the pane below says why for the row under the cursor (the worst)
        text = "\n".join(lines[10:])
        assert "gpu-08-down" in text and "PrefillTargetDown" in text
        assert "connection refused" in text


async def test_detail_pane_names_the_rule_and_the_gpu_source():
    app = fleet_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await _settle(pilot)
        table = app.screen.query_one(FleetTable)
        flaky = next(i for i, r in enumerate(table.rows) if r.label == "gpu-04-flaky")
        table.move_cursor(flaky)
        await _settle(pilot)
        text = "\n".join(_lines(app))
        assert "PrefillProbeErrors: 5 of 17 recent probes failed (29% > 20%)" in text
        assert "\n GPU: GPU page http://gpu-04-flaky:9400/metrics\n" in text
        slow = next(i for i, r in enumerate(table.rows) if r.label == "gpu-07")
        table.move_cursor(slow)
        await _settle(pilot)
        text = "\n".join(_lines(app))
        assert "PrefillFixedCostHigh" in text and "GPU: no GPU source" in text


async def test_sorting_keys_and_header_click():
    app = fleet_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        screen = app.screen
        await pilot.press("s")  # worst -> name
        await _settle(pilot)
        assert screen.sort_key == "name"
        labels = [r.label for r in screen.rows]
        assert labels == sorted(labels)
        assert "▼target" in _lines(app)[1]
        await pilot.press("S")  # reverse
        await _settle(pilot)
        assert [r.label for r in screen.rows] == sorted(labels, reverse=True)
        await pilot.press("s")  # name -> prefill throughput, lowest first
        await _settle(pilot)
        tps = [r.tok_s for r in screen.rows if r.tok_s is not None]
        assert screen.sort_key == "prefill" and tps == sorted(tps)
        assert screen.rows[-1].tok_s is None  # the unknown last
        # a click on a column title sorts by it
        header = _lines(app)[1]
        await pilot.click(FleetTable, offset=(header.index("MFU") + 1, 0))
        await _settle(pilot)
        assert screen.sort_key == "mfu"


async def test_enter_opens_the_dashboard_and_escape_returns():
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        table = app.screen.query_one(FleetTable)
        at = next(i for i, r in enumerate(table.rows) if r.label == "gpu-03-slow")
        table.move_cursor(at)
        await pilot.press("enter")
        await _settle(pilot)
        dash = app.screen
        assert isinstance(dash, DashboardScreen) and dash.feed.config.label == "gpu-03-slow"
        lines = _lines(app)
        assert lines[0].startswith(" gpu-03-slow")
        assert "gpu-03-slow · TTFT vs prompt tokens" in lines[1]
        plot = dash.query_one("#plot")
        assert plot.point_count == 16  # the feed's probes, replayed into the plot
        assert "esc Back" in lines[-1]
        # the drill-in is today's dashboard: its keys work on this target
        await pilot.press("w")
        assert dash.feed.which == "window"
        await pilot.press("escape")
        await _settle(pilot)
        assert isinstance(app.screen, FleetScreen)
        assert app.screen.query_one(FleetTable).current().label == "gpu-03-slow"


async def test_target_goes_down_and_comes_back():
    runners = {}

    def factory(on_result, on_state):
        runners["r"] = FakeRunner(on_result, on_state)
        return runners["r"]

    steady = [make_result(i, n) for i, n in enumerate([32, 256, 1024, 4096, 128, 2048], 1)]

    def other(on_result, on_state):
        return FakeRunner(on_result, on_state, preload=steady)

    now = [WALL]
    app = build_fleet_app([FeedConfig(label="flapping", runner_factory=factory),
                           FeedConfig(label="steady", runner_factory=other)],
                          wall_clock=lambda: now[0])
    async with app.run_test(size=(100, 30)) as pilot:
        await _settle(pilot)
        r = runners["r"]
        for i, n in enumerate([32, 256, 1024, 4096, 128], 1):
            r.emit(make_result(i, n))
        await _settle(pilot)
        now[0] += 120  # two minutes later the server goes away
        row = {x.label: x for x in app.screen.rows}["flapping"]
        assert row.health.word == "ok" and row.tok_s is not None
        for i in range(6, 9):  # the server goes away: connect errors
            r.emit(make_result(i, 256, ok=False, error_kind="connect"))
        r.on_state("retrying", "connect: connection refused")
        await _settle(pilot)
        row = {x.label: x for x in app.screen.rows}["flapping"]
        assert row.health.word == "down" and app.screen.rows[0].label == "flapping"
        assert "✖ down" in _lines(app)[2]
        r.emit(make_result(9, 512))  # it answers again
        r.on_state("probing", "512 tokens")
        await _settle(pilot)
        row = {x.label: x for x in app.screen.rows}["flapping"]
        assert row.health.word != "down" and row.failed == 3


async def test_hundred_targets_render_and_scroll():
    app = build_fleet_app(many_configs(100), wall_clock=lambda: WALL)
    async with app.run_test(size=(100, 30)) as pilot:
        await _settle(pilot)
        screen = app.screen
        assert len(screen.rows) == 100 and "100 targets" in _lines(app)[0]
        before = screen.rebuilds
        await pilot.press("end")
        await _settle(pilot)
        table = screen.query_one(FleetTable)
        assert table.current() is screen.rows[-1]
        assert any(screen.rows[-1].label in line for line in _lines(app))
        assert screen.rebuilds > before


async def test_overview_notifications_on_a_line_never_a_toast_over_the_table():
    """The overview keeps toasts off too: a theme's name (t) on its message line above
    the footer, every other row as it was."""
    app = fleet_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await _settle(pilot)
        before = _lines(app)
        app.notify("a long message that a toast would draw over the table's last rows "
                   "and the detail pane", timeout=30)
        await _settle(pilot)
        after = _lines(app)
        assert not app.screen.query("Toast")
        assert after[22].startswith(" · a long message that a toast"), after[22]
        assert after[:22] == before[:22] and after[23] == before[23]
