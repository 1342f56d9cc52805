"""How values are written for people: one spelling for a missing value, milliseconds.

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
