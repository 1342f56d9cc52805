"""Theme files: shipped themes load, broken ones are reported and skipped, --theme."""

from __future__ import annotations

import re
from pathlib import Path

from tests.tui.fakes import NOW, FakeRunner, FakeSampler

from prefilltui.tui.app import build_app
from prefilltui.tui.themes import (
    DEFAULT_THEME, PLOT_VARIABLES, load_theme_file, load_themes, resolve_theme_arg,
)

ROOT = Path(__file__).resolve().parents[2]


def test_builtin_themes_load_cleanly():
    ts = load_themes()
    assert ts.problems == []
    assert ts.names()[:3] == ["prefilltui-dark", "prefilltui-light", "prefilltui-high-contrast"]
    for theme in ts.themes:
        assert set(PLOT_VARIABLES) <= set(theme.variables)
    assert ts.themes[1].dark is False


def test_user_dir_and_broken_files(tmp_path):
    d = tmp_path / "themes"
    d.mkdir()
    (d / "ok.toml").write_text('name = "mine"\nprimary = "#123456"\n')
    (d / "bad-toml.toml").write_text('name = "x\n')
    (d / "bad-color.toml").write_text('name = "y"\nprimary = "not-a-colour"\n')
    (d / "no-name.toml").write_text('primary = "#123456"\n')
    (d / "unknown.toml").write_text('name = "z"\nprimary = "#123456"\nfoo = 1\n')
    ts = load_themes(user_dir=d)
    assert "mine" in ts.names()
    assert not {"x", "y", "z"} & set(ts.names())
    assert len(ts.problems) == 4
    joined = "\n".join(ts.problems)
    assert "bad-toml.toml: not valid TOML" in joined
    assert "'not-a-colour' is not a colour" in joined
    assert "'name'" in joined and "unknown key(s) foo" in joined
    # the theme's own colours fill the plot variables it leaves out
    mine = ts.themes[ts.names().index("mine")]
    assert mine.variables["plot-point"] == "#123456"


def test_resolve_theme_arg(tmp_path):
    ts = load_themes()
    assert resolve_theme_arg(None, ts) == (DEFAULT_THEME, None)
    assert resolve_theme_arg("light", ts) == ("prefilltui-light", None)
    assert resolve_theme_arg("prefilltui-high-contrast", ts)[0] == "prefilltui-high-contrast"
    name, problem = resolve_theme_arg("nope", ts)
    assert name == DEFAULT_THEME and "unknown theme 'nope'" in problem
    # lists the names users type (as README / --help), not the internal ones
    assert "dark" in problem and "high-contrast" in problem and "prefilltui-" not in problem
    p = tmp_path / "t.toml"
    p.write_text('name = "from-path"\nprimary = "#ff0000"\ndark = false\n')
    assert resolve_theme_arg(str(p), ts) == ("from-path", None)
    assert "from-path" in ts.names()
    name, problem = resolve_theme_arg(str(tmp_path / "missing.toml"), ts)
    assert name == DEFAULT_THEME and "not found" in problem


def test_theme_file_errors_name_the_file(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("dark = 3\n")
    try:
        load_theme_file(p)
    except ValueError as exc:
        assert str(p) in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected ThemeError")


def test_tcss_uses_theme_variables_only():
    tcss = (ROOT / "prefilltui" / "tui" / "app.tcss").read_text()
    assert not re.search(r"#[0-9a-fA-F]{3,8}\b(?![-\w])", re.sub(r"#[a-z][\w-]*", "", tcss))
    assert not re.search(r"\b(rgb|hsl)\(", tcss)


async def test_broken_theme_is_notified_and_app_runs(tmp_path):
    d = tmp_path / "themes"
    d.mkdir()
    (d / "broken.toml").write_text("name = \n")
    ts = load_themes(user_dir=d)
    app = build_app(lambda r, s: FakeRunner(r, s), FakeSampler(), themes=ts, clock=lambda: NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert any("broken.toml" in m for m in messages)
        assert app.theme == DEFAULT_THEME


async def test_no_color_is_honoured(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = build_app(lambda r, s: FakeRunner(r, s), FakeSampler(), clock=lambda: NOW)
    assert app.no_color is True
