"""Snapshot tests of the fleet overview (8 fake targets at 80x24 and 160x48, sorted,
a drill-in and the way back).  Update after an intended change with
``pytest tests/tui/test_snapshots_fleet.py --snapshot-update`` and look at the SVGs."""

from __future__ import annotations

from tests.tui.fleet_fakes import fleet_app

from prefilltui.tui.widgets.fleet_table import FleetTable


async def _settle(pilot):
    await pilot.pause()
    await pilot.pause(0.2)
    pilot.app.flush()
    await pilot.pause()


def _press(*keys, at: str | None = None):
    async def before(pilot):
        await _settle(pilot)
        if at is not None:
            table = pilot.app.screen.query_one(FleetTable)
            table.move_cursor(next(i for i, r in enumerate(table.rows) if r.label == at))
        for key in keys:
            await pilot.press(key)
            await _settle(pilot)
    return before


def test_fleet_80x24(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(80, 24), run_before=_settle)


def test_fleet_160x48(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(160, 48), run_before=_settle)


def test_fleet_sorted_by_name_160x48(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(160, 48), run_before=_press("s"))


def test_fleet_drill_in_80x24(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(80, 24),
                        run_before=_press("enter", at="gpu-03-slow"))


def test_fleet_back_from_drill_in_80x24(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(80, 24),
                        run_before=_press("enter", "escape", at="gpu-03-slow"))
