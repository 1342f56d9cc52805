"""Packages that name a concept keep one face: every package under model/ and measure/
has an ``__init__`` that names what the rest of prefilltui may use (``__all__``, each
name really there), an import-linter contract that lets code outside import only that
face (``protected`` in pyproject.toml, run by ``lint-imports``), and no module of the
code base only re-exports another's names (docs/architecture.md, "Packages")."""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PKG = ROOT / "prefilltui"
#: Layers whose sub-packages each name a concept behind a face.
FACED_LAYERS = ("model", "measure")


def faced_packages() -> list[str]:
    out = []
    for layer in FACED_LAYERS:
        for init in sorted((PKG / layer).rglob("__init__.py")):
            if init.parent != PKG / layer:
                out.append(".".join(init.parent.relative_to(ROOT).parts))
    return out


def contracts() -> list[dict]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return conf["tool"]["importlinter"]["contracts"]


@pytest.mark.parametrize("package", faced_packages())
def test_every_package_has_a_face_and_a_contract_keeping_outsiders_to_it(package):
    mod = importlib.import_module(package)
    names = getattr(mod, "__all__", None)
    assert names, f"{package}/__init__.py names nothing in __all__"
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{package}.__all__ names {missing}, which it does not have"
    assert len(set(names)) == len(names), f"{package}.__all__ repeats a name"
    guarded = [c for c in contracts() if c.get("type") == "protected"
               and f"{package}.*" in c.get("protected_modules", [])
               and c.get("allowed_importers") == [package]]
    assert guarded, (f"no import-linter contract keeps code outside {package} to its face: "
                     f"add a `protected` contract (protected_modules = [\"{package}.*\"], "
                     f"allowed_importers = [\"{package}\"])")


def _defines_something(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
                             ast.AnnAssign)):
            if isinstance(node, ast.Assign) and all(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                continue
            return True
    return False


def test_no_module_only_re_exports_another_modules_names():
    """A face (``__init__``) may gather its package's names; any other module that only
    imports names is a second door to them, and is not allowed."""
    only_imports = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        tree = ast.parse(path.read_text())
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                   and getattr(n, "module", "") != "__future__"]
        if imports and not _defines_something(tree):
            only_imports.append(str(path.relative_to(ROOT)))
    assert not only_imports, f"modules that only re-export names: {only_imports}"
