"""How values are written for people: one spelling for a missing value, milliseconds,
a quadratic's curvature.

Data is in seconds everywhere; milliseconds appear only in text made here.  A value
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
