"""Integration tests run against the real demo target: llama.cpp's llama-server with
SmolLM2-135M-Instruct Q4_1 on the CPU.

Fixtures:
  llama_server_binary (session) -- Path of the binary: $PREFILLTUI_LLAMA_SERVER, else
      llama-server on PATH, else the cache, else built now (7-15 min on 2 cores);
      smoke-tested with the model once per binary and CPU.
  demo_gguf (session)           -- Path of the model: $PREFILLTUI_GGUF, else the cache,
      else downloaded now (~93 MB).
  llama_server (session)        -- a running prefilltui.demo.server.LlamaServer shared by all
      tests (``.base_url``, ``.pid``, ``.log_path``); -c 4096, all cores.

Set PREFILLTUI_SKIP_INTEGRATION=1 to skip them.  A missing binary or model is built
or fetched; when that fails (no compiler, no registry) the tests skip with the line
that obtains it, and fail where PREFILLTUI_REQUIRE_COMPONENTS=1 (.ci/run), as every
component (tests/components.py).  The vLLM fixtures are in ``vllm_fixtures.py``.
Every test under tests/integration gets the ``integration`` marker.  When the binary
is not built yet, they get a long timeout too, since the first one builds it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from prefilltui.demo import build, target
from prefilltui.demo.server import DEFAULT_CTX, LlamaServer

SKIP = os.environ.get("PREFILLTUI_SKIP_INTEGRATION") == "1"
_HERE = Path(__file__).resolve().parent


def _binary_ready() -> bool:
    if os.environ.get("PREFILLTUI_LLAMA_SERVER") or shutil.which("llama-server"):
        return True
    return build.cached_llama_server().is_file()


def pytest_collection_modifyitems(config, items):
    ready = SKIP or _binary_ready()
    for item in items:
        if _HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.integration)
        if not ready:
            item.add_marker(pytest.mark.timeout(3600))


@contextlib.contextmanager
def _uncaptured(request):
    """Let build/download progress through to the terminal."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        yield
        return
    with capman.global_and_fixture_disabled():
        yield


@pytest.fixture(scope="session")
def demo_target(request) -> tuple[Path, Path]:
    """(binary, model), smoke-tested together (``demo.prepare_target``)."""
    if SKIP:
        pytest.skip("PREFILLTUI_SKIP_INTEGRATION=1")
    from prefilltui.demo.steps import DemoSetupError
    from tests.components import missing

    try:
        with _uncaptured(request):
            return target.prepare_target(os.environ.get("PREFILLTUI_LLAMA_SERVER") or None,
                                         os.environ.get("PREFILLTUI_GGUF") or None)
    except DemoSetupError as e:
        missing("llama-server", str(e).splitlines()[0])


@pytest.fixture(scope="session")
def llama_server_binary(demo_target) -> Path:
    return demo_target[0]


@pytest.fixture(scope="session")
def demo_gguf(demo_target) -> Path:
    return demo_target[1]


@pytest.fixture(scope="session")
def llama_server(llama_server_binary, demo_gguf):
    """A running llama-server (SmolLM2-135M) on 127.0.0.1, shared by the session."""
    with LlamaServer(llama_server_binary, demo_gguf, ctx=DEFAULT_CTX,
                          startup_timeout=180) as srv:
        yield srv


# ------------------------------------------------------------------------- vLLM

#: The shared vLLM's token budget per engine step (its prefill chunk): small, so a
#: 1,500-token prompt is 12 chunks and the chunk test sees steps (measured: ~46 ms per
#: chunk, p ~1e-5 over 36 probes; at 256 the steps were 18-75 ms, p 8.5e-5 to 0.014).
VLLM_BUDGET = 128


@pytest.fixture(scope="session")
def vllm_target(request):
    """vLLM installed and the model directory built (``demo.vllm.prepare_vllm``); a
    machine where that fails (no torch wheel, no registry) skips with the reason and
    the install line (fails with PREFILLTUI_REQUIRE_COMPONENTS=1)."""
    if SKIP:
        pytest.skip("PREFILLTUI_SKIP_INTEGRATION=1")
    from prefilltui.demo.steps import DemoSetupError
    from prefilltui.demo.vllm import prepare_vllm
    from tests.components import missing

    try:
        with _uncaptured(request):
            return prepare_vllm()
    except DemoSetupError as e:
        missing("vllm", str(e).splitlines()[0])


@pytest.fixture(scope="session")
def vllm_server(vllm_target):
    """One real vLLM (random weights, SmolLM2-135M shape, --max-model-len 4096,
    --max-num-batched-tokens 128) on 127.0.0.1, shared by the session's vLLM tests and
    stopped after them (~3.5 GB RSS while it runs)."""
    from prefilltui.demo.vllm import VllmServer

    with VllmServer(vllm_target, extra_args=["--max-num-batched-tokens", str(VLLM_BUDGET)],
                    startup_timeout=600) as srv:
        yield srv
