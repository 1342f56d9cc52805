"""What the exporter computes for the alerts from a target's probes and settings: the
explicit baseline, the per-length TTFT figures, the hang threshold and the histogram
buckets (the window's fit and verdict are ``analysis.analyze``'s ``RunSummary``).

Pure computation on results and a ``TargetConfig`` (``explicit_baseline`` alone reads
a file: the healthy run of ``baseline_run``).  Never raises for bad probe data.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Literal

from prefilltui.exporter.config import TargetConfig
from prefilltui.model.fit import LinearFit
from prefilltui.model.fleet import HANG_SLOWEST_FACTOR, hang_threshold_s, roofline_expected
from prefilltui.model.types import ProbeResult

BaselineSource = Literal["config", "baseline_run", "roofline"]

#: The 1-2-5 series the TTFT histogram's bounds are taken from (s): from the fastest
#: fixed cost a loopback server shows (~5 ms) up; the probe timeout closes the list.
_SERIES_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0,
             200.0, 500.0, 1000.0)
# The hang threshold and the roofline baseline are the alert rules' own, shared with
# the fleet overview and ``status`` (model/fleet/health.py judges the same rules on a snapshot).
__all__ = ["HANG_SLOWEST_FACTOR", "roofline_expected", "hang_threshold", "explicit_baseline",
           "baseline_fit",
           "length_medians", "ttft_buckets", "Expected", "BaselineSource"]


def ttft_buckets(timeout_s: float) -> tuple[float, ...]:
    """Histogram bounds (s) for probes capped at ``timeout_s``: the 1-2-5 series below
    the timeout, then the timeout itself, so every successful probe has a finite bucket
    (a probe over the timeout fails and is counted as a timeout, not observed)."""
    return tuple(b for b in _SERIES_S if b < timeout_s * 0.999) + (float(timeout_s),)


@dataclass(frozen=True, slots=True)
class Expected:
    """An explicit expected prefill throughput (prompt tokens/s) and where it came
    from: the config's number, a healthy run's fit, or the roofline (an estimate)."""

    tokens_per_s: float
    source: BaselineSource


def baseline_fit(cfg: TargetConfig) -> LinearFit | None:
    """The fit of ``cfg.baseline_run`` (a healthy run file), None without one.

    Raises:
        ValueError: naming the target, when ``baseline_run`` cannot be read or holds
            no fit (fewer than 3 usable probes, one length, or no slope).
    """
    if not cfg.baseline_run:
        return None
    from prefilltui.measure.runfile import load_baseline

    try:
        fit = load_baseline(cfg.baseline_run)
    except (OSError, ValueError) as e:
        raise ValueError(f"target {cfg.label!r}: baseline_run {cfg.baseline_run}: {e}") from None
    tps = fit.prefill_tokens_per_s
    if not tps or not math.isfinite(tps) or tps <= 0:
        raise ValueError(f"target {cfg.label!r}: baseline_run {cfg.baseline_run}: its fit has "
                         "no prefill throughput (TTFT does not grow with the prompt)")
    return fit


def explicit_baseline(cfg: TargetConfig, fit: LinearFit | None = None) -> Expected | None:
    """The config's expected throughput: ``expected_throughput`` (a number), else the
    fit of ``baseline_run`` (``fit`` when the caller loaded it: ``baseline_fit``); None
    for "roofline" (known once the model is) or none.

    Raises:
        ValueError: naming the target, when ``baseline_run`` cannot be read or holds
            no fit (fewer than 3 usable probes, one length, or no slope).
    """
    if isinstance(cfg.expected_throughput, (int, float)):
        return Expected(float(cfg.expected_throughput), "config")
    fit = fit if fit is not None else baseline_fit(cfg)
    if fit is None:
        return None
    return Expected(float(fit.prefill_tokens_per_s), "baseline_run")


def hang_threshold(cfg: TargetConfig, window: Iterable[ProbeResult]) -> float:
    """Seconds a probe may be in flight before it is a hang: ``cfg.hang_after_s``, or
    ``HANG_SLOWEST_FACTOR`` x the slowest TTFT in the window when that is longer
    (``model.fleet.health.hang_threshold_s``)."""
    return hang_threshold_s(cfg.hang_after_s, (r.ttft_s for r in window))


def length_medians(window: Iterable[ProbeResult]) -> tuple[tuple[int, float], ...]:
    """(requested tokens, median TTFT in s) of the window's probes, by length: exact
    figures from the probes themselves, every probe with a TTFT as the TTFT histogram
    counts them (a prefix-cache hit included: the exporter's prompts are fresh, so one
    is rare; the dashboard's by-length table and the fit leave hits out)."""
    by: dict[int, list[float]] = {}
    for r in window:
        if r.ttft_s is not None and r.requested_tokens:
            by.setdefault(int(r.requested_tokens), []).append(float(r.ttft_s))
    return tuple((n, statistics.median(v)) for n, v in sorted(by.items()))
