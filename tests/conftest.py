"""Test-wide fixtures: isolation from a developer's own config and run files, and the
loopback fake server.

``fake_server(script, ssl_context=None)`` starts a FakeServer (tests/fakeserver.py) on a
real loopback socket for the duration of the test; ``fakeserver.llama_routes()`` gives
the discovery endpoints of a llama.cpp server.  Tests are packages (``tests.unit``,
``tests.cli``, ...): shared helpers are imported as ``tests.fakeserver``, never through
``sys.path`` edits.

Every test gets fresh XDG_DATA_HOME / XDG_CONFIG_HOME / XDG_STATE_HOME dirs (run
files, config and state land there), while XDG_CACHE_HOME is pinned to the
developer's real cache dir, so the built llama-server and the downloaded model
(``<cache>/prefilltui/...``) are shared by all tests and reused across runs, even
by a test that changes HOME.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakeserver import FakeServer

#: The real cache dir, read once before any test can change HOME or XDG vars.
_REAL_CACHE_HOME = (os.environ.get("XDG_CACHE_HOME")
                    if os.path.isabs(os.environ.get("XDG_CACHE_HOME") or "")
                    else str(Path.home() / ".cache"))


_INTEGRATION = Path(__file__).resolve().parent / "integration"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration needs a real component: mark it so, before
    ``-m`` selects (``make test`` runs ``-m "not component"`` first, then the rest)."""
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.component)


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory,
                        monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the XDG data/config/state dirs at a per-test temp dir; keep the cache."""
    base = tmp_path_factory.mktemp("xdg")
    for var, sub in (("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config"),
                     ("XDG_STATE_HOME", "state")):
        d = base / sub
        d.mkdir()
        monkeypatch.setenv(var, str(d))
    monkeypatch.setenv("XDG_CACHE_HOME", _REAL_CACHE_HOME)
    return base


@pytest.fixture
def fake_server():
    servers: list[FakeServer] = []

    def start(script=None, **kw) -> FakeServer:
        s = FakeServer(script, **kw).__enter__()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.__exit__(None, None, None)
