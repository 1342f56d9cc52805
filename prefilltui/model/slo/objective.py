"""A TTFT objective and its parser: ``Objective``, ``parse_objective``, ``SloPreset``.

An objective "TTFT <= 2 s at p99" says that at least 99 % of the requests must see
their first token within 2 s: its *target* is the percentile as a share (0.99) and its
*error budget* is 1 - target (1 % of the requests may miss it; the SRE workbook,
"Implementing SLOs", ch. 2).  Written ``ttft=2s@p99`` on the command line and in TOML
(``ttft=500ms@p90``; units s and ms; the percentile p50 .. p99.9), or as a preset
(``mlperf-server``, ``mlperf-interactive``: ``presets``) that is resolved once the
server's model is known.  Pure: no I/O.  Seconds in data.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

#: The percentiles an objective may name (p50 .. p99.9): below the median an objective
#: says nothing about the tail; above p99.9 no window of a monitor holds enough
#: requests to tell (1,000 requests make one bad one the whole budget).
PERCENTILE_MIN = 50.0
PERCENTILE_MAX = 99.9
#: A TTFT threshold above an hour is a typo, not an objective.
THRESHOLD_MAX_S = 3600.0

PresetName = Literal["mlperf-server", "mlperf-interactive"]
PRESET_NAMES: tuple[PresetName, ...] = ("mlperf-server", "mlperf-interactive")

_FORM = re.compile(r"^\s*ttft\s*=\s*(?P<num>[0-9]*\.?[0-9]+)\s*(?P<unit>ms|s)\s*@\s*p"
                   r"(?P<pct>[0-9]+(?:\.[0-9]+)?)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Objective:
    """TTFT <= ``threshold_s`` (seconds) for at least ``percentile`` % of requests.

    ``source``: where it came from ("--slo", "mlperf-server preset: loadgen/mlperf.conf
    llama3_1-8b.Server.ttft_latency = 2000"), shown beside it.
    """

    threshold_s: float
    percentile: float
    source: str = ""

    @property
    def target(self) -> float:
        """The share of requests that must meet the threshold (0.99 for p99)."""
        return self.percentile / 100.0

    @property
    def budget(self) -> float:
        """The error budget: the share of requests that may miss it (1 - target)."""
        return 1.0 - self.target

    @property
    def key(self) -> str:
        """The objective as written (``ttft=2s@p99``, ``ttft=500ms@p90``): the exporter's
        ``objective`` label and the run file's spelling."""
        return f"ttft={_threshold_text(self.threshold_s, space=False)}@p{_pct(self.percentile)}"

    @property
    def label(self) -> str:
        """For people: "2 s p99", "500 ms p90"."""
        return f"{_threshold_text(self.threshold_s)} p{_pct(self.percentile)}"

    def to_json(self) -> dict:
        return {"objective": self.key, "threshold_s": self.threshold_s,
                "percentile": self.percentile, "target": self.target, "source": self.source}


@dataclass(frozen=True, slots=True)
class SloPreset:
    """A named objective (``mlperf-server`` / ``mlperf-interactive``) that needs the
    server's model to become an ``Objective`` (``presets.resolve``)."""

    name: PresetName

    @property
    def key(self) -> str:
        return self.name


SloItem = Objective | SloPreset


def _pct(p: float) -> str:
    return f"{p:g}"


def _threshold_text(s: float, *, space: bool = True) -> str:
    """2.0 -> "2 s", 0.5 -> "500 ms", 1.25 -> "1.25 s" (no space: "2s", "500ms")."""
    sep = " " if space else ""
    if s < 1.0:
        return f"{s * 1e3:g}{sep}ms"
    return f"{s:g}{sep}s"


def parse_objective(text: str, source: str = "--slo") -> SloItem:
    """``ttft=2s@p99`` / ``ttft=500ms@p90`` -> ``Objective``; ``mlperf-server`` /
    ``mlperf-interactive`` -> ``SloPreset``.  ``source``: where the text came from
    (``Objective.source``: "--slo", "config").

    Raises:
        ValueError: with a sentence saying what is wrong (the form, the unit, a
            threshold that is not positive and finite or above an hour, a percentile
            outside p50 .. p99.9).
    """
    if not isinstance(text, str):
        raise ValueError(f"an objective is text such as ttft=2s@p99, not {type(text).__name__}")
    raw = text.strip()
    if raw.lower() in PRESET_NAMES:
        return SloPreset(raw.lower())  # type: ignore[arg-type]
    m = _FORM.match(raw)
    if m is None:
        raise ValueError(f"{raw[:60]!r} is not an objective: write ttft=<number><s|ms>@p<percentile>"
                         f" (ttft=2s@p99, ttft=500ms@p90) or one of {', '.join(PRESET_NAMES)}")
    value = float(m["num"])
    threshold = value / 1e3 if m["unit"].lower() == "ms" else value
    if not math.isfinite(threshold) or threshold <= 0:
        raise ValueError(f"{raw!r}: the TTFT threshold must be above 0")
    if threshold > THRESHOLD_MAX_S:
        raise ValueError(f"{raw!r}: a TTFT threshold above {THRESHOLD_MAX_S:g} s is no objective")
    pct = float(m["pct"])
    if not PERCENTILE_MIN <= pct <= PERCENTILE_MAX:
        raise ValueError(f"{raw!r}: the percentile must be p{PERCENTILE_MIN:g} .. p{PERCENTILE_MAX:g}")
    return Objective(threshold_s=threshold, percentile=pct, source=source)
