"""What changed on the server, on the dashboard: one line in the probe log per change
(between the probes, no probe behind it) and the change in the verdict's evidence."""

from __future__ import annotations

import re
import time

from prefilltui.model.server_change import ServerChange
from prefilltui.tui.widgets.probe_log import ProbeLog
from prefilltui.tui.viewmodel import verdict_now
from tests.tui.fakes import fixed_results
from tests.tui.test_pilot import _app


async def test_each_change_is_one_log_line_and_reaches_the_verdict():
    changes: list[ServerChange] = []
    results = fixed_results()
    app, _ = _app(preload=results, server_changes=lambda: tuple(changes))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        log = app.query_one("#log", ProbeLog)
        assert log.row_count == len(results)
        now = time.time()
        restart = ServerChange(now - 40, "restart", (("enable_prefix_caching", "True", "False"),),
                               ("process_start_time_seconds moved 1 → 2",), seen_s=now - 38)
        changes.append(restart)
        app.flush()
        await pilot.pause()
        app.flush()  # drawn once, never again
        await pilot.pause()
        assert log.row_count == len(results) + 1
        note_probe, line = log._rows[-1]
        assert note_probe is None
        assert re.search(r"server  the server restarted 4\d s ago; prefix caching True → False$",
                         line), line
        log.focus()
        log.move_cursor(row=log.row_count - 1)
        await pilot.press("enter")  # a note has no probe to open: nothing happens
        await pilot.pause()
        feed = app.feeds[0]
        assert verdict_now(feed).users.server_changes == (restart,)
