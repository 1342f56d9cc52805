"""The dashboard's slow jobs: ``e`` export, ``s`` save the screen as SVG, ``c`` cache
check.  Export and the cache check run in thread workers that only post messages
(``ExportDone``, ``CacheCheckDone``); errors become notifications, never tracebacks.

``Jobs(feed, notify=..., run_worker=..., post=..., save_screenshot=...)`` is given
the target's feed (its exporter, cache checker, runner, run path) and the screen's
``run_worker`` / ``post_message`` and the app's ``save_screenshot``; the screen routes
the two messages back to ``export_done`` / ``cache_done``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from textual.worker import Worker

from prefilltui.model.types import ProbeResult
from prefilltui.tui.feed import TargetFeed
from prefilltui.tui.messages import CacheCheckDone, ExportDone

#: Seconds beyond the probe time cap to wait for the runner to pause.
PAUSE_MARGIN_S = 10.0

Notify = Callable[..., None]


class Jobs:
    """Export, save-screen and cache check for one target (see the module docstring).

    run_worker(fn, name=, group=, exclusive=, thread=, exit_on_error=) -> Worker: the
    screen's; post(message): the screen's ``post_message`` (thread-safe);
    save_screenshot(filename, path) -> the path written: the app's.
    """

    def __init__(self, feed: TargetFeed, *, notify: Notify,
                 run_worker: Callable[..., Worker], post: Callable[[Any], Any],
                 save_screenshot: Callable[[str, str], str]) -> None:
        self.feed = feed
        self.notify = notify
        self.run_worker = run_worker
        self.post = post
        self.save_screenshot = save_screenshot

    # -- s
    def screen_svg_path(self) -> Path:
        """Where ``s`` saves: beside the run file (``<run>-screen-HHMMSS.svg``), else
        ``prefilltui-screen-YYYYmmdd-HHMMSS.svg`` in the working directory."""
        run = self.feed.config.run_path
        if run is not None:
            return Path(run).with_name(f"{Path(run).stem}-screen-{time.strftime('%H%M%S')}.svg")
        return Path.cwd() / f"prefilltui-screen-{time.strftime('%Y%m%d-%H%M%S')}.svg"

    def save_svg(self) -> None:
        """Save the current screen (what is drawn now, help or not) as an SVG file."""
        path = self.screen_svg_path()
        try:
            saved = self.save_screenshot(path.name, str(path.parent))
        except Exception as exc:  # disk full, unwritable directory
            self.notify(f"cannot save the screen: {type(exc).__name__}: {exc}", severity="error")
            return
        self.notify(f"screen saved: {saved}", timeout=8)

    # -- e
    def export(self, fit: Any) -> None:
        """Write the exports of the probes kept and ``fit`` (the fit snapshot shown)."""
        exporter = self.feed.config.exporter
        if exporter is None:
            self.notify("export needs a run file", severity="warning")
            return
        self.notify("exporting…", timeout=2)
        results: list[ProbeResult] = list(self.feed.results)

        def work() -> None:
            try:
                paths = exporter(results, fit)
            except Exception as exc:
                self.post(ExportDone([], f"{type(exc).__name__}: {exc}"))
                return
            self.post(ExportDone(list(paths)))

        self.run_worker(work, name="export", group="export", exclusive=True, thread=True,
                        exit_on_error=False)

    def export_done(self, message: ExportDone) -> None:
        if message.error:
            self.notify(f"export failed: {message.error}", severity="error")
        else:
            self.notify("exported " + ", ".join(str(p) for p in message.paths), timeout=8)

    # -- c
    def cache_check(self) -> None:
        """Pause probing (a probe in flight finishes first), run the cache check,
        resume."""
        checker = self.feed.config.cache_checker
        if checker is None:
            self.notify("cache check is not available here", severity="warning")
            return
        self.notify("cache check: pausing probes…", timeout=3)
        feed = self.feed
        was_paused = feed.paused
        if feed.runner is not None and not was_paused:
            feed.runner.pause()

        def work() -> None:
            runner = feed.runner
            try:
                # wait for a probe in flight to finish so the check never overlaps one
                # (a probe ends within its time cap; 10 s more for the runner to pause)
                deadline = time.monotonic() + feed.config.probe_timeout_s + PAUSE_MARGIN_S
                while (runner is not None
                       and runner.state not in ("paused", "stopped", "failed", "done")
                       and time.monotonic() < deadline):
                    time.sleep(0.05)
                finding = checker()  # a model.fleet.advisor.CacheFinding
                self.post(CacheCheckDone(finding.line, detail=finding))
            except Exception as exc:
                self.post(CacheCheckDone(f"cache check failed: {exc}", ok=False))
            finally:
                if runner is not None and not was_paused:
                    runner.resume()

        self.run_worker(work, name="cache check", group="cache", exclusive=True,
                        thread=True, exit_on_error=False)

    def cache_done(self, message: CacheCheckDone) -> None:
        if message.detail is not None:
            self.feed.cache = message.detail  # the advisor reads it (prefix caching off)
        self.notify(message.text, severity="information" if message.ok else "error",
                    timeout=10)
