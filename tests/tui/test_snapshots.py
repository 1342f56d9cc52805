"""Snapshot tests (pytest-textual-snapshot) at 80x24 and 160x48 with fixed fake data.

Update after an intended change with ``pytest tests/tui/test_snapshots.py --snapshot-update``
and look at the SVGs (snapshot_report.html shows the differences).
"""

from __future__ import annotations

from tests.tui.fakes import (FAKE_RANGE, NOW, FakeRunner, FakeSampler, demo_results, demo_snapshot,
                             fixed_results, gpu_snapshot)

from prefilltui.tui.app import build_app


def _app(sampler=None, **kw):
    kw.setdefault("sweep_range", FAKE_RANGE)
    return build_app(lambda r, s: FakeRunner(r, s, preload=fixed_results()),
                     sampler or FakeSampler(), clock=lambda: NOW, **kw)


async def _settle(pilot):
    await pilot.pause()
    pilot.app.flush()
    await pilot.pause()


def test_cpu_80x24(snap_compare):
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_settle)


def test_cpu_160x48(snap_compare):
    assert snap_compare(_app(), terminal_size=(160, 48), run_before=_settle)


def test_gpus_roofline_160x48(snap_compare):
    assert snap_compare(_app(FakeSampler(gpu_snapshot(2))), terminal_size=(160, 48),
                        run_before=_settle)


def test_eight_gpus_compact_80x24(snap_compare):
    assert snap_compare(_app(FakeSampler(gpu_snapshot(8))), terminal_size=(80, 24),
                        run_before=_settle)


def test_help_80x24(snap_compare):
    async def before(pilot):
        await _settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=before)


def test_light_theme_80x24(snap_compare):
    assert snap_compare(_app(theme="prefilltui-light"), terminal_size=(80, 24),
                        run_before=_settle)


def _demo_app():
    """Duty-cycled probes with idle between, then a burst fired from pause: each
    probe's window tinted on the history under its spike."""
    app = build_app(lambda r, s: _PausedAfterBurst(r, s), FakeSampler(demo_snapshot()),
                    clock=lambda: NOW, sweep_range=(16, 1024))
    return app


class _PausedAfterBurst(FakeRunner):
    def __init__(self, on_result, on_state):
        super().__init__(on_result, on_state, preload=demo_results())

    def start(self):
        super().start()
        self._set("paused", "burst: 1 × 1,024 tokens, 6.2 s")


def test_demo_spikes_and_burst_80x24(snap_compare):
    assert snap_compare(_demo_app(), terminal_size=(80, 24), run_before=_settle)


def test_demo_selected_probe_160x48(snap_compare):
    async def before(pilot):
        await _settle(pilot)
        log = pilot.app.query_one("#log")
        log.focus()
        log.move_cursor(row=2)  # the 565-token probe: its window gets the strong tint
        await _settle(pilot)

    assert snap_compare(_demo_app(), terminal_size=(160, 48), run_before=before)


def test_slo_line_80x24(snap_compare):
    """``--slo`` with users' spans: the objective row under the status line, the plot
    one row shorter, everything else as without it."""
    import time

    from tests.tui.test_slo_tui import SLO, _users

    app = _app(analysis=SLO, users=_users(time.time(), slow=2))
    assert snap_compare(app, terminal_size=(80, 24), run_before=_settle)
