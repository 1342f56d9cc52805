"""What the live views save and check, shared by the dashboard of ``watch`` and the
fleet's drill-in: ``make_exporter`` (``e``: the probes as CSV and the run's summary as
JSON beside the run file) and ``cache_finding`` (``c``: a cache check as the advisor
reads it)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Callable

from prefilltui.measure.prefix_cache import CacheCheckResult
from prefilltui.measure.runfile import read_run
from prefilltui.model.fleet import CacheFinding
from prefilltui.model.summary import analyze
from prefilltui.model.redact import display_url
from prefilltui.model.summary import LiveFacts
from prefilltui.options import AnalysisOptions
from prefilltui.render.text import summary_json


def make_exporter(run_path: Path | None, info_fn: Callable[[], Any],
                  options: AnalysisOptions | None = None,
                  notices_fn: Callable[[], dict[str, str]] = dict):
    """exporter(results, fit_snapshot) -> [csv path, json path] beside the run file: the
    probes as CSV and the run's summary (the ``RunSummary`` JSON ``report`` prints).
    ``notices_fn``: the session's notices (``SweepRunner.notices``), the summary's
    ``live.notes``.

    Reads every probe back from the run file (the source of truth); falls back to the
    in-memory results when the file cannot be read.  Raises OSError on write failure.
    """

    def export(results: list, fit: Any) -> list[Path]:
        base = run_path or Path.cwd() / "prefilltui-run.jsonl"
        if run_path is not None:
            try:
                results = read_run(run_path)[0] or results
            except (OSError, ValueError):
                pass
        csv_path = base.with_suffix(".csv")
        json_path = base.with_suffix(".summary.json")
        rows = [r.to_json() for r in results]
        for row in rows:
            row.pop("extra", None)
        fields = list(rows[0].keys()) if rows else ["seq"]
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        info = info_fn()
        live = LiveFacts(base_url=display_url(info.base_url) if info else None,
                         notes=tuple(notices_fn().values()))
        summary = analyze(results, info, options,
                          run_file=str(run_path) if run_path else None, live=live)
        with open(json_path, "w", encoding="utf-8") as f:
            f.write(summary_json(summary) + "\n")
        return [csv_path, json_path]

    return export


def cache_finding(result: CacheCheckResult) -> CacheFinding:
    """A cache check's verdict and line, as the advisor reads them."""
    return CacheFinding(result.verdict, result.line)
