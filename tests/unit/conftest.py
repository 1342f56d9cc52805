"""Shared fixtures for the core unit tests.

``fake_server(script)`` starts a FakeServer (tests/unit/fakeserver.py) on a real
loopback socket for the duration of the test; ``fakeserver.llama_routes()``
gives the discovery endpoints of a llama.cpp server.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from fakeserver import FakeServer  # noqa: E402


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
