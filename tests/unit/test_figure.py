"""The report's SVG figure and HTML page (structure; tests/tui/test_figures.py
renders them in Chromium)."""

import xml.etree.ElementTree as ET

import pytest
from dataclasses import replace

from prefilltui.model.summary import analyze
from prefilltui.model.summary.run import ServerFacts
from prefilltui.render.figure import html_page, nice_ticks, svg_figure
from prefilltui.model.types import ProbeResult

NS = "{http://www.w3.org/2000/svg}"


def _runs():
    rs = [ProbeResult(seq=i, requested_tokens=n, prompt_tokens=n + 1, ttft_s=0.01 + 1e-4 * n, ok=True)
          for i, n in enumerate([16, 64, 256, 1024] * 2)]
    rs.append(ProbeResult(seq=9, requested_tokens=64, prompt_tokens=65, ttft_s=0.5, ok=True, warmup=True))
    return rs


def test_nice_ticks():
    assert nice_ticks(0, 1000) == [0, 200, 400, 600, 800, 1000]
    assert nice_ticks(0, 4097)[-1] >= 4097
    assert nice_ticks(0, 0) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]


def test_svg_is_wellformed_with_points_fit_and_escaped_title():
    d = replace(analyze(_runs()), server=ServerFacts("vllm", "a<b&c", None))
    assert d.fit.prefill_tokens_per_s == pytest.approx(10000.0)
    svg = svg_figure(_runs(), d)
    root = ET.fromstring(svg)
    assert root.tag == NS + "svg"
    circles = root.findall(f".//{NS}circle")
    assert len(circles) >= 9  # 8 in the fit, 1 warm-up, legend marks
    assert any(t.text and "a<b&c" in t.text for t in root.iter(NS + "text"))
    assert "10,000 tok/s" in svg and "TTFT (ms)" in svg


def test_svg_without_points_says_so():
    root = ET.fromstring(svg_figure([], analyze([])))
    assert any(t.text == "no usable probes" for t in root.iter(NS + "text"))


def test_html_has_figure_tables_and_escaped_summary():
    d = analyze(_runs())
    page = html_page(_runs(), d, "summary <x>", title="t & t")
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1
    assert "summary &lt;x&gt;" in page and "<title>t &amp; t</title>" in page
    # the table is the summary's per-length table (the one sweep and report print)
    rows = d.percentiles.by_length
    assert [r.requested_tokens for r in rows] == [16, 64, 256, 1024]
    assert rows[1].n == 2  # the warm-up is not counted
    assert "<td>1,024</td><td>1,025</td><td>2</td>" in page
