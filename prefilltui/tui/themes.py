"""Theme files: TOML in ``themes/`` (installed as ``prefilltui.themes``), the user's
config dir, or a path given with ``--theme``; converted to ``textual.theme.Theme``.

Theme file format (every colour is anything ``textual.color.Color.parse`` accepts)::

    name = "my-theme"          # required, unique
    dark = true                # optional, default true
    primary = "#4ea1f3"        # required
    secondary/accent/warning/error/success/foreground/background/surface/panel = ...
    [variables]                # optional app variables (see PLOT_VARIABLES)
    plot-point = "#4ea1f3"

Precedence when two files give the same name: ``--theme PATH`` > user config dir >
built-in.  A broken file is reported (one line per file) and skipped, never fatal.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from itertools import chain
from importlib import resources
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.css.stylesheet import Stylesheet, StylesheetParseError
from textual.theme import Theme
from textual.widget import Widget

from prefilltui.model.localfile import loads_toml, read_text

#: The default theme's name (themes/dark.toml).
DEFAULT_THEME = "prefilltui-dark"

COLOR_KEYS = ("primary", "secondary", "accent", "warning", "error", "success",
              "foreground", "background", "surface", "panel", "boost")

#: App variables the tcss and the plot use, with the standard colour each falls back to
#: when a theme file does not set it.
PLOT_VARIABLES: dict[str, str] = {
    "plot-point": "primary",
    "plot-newest": "accent",
    "plot-fit": "success",
    "plot-roofline": "secondary",
    "plot-warmup": "foreground",
    "plot-cache": "error",
    "plot-load": "warning",
    "plot-user": "secondary",
    "gauge-cool": "success",
    "gauge-hot": "error",
    "gauge-probe": "accent",
}

#: Fallbacks for the app variables when nothing else defines them (used by
#: PrefillApp.get_theme_variable_defaults, so tcss always parses).
VARIABLE_DEFAULTS: dict[str, str] = {
    "plot-point": "#4ea1f3", "plot-newest": "#f5b342", "plot-fit": "#5cc97b",
    "plot-roofline": "#c678dd", "plot-warmup": "#7d8590", "plot-cache": "#f0625d",
    "plot-load": "#e5c07b", "plot-user": "#56b6c2", "gauge-cool": "#2f6f4f", "gauge-hot": "#f0625d", "gauge-probe": "#f5b342",
}


#: Longest [variables] value accepted (a colour with alpha is ~12 characters).
MAX_VARIABLE_CHARS = 200


class ThemeError(ValueError):
    """A theme file that cannot be used; the message names the file and the problem."""


@dataclass
class ThemeSet:
    """Loaded themes in cycling order and the problems met while loading them."""

    themes: list[Theme] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # name -> where it came from

    def names(self) -> list[str]:
        return [t.name for t in self.themes]

    def drop(self, name: str, problem: str) -> None:
        """Remove a theme that failed a later check; ``problem`` says why (one line)."""
        self.themes = [t for t in self.themes if t.name != name]
        self.problems.append(f"theme skipped: {self.sources.pop(name, name)}: {problem}")

    def add(self, theme: Theme, source: str) -> None:
        """Add or replace (same name) a theme, keeping its first position."""
        for i, t in enumerate(self.themes):
            if t.name == theme.name:
                self.themes[i] = theme
                self.sources[theme.name] = source
                return
        self.themes.append(theme)
        self.sources[theme.name] = source


def parse_theme(data: dict, source: str = "<theme>") -> Theme:
    """Validate a decoded theme TOML table and build a Textual Theme.

    Raises:
        ThemeError: missing/ill-typed keys, unknown keys, or a colour that does not parse.
    """
    if not isinstance(data, dict):
        raise ThemeError(f"{source}: not a table")
    known = {"name", "dark", "variables", "luminosity_spread", "text_alpha", *COLOR_KEYS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ThemeError(f"{source}: unknown key(s) {', '.join(unknown)}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ThemeError(f"{source}: 'name' (a non-empty string) is required")
    if "primary" not in data:
        raise ThemeError(f"{source}: 'primary' colour is required")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeError(f"{source}: 'dark' must be true or false")
    colors: dict[str, str] = {}
    for key in COLOR_KEYS:
        if key in data:
            colors[key] = _check_color(data[key], f"{source}: {key}")
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ThemeError(f"{source}: [variables] must be a table")
    out_vars: dict[str, str] = {}
    for key, value in variables.items():
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_VARIABLE_CHARS:
            raise ThemeError(f"{source}: variables.{key} must be a non-empty string of at "
                             f"most {MAX_VARIABLE_CHARS} characters")
        if key in PLOT_VARIABLES:
            value = _check_color(value, f"{source}: variables.{key}")
        out_vars[key] = value
    # Fill plot/gauge variables the file leaves out from its own standard colours.
    for key, std in PLOT_VARIABLES.items():
        if key not in out_vars:
            fallback = colors.get(std) or colors["primary"]
            out_vars[key] = fallback
    extra = {}
    for key in ("luminosity_spread", "text_alpha"):
        if key in data:
            v = data[key]
            if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                    or not 0.0 <= v <= 1.0):
                raise ThemeError(f"{source}: {key} = {str(v)[:40]}: must be a number from 0 to 1")
            extra[key] = float(v)
    theme = Theme(name=name.strip(), dark=dark, variables=out_vars, **colors, **extra)
    try:  # the colour system every screen is drawn with: built now, not at first use
        theme.to_color_system().generate()
    except Exception as exc:  # noqa: BLE001 - any failure of a user's file is its problem
        raise ThemeError(f"{source}: its colours cannot be built ({type(exc).__name__}: "
                         f"{str(exc)[:120]})") from None
    return theme


def _check_color(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ThemeError(f"{where} must be a colour string")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ThemeError(f"{where}: {value!r} is not a colour") from None
    return value


def load_theme_file(path: Path) -> Theme:
    """Read and validate one theme file.

    Raises:
        ThemeError: unreadable file, bad TOML, or an invalid theme.
    """
    try:
        text = read_text(path)  # bounded; a BOM dropped; named when not UTF-8
    except OSError as exc:
        raise ThemeError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ThemeError(str(exc)) from None
    try:
        data = loads_toml(text, str(path))
    except ValueError as exc:  # bad TOML, or nested past the recursion limit
        raise ThemeError(f"{path}: not valid TOML ({str(exc).removeprefix(f'{path}: ')})") \
            from None
    return parse_theme(data, str(path))


def builtin_theme_files() -> list[tuple[str, str]]:
    """(file name, text) of the shipped theme files, dark.toml first."""
    out = []
    try:
        root = resources.files("prefilltui.themes")
        for entry in root.iterdir():
            if entry.name.endswith(".toml"):
                out.append((entry.name, entry.read_text(encoding="utf-8")))
    except (ModuleNotFoundError, OSError):  # pragma: no cover - broken install
        return []
    order = {"dark.toml": 0, "light.toml": 1, "high-contrast.toml": 2}
    return sorted(out, key=lambda p: (order.get(p[0], 9), p[0]))


def user_theme_dir() -> Path:
    """``platformdirs.user_config_dir("prefilltui")/themes`` (may not exist)."""
    from platformdirs import user_config_dir

    return Path(user_config_dir("prefilltui")) / "themes"


def load_themes(*, user_dir: Path | None = None, extra: list[Path] = ()) -> ThemeSet:
    """Built-in themes, then ``user_dir/*.toml``, then ``extra`` files.

    Never raises for a bad file: each problem becomes one line in ``problems``.
    """
    ts = ThemeSet()
    for fname, text in builtin_theme_files():
        try:
            ts.add(parse_theme(loads_toml(text, f"built-in {fname}"), f"built-in {fname}"),
                   f"built-in {fname}")
        except ValueError as exc:  # ThemeError is one
            ts.problems.append(f"theme built-in {fname}: {exc}")
    if user_dir is not None and user_dir.is_dir():
        for path in sorted(user_dir.glob("*.toml")):
            if path.is_file():  # a FIFO or device named *.toml would block the start
                _add_file(ts, path)
            else:
                ts.problems.append(f"theme skipped: {path}: not a regular file")
    for path in extra:
        _add_file(ts, Path(path))
    return ts


def _add_file(ts: ThemeSet, path: Path) -> Theme | None:
    try:
        theme = load_theme_file(path)
    except ThemeError as exc:
        ts.problems.append(f"theme skipped: {exc}")
        return None
    ts.add(theme, str(path))
    return theme


def resolve_theme_arg(arg: str | None, ts: ThemeSet) -> tuple[str, str | None]:
    """Turn ``--theme PATH|NAME`` into a theme name present in ``ts``.

    A path (contains a separator or ends in .toml and exists) is loaded into ``ts``.
    Returns (name, problem): on any problem the default theme is used and
    ``problem`` says why.
    """
    if not arg:
        return DEFAULT_THEME, None
    p = Path(arg).expanduser()
    if arg.endswith(".toml") or "/" in arg:
        if not p.is_file():
            return DEFAULT_THEME, f"theme file not found: {arg}"
        theme = _add_file(ts, p)
        if theme is None:
            return DEFAULT_THEME, ts.problems[-1]
        return theme.name, None
    names = ts.names()
    for cand in (arg, f"prefilltui-{arg}"):
        if cand in names:
            return cand, None
    typed = [n.removeprefix("prefilltui-") for n in names]  # what --theme accepts
    return DEFAULT_THEME, f"unknown theme {arg!r} (have: {', '.join(typed)})"


def rgb(value: str | None, default: tuple[int, int, int] = (200, 200, 200)) -> tuple[int, int, int]:
    """A colour string as an (r, g, b) tuple for plotext; ``default`` when unparsable."""
    if not value:
        return default
    try:
        return Color.parse(value).rgb
    except ColorParseError:
        return default


def check_stylesheet(app_sheet: Stylesheet) -> Stylesheet:
    """A copy of the app's stylesheet plus the ``DEFAULT_CSS`` of every widget class
    imported so far (mounted or not yet: a help screen, a toast), to check themes
    against every rule that may ever use their variables."""
    sheet = app_sheet.copy()
    seen = {read_from for read_from in sheet.source}

    def classes(cls: type) -> list[type]:
        out = []
        for sub in cls.__subclasses__():
            out += [sub, *classes(sub)]
        return out

    for cls in classes(Widget):
        css = cls.__dict__.get("DEFAULT_CSS")
        read_from = ("", f"{cls.__name__}.DEFAULT_CSS")
        if not css or any(where[1] == read_from[1] for where in seen):
            continue
        scope = cls._css_type_name if cls.__dict__.get("SCOPED_CSS", True) else ""
        sheet.add_source(css, read_from=read_from, is_default_css=True, scope=scope)
    return sheet


def theme_problem(theme: Theme, sheet: Stylesheet, defaults: dict[str, str]) -> str | None:
    """Why ``theme`` cannot be used with ``sheet`` (``check_stylesheet``), in one line,
    or None: its colour system is built and every rule is parsed with its variables,
    as Textual does when the theme is switched on (where an error would end the app
    with "Error in stylesheet")."""
    try:
        variables = {**defaults, **theme.to_color_system().generate(), **theme.variables}
        trial = sheet.copy()
        trial.set_variables(variables)
        trial.reparse()
    except StylesheetParseError as exc:
        errors = list(dict.fromkeys(chain.from_iterable(r.errors for r in exc.errors.rules)))
        if not errors:
            return "its stylesheet does not parse"
        token, message = errors[0]
        why = re.sub(r"\[/?[a-z ]*\]", "", str(getattr(message, "summary", message)))
        ref = token.referenced_by
        name = ref.name if ref is not None else None
        where = f"variables.{name} = {variables.get(name, token.value)!r}: " if name else ""
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{where}{why}{more}"
    except Exception as exc:  # noqa: BLE001 - a user's theme must never end the app
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return None


def register_usable_themes(app, ts: ThemeSet, wanted: str) -> str:
    """Register on ``app`` every theme of ``ts`` that passes ``theme_problem`` against
    the app's whole stylesheet; drop the others from ``ts`` with their reason (in
    ``ts.problems``).  Returns the theme to start with: ``wanted`` if usable, else the
    default, else the first usable one, else Textual's own."""
    sheet = check_stylesheet(app.stylesheet)
    defaults = app.get_theme_variable_defaults()
    for theme in list(ts.themes):
        problem = theme_problem(theme, sheet, defaults)
        if problem is None:
            app.register_theme(theme)
        else:
            ts.drop(theme.name, problem)
    names = ts.names()
    if wanted in names:
        return wanted
    return DEFAULT_THEME if DEFAULT_THEME in names else (names[0] if names else "textual-dark")
