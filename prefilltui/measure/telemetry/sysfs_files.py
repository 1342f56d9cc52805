"""A device's sysfs files, probed once and read each tick (for the AMD and Intel readers).

``FileSet.probe(metric, path)`` reads the file once: a value keeps the file for the
ticks; a file that cannot give a value (missing, permission denied, "N/A", the
driver's EOPNOTSUPP) puts the metric in ``na`` with that reason and it is never read
again.  ``FileSet.read(metric)`` during a tick: a value, or None for a metric in
``na``, or None for one tick when the driver writes something that is not a number;
any other failure raises ``RuntimeError`` (the device goes to "error" and is retried:
amdgpu answers EPERM during a GPU reset, EBUSY while the SMU is busy).
"""

from __future__ import annotations

from prefilltui.measure.telemetry.sysfs import Unreadable, read_number

__all__ = ["FileSet"]


class FileSet:
    """Metric name -> sysfs path, with ``na`` {metric: reason} for the unusable ones."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}
        self.na: dict[str, str] = {}

    def probe(self, metric: str, path: str | None, missing: str | None = None
              ) -> float | None:
        """Read ``path`` once for ``metric``; keep it when it gives a value.
        ``path`` None: not applicable here, ``missing`` says why."""
        if path is None:
            self.na[metric] = missing or "not exposed here"
            return None
        try:
            value = read_number(path)
        except Unreadable as exc:
            self.na[metric] = str(exc)
            return None
        self.paths[metric] = path
        self.na.pop(metric, None)
        return value

    def drop(self, metric: str, reason: str) -> None:
        """Stop reading ``metric`` (N/A with ``reason`` from now on)."""
        self.paths.pop(metric, None)
        self.na[metric] = reason

    def has(self, metric: str) -> bool:
        return metric in self.paths

    def read(self, metric: str) -> float | None:
        """One tick's value (see the module docstring).

        Raises:
            RuntimeError: the file failed in a way that may pass (retried).
        """
        path = self.paths.get(metric)
        if path is None:
            return None
        try:
            return read_number(path)
        except Unreadable as exc:
            if "not a number" in str(exc):
                return None  # "N/A" for one tick: no value, no error
            raise RuntimeError(str(exc)) from None
