"""The one session wiring: the TUI's /metrics scraper uses the probe client's pool,
so a server that protects /metrics with the API key, or serves HTTPS with a
self-signed certificate under --insecure, still gives the TTFT breakdown."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess

import pytest

from tests.fakeserver import Reply, models_reply
from prefilltui.cli import build_parser
from prefilltui.commands.common import session_options
from prefilltui.commands.watch import display_options, make_watch_app
from prefilltui.session import SessionError, build_session
from prefilltui.tui.widgets.stats import StatsPanel
from tests.unit.test_metrics_sweep import QUEUE_S, FakeVllm

KEY = "sekrit-key"


class KeyedVllm(FakeVllm):
    """/metrics answers 401 unless the request carries the API key (as a proxy would)."""

    def __init__(self):
        super().__init__()
        self.refused = 0

    def metrics(self, req):
        if req.headers.get("authorization") != f"Bearer {KEY}":
            self.refused += 1
            return Reply.json({"error": "unauthorized"}, status=401)
        return super().metrics(req)

    def routes(self):
        return {"GET /v1/models": models_reply("m", max_model_len=8192),
                "GET /metrics": self.metrics, "POST /v1/completions": self.complete,
                "GET /version": Reply.json({"version": "0.11.0"})}


def _watch_args(url, tmp_path, *extra):
    """The typed options of ``prefilltui watch URL ...`` (as the command builds them)."""
    args = build_parser().parse_args(
        ["watch", url, "--no-telemetry", "--out", str(tmp_path / "run.jsonl"),
         "--lengths", "100,400,1600", "--warmup", "0", "--timeout", "10", *extra])
    return session_options(args), display_options(args)


async def _watch_breakdown(args, url):
    """Run the watch app until 3 probes are back; the stats view and the session."""
    app, session = make_watch_app(*args, url)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(200):
                if app.live.ok >= 3:
                    break
                await asyncio.sleep(0.05)
            await pilot.pause(0.5)  # one display tick
            view = app.query_one("#stats", StatsPanel).view
            return app, session, view
    finally:
        session.close()


async def test_watch_scrapes_metrics_with_the_api_key(fake_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    v = KeyedVllm()
    srv = fake_server(v.routes())
    app, session, view = await _watch_breakdown(_watch_args(srv.base_url, tmp_path),
                                                srv.base_url)
    assert app.live.ok >= 3
    assert session.metrics.problem is None and v.refused == 0
    assert view.queue_s == pytest.approx(QUEUE_S, abs=1e-9)
    assert view.prefill_s is not None and view.overhead_s is not None


def _self_signed(tmp_path) -> ssl.SSLContext:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                   capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_insecure_reaches_the_metrics_scraper(fake_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    v = KeyedVllm()
    srv = fake_server(v.routes(), ssl_context=_self_signed(tmp_path))
    assert srv.base_url.startswith("https://")
    app, session, view = await _watch_breakdown(
        _watch_args(srv.base_url, tmp_path, "--insecure"), srv.base_url)
    assert app.live.ok >= 3
    assert session.metrics.problem is None and v.refused == 0
    assert view.queue_s == pytest.approx(QUEUE_S, abs=1e-9)


def test_session_builds_one_set_of_objects(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    args = _watch_args("http://127.0.0.1:9", tmp_path)
    s = build_session(args[0], "http://127.0.0.1:9")
    try:
        assert s.lengths == [100, 400, 1600] and s.sampler is None
        # the metrics hook, then the users' window read from its scrapes (docs/users.md),
        # then the server's own identity (docs/server-changes.md)
        assert s.hooks == [s.metrics, s.users_metrics, s.server_watch]
        assert s.metrics.on_sample == s.server_watch.feed_sample
        assert s.run_path == tmp_path / "run.jsonl"
        assert s.users is s.users_metrics and s.trace is None
        c = s.new_client()
        assert c.timeout == 10.0 and "sekrit" not in repr(c)
    finally:
        s.close()


def test_session_errors_carry_the_exit_code(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "bad\x01key")
    with pytest.raises(SessionError) as e:
        build_session(_watch_args("http://127.0.0.1:9", tmp_path)[0], "http://127.0.0.1:9")
    assert e.value.code == 2 and "bad" not in str(e.value)


def test_cache_check_command_and_tui_key_share_one_check(fake_server, tmp_path, capsys,
                                                         monkeypatch):
    """Both go through core.prefix_cache.cache_check: same discovery, same context cap."""
    from prefilltui.cli import main
    from tests.unit.test_diagnose import CachingLlama
    from tests.fakeserver import llama_routes

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    srv = fake_server({**llama_routes(n_ctx=200), "POST /v1/completions": CachingLlama()})
    assert main(["cache-check", srv.base_url, "--tokens", "512", "--format", "json"]) == 0
    from_command = json.loads(capsys.readouterr().out)
    app, session = make_watch_app(*_watch_args(srv.base_url, tmp_path), srv.base_url)
    try:
        line = app.cache_checker().line  # what the c key runs in its worker thread
    finally:
        session.close()
    # 512 requested, capped at the 200-token context minus the 64-token margin: 136
    # tokens asked for, which the fake counts as 113 words, in both paths
    head = f"cache on: repeat of {from_command['tokens']:,} tokens"
    assert from_command["tokens"] == 113 and from_command["line"].startswith(head)
    assert line.startswith(head)
