"""The argparse value types of the commands' flags: each parses one flag's text or
refuses it with ``argparse.ArgumentTypeError`` saying what was expected (a usage
error, exit 2, before anything is sent).

Ranges come from ``model.limits.RANGES`` (``ranged``; one home with the exporter's
TOML file) or are stated beside each type.  The argument groups that use them are
in ``common``.
"""

from __future__ import annotations

import argparse
import math

from prefilltui.model import limits


def _int_list(text: str) -> list[int]:
    """``--lengths``: comma-separated prompt lengths, each 1..``limits.MAX_PROMPT_TOKENS``."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text[:80]!r}")
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"lengths must be positive integers, got {text[:80]!r}")
    try:
        limits.check("lengths", values)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return values


def ranged(key: str):
    """An argparse type for the setting ``key`` of ``model.limits.RANGES``: parsed as its
    kind, refused outside its range with the range said (one home with the exporter's
    TOML file)."""
    r = limits.RANGES[key]

    def parse(text: str):
        try:
            value = int(text) if r.kind in ("int", "lengths") else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {r.describe()}, got {text[:80]!r}")
        try:
            return limits.check("lengths", [value])[0] if r.kind == "lengths" \
                else limits.check(key, value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {r.describe()}, got {text[:80]!r}")
    parse.__name__ = key  # argparse names the type in its messages
    return parse


def server_url(text: str) -> str:
    """argparse type of a server base URL (``core.server.url_problem``): a bad one is
    a usage error (exit 2) with the reason, before anything is sent."""
    from prefilltui.measure.server import url_problem
    from prefilltui.model.redact import display_url

    problem = url_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{display_url(text)!r} is not a server URL: {problem}")
    return text


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _shard(text: str):
    """``--shard I/N`` (``exporter.discovery.Shard``: Prometheus' hashmod)."""
    from prefilltui.exporter.discovery import Shard

    try:
        return Shard.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _duty(text: str) -> float:
    """A busy share in (0, 1]."""
    v = _positive_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"expected a share in (0, 1] such as 0.5, got {text!r}")
    return v


#: ``--efficiency``: a fraction of peak in (0, 1.5] (``limits.RANGES``, the range
#: roofline.estimate accepts).
_efficiency = ranged("efficiency")


def _sample_hz(text: str) -> float:
    """A sampling rate in [0.1, 100] Hz (slower would leave probes unattributed, faster
    would spend a core on sampling)."""
    v = _positive_float(text)
    if not 0.1 <= v <= 100:
        raise argparse.ArgumentTypeError(f"expected a rate from 0.1 to 100 Hz, got {text!r}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _depth_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or any(v < 0 or v > limits.MAX_PROMPT_TOKENS for v in values):
        raise argparse.ArgumentTypeError(f"depths must be integers from 0 to "
                                         f"{limits.MAX_PROMPT_TOKENS:,}, got {text[:80]!r}")
    return sorted(set(values))


_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_budget(text: str) -> tuple[int | None, float | None]:
    """``--budget``: "200" (probes), "90s" / "10m" / "1h" (time), or both, comma-separated
    ("200,10m").  Returns (probes, seconds).

    Raises:
        argparse.ArgumentTypeError: on anything else, or a value <= 0.
    """
    probes: int | None = None
    seconds: float | None = None
    for part in (p.strip().lower() for p in text.split(",")):
        try:
            if part and part[-1] in _UNITS_S:
                v = float(part[:-1]) * _UNITS_S[part[-1]]
                if not (v > 0 and math.isfinite(v)) or seconds is not None:
                    raise ValueError
                seconds = v
            else:
                n = int(part)
                if n <= 0 or probes is not None:
                    raise ValueError
                probes = n
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected probes (200), a time (90s, 10m, 1h) or both (200,10m), got {text!r}")
    return probes, seconds


def _until_pct(text: str) -> float:
    v = _positive_float(text.rstrip("%"))
    if v >= 100:
        raise argparse.ArgumentTypeError(f"expected a percentage below 100, got {text!r}")
    return v


def _load_spec(text: str):
    from prefilltui.model.loadspec import parse_load

    try:
        return parse_load(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def _load_levels(text: str) -> tuple[float, ...]:
    from prefilltui.model.loadspec import parse_levels

    try:
        return parse_levels(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def otlp_listen(text: str) -> str:
    """``--otlp-listen HOST:PORT``: checked here, kept as given."""
    from prefilltui.measure.otlp import parse_listen

    try:
        parse_listen(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    return text


def slo_objective(text: str):
    """``--slo``: ``ttft=2s@p99`` / ``ttft=500ms@p90`` or a preset (``mlperf-server``,
    ``mlperf-interactive``): ``model.slo.parse_objective``; its sentence is the usage
    error."""
    from prefilltui.model.slo import parse_objective

    try:
        return parse_objective(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


slo_objective.__name__ = "slo"


def _rate_range(text: str) -> tuple[float, float]:
    """``--rate-search LO:HI``: two request rates, 0 < LO < HI <= the rate load's cap
    (``model.loadspec.MAX_RATE``)."""
    from prefilltui.model.loadspec import MAX_RATE

    try:
        lo, hi = (float(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO:HI requests/s (0.5:8), got {text[:40]!r}")
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi <= MAX_RATE):
        raise argparse.ArgumentTypeError(f"expected 0 < LO < HI <= {MAX_RATE:g} requests/s, "
                                         f"got {text[:40]!r}")
    return lo, hi


_rate_range.__name__ = "rate range"
