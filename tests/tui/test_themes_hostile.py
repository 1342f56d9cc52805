"""A hostile theme file: a theme is validated fully before use; a bad one is skipped with
its reason, never "Error in stylesheet", never a crash, at start or when ``t`` reaches it."""

from __future__ import annotations

import pytest

from tests.tui.fakes import NOW, FakeRunner, FakeSampler

from prefilltui.tui.app import build_app
from prefilltui.tui.themes import DEFAULT_THEME, load_themes, resolve_theme_arg

GOOD = 'name = "fine"\nprimary = "#4ea1f3"\n'


def _write(d, name, body):
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_text(body)
    return p


@pytest.mark.parametrize("line, words", [
    ("luminosity_spread = 1e308", "luminosity_spread = 1e+308: must be a number from 0 to 1"),
    ("luminosity_spread = nan", "luminosity_spread = nan: must be a number from 0 to 1"),
    ("text_alpha = -2", "text_alpha = -2: must be a number from 0 to 1"),
    ('[variables]\nplot-fit = ""', "variables.plot-fit must be a non-empty string"),
])
def test_a_bad_number_or_value_is_reported_and_skipped_at_load(tmp_path, line, words):
    _write(tmp_path / "themes", "bad.toml", 'name = "bad"\nprimary = "#4ea1f3"\n' + line + "\n")
    ts = load_themes(user_dir=tmp_path / "themes")
    assert "bad" not in ts.names()
    assert any("bad.toml" in p and words in p for p in ts.problems), ts.problems


async def _run_and_cycle(ts, theme=None, presses=6):
    app = build_app(lambda r, s: FakeRunner(r, s), FakeSampler(), themes=ts, theme=theme,
                    clock=lambda: NOW)
    seen = []
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        for _ in range(presses):
            seen.append(app.theme)
            await pilot.press("t")
            await pilot.pause()
        assert app.is_running
        # the message line keeps them (a notification expires from Textual's list)
        messages = [n.text for n in app.dashboard().messages.history]
    return app, seen, messages


@pytest.mark.parametrize("variables, words", [
    ('"block-cursor-text-style" = "purple"',
     "variables.block-cursor-text-style = 'purple': Invalid value 'purple' in text-style"),
    ('"footer-key-foreground" = "not a colour"', "variables.footer-key-foreground = "),
    ('"surface" = "zz"', "variables.surface = 'zz'"),
])
async def test_a_bad_variable_is_skipped_with_its_reason_never_a_stylesheet_error(
        tmp_path, variables, words):
    _write(tmp_path / "themes", "ok.toml", GOOD)
    _write(tmp_path / "themes", "vars.toml",
           'name = "vars"\nprimary = "#4ea1f3"\n[variables]\n' + variables + "\n")
    ts = load_themes(user_dir=tmp_path / "themes")
    app, seen, messages = await _run_and_cycle(ts)
    assert "vars" not in seen and "vars" not in app.theme_set.names()
    assert "fine" in seen  # the cycle goes on through the good ones
    assert any("theme skipped" in m and "vars.toml" in m and words in m for m in messages), \
        messages
    assert app.return_code in (None, 0) and not app._exit_renderables


async def test_a_bad_theme_asked_for_at_start_falls_back_to_the_default(tmp_path):
    path = _write(tmp_path, "bad.toml",
                  'name = "bad"\nprimary = "#4ea1f3"\n[variables]\n'
                  '"block-cursor-text-style" = "purple"\n')
    ts = load_themes()
    name, problem = resolve_theme_arg(str(path), ts)
    assert problem is None and name == "bad"  # parses as TOML: caught at mount
    app, seen, messages = await _run_and_cycle(ts, theme=name, presses=1)
    assert seen[0] == DEFAULT_THEME
    assert any("bad.toml" in m and "text-style" in m for m in messages)
