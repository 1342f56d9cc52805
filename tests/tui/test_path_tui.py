"""The dashboard of a path (``prefilltui ROUTER --prefill URL --decode URL``) at 80x24:
the hops in one row, on the fake pair (tests/pdengine.py)."""

from __future__ import annotations

import asyncio

from prefilltui.cli import build_parser
from prefilltui.commands.common import path_options, session_options
from prefilltui.commands.watch import display_options, make_watch_app
from prefilltui.model.hops import Hops
from prefilltui.model.types import ProbeResult
from prefilltui.tui.widgets.path_row import PathRow, path_text
from tests.pdengine import PdPair


def test_path_text_fits_80_columns_and_says_a_missing_hop():
    rs = [ProbeResult(ok=True, ttft_s=0.1234, requested_tokens=256,
                      hops=Hops(0.0021, 0.1011, 0.0123, 0.0079)) for _ in range(5)]
    text = path_text(rs, 78)
    # the full names are 85 columns: the short ones fit
    assert text == "path: rtr 2.1 ms 2% ▸ pre 101 ms 82% ▸ kv 12.3 ms 10% ▸ dec 7.9 ms 6%"
    assert path_text(rs, 120).startswith("path: router 2.1 ms 2% ▸ prefill 101 ms 82% ▸ ")
    short = path_text(rs, 50)
    assert len(short) <= 50 and "▸" in short
    gone = [ProbeResult(ok=True, ttft_s=0.1, requested_tokens=64,
                        hops=Hops(problem="the decode worker's /metrics did not answer"))]
    assert path_text(gone, 78).startswith("path: hops not read (the decode worker's")
    assert path_text([ProbeResult(ok=True, ttft_s=0.1)], 78) == ""


async def _until(cond, seconds=30.0):
    for _ in range(int(seconds / 0.05)):
        if cond():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_the_hops_row_at_80x24(tmp_path):
    with PdPair() as pair:
        args = build_parser().parse_args(
            ["watch", pair.router, "--prefill", pair.prefill, "--decode", pair.decode,
             "--no-telemetry", "--out", str(tmp_path / "run.jsonl"), "--lengths", "64,256",
             "--warmup", "0", "--pause", "0.05", "--duty", "1"])
        app, session = make_watch_app(session_options(args, path=path_options(args)),
                                      display_options(args), pair.router)
        try:
            async with app.run_test(size=(80, 24)) as pilot:
                assert await _until(lambda: sum(1 for r in app.results if r.hops) >= 3)
                app.flush()
                await pilot.pause(0.3)
                row = app.query_one("#path", PathRow)
                assert row.has_class("-on")
                assert row.text.startswith("path: rtr ") and row.text.count("▸") == 3
                assert len(row.text) <= 78 and "%" in row.text
        finally:
            session.close()
