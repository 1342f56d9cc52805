"""The fleet overview wired for real: sessions and SweepRunners against loopback fake
targets (tests/fleetserver.py), a dead URL, GPU readings from a dcgm-exporter page, a
target that goes down and comes back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.fakeserver import Reply
from tests.fleetserver import linear_target

from prefilltui.cli import _normalise_argv, build_parser
from prefilltui.commands.common import analysis_options, sweep_design, telemetry_options
from prefilltui.commands.fleet import build_fleet, fleet_options, fleet_targets
from prefilltui.tui.app import build_fleet_app
from prefilltui.tui.dashboard import DashboardScreen
from prefilltui.tui.widgets.fleet_table import FleetTable

DCGM = (Path(__file__).parents[1] / "unit" / "fixtures" / "dcgm_exporter_h100x2.prom").read_text()


def _fleet(argv: list[str]):
    args = build_parser().parse_args(_normalise_argv(argv))
    fleet = build_fleet(fleet_targets(args), fleet_options(args),
                        analysis=analysis_options(args), design=sweep_design(args),
                        telemetry=telemetry_options(args), seed=1)
    app = build_fleet_app(fleet.configs, load=fleet.load, ref_tokens=args.ref_tokens)
    return fleet, app


async def _until(pilot, cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pilot.app.flush()
        if cond():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _row(app, label: str):
    return next(r for r in app.screen.rows if r.label == label)


async def test_two_targets_a_dead_url_and_a_dcgm_page(fake_server, tmp_path):
    a, _ = linear_target(fake_server, b=2e-5)
    b, _ = linear_target(fake_server, b=6e-5)
    gpu = fake_server({"GET /metrics": Reply.text(DCGM)})
    toml = tmp_path / "targets.toml"
    toml.write_text(
        f'[[target]]\nurl = "{a.base_url}"\nname = "node-a"\n'
        f'gpu_metrics_url = "{gpu.base_url}/metrics"\n\n'
        f'[[target]]\nurl = "{b.base_url}"\nname = "node-b"\n\n'
        '[[target]]\nurl = "http://127.0.0.1:9"\nname = "node-dead"\n')
    fleet, app = _fleet(["--config", str(toml), "--lengths", "16,64,256,1024",
                         "--interval", "0.1", "--fleet-rate", "100",
                         "--run-dir", str(tmp_path / "runs")])
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            await _until(pilot, lambda: all(_row(app, n).tok_s for n in ("node-a", "node-b")))
            await _until(pilot, lambda: _row(app, "node-dead").health.word == "down")
            rows = app.screen.rows
            assert rows[0].label == "node-dead"  # worst first
            a_row, b_row = _row(app, "node-a"), _row(app, "node-b")
            assert a_row.tok_s > b_row.tok_s  # 2e-5 vs 6e-5 s per token
            # node-a's GPUs are the dcgm page's two H100s, never this machine's
            await _until(pilot, lambda: _row(app, "node-a").gpu == "50% 731W ×2")
            assert _row(app, "node-a").mfu is not None  # the H100's peak from the page's name
            assert b_row.gpu.startswith("CPU")  # a local target: this machine
            assert app.feeds[0].config.gpu_source.startswith("GPU page http://127.0.0.1:")
            # the drill-in shows the remote GPU's gauges
            table = app.screen.query_one(FleetTable)
            table.move_cursor(next(i for i, r in enumerate(table.rows) if r.label == "node-a"))
            await pilot.press("enter")
            await pilot.pause(0.5)
            assert isinstance(app.screen, DashboardScreen)
            app.screen.flush()
            await pilot.pause()

            def screen_lines() -> list[str]:
                return [s.text for s in app.screen._compositor.render_strips()]

            # the remote gauges fill on the drill-in's next gauge tick (a race under load)
            want = "GPU 0 NVIDIA H100 80GB HBM3 util  93 % · tensor 41 %"  # vendor + model
            await _until(pilot, lambda: any(want in x for x in screen_lines()))
            lines = screen_lines()
            assert any("power 612 W" in x for x in lines)
            await pilot.press("escape")
    finally:
        fleet.close()
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs[:2] == ["node-a.jsonl", "node-b.jsonl"]  # one run file per target


async def test_a_target_that_goes_down_and_comes_back(fake_server, tmp_path):
    a, h = linear_target(fake_server)
    b, _ = linear_target(fake_server)
    fleet, app = _fleet([a.base_url, b.base_url, "--lengths", "16,64,256", "--interval",
                         "0.1", "--fleet-rate", "100", "--no-telemetry",
                         "--run-dir", str(tmp_path / "runs")])
    label = app.feeds[0].config.label
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await _until(pilot, lambda: _row(app, label).tok_s is not None)
            h.down = True  # down once every probe of the last minute failed (the alert's rule)
            await _until(pilot, lambda: _row(app, label).health.word == "down", 120)
            assert app.screen.rows[0].label == label
            h.down = False  # back with its next probe (the runner backs off: <= 60 s)
            await _until(pilot, lambda: _row(app, label).health.word != "down", 90)
            assert _row(app, label).failed >= 3
    finally:
        fleet.close()
