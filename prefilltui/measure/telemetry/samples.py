"""Sample storage and window statistics for telemetry (split out of telemetry.py).

``SampleRing`` keeps a fixed number of ``(t_perf, util_pct, power_w, energy_counter_j)``
rows per device in one preallocated numpy array; ``window_stats`` turns the rows in a
probe's request window into peak/mean utilization, peak/mean power and energy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Columns of a sample ring row.
_T, _UTIL, _POWER, _ENERGY = 0, 1, 2, 3


class SampleRing:
    """A fixed-size ring of samples ``(t_perf, util_pct, power_w, energy_counter_j)``.

    Missing values are stored as NaN.  Memory is ``capacity * 4 * 8`` bytes, allocated
    once; appends are O(1) and never allocate.  Times must be non-decreasing.
    """

    __slots__ = ("_buf", "_n", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(2, int(capacity))
        self._buf = np.full((self.capacity, 4), np.nan)
        self._n = 0

    def __len__(self) -> int:
        return min(self._n, self.capacity)

    @property
    def nbytes(self) -> int:
        return int(self._buf.nbytes)

    def append(self, t: float, util: float | None, power: float | None,
               energy: float | None) -> None:
        row = self._buf[self._n % self.capacity]
        row[0] = t
        row[1] = math.nan if util is None else util
        row[2] = math.nan if power is None else power
        row[3] = math.nan if energy is None else energy
        self._n += 1

    def ordered(self) -> np.ndarray:
        """All kept rows, oldest first; shape (len, 4).  A copy."""
        if self._n <= self.capacity:
            return self._buf[: self._n].copy()
        i = self._n % self.capacity
        return np.concatenate((self._buf[i:], self._buf[:i]))

    def last_t(self) -> float | None:
        if self._n == 0:
            return None
        return float(self._buf[(self._n - 1) % self.capacity, 0])


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Telemetry over one time window [t0, t1] (perf_counter seconds).

    util_*: per-tick utilization averaged over the devices; power_*: per-tick power
    summed over the devices (W); energy_j: joules spent, from the energy counter
    (``energy_source`` "counter") or by integrating power over time ("integrated").
    n_samples: samples used.  Any figure may be None when no sample supports it.
    """

    device: str
    n_samples: int
    util_peak_pct: float | None
    util_mean_pct: float | None
    power_peak_w: float | None
    power_mean_w: float | None
    energy_j: float | None
    energy_source: str | None


#: The energy counter is used for a window only when the window spans at least this
#: many of the counter's own update periods.  NVML's total-energy counter advances in
#: steps: on an H200 polled at 20 Hz, a 41 ms probe right after a long one took in a
#: whole step (41 J, a "997 W" mean on a 700 W board).  A shorter window is
#: integrated from the power samples instead.
MIN_COUNTER_PERIODS = 4


def _counter_period(t: np.ndarray, e: np.ndarray) -> float | None:
    """The median time between the energy counter's changes (s), from the samples in
    the ring; None when it changed fewer than 3 times (too few to tell)."""
    ok = ~np.isnan(e)
    tt, ee = t[ok], e[ok]
    changed = np.flatnonzero(np.diff(ee) != 0) + 1
    if len(changed) < 3:
        return None
    return float(np.median(np.diff(tt[changed])))


def _window_energy(rows: np.ndarray, t0: float, t1: float) -> tuple[float | None, str | None]:
    """Joules spent by one device over [t0, t1]; (value, "counter"|"integrated").
    The counter is interpolated at t0 and t1 when the window spans at least
    ``MIN_COUNTER_PERIODS`` of its update periods; else the power samples are
    integrated."""
    t = rows[:, _T]
    if not len(t) or t0 < t[0] or t1 > t[-1]:
        return None, None
    e = rows[:, _ENERGY]
    lo = int(np.searchsorted(t, t0, side="right")) - 1
    hi = int(np.searchsorted(t, t1, side="left"))
    seg = e[lo:hi + 1]
    period = _counter_period(t, e) if len(seg) else None
    if (len(seg) and not np.isnan(seg).any() and np.all(np.diff(seg) >= 0)
            and (period is None or t1 - t0 >= MIN_COUNTER_PERIODS * period)):
        ts = t[lo:hi + 1]
        return float(np.interp(t1, ts, seg) - np.interp(t0, ts, seg)), "counter"
    p = rows[:, _POWER]
    ok = ~np.isnan(p)
    if ok.sum() < 1:
        return None, None
    tp, pp = t[ok], p[ok]
    if t0 < tp[0] or t1 > tp[-1]:
        return None, None
    inner = (tp > t0) & (tp < t1)
    xs = np.concatenate(([t0], tp[inner], [t1]))
    ys = np.interp(xs, tp, pp)
    return float(np.sum((ys[1:] + ys[:-1]) * np.diff(xs) / 2.0)), "integrated"



def window_stats(per: list[np.ndarray], label: str, t0: float, t1: float,
                 power_from: list[bool] | None = None) -> WindowStats | None:
    """Telemetry over [t0, t1] from each device's ordered ring rows (``per``, one
    (n, 4) array per device, as ``SampleRing.ordered()``); None when t1 < t0.

    Utilization and power samples taken in the window are used, plus the samples up
    to the first utilization sample at or after ``t1`` (a sample describes the period
    before it, so it covers the window's tail; a probe shorter than one period still
    gets one).
    Energy: the energy counter interpolated linearly at t0 and t1 where every
    device has one bracketing the window, else the power samples (with values
    interpolated at t0 and t1) integrated by the trapezoid rule.
    Several devices: utilization is averaged per tick, power and energy summed over
    the devices whose ``power_from`` entry is True (default all; MIG slices of one GPU
    share the whole GPU's power, which must be counted once).
    """
    if t1 < t0:
        return None
    util_cols, power_cols, energies, sources = [], [], [], set()
    n = 0
    for k, rows in enumerate(per):
        if not len(rows):
            continue
        if power_from is not None and not power_from[k]:
            rows = rows.copy()
            rows[:, _POWER] = 0.0 if len(per) > 1 else np.nan
            rows[:, _ENERGY] = 0.0 if len(per) > 1 else np.nan
        t = rows[:, _T]
        lo = int(np.searchsorted(t, t0, side="left"))
        hi = int(np.searchsorted(t, t1, side="left"))
        # the first utilization sample at/after t1 covers the tail (rows without one,
        # e.g. a GPU's polled power between its driver utilization samples, are kept)
        has_util = np.flatnonzero(~np.isnan(rows[hi:, _UTIL]))
        hi += int(has_util[0]) if len(has_util) else 0
        hi = min(hi + 1, len(t))  # include the first sample at/after t1
        sel = rows[lo:hi]
        n = max(n, len(sel))
        util_cols.append(sel[:, _UTIL])
        power_cols.append(sel[:, _POWER])
        e, src = _window_energy(rows, t0, t1)
        energies.append(e)
        sources.add(src)
    if n == 0:
        return WindowStats(label, 0, None, None, None, None, None, None)
    util_peak = util_mean = power_peak = power_mean = None
    # per-tick mean utilization over devices, per-tick summed power
    m = min(len(c) for c in util_cols)
    if m:
        u = np.vstack([c[:m] for c in util_cols])
        have = (~np.isnan(u)).sum(axis=0)
        if have.any():
            per_tick = np.nansum(u, axis=0)[have > 0] / have[have > 0]
            util_peak, util_mean = float(per_tick.max()), float(per_tick.mean())
        p = np.vstack([c[:m] for c in power_cols])
        ok = ~np.isnan(p).any(axis=0)
        if ok.any():
            s = p[:, ok].sum(axis=0)
            power_peak, power_mean = float(s.max()), float(s.mean())
    energy = None
    source = None
    if energies and all(e is not None for e in energies):
        energy = float(sum(energies))  # type: ignore[arg-type]
        source = "counter" if sources == {"counter"} else "integrated"
        if t1 > t0:
            power_mean = energy / (t1 - t0)
    return WindowStats(label, n, util_peak, util_mean, power_peak, power_mean,
                       energy, source)

