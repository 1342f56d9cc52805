"""How probes are spaced so the gauges can show them: the duty cycle and the burst.

A gauge can only show a spike if the sensor falls back between probes and a burst
outlasts the sensor's averaging.  Two numbers describe the sensor:

* ``period_s``: how often the sampler reads it (1 / ``--sample-hz``, 0.1 s default);
* ``window_s``: how long a reading averages over.  CPU (psutil ``cpu_times`` deltas):
  one sample period.  NVML utilization: "each sample period may be between 1 second
  and 1/6 second, depending on the product" (NVML API reference, ``nvmlUtilization_t``;
  an H200 on driver 580 was measured here at 0.2 s from ``nvmlDeviceGetSamples``
  timestamps); ``nvmlDeviceGetPowerUsage`` averages over ~1 s on Ampere (except
  GA100) and newer (NVML API reference); instantaneous power
  (``NVML_FI_DEV_POWER_INSTANT``, the ``NVML_TOTAL_POWER_SAMPLES`` buffer, 20 ms
  apart on that H200) adds no window.  Unknown: ``NVML_WINDOW_MAX_S``.

Rules (all times in seconds):

* idle after a probe = max(``idle_floor_s``, TTFT * (1 - duty) / duty).  The default
  duty is ``DEFAULT_DUTY`` = 0.5, so the idle gap is at least as long as the probe it
  follows: every spike is followed by a trough at least as wide as itself, which the
  60 s history shows as separate spikes at any terminal width, and the probe rate
  at most halves.  ``idle_floor_s`` = 2 * max(period, window): one full reading
  whose window holds no probe, whatever the phase of the sampler (CPU at 10 Hz:
  0.2 s; NVML worst case: 2 s).
* a burst runs back-to-back probes at the longest length for at least
  ``burst_min_s`` = 2 * window + 2 * period, where window also counts the gauge
  history's own averaging: a history column is the mean over ``HISTORY_COLUMN_S``
  (60 s over the 38 columns of a utilization history at 80 terminal columns,
  1.58 s).  A reading reaches the burst's level once a whole window lies inside the
  burst (one window) and holds it for one more, so at least one column shows the
  burst at full height; one period each side covers the sampler's phase: 3.4 s at
  10 Hz (CPU or GPU; NVML's own windows, 1 s at most, are shorter).  On the CPU demo
  a 1,024-token probe outlasts it alone, so the burst is one probe there.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Busy share of the time used by default in the TUI and the demo (idle >= TTFT).
DEFAULT_DUTY = 0.5
#: Longest averaging window NVML documents for utilization ("between 1 second and
#: 1/6 second", nvmlUtilization_t) and for nvmlDeviceGetPowerUsage (~1 s on Ampere
#: and newer): used when the window is not known.
NVML_WINDOW_MAX_S = 1.0
#: Default sample period (the sampler's 10 Hz default).
DEFAULT_PERIOD_S = 0.1
#: Seconds one column of the gauge history averages at 80 terminal columns: the 60 s
#: history over the 38 columns a utilization history gets there (gauges.HistorySpark).
HISTORY_COLUMN_S = 60.0 / 38


def idle_floor_s(period_s: float, window_s: float) -> float:
    """Shortest idle gap that leaves one reading free of any probe: 2 * max(period,
    window) seconds."""
    return 2.0 * max(period_s, window_s)


def burst_min_s(period_s: float, window_s: float) -> float:
    """Shortest burst that registers as a plateau on the sensor and on the 80-column
    history: 2 * max(window, HISTORY_COLUMN_S) + 2 * period seconds."""
    return 2.0 * max(window_s, HISTORY_COLUMN_S) + 2.0 * period_s


@dataclass(frozen=True)
class Pacing:
    """Spacing of probes.  ``duty`` in (0, 1]: the busiest share of the time probes
    may take (1 = no gap beyond ``idle_floor_s``); ``idle_floor_s`` >= 0: the least
    idle time after each probe; ``burst_min_s`` >= 0: the least duration of a burst
    (0 = one probe).  ``Pacing()`` is back-to-back probing with one-probe bursts
    (the headless sweep's pacing)."""

    duty: float = 1.0
    idle_floor_s: float = 0.0
    burst_min_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.duty <= 1.0:
            raise ValueError(f"duty must be in (0, 1], got {self.duty}")
        if self.idle_floor_s < 0 or self.burst_min_s < 0:
            raise ValueError("idle_floor_s and burst_min_s must be >= 0")

    def idle_after(self, busy_s: float | None) -> float:
        """Idle seconds after a probe that kept the server busy ``busy_s`` seconds
        (its TTFT; None when unknown, e.g. a failed probe: the floor only)."""
        ratio = 0.0 if busy_s is None or busy_s <= 0 else busy_s * (1.0 - self.duty) / self.duty
        return max(self.idle_floor_s, ratio)

    def describe(self) -> str:
        """One line for the help screen, e.g. "duty 50 %: idle ≥ TTFT, ≥ 0.2 s"."""
        if self.duty >= 1.0 and self.idle_floor_s <= 0:
            return "back-to-back probes"
        parts = []
        if self.duty < 1.0:
            k = (1.0 - self.duty) / self.duty
            parts.append(f"duty {self.duty * 100:.0f} %: idle ≥ "
                         + ("TTFT" if abs(k - 1) < 1e-9 else f"{k:.2g} × TTFT"))
        if self.idle_floor_s > 0:
            parts.append(f"≥ {self.idle_floor_s:.1f} s" if parts
                         else f"idle {self.idle_floor_s:.1f} s after each probe")
        return ", ".join(parts)


def auto_pacing(period_s: float | None, window_s: float | None, *,
                duty: float | None = None, pause_s: float | None = None) -> Pacing:
    """The TUI's pacing from the sensor (``period_s``/``window_s``: None = no sampler:
    ``DEFAULT_PERIOD_S`` / ``NVML_WINDOW_MAX_S``) and the ``--duty``/``--pause``
    flags (None = not given).  Neither flag: ``DEFAULT_DUTY`` with the idle floor.
    ``--pause S`` alone: a fixed S-second gap, no TTFT share (``--pause 0``:
    back-to-back).  ``--duty F``: that share, with the ``--pause`` floor if given,
    else the sensor's floor.

    Raises:
        ValueError: duty outside (0, 1] or a negative pause.
    """
    p = DEFAULT_PERIOD_S if period_s is None else period_s
    w = NVML_WINDOW_MAX_S if window_s is None else window_s
    if duty is None:
        duty = DEFAULT_DUTY if pause_s is None else 1.0
    floor = idle_floor_s(p, w) if pause_s is None else pause_s
    return Pacing(duty=duty, idle_floor_s=floor, burst_min_s=burst_min_s(p, w))
