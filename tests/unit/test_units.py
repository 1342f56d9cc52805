"""How values are written for people: one missing-value spelling, ms and durations."""

from __future__ import annotations

import math

from prefilltui.model.units import MISSING, duration, ms


def test_one_missing_value_spelling():
    assert MISSING == "N/A"
    assert ms(None) == ms(math.nan) == duration(None) == duration(math.inf) == MISSING


def test_ms_and_duration():
    assert ms(0.0123) == "12.3 ms" and ms(1.2345, 2) == "1,234.50 ms"
    assert ms(0.0123, unit=False) == "12.3"
    assert duration(0.25) == "250 ms" and duration(12.34) == "12.3 s"
