"""The history gauge repaints only when its drawn-cells key changes
(``gauges._drawn_cells``): two column means with the same key must draw the same glyph
and colour on every row, or a change would never reach the screen."""

import random

from prefilltui.tui.widgets.gauges import _drawn_cells, bar_glyph


def _cells(v: float, hi: float, height: int) -> tuple:
    ratio = max(0.0, min(v / hi, 1.0))
    return tuple(bar_glyph(ratio, row, height) for row in range(height)), round(ratio * 100)


def test_equal_keys_draw_equal_cells():
    rng = random.Random(7)
    for height in (1, 2):
        for hi in (100.0, 350.0):
            values = [rng.uniform(-5, hi * 1.1) for _ in range(4000)]
            values += [hi * k / (8 * height) for k in range(8 * height + 1)]  # glyph edges
            seen: dict = {}
            for v in values:
                key = _drawn_cells((1, hi, (v,), (0,)), height)
                drawn = _cells(v, hi, height)
                assert seen.setdefault(key, drawn) == drawn
            # the key may tell apart cells that draw alike (a spare repaint), never
            # the reverse; it does not repaint on every sample either
            assert len(seen) < len(values) / 10


def test_key_holds_missing_columns_marks_and_size():
    a = _drawn_cells((3, 100.0, (None, 50.0, 0.0), (0, 1, 2)), 2)
    assert a[3][0] is None and a[4] == (0, 1, 2)
    assert a != _drawn_cells((3, 100.0, (None, 50.0, 0.0), (0, 0, 2)), 2)
    assert a != _drawn_cells((3, 100.0, (None, 50.0, 0.0), (0, 1, 2)), 1)
