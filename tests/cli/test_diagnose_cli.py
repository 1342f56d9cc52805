"""``prefilltui cache-check`` end to end against a loopback fake llama.cpp server."""

from __future__ import annotations

import json

from tests.fakeserver import llama_routes
from prefilltui.cli import main
from tests.unit.test_diagnose import CachingLlama


def test_cache_check_cli_json(fake_server, capsys):
    srv = fake_server({**llama_routes(), "POST /v1/completions": CachingLlama()})
    assert main(["cache-check", srv.base_url + "/v1", "--tokens", "120", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "on" and d["server"]["kind"] == "llama.cpp"
    assert d["repeat_cached"] >= d["tokens"] - 1 and d["nocache_cached"] == 0


def test_cache_check_cli_text(fake_server, capsys):
    srv = fake_server({**llama_routes(), "POST /v1/completions": CachingLlama()})
    assert main(["cache-check", srv.base_url, "--tokens", "80"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cache on: repeat of ") and out.count("\n") == 2
    assert out.splitlines()[1] == ("  note: cached tokens counted by the server: "
                                   "llama.cpp's timings.cache_n")


def test_cache_check_cli_unreachable(capsys):
    assert main(["cache-check", "http://127.0.0.1:9", "--timeout", "2"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("prefilltui: server unreachable") and "Traceback" not in err


def test_run_cache_check_sync(fake_server):
    from prefilltui.measure.prefix_cache import run_cache_check
    from prefilltui.measure.probe import ProbeClient

    srv = fake_server({**llama_routes(), "POST /v1/completions": CachingLlama()})
    res = run_cache_check(lambda: ProbeClient(srv.base_url, timeout=10), 60)
    assert res.verdict == "on" and res.line.startswith("cache on: repeat of ")
    down = run_cache_check(lambda: ProbeClient("http://127.0.0.1:9", timeout=2), 60)
    assert down.verdict == "failed" and down.unreachable and "unreachable" in down.line
