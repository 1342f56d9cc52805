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


def test_every_ms_on_screen_is_grouped_by_the_one_formatter():
    """The sweep's progress lines said "TTFT 1245.3 ms" where its table said "1,245.3":
    ms reach the screen through ``units.ms`` (grouped), so no module formats seconds
    x 1e3 itself."""
    import re
    from pathlib import Path

    import prefilltui
    from prefilltui.commands.sweep import _depth_line, _progress_line
    from prefilltui.model.probe_notes import DepthInfo
    from prefilltui.model.types import ProbeResult
    from prefilltui.render.tables import format_estimate
    from prefilltui.model.roofline import estimate, lookup_gpu, lookup_model
    from prefilltui.tui.widgets.probe_log import probe_message, row_cells

    own = re.compile(r"\*\s*1e3\s*:[^}]*f\}|\*\s*1000\s*:[^}]*f\}")
    root = Path(prefilltui.__file__).parent
    found = [f"{p.relative_to(root)}:{i}: {line.strip()}"
             for p in sorted(root.rglob("*.py")) if p.name != "units.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if own.search(line)]
    assert not found, "\n".join(found)

    r = ProbeResult(seq=6, requested_tokens=553, prompt_tokens=553, ttft_s=1.2453,
                    server_prefill_s=1.2426, queue_s=1.5, queue_source="estimated", ok=True)
    line = _progress_line(r, 11)
    assert "TTFT 1,245.3 ms  server 1,242.6 ms  queue 1,500.0 ms (est.)" in line, line
    assert "TTFT 1,245.3 ms" in probe_message(r) and "server prefill 1,242.6 ms" in \
        probe_message(r)
    assert row_cells(r)[2] == " 1,245.3"  # the probe log's column, 8 wide
    assert row_cells(ProbeResult(seq=1, requested_tokens=9, ttft_s=120.0, ok=True))[2] == \
        " 120,000"  # past 100 s: no decimal, still 8
    r.depth = DepthInfo(depth=0, role="prefix")
    assert "TTFT 1,245.3 ms" in _depth_line(r)
    m, hw = lookup_model("llama-3-8b"), lookup_gpu("l4").for_dtype("bf16")
    e = estimate(m.params, m.layers, m.d_attn, 32000, hidden=m.hidden,
                 peak_flops=hw.peak_flops, bandwidth_bytes_s=hw.bandwidth_bytes_s)
    text = format_estimate(e, m, hw, [])
    assert re.search(r"time: +\d{1,3}(,\d{3})+\.\d ms at peak", text), text


def test_ms_short_one_decimal_below_100_ms_grouped_above():
    from prefilltui.model.units import ms_short

    assert ms_short(0.0341) == "34.1" and ms_short(0.612) == "612"
    assert ms_short(6.12) == "6,120" and ms_short(-0.0123) == "-12.3"
    assert ms_short(None) == MISSING and ms_short(1.5, unit=True) == "1,500 ms"
