"""Reading a run file back: probe lines checked field by field, split into the runs
the file holds; the session facts; the background-load lines.

``read_run`` / ``read_run_sessions`` (probes, bad lines reported as
``"line N: reason"``, never raised), ``read_session`` (the merged session lines),
``read_load`` (load lines as ``DecodeTrace``), ``read_server_changes`` (the server's
restarts and changes as ``ServerChange``), ``load_baseline`` (the fit of a saved run).  Lines are read in bounded pieces (``MAX_LINE_CHARS``).  The writer and the
record names are in ``runfile``.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Iterator

from prefilltui.measure.runfile.writer import (CALIBRATION_RECORD, LOAD_RECORD,
                                               SERVER_CHANGE_RECORD, SESSION_RECORD,
                                               SPAN_RECORD)
from prefilltui.model.diagnosis import run_fit
from prefilltui.model.fit import LinearFit
from prefilltui.model.jsontypes import loads as json_loads
from prefilltui.model.probe_notes import ServerSpan
from prefilltui.model.load import DecodeTrace
from prefilltui.model.server_change import ServerChange
from prefilltui.model.types import FitMethod, ProbeResult
from prefilltui.model.users import apply_span

_NUMBER_FIELDS = ("started_at", "ttft_s", "ttfb_s", "total_s", "connect_s", "server_prefill_s",
                  "queue_s", "overhead_s", "retry_after_s", "t_send", "t_end", "server_running",
                  "server_waiting", "util_peak_pct", "util_mean_pct", "power_peak_w", "energy_j",
                  "load_level", "decode_stall_s", "decode_excess_s", "decode_gap_s",
                  "server_itl_max_s", "server_itl_mean_s")
#: Durations a probe measures (seconds); a read-back value outside 0..MAX_DURATION_S
#: is not a measurement (a hand-edited or foreign line) and the line is skipped.
_DURATION_FIELDS = ("ttft_s", "ttfb_s", "total_s", "connect_s", "server_prefill_s", "queue_s")
#: One day: far beyond any probe's timeout, far below a corrupt 1e308.
MAX_DURATION_S = 86_400.0
_COUNT_FIELDS = ("seq", "requested_tokens", "prompt_tokens", "cached_tokens", "http_status",
                 "decode_tokens", "decode_streams", "load_ahead_tokens",
                 "window_prompt_tokens")
_BOOL_FIELDS = ("ok", "warmup", "burst")
_STR_FIELDS = ("prompt_tokens_source", "error_kind", "error_message", "api", "model",
               "telemetry_device", "load_kind")


def _check(r: ProbeResult) -> None:
    """Raise ValueError naming the first field of a read-back result with the wrong type
    (a hand-edited or foreign file), so it is skipped as a bad line instead of
    breaking the analysis."""
    def bad(name: str, want: str) -> ValueError:
        return ValueError(f"{name} is {str(getattr(r, name))[:40]!r}, not {want}")

    for name in _NUMBER_FIELDS:
        v = getattr(r, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not math.isfinite(v)):
            raise bad(name, "a finite number")
    for name in _COUNT_FIELDS:
        v = getattr(r, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise bad(name, "a count")
    for name in _BOOL_FIELDS:
        if not isinstance(getattr(r, name), bool):
            raise bad(name, "true/false")
    for name in _STR_FIELDS:
        v = getattr(r, name)
        if v is not None and not isinstance(v, str):
            raise bad(name, "a string")
    for name in _DURATION_FIELDS:  # a measured duration: never negative, never days
        v = getattr(r, name)
        if v is not None and not 0.0 <= v <= MAX_DURATION_S:
            raise bad(name, f"a duration from 0 to {MAX_DURATION_S:g} s")
    if r.ok and r.ttft_s is not None and r.ttft_s <= 0:
        raise bad("ttft_s", "a positive time")


def read_run(path: str | os.PathLike, *, calibration: list[ProbeResult] | None = None
             ) -> tuple[list[ProbeResult], list[str]]:
    """Read a run file; bad lines are reported as ``"line N: reason"``, never raised.
    ``calibration``: a list that receives the calibration requests (skipped otherwise).

    Raises:
        FileNotFoundError / OSError: when the file cannot be opened.
    """
    sessions, problems = read_run_sessions(path, calibration=calibration)
    return [r for s in sessions for r in s.results], problems


class RunSession:
    """The probes of one run in a run file, and where they stand (line numbers)."""

    def __init__(self, session_id: str | None, first_line: int) -> None:
        self.session_id = session_id
        self.first_line = self.last_line = first_line
        self.results: list[ProbeResult] = []

    def span(self) -> str:
        return f"lines {self.first_line}-{self.last_line}"


#: Longest run-file line read (characters): a probe line is ~1-2 KiB, a load request's
#: line with its token arrivals ~12 characters per token; 16 Mi characters holds a
#: million-token decode.  A longer line (a damaged or foreign file, ``/dev/zero``) is
#: skipped as it is read, never held whole in memory.
MAX_LINE_CHARS = 16 * 2**20
#: Pieces a too-long line is skipped in, and the most of one line skipped before the
#: rest of the file is given up (a line without end: ``/dev/zero``, a disk image).
_SKIP_CHARS = 2**20
_MAX_SKIP_PIECES = 1024


def _lines(f) -> Iterator[tuple[int, str | None]]:
    """(line number, line) of a text file opened for reading; ``None`` in place of a
    line longer than ``MAX_LINE_CHARS`` (read past in bounded pieces, never whole; after
    ``_MAX_SKIP_PIECES`` pieces without its end the file is read no further)."""
    i = 0
    while True:
        line = f.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        i += 1
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            for _ in range(_MAX_SKIP_PIECES):  # the rest of the line, piece by piece
                piece = f.readline(_SKIP_CHARS)
                if not piece or piece.endswith("\n"):
                    break
            else:
                yield i, None
                return
            yield i, None
            continue
        yield i, line


def read_run_sessions(path: str | os.PathLike, *, calibration: list[ProbeResult] | None = None
                      ) -> tuple[list[RunSession], list[str]]:
    """Read a run file split into its runs: a new one starts at a session line with
    another ``session_id``, or, in a file written before session ids, where ``seq``
    starts again (a probe numbered at or below the previous one).  Sessions without a probe are
    dropped.  Bad lines are reported as ``"line N: reason"``, never raised; so is a probe
    line the file already holds (same run, seq, start time and request id: a file joined
    to itself), which is counted once.
    ``calibration``: a list that receives the calibration requests (skipped otherwise).

    Raises:
        FileNotFoundError / OSError: when the file cannot be opened.
    """
    sessions: list[RunSession] = [RunSession(None, 1)]
    problems: list[str] = []
    seen: dict[tuple, int] = {}  # (session, seq, started_at, request id) -> its line
    last_seq: int | None = None
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for i, line in _lines(f):
            if line is None:
                problems.append(f"line {i}: longer than {MAX_LINE_CHARS:,} characters "
                                "(skipped unread)")
                continue
            s = line.strip()
            if not s:
                continue
            cur = sessions[-1]
            try:
                obj = json_loads(s)
                if isinstance(obj, dict) and obj.get("record") == SESSION_RECORD:
                    sid = obj.get("session_id") if isinstance(obj.get("session_id"), str) \
                        else None
                    if sid is not None and sid != cur.session_id:
                        if cur.session_id is None and not cur.results:
                            cur.session_id, cur.first_line = sid, i
                        else:
                            sessions.append(RunSession(sid, i))
                            last_seq = None
                    continue  # facts about the run, not a probe: read_session
                if isinstance(obj, dict) and obj.get("record") in (LOAD_RECORD,
                                                                   SERVER_CHANGE_RECORD):
                    continue  # load requests (read_load), the server's changes
                if isinstance(obj, dict) and obj.get("record") == SPAN_RECORD:
                    _amend_span(sessions[-1].results, obj)  # a probe's late server span
                    continue
                if isinstance(obj, dict) and obj.get("record") == CALIBRATION_RECORD:
                    if calibration is not None:
                        calibration.append(ProbeResult.from_json(
                            {k: v for k, v in obj.items() if k != "record"}))
                    continue  # a request, not a result
                if isinstance(obj, dict) and not {"ok", "requested_tokens"} <= obj.keys():
                    raise ValueError("not a probe record (no ok / requested_tokens)")
                r = ProbeResult.from_json(obj)
                _check(r)
                key = (sessions[-1].session_id, r.seq, r.started_at, r.t_send,
                       r.notes.request_id)
                if r.started_at and key in seen:  # 0.0: no send time recorded, nothing to match
                    # the same probe twice (a run file joined to itself, copied in twice):
                    # counted once, or its fit would claim a precision it does not have
                    raise ValueError(f"the same probe as line {seen[key]} (the file holds "
                                     "it twice)")
                seen[key] = i
                if (sessions[-1].session_id is None and r.seq is not None
                        and last_seq is not None and r.seq <= last_seq):
                    # a file without session ids: seq restarted, another run (with ids,
                    # seq may restart within one run: a load level's own runner)
                    sessions.append(RunSession(None, i))
                last_seq = r.seq if r.seq is not None else last_seq
                sessions[-1].results.append(r)
                sessions[-1].last_line = i
            except (ValueError, TypeError) as e:
                reason = str(e).splitlines()[0] if str(e) else type(e).__name__
                if not line.endswith("\n"):
                    reason = "truncated last line (" + reason + ")"
                problems.append(f"line {i}: {reason}")
    return [x for x in sessions if x.results], problems


def _amend_span(results: list[ProbeResult], obj: dict) -> None:
    """Apply a ``{"record": "span"}`` line to the probe of its run with that request id
    (searched from the newest; the span comes seconds after its probe).

    Raises:
        ValueError: no span object, or no probe of this run with that request id.
    """
    span = ServerSpan.from_json(obj.get("span"))
    rid = obj.get("request_id")
    if span is None or not isinstance(rid, str):
        raise ValueError("span record without a span or a request_id")
    for r in reversed(results):
        if r.notes.request_id == rid:
            apply_span(r, span)
            return
    raise ValueError("span record for a probe this run does not hold")


def read_session(path: str | os.PathLike) -> dict:
    """The run's session facts: every session line of the file merged in order (the
    last value of a key wins); ``{}`` for files without one (older runs) or when the
    file cannot be read.  Never raises."""
    merged: dict = {}
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            for _, line in _lines(f):
                if line is None or f'"record":"{SESSION_RECORD}"' not in line:
                    continue
                try:
                    obj = json_loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("record") == SESSION_RECORD:
                    merged.update({k: v for k, v in obj.items() if k != "record"})
    except OSError:
        return {}
    return merged


def _read_records(path: str | os.PathLike, record: str, parse: Callable[[Any], Any],
                  what: str) -> tuple[list, list[str]]:
    """The ``record`` lines of a run file through ``parse``, in file order; a line
    ``parse`` refuses (raises, or returns None: no time or kind) is reported as
    ``"line N: <what> record: reason"``, never raised, and so is an unreadable file:
    ``([], [reason])``."""
    out: list = []
    problems: list[str] = []
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            for i, line in _lines(f):
                if line is None or f'"record":"{record}"' not in line:
                    continue
                try:
                    item = parse(json_loads(line))
                except (ValueError, TypeError, KeyError) as e:
                    problems.append(f"line {i}: {what} record: {e}")
                    continue
                if item is None:
                    problems.append(f"line {i}: {what} record without a time or kind")
                else:
                    out.append(item)
    except OSError as e:
        return [], [f"cannot read {path}: {e.strerror or e}"]
    return out, problems


def read_load(path: str | os.PathLike) -> tuple[list[DecodeTrace], list[str]]:
    """The background-load requests of a run file (``LOAD_RECORD`` lines) as
    DecodeTraces (arrival offsets turned back into the run's perf_counter clock);
    bad lines are reported as ``"line N: reason"``, never raised.  Never raises for
    an unreadable file: ``([], [reason])``."""
    return _read_records(path, LOAD_RECORD, trace_from_record, "load")


def read_server_changes(path: str | os.PathLike) -> tuple[list[ServerChange], list[str]]:
    """The server's restarts and changes a run file recorded (``SERVER_CHANGE_RECORD``
    lines, ``ServerChange.from_json``), in file order; bad lines are reported as
    ``"line N: reason"``, never raised, and so is an unreadable file: ``([], [reason])``."""
    return _read_records(path, SERVER_CHANGE_RECORD, ServerChange.from_json, "server change")


def load_baseline(path: str, *, method: FitMethod = "robust") -> LinearFit:
    """``drift.run_fit`` of a saved run file (the baseline of ``--baseline``).

    Raises:
        FileNotFoundError / OSError: the file cannot be read.
        ValueError: fewer than 3 usable probes (or a single length) in the file.
    """
    results, _problems = read_run(path)
    f = run_fit(results, method)
    if f is None:
        n = sum(1 for r in results if r.fit_eligible)
        raise ValueError(f"baseline {path}: {n} usable probe(s), a fit needs 3 "
                         "at 2+ lengths")
    return f


def trace_from_record(d: dict) -> DecodeTrace:
    """The DecodeTrace of a load line.

    Raises:
        ValueError / TypeError / KeyError: a field of the wrong kind.
    """
    kind = d["kind"]
    if kind not in ("decode", "rate"):
        raise ValueError(f"kind is {kind!r}")
    t0 = float(d["t_send"])
    offs = d.get("arrivals") or []
    if not isinstance(offs, list):
        raise ValueError("arrivals is not a list")
    arr = tuple(t0 + float(x) for x in offs)
    if not all(math.isfinite(x) for x in arr) or any(b < a for a, b in zip(arr, arr[1:])):
        raise ValueError("arrivals are not ascending finite offsets")
    pt = d.get("prompt_tokens")
    return DecodeTrace(stream=int(d.get("stream", 0)), kind=kind, level=float(d.get("level", 0)),
                       t_send=t0, arrivals=arr, prompt_tokens=int(pt) if pt is not None else None,
                       ended=bool(d.get("ended", True)), ok=bool(d.get("ok", True)),
                       error=d.get("error") if isinstance(d.get("error"), str) else None)
