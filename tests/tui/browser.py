"""Headless Chromium screenshots of saved files, and a check that they are not blank.

``screenshot(path, png, size)`` opens a local file (SVG or HTML) in Chromium with
networking, sync, GPU and sandbox off and writes a PNG; ``png_pixels`` decodes an
8-bit, non-interlaced RGB/RGBA/grey PNG with zlib alone (no imaging dependency);
``blank_reason`` says why a screenshot looks blank (None when it does not).
"""

from __future__ import annotations

import struct
import subprocess
import zlib
from pathlib import Path


NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str:
    """The browser's path (the chromium component, tests/components.py): a missing
    one skips the test with its install line, and fails it in CI."""
    from tests.components import require

    return require("chromium")


def screenshot(browser: str, page: Path, png: Path, size: tuple[int, int], profile: Path) -> None:
    """Render ``page`` at ``size`` (width, height) into ``png``.  Raises AssertionError
    with Chromium's output when no PNG was written."""
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
           f"--screenshot={png}", f"--window-size={size[0]},{size[1]}", page.resolve().as_uri()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert png.is_file() and png.stat().st_size > 0, f"no screenshot (rc {p.returncode}): {p.stderr[-2000:]}"


def png_pixels(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, channels, raw unfiltered rows) of an 8-bit non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    w, h, depth, ctype, _c, _f, interlace = hdr
    assert depth == 8 and interlace == 0, f"unsupported PNG (depth {depth}, interlace {interlace})"
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = w * ch
    out = bytearray(h * stride)
    prev = bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0
            b = prev[i]
            c = prev[i - ch] if i >= ch else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out[y * stride:(y + 1) * stride] = line
        prev = line
    return w, h, ch, bytes(out)


def blank_reason(png: Path, *, min_colors: int = 8, min_ink: float = 0.01) -> str | None:
    """Why the screenshot looks blank, or None: fewer than ``min_colors`` distinct
    colours, or under ``min_ink`` of the pixels differ from the most common colour,
    or the grey levels hardly vary."""
    w, h, ch, px = png_pixels(png.read_bytes())
    counts: dict[bytes, int] = {}
    step = max(1, (w * h) // 40000)  # a sample is enough
    grey: list[int] = []
    for i in range(0, w * h, step):
        p = px[i * ch:i * ch + min(ch, 3)]
        counts[p] = counts.get(p, 0) + 1
        grey.append(sum(p) // len(p))
    total = sum(counts.values())
    ink = 1 - max(counts.values()) / total
    mean = sum(grey) / len(grey)
    var = sum((g - mean) ** 2 for g in grey) / len(grey)
    if len(counts) < min_colors:
        return f"only {len(counts)} colours"
    if ink < min_ink:
        return f"only {ink:.2%} of the pixels differ from the background"
    if var < 20:
        return f"grey-level variance {var:.1f}"
    return None
