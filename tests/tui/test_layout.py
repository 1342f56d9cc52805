"""A layout per size: the headline figures and the gauges in view at 80x24, 100x30 and
160x50 with no scrolling, the details a key away (or beneath at 28 rows and more);
notifications on their own line, never over the probe log; the footer lists every key
that fits; reset clears what the dropped probes told; the README's key table is the
app's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.tui.fakes import (FAKE_RANGE, NOW, FakeRunner, FakeSampler, fixed_results,
                             gpu_snapshot, make_result)

from prefilltui.tui.app import build_app
from prefilltui.tui.dashboard import DashboardScreen
from prefilltui.tui.help import HELP_TEXT
from prefilltui.tui.textfit import fit_line, middle, tilde, wrap_units
from prefilltui.tui.widgets.message_line import MessageLine

SIZES = [(80, 24), (100, 30), (160, 50)]
ROOT = Path(__file__).resolve().parents[2]


def _app(results=None, sampler=None, **kw):
    holder = {}

    def factory(on_result, on_state):
        holder["runner"] = FakeRunner(on_result, on_state,
                                      preload=fixed_results() if results is None else results)
        return holder["runner"]

    kw.setdefault("sweep_range", FAKE_RANGE)
    return build_app(factory, sampler or FakeSampler(), clock=lambda: NOW, **kw), holder


def _lines(app) -> list[str]:
    return [s.text for s in app.screen._compositor.render_strips()]


async def _settle(pilot):
    await pilot.pause()
    pilot.app.flush()
    await pilot.pause()


def _headline_on_screen(screen: str, *, gpu: bool, width: int = 80) -> None:
    assert re.search(r"prefill +22\.3k tok/s", screen), screen
    assert re.search(r"95% +21\.8k–22\.9k tok/s", screen), screen
    assert re.search(r"intercept +20\.3 ms", screen), screen
    assert re.search(r"95% +19\.4–21\.2 ms", screen), screen
    if gpu:
        assert re.search(r"MFU +0\.8 % est\.", screen), screen
        assert "something is wrong" in screen
        assert "GPU 0 util" in screen and "GPU 1 util" in screen  # the gauges
    else:
        assert re.search(r"achieved +7\.93 TFLOP/s est\.", screen), screen
        assert "MFU needs --peak-tflops" in screen
        assert "CPU util" in screen
    # the verdict line: these probes are as the fit expects, so the expectation, no
    # alarm, whole in the headline: the shortest and longest length's expected TTFT in
    # the 28 columns of an 80-column terminal (it was cut: "TTFT as expected: 33 tok
    # 22…"), with the words in the 40 from 120 columns
    line = ("TTFT as expected: 33→22 ms, 4.1k→204 ms" if width >= 120
            else "TTFT ok: 33→22, 4.1k→204 ms")
    assert re.search(r"│ " + re.escape(line) + r" *│", screen), screen  # whole, not cut


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpus"])
async def test_headline_figures_in_view_without_scrolling(size, gpu):
    app, _ = _app(sampler=FakeSampler(gpu_snapshot(2)) if gpu else None)
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        lines = _lines(app)
        screen = "\n".join(lines)
        _headline_on_screen(screen, gpu=gpu, width=size[0])
        assert lines[-1].rstrip().endswith("q Quit")  # the footer, last line, whole
        tall = size[1] >= 28
        # the details: beneath the headline from 28 rows, else a key away
        assert ("slope" in screen) is tall
        await pilot.press("d")
        await _settle(pilot)
        opened = "\n".join(_lines(app))
        _headline_on_screen(opened, gpu=gpu, width=size[0])
        for fact in ("slope", "44.8 µs/tok", "R²", "p50/p90/p99"):
            assert fact in opened, opened
        # the details keep the whole line: each length's uncertainty (the robust
        # fit's noise model: relative scatter x (TTFT + s0), wider at 204 ms than at 22;
        # wrapped to the panel's width)
        assert "TTFT as expected: 33 tok 22 ± 5 ms, 4,097 tok 204 ± 11 ms" in \
            " ".join(app.screen.query_one("#stats")._plain.split())
        box = app.screen.query_one("#details-box")
        assert "SmolLM2-135M-Instruct" in app.screen.query_one("#stats")._plain
        assert box.max_scroll_y > 0 or "SmolLM2-135M-Instruct" in opened  # scrolls there
        assert "prompt tokens" not in opened  # in place of the plot
        await pilot.press("d")
        await _settle(pilot)
        assert "prompt tokens" in "\n".join(_lines(app))


async def test_not_pinned_and_no_fit_fit_the_headline():
    """Two short lengths only, widely scattered: the fixed cost is "not pinned"; before
    three lengths: what the fit needs."""
    results = [make_result(i, n, noise=((-1) ** i) * 0.015)
               for i, n in enumerate([600, 1200, 2400] * 2, start=1)]
    app, _ = _app(results)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        screen = "\n".join(_lines(app))
        assert re.search(r"intercept +not pinned", screen), screen
        # so scattered the slope's 95% interval includes 0 too (-1 to 91 µs/token):
        # no throughput number yet (it read "prefill 22.2k tok/s")
        assert re.search(r"prefill +too noisy yet\s", screen), screen
        assert re.search(r"95% +slope includes 0\s", screen), screen
    app, _ = _app(results[:1])
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        assert "fit: needs ≥3 probes at" in "\n".join(_lines(app))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_footer_lists_every_key_that_fits(size):
    app, _ = _app()
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        footer = _lines(app)[-1].rstrip()
        assert len(footer) <= size[0] and footer.endswith("q Quit"), footer
        base = ("␣ Pause", "r Reset", "w Window", "b Burst", "+- Range", "d More",
                "e Export", "c Cache", "? Help", "q Quit")
        for entry in base:
            assert entry in footer, footer
        optional = ("t Theme", "s SVG", "l Load")
        shown = [e for e in optional if e in footer]
        if size[0] >= 100:
            assert shown == list(optional), footer
        else:  # none of them has room at 80 columns
            assert not shown and len(footer) + len(" t Theme") > size[0]


async def test_notifications_on_their_own_line_never_over_the_log(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    app, _ = _app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await _settle(pilot)
        before = _lines(app)
        long = tmp_path / "runs" / "2026-01-01-demo-llama-server" / "run-20260101-120000"
        app.notify(f"exported {long}.csv, {long}.summary.json", timeout=30)
        await _settle(pilot)
        after = _lines(app)
        line = app.screen.query_one(MessageLine)
        assert line.region.y == 22  # above the footer
        shown = after[22]
        assert shown.startswith(" · exported ~/runs/") and "…" in shown, shown
        assert len(shown.rstrip()) <= 80 and ".json" in shown
        # every other row as before: nothing drawn over the log, the plot or the gauges
        assert [a for i, a in enumerate(after) if i != 22] == \
               [b for i, b in enumerate(before) if i != 22]
        assert line.history[-1].text.endswith(".summary.json")  # in full for the help


async def test_the_count_of_other_messages_says_what_it_is(tmp_path, monkeypatch):
    """The line ended in an unexplained "(+1)": it counts the other notifications
    still within their timeout, which ``?`` lists; it says so, within the width."""
    monkeypatch.setenv("HOME", str(tmp_path))
    app, _ = _app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await _settle(pilot)
        long = tmp_path / ".local" / "share" / "prefilltui" / "run-20261201-223448"
        app.notify("cache check: 0 cached tokens", timeout=30)
        app.notify(f"exported {long}.csv, {long}.summary.json", timeout=30)
        await _settle(pilot)
        shown = _lines(app)[22].rstrip()
        assert shown.startswith(" · exported ~/") and shown.endswith(".json (+1 more: ?)"), shown
        assert len(shown) <= 80
    from prefilltui.tui.widgets.message_line import more_tail

    assert more_tail(0, 78) == ""
    assert more_tail(2, 78) == " (+2 more: ?)"
    assert more_tail(2, 30) == " (+2)"  # a narrow line keeps room for the message


def test_fit_line_shortens_paths_never_mid_word():
    home = "/home/ana"
    assert tilde("wrote /home/ana/a.csv and /home/anna/b", home) == \
        "wrote ~/a.csv and /home/anna/b"
    assert middle("~/runs/2026-01-01-demo/run.jsonl", 20) == "~/runs/20…/run.jsonl"
    words = "the quick brown fox jumps over the lazy dog " * 4
    cut = fit_line(words, 30)
    assert len(cut) <= 30 and cut.endswith("…") and cut[:-1].rstrip() in words
    assert cut[:-1].split()[-1] in words.split()  # the last word whole
    assert fit_line("one\ntwo", 40) == "one · two"


def test_wrap_units_never_parts_a_number_from_its_unit():
    text = "TTFT as expected: 5 tok not pinned (± 1,789 ms), 1,025 tok 8,653 ± 5,660 ms"
    assert wrap_units(text, 27) == ["TTFT as expected: 5 tok not", "pinned (± 1,789 ms),",
                                    "1,025 tok 8,653 ± 5,660 ms"]
    assert wrap_units(text, 24)[-2:] == ["1,025 tok", "8,653 ± 5,660 ms"]
    assert wrap_units("Peak unknown (CPU): 421 prompt tok/s, 0.104 TFLOP/s achieved", 20) == \
        ["Peak unknown (CPU):", "421 prompt tok/s,", "0.104 TFLOP/s", "achieved"]
    assert wrap_units("a" * 25, 10) == ["a" * 10, "a" * 10, "a" * 5]  # folded, as Textual


async def test_reset_clears_everything_derived_from_the_dropped_probes():
    app, _ = _app()
    async with app.run_test(size=(100, 30)) as pilot:
        await _settle(pilot)
        assert "16 ok" in app.screen.query_one("#status").text
        await pilot.press("r")
        await _settle(pilot)
        view = app.screen.query_one("#stats").view
        assert view.slope_s is None and view.pct_all is None and view.probes == 0
        assert "0 recent probe" in view.why  # the verdict reads no dropped probe
        status = app.screen.query_one("#status").text
        assert " 0 ok" in status and "failed" not in status
        assert app.live.total == 0 and app.feed.recent_results() == ()
        screen = "\n".join(_lines(app))
        assert "fit: needs ≥3 probes at" in screen and "p50/p90/p99" not in screen
        assert app.query_one("#plot").point_count == 0
        assert len(app.results) == len(fixed_results())  # kept for the export


def _readme_keys() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    table = text[text.index("<!-- keys: the dashboard's bindings -->"):]
    table = table[: table.index("\n\n")]
    return {m.group(1): m.group(2).strip()
            for m in re.finditer(r"^\| `([^`]+)` \| (.+?) \|$", table, re.M)}


def _app_keys() -> set[str]:
    keys = set()
    for b in DashboardScreen.BINDINGS:
        shown = b.key_display or b.key.split(",")[0]
        keys.add({"␣": "space"}.get(shown, shown))
    return keys | {"Ctrl-C"}


def test_readme_key_table_is_the_apps():
    assert set(_readme_keys()) == _app_keys()


def test_help_lists_every_key():
    for key in _app_keys():
        assert re.search(rf"(^|\s|/|\(){re.escape(key)}(\s|/|$)", HELP_TEXT, re.M), key


async def test_reset_keeps_the_sessions_counts_for_the_exit():
    """The exit line and code read the whole session, not the dashboard's reset view."""
    app, _ = _app([make_result(1, 64, ok=False), make_result(2, 128)])
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        await pilot.press("r")
        await _settle(pilot)
        assert app.live.total == 0
        assert (app.feed.session_total, app.feed.session_ok, app.feed.session_failed) == (2, 1, 1)
        assert app.exit_code() == 0


async def test_help_lists_the_recent_messages_in_full():
    app, _ = _app()
    async with app.run_test(size=(100, 30)) as pilot:
        await _settle(pilot)
        app.notify("cache on: repeat of 511 tokens 14.8 s → 561 ms (510 cached)", timeout=1)
        await pilot.press("question_mark")
        await pilot.pause()
        details = str(app.screen.query_one("#help-details").render())
        assert "recent messages:" in details
        assert "cache on: repeat of 511 tokens 14.8 s → 561 ms (510 cached)" in details


async def test_no_toast_over_the_help_a_message_line_instead(tmp_path, monkeypatch):
    """`?` opened just before the export's message (the newcomer's `e` then `?`): the
    message goes to a line of the help's own, never drawn over the help's text."""
    monkeypatch.setenv("HOME", str(tmp_path))
    app, _ = _app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await _settle(pilot)
        await pilot.press("question_mark")
        await _settle(pilot)
        before = _lines(app)
        runs = tmp_path / ".local" / "share" / "prefilltui" / "runs" / "run-20261202-015221"
        app.notify(f"exported {runs}.csv, {runs}.summary.json", timeout=30)
        await _settle(pilot)
        await pilot.pause(0.3)  # a toast would be drawn by now
        after = _lines(app)
        assert not app.screen.query("Toast")
        line = app.screen.query_one(MessageLine)
        row = line.region.y
        assert after[row].lstrip("│ ").startswith("· exported ~/.loc"), after[row]
        assert "summary.json" in after[row]
        assert "Ctrl-C quits" in after[row + 1]  # the close hint stays, under it
        # every other row as before (the text scrolls in one row less: only its
        # scrollbar's column moves): nothing drawn over the help's text
        def text(rows):
            return [r[:-3] + r[-2:] for r in rows]
        assert text(after[:row]) == text(before[:row])
        assert after[row + 1:] == before[row + 1:]
        await pilot.press("escape")
        await _settle(pilot)
        # the dashboard has it too, and its history for the next help
        assert app.screen.query_one(MessageLine).history[-1].text.endswith(".summary.json")


def _cpu_demo_probes():
    """The newcomer's CPU demo: ~420 prompt tok/s (2.45 ms a token, 0.1 TFLOP/s
    achieved), 4-1024 tokens, noisy enough that the fixed cost is not pinned."""
    noise = [0.3, -0.2, 0.5, -0.4, 0.25, -0.5, 0.6, -0.3, 0.45, -0.6, 0.2, -0.1]
    lengths = [4, 7, 14, 25, 47, 87, 161, 299, 553, 1024]
    out = [make_result(0, 87, warmup=True)]
    for i, n in enumerate(lengths * 2):
        out.append(make_result(i + 1, n, a=0.012, b=2.45e-3,
                               noise=noise[i % len(noise)] * 0.1 * (1 + n / 300)))
    return out


#: a unit (or the ± of an interval) at the start of a line: wrapped away from its
#: number (a unit followed by a number is a label: "tokens    1024 req")
_UNIT_FIRST = re.compile(r"^(µs/tok|ms|s|tok/s|tok|tokens|%|TFLOP/s|GFLOP/s)(?=[\s,.;)]|$)"
                         r"(?!\s+\d)|^±|±$")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_fit_panel_text_fits_its_panel(size):
    """The fit's panel at 80x24 (d: the details beside the headline), 100x30 and
    160x50 with the newcomer's CPU probes: no line cut or wrapped (at 100x30 the
    slope's interval put "µs/tok" on a line of its own and "intercept add short
    prompts/repeats" was cut, at 80x24 "est." touched the divider), no unit on a line
    without its number; where the details scroll, the panel's border says so."""
    app, _ = _app(_cpu_demo_probes(), sweep_range=(4, 1024))
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        if size[1] < 28:
            await pilot.press("d")
            await _settle(pilot)
        screen = app.screen
        stats = screen.query_one("#stats")
        box = screen.query_one("#details-box")
        panel = screen.query_one("#stats-box").region
        rows = _lines(app)[panel.y + 1:panel.bottom - 1]
        inside = [r[panel.x + 1:panel.right] for r in rows]  # less the left border
        shown = "\n".join(inside)
        assert "slope" in shown and "achieved" in shown, shown
        # nothing cut: every line of the details fits the panel's width whole (so
        # none is wrapped on screen either), none ends in "…"
        width = stats.content_size.width
        lines = stats._plain.splitlines()
        assert all(len(line) <= width for line in lines), (width, lines)
        assert stats.size.height == len(lines)
        assert "…" not in shown, shown
        for row in inside:
            # a character right before a divider or the border: text touching it
            assert not re.search(r"[^ ]│", row), shown
            for part in row.split("│"):
                assert not _UNIT_FIRST.search(part.strip()), shown
        for line in lines:
            assert not _UNIT_FIRST.search(line.strip()), lines
        assert re.search(r"95% +[\d,]+–[\d,]+ µs/tok", shown), shown  # unit with number
        # the hint: the panel's bottom border says when the details scroll
        scrolls = box.max_scroll_y > 0
        hint = str(screen.query_one("#stats-box").border_subtitle or "")
        assert ("↓ more" in hint) is scrolls, (hint, box.max_scroll_y)
        if scrolls:
            assert "↓ more (scroll)" in _lines(app)[panel.bottom - 1]
            box.scroll_end(animate=False, immediate=True)
            await _settle(pilot)
            hint = str(screen.query_one("#stats-box").border_subtitle or "")
            assert "↓" not in hint and "↑ more" in hint, hint
        assert size != (100, 30) or scrolls  # the breakdown below the fold there


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_footer_says_resume_while_paused(size):
    """Space's footer entry names what it will do: "␣ Resume" while paused (it said
    "␣ Pause" then too), every key that fits still listed, "q Quit" last."""
    app, _ = _app()
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        assert "␣ Pause" in _lines(app)[-1]
        await pilot.press("space")
        await _settle(pilot)
        footer = _lines(app)[-1].rstrip()
        assert app.paused
        assert "␣ Resume" in footer and "Pause" not in footer, footer
        assert len(footer) <= size[0] and footer.endswith("q Quit"), footer
        for entry in ("r Reset", "w Window", "b Burst", "+- Range", "d More", "e Export",
                      "c Cache", "? Help"):
            assert entry in footer, footer
        await pilot.press("space")
        await _settle(pilot)
        footer = _lines(app)[-1]
        assert not app.paused and "␣ Pause" in footer and "Resume" not in footer, footer


async def test_window_and_range_keys_say_what_they_did():
    """w and + / - changed only the status line: each says what it did on the message
    line, as the other keys do."""
    app, _ = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)

        def said() -> str:
            return _lines(app)[22]
        window = app.feed.config.analysis.window
        await pilot.press("w")
        await _settle(pilot)
        assert f"· fit: window of the last {window} probes" in said(), said()
        await pilot.press("w")
        await _settle(pilot)
        assert "· fit: all-time" in said(), said()
        await pilot.press("minus")
        await _settle(pilot)
        assert "· range 32–2,048 tokens" in said(), said()
        await pilot.press("plus")
        await pilot.press("plus")
        await _settle(pilot)
        # 4,096 x 2 is over the fake server's 8,192-token context: capped, and said
        assert "· range 32–8,023 tokens (the context's cap)" in said(), said()
        await pilot.press("plus")
        await _settle(pilot)
        assert "· range stays 32–8,023 tokens (the context's cap)" in said(), said()
