"""The run file: one JSON line per probe, written as each completes and read back.

``writer`` (``RunWriter``, ``RotatingRunWriter``: append and flush, one line per
``write``; the session and load records), ``reader`` (``read_run``, the sessions, the
load lines, the server's changes; a bad line is reported, never raised).  docs/runfile.md is the format.

The rest of prefilltui imports this package, never its modules (an import-linter
contract); its modules import each other directly.
"""

from __future__ import annotations

from prefilltui.measure.runfile.reader import (
    load_baseline, read_load, read_run, read_run_sessions, read_server_changes, read_session,
)
from prefilltui.measure.runfile.writer import (
    LOAD_RECORD, SERVER_CHANGE_RECORD, RotatingRunWriter, RunFileBusy, RunWriter, SPAN_RECORD,
    default_run_path, record_of_trace,
)

__all__ = [
    "LOAD_RECORD", "SERVER_CHANGE_RECORD", "RotatingRunWriter", "RunFileBusy", "RunWriter",
    "SPAN_RECORD", "default_run_path", "load_baseline", "read_load", "read_run",
    "read_run_sessions", "read_server_changes", "read_session", "record_of_trace",
]
