"""The shareable pictures: `report --svg/--html` and the `s` key's screen SVG, each
opened in headless Chromium and checked to be not blank."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from tests.tui.browser import blank_reason, find_chromium, png_pixels, screenshot
from tests.tui.fakes import NOW, FakeRunner, FakeSampler, fixed_results, make_result

from prefilltui.cli import main
from prefilltui.measure.runfile import RunWriter
from prefilltui.model.probe_notes import DepthInfo
from prefilltui.tui.app import build_app


def depth_run(path: Path) -> Path:
    """A run file: the fixed sweep plus verified probes at depth 1,024 (steeper)."""
    rs = fixed_results()
    seq = len(rs)
    prefix = make_result(seq, 1024, warmup=True)
    prefix.depth = DepthInfo(depth=1024, role="prefix", prefix_tokens=1025)
    rs.append(prefix)
    for i, n in enumerate([32, 128, 512, 1024, 2048] * 2):
        r = make_result(seq + 1 + i, n, b=60e-6, cached=1025, noise=(-1) ** i * 0.001)
        r.prompt_tokens = n + 1025
        r.depth = DepthInfo(depth=1024, role="probe", prefix_tokens=1025, verified=True,
                            new_tokens=n)
        rs.append(r)
    with RunWriter(path) as w:
        for r in rs:
            w.append(r)
    return path


def _png(w: int, h: int, rgb: tuple[int, int, int]) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\x00" + bytes(rgb) * w for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_blank_check_catches_a_blank_image(tmp_path):
    p = tmp_path / "white.png"
    p.write_bytes(_png(40, 30, (255, 255, 255)))
    assert png_pixels(p.read_bytes())[:3] == (40, 30, 3)
    assert blank_reason(p) == "only 1 colours"


def test_report_writes_svg_and_html(tmp_path, capsys):
    run = depth_run(tmp_path / "run.jsonl")
    svg, page = tmp_path / "fig.svg", tmp_path / "report.html"
    rc = main(["report", str(run), "--no-plot", "--svg", str(svg), "--html", str(page),
               "--model", "SmolLM2-135M"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert f"wrote {svg}" in cap.err and "Prefill at context depth" in cap.out
    s = svg.read_text()
    assert s.startswith("<svg") and "depth 1,024 (cached prefix)" in s and "TTFT (ms)" in s
    h = page.read_text()
    assert h.count("<svg") == 1 and "<table>" in h and "Probes per length" in h
    assert "Prefill at context depth" in h and "ratio vs depth 0" in h


def test_report_unwritable_svg_is_one_line(tmp_path, capsys):
    run = depth_run(tmp_path / "run.jsonl")
    rc = main(["report", str(run), "--no-plot", "--svg", str(tmp_path / "no" / "x.svg")])
    assert rc == 1 and "cannot write" in capsys.readouterr().err


async def press_s(tmp_path) -> None:
    """Run the app on fixed results beside ``tmp_path/run.jsonl`` and press ``s``."""
    def factory(on_result, on_state):
        return FakeRunner(on_result, on_state, preload=fixed_results())

    app = build_app(factory, FakeSampler(), clock=lambda: NOW, run_path=tmp_path / "run.jsonl")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.press("s")
        await pilot.pause()


async def test_s_key_saves_the_screen_as_svg(tmp_path):
    await press_s(tmp_path)
    saved = list(tmp_path.glob("run-screen-*.svg"))
    assert len(saved) == 1
    text = saved[0].read_text()
    assert text.lstrip().startswith("<svg") and "TTFT vs prompt tokens" in text.replace("&#160;", " ")


@pytest.mark.component
@pytest.mark.timeout(300)
async def test_figures_render_in_headless_chromium(tmp_path, capsys):
    """The report's SVG and HTML and the TUI's screen SVG, screenshot by Chromium."""
    browser = find_chromium()
    run = depth_run(tmp_path / "run.jsonl")
    svg, page = tmp_path / "fig.svg", tmp_path / "report.html"
    assert main(["report", str(run), "--no-plot", "--svg", str(svg), "--html", str(page)]) == 0
    await press_s(tmp_path)
    (screen,) = tmp_path.glob("run-screen-*.svg")
    for i, (f, size) in enumerate([(svg, (860, 540)), (page, (960, 1400)), (screen, (1300, 800))]):
        png = tmp_path / f"shot{i}.png"
        screenshot(browser, f, png, size, tmp_path / f"profile{i}")
        assert blank_reason(png) is None, f"{f.name}: {blank_reason(png)}"
