"""How values are written for people: one spelling for a missing value, milliseconds,
a quadratic's curvature,
an achieved FLOP/s figure.

Data is in seconds everywhere; milliseconds appear only in text made here (``ms`` and
the shapes built on it: grouped thousands, "1,245.3 ms", on every screen).  A value
that was not measured is written ``MISSING`` ("N/A"), on screen and in text summaries
alike, never 0 and never a dash.
"""

from __future__ import annotations

import math

#: The one spelling of a value that was not measured or cannot be computed.
MISSING = "N/A"


def _known(s: float | None) -> bool:
    return s is not None and math.isfinite(s)


def ms(s: float | None, digits: int = 1, *, unit: bool = True) -> str:
    """Seconds as milliseconds, e.g. ``ms(0.0123) == "12.3 ms"``; ``MISSING`` for
    None/NaN.  ``unit=False`` leaves out " ms" (table columns that name the unit)."""
    if not _known(s):
        return MISSING
    return f"{s * 1e3:,.{digits}f}" + (" ms" if unit else "")


def ms_short(s: float | None, *, unit: bool = False) -> str:
    """Seconds as ms for a figure among others (a percentile, a table cell): one
    decimal below 100 ms, none from 100 up, grouped (``ms``): ``0.0123 -> "12.3"``,
    ``1.2345 -> "1,235"``; ``MISSING`` for None/NaN."""
    if not _known(s):
        return MISSING
    return ms(s, 1 if abs(s) < 0.1 else 0, unit=unit)


def duration(s: float | None) -> str:
    """A time span: ``"1,234 ms"`` below 10 s, ``"12.3 s"`` above; ``MISSING`` for None."""
    if not _known(s):
        return MISSING
    return f"{s * 1000:,.0f} ms" if abs(s) < 10 else f"{s:,.1f} s"


def ms_sig(s: float | None, sig: int = 3, *, unit: bool = True) -> str:
    """Seconds as milliseconds to about ``sig`` significant digits, grouped, never in
    exponent notation: ``0.0418 -> "41.8 ms"``, ``1.5 -> "1,500 ms"``,
    ``0.000655 -> "0.655 ms"``; ``MISSING`` for None/NaN (``ms``'s spelling)."""
    if not _known(s):
        return MISSING
    v = abs(s) * 1e3
    digits = 0 if v == 0 else max(0, sig - 1 - math.floor(math.log10(v)))
    return ms(s, digits, unit=unit)


#: The unit a quadratic's curvature c is shown in: its n² term at 1,000 prompt tokens,
#: in ms (c in s/token² x 1e6 tokens²; numerically ns/token²).
CURVATURE_UNIT = "ms per (1k tokens)²"


def curvature(c_s_per_token2: float | None, *, unit: bool = True) -> str:
    """A quadratic's c (seconds per token², TTFT = a + b·n + c·n²) on screen, in
    ``CURVATURE_UNIT``: ``4.18e-8 -> "41.8 ms per (1k tokens)²"``, ``1.5e-6 -> "1,500 ms
    per (1k tokens)²"`` (``ms_sig``: one format whatever the size); ``unit=False`` the
    number alone (an interval's ends, the unit said once after it)."""
    if not _known(c_s_per_token2):
        return MISSING
    return ms_sig(c_s_per_token2 * 1e6, unit=False) + (f" {CURVATURE_UNIT}" if unit else "")


def _sig_digits(v: float, sig: int) -> str:
    """``v`` (>= 0) to ``sig`` significant digits, trailing zeros kept, grouped, never
    in exponent notation: 91 -> "91.0", 0.1 -> "0.100", 1234 -> "1,230"."""
    if v == 0:
        return f"{0:.{sig - 1}f}"
    d = sig - 1 - math.floor(math.log10(v))
    r = round(v, d)
    if r and math.floor(math.log10(r)) > math.floor(math.log10(v)):  # 99.96 -> 100.0
        d -= 1
        r = round(v, d)
    return f"{r:,.{d}f}" if d > 0 else f"{r:,.0f}"


def flops(flop_per_s: float | None, sig: int = 3) -> str:
    """An achieved FLOP/s figure on screen, one spelling wherever it is shown (the TUI's
    headline and details, the text summary, the roofline verdict): ``sig`` significant
    digits, trailing zeros kept, in GFLOP/s below 1 TFLOP/s and TFLOP/s from it, the
    unit chosen after rounding: 9.1e10 -> "91.0 GFLOP/s", 1.05e11 -> "105 GFLOP/s",
    9.9996e11 -> "1.00 TFLOP/s", 1.57e12 -> "1.57 TFLOP/s"; ``MISSING`` for None/NaN.
    Data stay in FLOP/s."""
    if not _known(flop_per_s):
        return MISSING
    g = abs(flop_per_s) / 1e9
    sign = "-" if flop_per_s < 0 else ""
    if float(_sig_digits(g, sig).replace(",", "")) < 1000:
        return f"{sign}{_sig_digits(g, sig)} GFLOP/s"
    return f"{sign}{_sig_digits(g / 1000, sig)} TFLOP/s"
