"""measure, model and render stay UI-free: importing all of them must not import textual.

Runs in a fresh interpreter, because this test process may already have imported
textual through other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import importlib, json, pkgutil, sys
import prefilltui.measure, prefilltui.model, prefilltui.render
names = sorted(m.name for pkg in (prefilltui.measure, prefilltui.model, prefilltui.render)
               for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))
errors = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as e:  # reported, so a broken module is visible here too
        errors[name] = f"{type(e).__name__}: {e}"
ui = sorted(m for m in sys.modules if m == "textual" or m.startswith("textual.")
            or m == "textual_plotext" or m.startswith("textual_plotext."))
print(json.dumps({"modules": names, "errors": errors, "ui": ui}))
"""


def _run_probe() -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_core_imports_no_textual():
    d = _run_probe()
    assert "prefilltui.model.types" in d["modules"]
    assert not d["errors"], f"modules failed to import: {d['errors']}"
    assert d["ui"] == [], f"measure/model/render imported UI modules: {d['ui'][:5]}"


def test_demo_module_imports_no_textual():
    """The demo target and its build helpers are also UI-free (the CLI loads them
    for --prepare-only and --headless)."""
    code = ("import sys, prefilltui.demo.target, prefilltui.demo.build; "
            "print(any(m == 'textual' or m.startswith('textual.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "False"
