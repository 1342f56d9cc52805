"""How values are written for people: one missing-value spelling, ms and durations."""

from __future__ import annotations

import math

from prefilltui.model.units import MISSING, curvature, duration, flops, ms, ms_sig


def test_one_missing_value_spelling():
    assert MISSING == "N/A"
    assert ms(None) == ms(math.nan) == duration(None) == duration(math.inf) == MISSING


def test_ms_and_duration():
    assert ms(0.0123) == "12.3 ms" and ms(1.2345, 2) == "1,234.50 ms"
    assert ms(0.0123, unit=False) == "12.3"
    assert duration(0.25) == "250 ms" and duration(12.34) == "12.3 s"


def test_ms_to_three_significant_digits_never_in_exponent_form():
    assert ms_sig(0.0418) == "41.8 ms" and ms_sig(1.5178) == "1,518 ms"
    assert ms_sig(0.000655) == "0.655 ms" and ms_sig(0.0) == "0 ms" and ms_sig(None) == MISSING
    assert ms_sig(2.5e-9, unit=False) == "0.00000250"


def test_curvature_in_one_unit_whatever_its_size():
    """c in s/token² shown as its n² term at 1,000 tokens, in ms: a GPU's and a CPU's
    in the same grouped format (was '1.52e+03' beside '41.8')."""
    assert curvature(4.18e-8) == "41.8 ms per (1k tokens)²"
    assert curvature(1.5178e-6) == "1,518 ms per (1k tokens)²"
    assert curvature(6.5e-10) == "0.650 ms per (1k tokens)²"
    assert curvature(1.5178e-6, unit=False) == "1,518" and curvature(None) == MISSING


def test_flops_three_significant_digits_unit_by_magnitude():
    """A new user saw "91 GFLOP/s", "0.105 TFLOP/s", "0.1 TFLOP/s est." and "98.4
    GFLOP/s" between refreshes: one formatter, 3 significant digits, G below 1 TFLOP/s."""
    assert flops(9.1e10) == "91.0 GFLOP/s"  # was "91 GFLOP/s"
    assert flops(1.05e11) == "105 GFLOP/s"  # was "0.105 TFLOP/s"
    assert flops(1.0e11) == "100 GFLOP/s"  # was "0.1 TFLOP/s"
    assert flops(9.84e10) == "98.4 GFLOP/s"
    assert flops(9.994e11) == "999 GFLOP/s" and flops(9.9996e11) == "1.00 TFLOP/s"
    assert flops(1.57e12) == "1.57 TFLOP/s" and flops(7.93e12) == "7.93 TFLOP/s"
    assert flops(1.234e15) == "1,230 TFLOP/s" and flops(1.13e9) == "1.13 GFLOP/s"
    assert flops(5e8) == "0.500 GFLOP/s" and flops(0.0) == "0.00 GFLOP/s"
    assert flops(None) == flops(math.nan) == MISSING
