"""Bad input from a server, a file, the environment or the command line: a clear
message, nothing lost, never a crash, never the fit, never the API key in output."""

import argparse
import asyncio
import json
import math
import socket
import threading
import time

import pytest

from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text
from prefilltui.cli import main
from prefilltui.commands.argtypes import _efficiency, _positive_float, _sample_hz
from prefilltui.measure import server as srv
from prefilltui.model.roofline import model_from_config
from prefilltui.model.diagnosis import summarize_diagnosis
from prefilltui.render.tables import format_diagnosis
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.probe.errors import parse_retry_after
from prefilltui.measure.runfile import RunWriter
from prefilltui.measure.runfile import read_run
from prefilltui.model.types import ProbeResult

SECRET = "sk-SECRET123-bad-input"


def _completions(usage=None, timings=None):
    def reply(req):
        words = len(req.json["prompt"].split())
        last = {"choices": [], "usage": usage if usage is not None else {"prompt_tokens": words}}
        if timings is not None:
            last["timings"] = timings
        return Reply.sse([(0.001, sse_text("x")), (0.002, sse_data(last)), (0.003, sse_done())])
    return reply


def _run(coro):
    return asyncio.run(coro)


async def _probe(url, n=16, **kw):
    async with ProbeClient(url, timeout=5, **kw) as c:
        await c.discover()
        return await c.probe(n)


# ---------------------------------------------------------------- discovery


@pytest.mark.parametrize("route,body", [
    ("GET /props", b'{"build_info":"x","n_ctx":Infinity,"n_batch":1e999}'),
    ("GET /props", b'{"build_info":"b","default_generation_settings":"yes","n_ctx":"big"}'),
    ("GET /props", b'{"build_info":"b","default_generation_settings":[1,2]}'),
    ("GET /v1/models", b'{"data":[{"id":{"x":1},"meta":{"n_params":"NaN","n_ctx":1e400}}]}'),
])
def test_discovery_survives_nonsense_metadata(fake_server, route, body):
    s = fake_server({"GET /v1/models": models_reply("m"),
                     route: Reply(200, {"Content-Type": "application/json"}, body),
                     "POST /v1/completions": _completions()})
    r = _run(_probe(s.base_url))
    assert r.ok, r.error_message


def test_discovery_model_id_is_text_or_none(fake_server):
    s = fake_server({"GET /v1/models": Reply.json({"data": []}),
                     "GET /get_model_info": Reply.json({"model_path": ["x"]})})

    async def go():
        async with ProbeClient(s.base_url, timeout=5) as c:
            return await c.discover()
    assert _run(go()).model is None


def test_discovery_of_a_trickling_server_is_bounded():
    """A server that sends one header byte a second never trips httpx's per-read
    timeout; discovery must still give up within its own timeout."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    stop = threading.Event()

    def serve():
        lsock.settimeout(0.2)
        conns = []
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
                conns.append(c)
            except OSError:
                pass
            for c in conns:
                try:
                    c.send(b"X")
                except OSError:
                    pass
        for c in conns:
            c.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{lsock.getsockname()[1]}"

        async def go():
            async with ProbeClient(url, timeout=1.5) as c:
                await c.discover()
        t0 = time.monotonic()
        with pytest.raises(srv.ServerUnreachable, match="within"):
            _run(go())
        assert time.monotonic() - t0 < 8
    finally:
        stop.set()
        t.join(2)
        lsock.close()


# ---------------------------------------------------------------- stream values


@pytest.mark.parametrize("usage", [{"prompt_tokens": -500}, {"prompt_tokens": 10**30},
                                   {"prompt_tokens": True}, {"prompt_tokens": 0},
                                   {"prompt_tokens": "many"}])
def test_implausible_prompt_tokens_are_ignored_and_noted(fake_server, usage):
    s = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": _completions(usage)})
    r = _run(_probe(s.base_url))
    # no usable count: the length is the client's estimate, labelled so
    assert r.ok and r.prompt_tokens_source == "estimate" and r.tokens == 16
    assert r.notes.ignored and "prompt_tokens" in r.notes.ignored[0]


def test_bigint_prompt_tokens_do_not_crash_the_length_model(fake_server):
    big = b'data: {"choices":[],"usage":{"prompt_tokens":1' + b"0" * 400 + b"}}\n\n"
    s = fake_server({"GET /v1/models": models_reply("m"),
                     "POST /v1/completions": Reply.sse([(0, sse_text("x")), (0.001, big),
                                                        (0.002, sse_done())])})

    async def go():
        async with ProbeClient(s.base_url, timeout=5) as c:
            await c.discover()
            return [await c.probe(16), await c.probe(32)]
    rs = _run(go())
    assert all(r.ok and r.prompt_tokens_source == "estimate" for r in rs)
    assert [r.prompt_tokens for r in rs] == [16, 32]


def test_bad_timings_and_cached_tokens_are_ignored(fake_server):
    s = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": _completions(
        {"prompt_tokens": 20, "prompt_tokens_details": {"cached_tokens": -5}},
        {"prompt_ms": -5, "prompt_n": -3, "cache_n": "y"})})
    r = _run(_probe(s.base_url))
    assert r.ok and r.prompt_tokens == 20 and r.cached_tokens is None
    assert r.server_prefill_s is None and r.fit_eligible


def test_infinite_prompt_ms_is_ignored(fake_server):
    chunk = b'data: {"choices":[],"usage":{"prompt_tokens":20},"timings":{"prompt_ms":Infinity}}\n\n'
    s = fake_server({"GET /v1/models": models_reply("m"),
                     "POST /v1/completions": Reply.sse([(0, sse_text("x")), (0.001, chunk),
                                                        (0.002, sse_done())])})
    r = _run(_probe(s.base_url))
    assert r.ok and r.server_prefill_s is None


@pytest.mark.parametrize("usage,timings", [
    ({"prompt_tokens": "W", "prompt_tokens_details": {"cached_tokens": "10W"}}, None),
    ({"prompt_tokens": "W"}, {"prompt_n": 3, "cache_n": "10W", "prompt_ms": 1.0}),
])
def test_cached_tokens_above_prompt_tokens_are_not_a_cache_hit(fake_server, usage, timings):
    def reply(req):
        w = len(req.json["prompt"].split())
        sub = lambda d: d and {k: (w if v == "W" else 10 * w if v == "10W" else sub(v)
                                   if isinstance(v, dict) else v) for k, v in d.items()}
        return _completions(sub(usage), sub(timings))(req)
    s = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": reply})
    r = _run(_probe(s.base_url, 64))
    # the count is dropped, the probe stays a miss in the fit, and the reason is kept
    assert r.ok and r.prompt_tokens_source == "usage" and r.prompt_tokens > 0
    assert r.cached_tokens is None and r.fit_eligible
    assert any("cached tokens" in x and f"{r.prompt_tokens} prompt tokens" in x
               for x in r.notes.ignored)


def test_huge_server_timings_never_reach_the_result_or_the_length_model(fake_server):
    def reply(req):
        w = len(req.json["prompt"].split())
        return _completions({}, {"prompt_n": w, "cache_n": 99_999_999, "prompt_ms": 1e308})(req)
    s = fake_server({"GET /v1/models": models_reply("m", max_model_len=8192),
                     "POST /v1/completions": reply})

    async def go():
        async with ProbeClient(s.base_url, timeout=5) as c:
            await c.discover()
            await c.calibrate()
            return c, await c.probe(64)
    c, r = _run(go())
    assert c.info.context_tokens == 8192
    assert r.ok and r.cached_tokens is None and r.server_prefill_s is None
    # cache_n over the 8192-token context is no count: prompt_n alone is the length
    words = len(s.requests[-1].json["prompt"].split())
    assert r.prompt_tokens_source == "timings" and r.prompt_tokens == words
    assert c.lengths.ratio < 10  # learned nothing from 1e8 tokens
    ig = " | ".join(r.notes.ignored)
    assert "timings.cache_n '99999999'" in ig and "server prefill (s) '1e+305'" in ig
    assert "server values ignored" in c.notices


@pytest.mark.parametrize("cache_n,ctx", [(10_000_001, None), (9000, 8192)])
def test_cache_n_over_context_or_ceiling_is_not_a_count(fake_server, cache_n, ctx):
    entry = {"max_model_len": ctx} if ctx else {}
    s = fake_server({"GET /v1/models": models_reply("m", **entry),
                     "POST /v1/completions": _completions(
                         {"prompt_tokens": 20}, {"prompt_n": 20, "cache_n": cache_n})})
    r = _run(_probe(s.base_url))
    assert r.ok and r.prompt_tokens == 20 and r.cached_tokens is None
    assert f"timings.cache_n '{cache_n}' is not a token count" in r.notes.ignored


def test_server_prefill_longer_than_ttft_is_dropped(fake_server):
    s = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": _completions(
        {"prompt_tokens": 20}, {"prompt_ms": 5000.0})})
    r = _run(_probe(s.base_url))
    assert r.ok and r.ttft_s < 1 and r.server_prefill_s is None
    s.set("POST /v1/completions", _completions({"prompt_tokens": 20}, {"prompt_ms": 0.5}))
    assert _run(_probe(s.base_url)).server_prefill_s == 0.0005  # a plausible one is kept


def test_retry_after_non_finite_is_ignored():
    assert parse_retry_after("nan") is None and parse_retry_after("1e400") is None
    assert parse_retry_after("2") == 2.0


# ---------------------------------------------------------------- the run file


def test_run_file_keeps_a_probe_with_non_finite_values(tmp_path):
    p = tmp_path / "r.jsonl"
    r = ProbeResult(seq=1, requested_tokens=16, ok=True, ttft_s=0.01, server_prefill_s=math.inf,
                    server_waiting=math.nan, extra={"x": [math.inf]})
    with RunWriter(p) as w:
        w.append(r)
    back, problems = read_run(p)
    assert not problems and len(back) == 1
    assert back[0].server_prefill_s is None and back[0].server_waiting is None
    assert back[0].extra["x"] == [None]


def test_run_file_close_on_a_full_disk_does_not_raise(tmp_path):
    w = RunWriter(tmp_path / "r.jsonl")

    class Full:
        closed = False

        def write(self, s):
            return len(s)

        def flush(self):
            raise OSError(28, "No space left on device")

        def fileno(self):
            return -1

        def close(self):
            self.closed = True
    w._f.close()
    w._f = Full()
    w.close()  # no exception


def test_read_run_skips_lines_with_wrong_types(tmp_path):
    p = tmp_path / "r.jsonl"
    good = {"seq": 1, "ok": True, "ttft_s": 0.1, "prompt_tokens": 100, "requested_tokens": 100}
    lines = [json.dumps(good),
             '{"seq": 2, "ttft_s": "fast", "ok": true, "prompt_tokens": "many"}',
             '{"seq": 3, "ok": true, "ttft_s": NaN, "prompt_tokens": 100}',
             '{"seq": 4, "ok": true, "ttft_s": 0.1, "prompt_tokens": -100}',
             '{"seq": 5, "ok": "yes", "ttft_s": 0.1}',
             '{"seq": 6, "ok": true, "ttft_s": 0.1, "prompt_tokens": true}']
    p.write_text("\n".join(lines) + "\n")
    results, problems = read_run(p)
    assert [r.seq for r in results] == [1]
    assert [q.split(":")[0] for q in problems] == ["line 2", "line 3", "line 4", "line 5", "line 6"]


def test_report_of_a_file_with_bad_types_is_not_a_traceback(tmp_path, capsys):
    p = tmp_path / "r.jsonl"
    rows = [{"seq": i, "ok": True, "ttft_s": 0.001 * n, "prompt_tokens": n, "requested_tokens": n}
            for i, n in enumerate([16, 32, 64, 128], 1)]
    p.write_text("\n".join(map(json.dumps, rows))
                 + '\n{"seq": 9, "ttft_s": "fast", "ok": true, "prompt_tokens": "many"}\n')
    assert main(["report", str(p), "--no-plot"]) == 0
    assert "line 5" in capsys.readouterr().err


# ---------------------------------------------------------------- configs and flags


@pytest.mark.parametrize("cfg", ['{"hidden_size": "abc", "num_hidden_layers": -3}',
                                 '{"hidden_size": 1e400, "num_hidden_layers": 2}',
                                 '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": "x"}'])
def test_garbage_model_config_is_a_value_error(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(cfg)
    with pytest.raises(ValueError, match="config.json"):
        model_from_config(p)


def test_estimate_with_garbage_model_config_is_a_usage_error(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text('{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 0.5}')
    assert main(["estimate", "--model-config", str(p)]) == 2
    assert "num_attention_heads" in capsys.readouterr().err


@pytest.mark.parametrize("fn,text", [(_positive_float, "inf"), (_positive_float, "nan"),
                                     (_efficiency, "5"), (_sample_hz, "1e-9"), (_sample_hz, "inf")])
def test_flag_values_out_of_range_are_usage_errors(fn, text):
    with pytest.raises(argparse.ArgumentTypeError):
        fn(text)


def test_drift_line_only_when_the_baseline_was_used(tmp_path):
    d = summarize_diagnosis([], None, baseline=str(tmp_path / "missing.jsonl"),
                            baseline_problem="no such file")
    text = format_diagnosis(d)
    assert "baseline not used" in text and "drift:" not in text


# ---------------------------------------------------------------- the API key


@pytest.mark.parametrize("key", [SECRET + "\x01", SECRET + "\r\nX-Evil: 1", SECRET + "é"])
def test_unsendable_key_is_a_usage_error_without_the_key(monkeypatch, tmp_path, capsys, key):
    monkeypatch.setenv("OPENAI_API_KEY", key)
    rc = main(["sweep", "http://127.0.0.1:9", "--lengths", "8", "--no-telemetry",
               "--out", str(tmp_path / "r.jsonl")])
    cap = capsys.readouterr()
    assert rc == 2 and "API key" in cap.err
    assert "SECRET123" not in cap.out + cap.err


def test_key_is_scrubbed_in_any_letter_case(fake_server):
    s = fake_server({"GET /v1/models": models_reply("m"),
                     "POST /v1/completions": Reply.json(
                         {"error": {"message": f"bad key {SECRET.upper()}"}}, status=401)})
    r = _run(_probe(s.base_url, api_key=SECRET))
    assert not r.ok and "SECRET123" not in r.error_message.upper().replace("***", "")


def test_key_with_surrounding_whitespace_is_stripped(fake_server):
    s = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": _completions()})
    r = _run(_probe(s.base_url, api_key=f"  {SECRET} "))
    assert r.ok
    assert s.requests[-1].headers["authorization"] == f"Bearer {SECRET}"


# ---------------------------------------------------------------- the sweep


def test_continuous_sweep_backs_off_on_http_errors(fake_server):
    from prefilltui.measure.sweep import SweepRunner
    from prefilltui.measure.sweep import SweepConfig
    s = fake_server({"GET /v1/models": models_reply("m"),
                     "POST /v1/completions": Reply.json({"error": "no"}, status=401)})
    runner = SweepRunner(lambda: ProbeClient(s.base_url, timeout=5),
                         SweepConfig([16, 32], warmup=0, continuous=True))
    runner.start()
    time.sleep(2.0)
    runner.stop(5)
    assert 1 <= len(runner.results) <= 3  # 0 s, then 2 s back-off; not hundreds


def test_sweep_rate_limit_wait_has_a_floor(fake_server):
    from prefilltui.measure.sweep import SweepRunner
    from prefilltui.measure.sweep.config import MIN_RATE_LIMIT_WAIT_S
    from prefilltui.measure.sweep import SweepConfig
    s = fake_server({"GET /v1/models": models_reply("m"),
                     "POST /v1/completions": Reply.json({"error": "slow"}, status=429,
                                                        headers={"Retry-After": "0"})})
    runner = SweepRunner(lambda: ProbeClient(s.base_url, timeout=5),
                         SweepConfig([16], warmup=0))
    runner.start()
    time.sleep(1.2)
    runner.stop(5)
    assert len(runner.results) <= 1.2 / MIN_RATE_LIMIT_WAIT_S + 1


def test_rate_limit_wait_is_clamped_to_a_sane_range():
    from prefilltui.measure.sweep.config import rate_limit_wait
    assert parse_retry_after("-5") == 0.0
    assert rate_limit_wait(parse_retry_after("-5"), 1.0) == 1.0  # not a 0.5 s busy loop
    assert rate_limit_wait(1e9, 1.0) == 60.0 and rate_limit_wait(None, 4.0) == 4.0


def test_continuous_sweep_rate_limited_with_negative_retry_after_backs_off(fake_server):
    from prefilltui.measure.sweep import SweepRunner
    from prefilltui.measure.sweep import SweepConfig
    s = fake_server({"GET /v1/models": models_reply("m"),
                     "POST /tokenize": Reply.json({"tokens": [1] * 16}),
                     "POST /v1/completions": Reply.json({"error": "slow"}, status=429,
                                                        headers={"Retry-After": "-5"})})
    runner = SweepRunner(lambda: ProbeClient(s.base_url, timeout=5),
                         SweepConfig([16], warmup=0, continuous=True))
    runner.start()
    time.sleep(1.5)
    assert runner.alive and runner.state == "retrying"  # keeps backing off, never gives up
    runner.stop(5)
    assert 1 <= len(runner.results) <= 2  # attempts 1 s apart, not every 0.5 s or faster


def test_telemetry_after_probe_wait_is_bounded():
    from prefilltui.measure.telemetry import make_sampler
    s = make_sampler(hz=0.2, nvml_module=None, env={}).start()
    try:
        r = ProbeResult(t_send=time.perf_counter(), t_end=time.perf_counter() + 0.001)
        t0 = time.monotonic()
        _run(s.after_probe(r))
        assert time.monotonic() - t0 < 3
    finally:
        s.stop()


def test_report_every_probe_failed_says_so_on_stderr(tmp_path, capsys):
    import json as _json
    from prefilltui import cli
    from prefilltui.model.types import ProbeResult
    p = tmp_path / "failed.jsonl"
    p.write_text(_json.dumps(ProbeResult(seq=1, requested_tokens=32, ok=False,
                                         error_kind="connect").to_json()) + "\n")
    assert cli.main(["report", str(p), "--no-plot"]) == 3
    assert "every probe in" in capsys.readouterr().err


async def test_metrics_body_over_the_cap_is_not_parsed(fake_server, monkeypatch):
    from tests.fakeserver import Reply
    from prefilltui.measure import metrics_hook as metrics
    monkeypatch.setattr(metrics, "MAX_METRICS_BYTES", 1000)
    srv = fake_server({"GET /metrics": Reply.text("llamacpp:requests_processing 0\n" * 100)})
    reader = metrics.MetricsReader(srv.base_url, "llama.cpp")
    try:
        assert await reader.scrape() is None
        assert "not scraped" in reader.problem
    finally:
        await reader.aclose()
