"""A restart of the real llama-server behind one URL, seen by the exporter's target:
llama.cpp publishes no ``process_start_time_seconds``, so the restart is its counters
going down (``llamacpp:prompt_tokens_total``), and ``/props`` names what changed (the
context: ``-c 4096`` then ``-c 2048``).  Two llama-server starts (~1 s each)."""

from __future__ import annotations

import time

import pytest

from prefilltui.exporter.config import check, target
from prefilltui.exporter.target import TargetProber
from tests.unit.test_exporter import _wait

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]




def test_llama_server_restart_names_its_context(llama_server_binary, demo_gguf, tmp_path,
                                                monkeypatch):
    from prefilltui.demo import server as demo_server

    first = demo_server.LlamaServer(llama_server_binary, demo_gguf, ctx=4096,
                                    startup_timeout=180).start()
    second = None
    port = first.port
    p = TargetProber(check(target(first.base_url, name="llama", lengths=(16, 64),
                                  interval=1.0)), run_dir=tmp_path, seed=7).start()
    try:
        watch = p.session.server_watch

        def known() -> bool:
            last = watch.tracker._streams["metrics"].last
            tokens = dict(last.counters).get("llamacpp:prompt_tokens_total", 0) if last else 0
            # its /props read once, and more prompt tokens counted than the new server's
            # first probes will count (a server younger than that restarting reads as a
            # scrape of another replica: its counters are not lower for long enough)
            return watch.tracker._last_stated is not None and tokens >= 400

        assert _wait(known, timeout=180)
        first.stop()
        monkeypatch.setattr(demo_server, "free_port", lambda host: port)
        second = demo_server.LlamaServer(llama_server_binary, demo_gguf, ctx=2048,
                                         startup_timeout=180).start()
        answered = time.time()
        assert _wait(lambda: dict(p.snapshot.server_changes).get("restart", 0) >= 1,
                     timeout=120)
        published = time.time()
        changes = p.server_changes()
    finally:
        p.stop(timeout=5)
        if second is not None:
            second.stop()
        first.stop()
    (c,) = changes
    assert c.kind == "restart" and p.snapshot.server_start_time_s is None
    assert ("n_ctx", 4096, 2048) in c.changed, c
    assert any("llamacpp:" in e and "went down" in e for e in c.evidence), c
    print(f"\nllama-server restart: published {published - answered:.1f} s after it answered; "
          f"changed {c.changed}; evidence {'; '.join(c.evidence)}")
