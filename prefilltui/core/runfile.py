"""The run file: one JSON line per probe, appended and flushed as each completes.

A ``kill -9`` loses at most the probe in flight: each line is written with a single
``write`` and flushed to the OS before ``append`` returns (the page cache survives a
killed process; ``close()`` also fsyncs for power loss).  Schema: the fields of
``ProbeResult.to_json`` (documented in README, "Run file").
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from prefilltui.core.types import ProbeResult


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

    Raises:
        OSError: when the file cannot be created/opened.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Opened now, so an unwritable path fails before any probe is fired.
        self._created = not self.path.exists()
        self._f = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.count = 0

    def append(self, result: ProbeResult) -> None:
        line = json.dumps(result.to_json(), separators=(",", ":"), allow_nan=False,
                          default=str) + "\n"
        with self._lock:
            if self._f.closed:
                raise ValueError("run file is closed")
            self._f.write(line)
            self._f.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.flush()
                try:
                    os.fsync(self._f.fileno())
                except OSError:
                    pass
                self._f.close()
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


def read_run(path: str | os.PathLike) -> tuple[list[ProbeResult], list[str]]:
    """Read a run file; bad lines are reported as ``"line N: reason"``, never raised.

    Raises:
        FileNotFoundError / OSError: when the file cannot be opened.
    """
    results: list[ProbeResult] = []
    problems: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, 1):
            s = line.strip()
            if not s:
                continue
            try:
                obj = json.loads(s)
                results.append(ProbeResult.from_json(obj))
            except (ValueError, TypeError) as e:
                reason = str(e).splitlines()[0] if str(e) else type(e).__name__
                if not line.endswith("\n"):
                    reason = "truncated last line (" + reason + ")"
                problems.append(f"line {i}: {reason}")
    return results, problems
