"""Every package of the product is in pyproject's explicit package list: a package left
out installs nowhere but an editable checkout (the image's wheel lacked
``prefilltui.model.diagnosis.causes`` and the exporter died at import)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_for_the_wheel():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapped = set(cfg.get("package-dir", {}))  # packages that live outside prefilltui/
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "prefilltui").rglob("__init__.py")}
    assert on_disk - listed == set(), "add them to [tool.setuptools] packages"
    assert listed - on_disk <= mapped
