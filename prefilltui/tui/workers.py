"""Export, save-screen and cache-check actions: thread workers that only post messages.

Mixed into the dashboard screen (``dashboard.DashboardScreen``).  Each worker runs with
``exit_on_error=False``; errors become notifications, never tracebacks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from textual import work
from textual.worker import Worker, WorkerState

from prefilltui.model.types import ProbeResult
from prefilltui.tui.messages import CacheCheckDone, ExportDone

#: Seconds beyond the probe time cap to wait for the runner to pause.
PAUSE_MARGIN_S = 10.0


class WorkerActions:
    """``e`` export, ``s`` save the screen as SVG and ``c`` cache check for the dashboard."""

    def screen_svg_path(self) -> Path:
        """Where ``s`` saves: beside the run file (``<run>-screen-HHMMSS.svg``), else
        ``prefilltui-screen-YYYYmmdd-HHMMSS.svg`` in the working directory."""
        run = getattr(self, "run_path", None)
        if run is not None:
            return Path(run).with_name(f"{Path(run).stem}-screen-{time.strftime('%H%M%S')}.svg")
        return Path.cwd() / f"prefilltui-screen-{time.strftime('%Y%m%d-%H%M%S')}.svg"

    def action_save_svg(self) -> None:
        """Save the current screen (what is drawn now, help or not) as an SVG file."""
        path = self.screen_svg_path()
        try:
            saved = self.app.save_screenshot(path.name, str(path.parent))
        except Exception as exc:  # disk full, unwritable directory
            self.notify(f"cannot save the screen: {type(exc).__name__}: {exc}", severity="error")
            return
        self.notify(f"screen saved: {saved}", timeout=8)

    def action_export(self) -> None:
        if self.exporter is None:
            self.notify("export needs a run file", severity="warning")
            return
        self.notify("exporting…", timeout=2)
        self._export_worker(list(self.results), self.last_fit)

    @work(thread=True, exclusive=True, exit_on_error=False, group="export")
    def _export_worker(self, results: list[ProbeResult], fit: Any) -> None:
        try:
            paths = self.exporter(results, fit)
        except Exception as exc:
            self.post_message(ExportDone([], f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(ExportDone(list(paths)))

    def on_export_done(self, message: ExportDone) -> None:
        if message.error:
            self.notify(f"export failed: {message.error}", severity="error")
        else:
            self.notify("exported " + ", ".join(str(p) for p in message.paths), timeout=8)

    def action_cache_check(self) -> None:
        if self.cache_checker is None:
            self.notify("cache check is not available here", severity="warning")
            return
        self.notify("cache check: pausing probes…", timeout=3)
        was_paused = self.paused
        if self.runner is not None and not was_paused:
            self.runner.pause()
        self._cache_worker(was_paused)

    @work(thread=True, exclusive=True, exit_on_error=False, group="cache")
    def _cache_worker(self, was_paused: bool) -> None:
        try:
            # wait for a probe in flight to finish so the check never overlaps one
            # (a probe ends within its time cap; 10 s more for the runner to pause)
            deadline = time.monotonic() + self.probe_timeout_s + PAUSE_MARGIN_S
            while (self.runner is not None
                   and self.runner.state not in ("paused", "stopped", "failed", "done")
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            finding = self.cache_checker()  # a model.advisor.CacheFinding
            self.post_message(CacheCheckDone(finding.line, detail=finding))
        except Exception as exc:
            self.post_message(CacheCheckDone(f"cache check failed: {exc}", ok=False))
        finally:
            if self.runner is not None and not was_paused:
                self.runner.resume()

    def on_cache_check_done(self, message: CacheCheckDone) -> None:
        if message.detail is not None:
            self.cache_found(message.detail)  # the advisor reads it (prefix caching off)
        self.notify(message.text, severity="information" if message.ok else "error",
                    timeout=10)

    def cache_found(self, finding) -> None:
        """Keep a cache check's finding (the dashboard stores it on its feed)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.notify(f"{event.worker.name} failed: {event.worker.error}", severity="error")

