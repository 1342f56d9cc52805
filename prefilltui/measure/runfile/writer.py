"""The run file: one JSON line per probe, appended and flushed as each completes.

A ``kill -9`` loses at most the probe in flight: each line is written with a single
``write`` and flushed to the OS before ``append`` returns (the page cache survives a
killed process; ``close()`` also fsyncs for power loss).  Schema: the fields of
``ProbeResult.to_json`` (documented in docs/runfile.md), plus session lines
``{"record": "session", ...}`` with facts about the whole run (the server's kind,
model and shape, the GPU names telemetry saw, the background load), written before
the next line whenever they become known, so ``report`` reads the run as the sweep
saw it; and, when a background load ran (``--load``), one ``{"record": "load", ...}``
line per load request with its token arrivals (``record_of_trace``); and, with
``--otlp-listen``, a ``{"record": "span", ...}`` line for each probe whose server span
came after its line was written (``SPAN_RECORD``); and a ``{"record": "server_change",
...}`` line for each restart or change of the server seen (``SERVER_CHANGE_RECORD``).

This module writes (``RunWriter``, ``RotatingRunWriter``) and names the records;
reading a run file back is ``runfile_read``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import uuid
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: run files are not locked
    fcntl = None  # type: ignore[assignment]

from prefilltui.model.load import DecodeTrace
from prefilltui.model.types import ProbeResult

#: The ``record`` value that marks a session line (not a probe) in a run file.
SESSION_RECORD = "session"
#: The ``record`` value of a background-load request's line (``measure.load.generator``).
LOAD_RECORD = "load"
#: The ``record`` value of a request sent to calibrate prompt lengths before the
#: first probe (``ProbeClient.calibrate``): the probe fields, not a result
#: (``read_run`` skips it, ``read_requests`` keeps it), so the file holds every
#: request the server was sent.
CALIBRATION_RECORD = "calibration"
#: The ``record`` value of a probe's own server span that came after its line was
#: written (``measure.otlp``): ``{"record": "span", "seq", "request_id", "span": {...}}``;
#: ``read_run`` applies it to the probe of that request id (``model.users.apply_span``).
SPAN_RECORD = "span"
#: The ``record`` value of a change of the server (a restart, another server behind the
#: URL, a new config: ``model.server_change.ServerChange.to_json``), written as it is
#: confirmed (``measure.server_watch``); ``read_run`` skips it, ``read_server_changes``
#: reads it.
SERVER_CHANGE_RECORD = "server_change"


class RunFileBusy(OSError):
    """The run file is being written by another writer (another prefilltui process, or
    a second session of this one): two runs never interleave their lines in one file."""


def _lock(f, path: Path) -> None:
    """Hold an exclusive ``flock`` on the open run file for as long as it is open.

    Raises:
        RunFileBusy: another writer holds it.
    """
    if fcntl is None:
        return
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise RunFileBusy(0, f"{path} is being written by another prefilltui run (it is "
                             "locked until that run ends); give this run another --out") from None


def default_run_path() -> Path:
    """``<user data dir>/prefilltui/runs/run-YYYYmmdd-HHMMSS.jsonl`` (not created)."""
    import platformdirs

    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(platformdirs.user_data_dir("prefilltui", appauthor=False)) / "runs"
    p = base / f"run-{stamp}.jsonl"
    i = 1
    while p.exists():
        p = base / f"run-{stamp}-{i}.jsonl"
        i += 1
    return p


class RunWriter:
    """Append ProbeResults to a JSONL file (thread-safe), one flushed line each.
    A file this writer created and never wrote to is removed on ``close()``.

    The file is locked (``flock``, exclusive) while the writer has it open: a second
    run given the same ``--out`` is refused (``RunFileBusy``), never interleaved.  Its
    first line is a session line with a fresh ``session_id``, so ``report`` can tell
    two runs appended to one file apart.

    Raises:
        RunFileBusy: another writer holds the file; OSError: it cannot be created/opened.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Opened now, so an unwritable path fails before any probe is fired.
        self._created = not self.path.exists()
        self._f = open(self.path, "a", encoding="utf-8")
        _lock(self._f, self.path)
        self._lock = threading.Lock()
        self.count = 0
        #: written before the first probe line, whatever else becomes known
        self._session: dict = {"session_id": uuid.uuid4().hex[:12]}
        self._session_pending = True

    def set_session(self, **fields) -> None:
        """Record facts about the whole run (e.g. ``server={...}``,
        ``gpu_names=[...]``); they are written as one session line before the next
        probe line (merged with earlier ones, so the last session line is complete).
        Never writes by itself: a run with no probe leaves no file."""
        with self._lock:
            self._session.update(_finite(fields))
            self._session_pending = True

    def append(self, result: ProbeResult) -> None:
        """Write one line.  A non-finite float anywhere in the result (a server's
        Infinity, a NaN reading) is written as null, so the probe is never lost.

        Raises:
            OSError: the write failed (disk full); ValueError: the writer is closed.
        """
        self._write(_finite(result.to_json()))
        with self._lock:
            self.count += 1

    def append_calibration(self, result: ProbeResult) -> None:
        """Write a calibration request as a ``{"record": "calibration", ...}`` line
        (not a probe: ``count`` is unchanged).  Raises as ``append``."""
        self._write({"record": CALIBRATION_RECORD, **_finite(result.to_json())})

    def append_record(self, record: str, fields: dict) -> None:
        """Write one non-probe line ``{"record": record, **fields}`` (a background-load
        request, ``LOAD_RECORD``), with the same guarantees as ``append``.

        Raises:
            OSError: the write failed; ValueError: the writer is closed.
        """
        self._write(_finite({"record": record, **fields}))

    def _write(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str) + "\n"
        with self._lock:
            if self._f.closed:
                raise ValueError("run file is closed")
            if self._session_pending:
                line = _line({"record": SESSION_RECORD, **self._session}) + line
                self._session_pending = False
            self._f.write(line)
            self._f.flush()

    def close(self) -> None:
        """Flush, fsync and close; never raises (a failed flush, e.g. disk full, was
        already reported by ``append``)."""
        with self._lock:
            if not self._f.closed:
                try:
                    self._f.flush()
                    os.fsync(self._f.fileno())
                except OSError:
                    pass
                try:
                    self._f.close()
                except OSError:
                    pass
                if self._created and self.count == 0:
                    # no probe completed: leave no empty run file behind
                    try:
                        if self.path.stat().st_size == 0:
                            self.path.unlink()
                    except OSError:
                        pass

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RotatingRunWriter(RunWriter):
    """A RunWriter that never grows past ``max_bytes``: when a line would take the file
    over, the file is closed (fsynced) and renamed ``NAME.1`` (``.1`` -> ``.2`` ... up to
    ``keep`` old files; the oldest is deleted) and a new ``NAME`` is started, so a
    long-running prober keeps at most ``(keep + 1) * max_bytes`` on disk.  Lines are
    never split across files; each file is a valid run file on its own (the session
    line, when there is one, opens every new file).

    Raises:
        OSError: when the file cannot be created/opened (at construction or rotation);
        ValueError: ``max_bytes`` < 1 or ``keep`` < 0.
    """

    def __init__(self, path: str | os.PathLike, *, max_bytes: int, keep: int = 3) -> None:
        if max_bytes < 1 or keep < 0:
            raise ValueError(f"max_bytes must be >= 1 and keep >= 0, got {max_bytes}, {keep}")
        super().__init__(path)
        self.max_bytes = int(max_bytes)
        self.keep = int(keep)
        self.rotations = 0
        self._size = self.path.stat().st_size

    def _write(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str) + "\n"
        with self._lock:
            if self._f.closed:
                raise ValueError("run file is closed")
            if self._size and self._size + len(self._head() + line) > self.max_bytes:
                self._rotate()
                # every file stands alone: the session facts open each new one
                self._session_pending = bool(self._session)
            text = self._head() + line
            self._session_pending = False
            self._f.write(text)
            self._f.flush()
            self._size += len(text.encode("utf-8"))

    def _head(self) -> str:
        """The pending session line ("" when none is due); called with the lock held."""
        if not self._session_pending:
            return ""
        return _line({"record": SESSION_RECORD, **self._session})

    def _rotate(self) -> None:
        """Called with the lock held."""
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError:
            pass
        self._f.close()
        old = lambda i: self.path.with_name(f"{self.path.name}.{i}")  # noqa: E731
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
        else:
            old(self.keep).unlink(missing_ok=True)
            for i in range(self.keep - 1, 0, -1):
                if old(i).exists():
                    os.replace(old(i), old(i + 1))
            os.replace(self.path, old(1))
        self._f = open(self.path, "a", encoding="utf-8")
        _lock(self._f, self.path)
        self._size = 0
        self._created = False  # rotated files are kept, even an empty current one
        self.rotations += 1


def _line(obj: dict) -> str:
    """One run-file line: compact JSON, non-finite floats as null, newline-ended."""
    return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False, default=str) + "\n"


def _finite(v):
    """``v`` with every non-finite float (NaN, +-Infinity) replaced by None."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def record_of_trace(tr: DecodeTrace) -> dict:
    """A load request's run-file fields: its arrivals as offsets from ``t_send``
    (0.1 ms resolution; a 1,024-token stream is ~8 KB)."""
    return {"kind": tr.kind, "level": tr.level, "stream": tr.stream, "t_send": tr.t_send,
            "prompt_tokens": tr.prompt_tokens, "ended": tr.ended, "ok": tr.ok,
            "error": tr.error, "tokens": len(tr.arrivals),
            "arrivals": [round(t - tr.t_send, 4) for t in tr.arrivals]}
