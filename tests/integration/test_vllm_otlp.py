"""Against a real vLLM 0.32.0 started with ``--otlp-traces-endpoint`` (its own
``llm_request`` spans over OTLP/HTTP protobuf, gzip-compressed, with the OpenTelemetry
SDK's default 5 s export delay rather than the demo's 1 s): ``sweep --otlp-listen`` matches every probe to its own span by request
id (the span's TTFT becomes the probe's server TTFT, in the run file too), and the
requests this test sends itself, as another user would, appear as users with the
prompt lengths vLLM counted.  The span latency and the match rate are printed (the
figures docs/users.md quotes).  One vLLM of its own (~3.5 GB, one core), ~2 min."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from prefilltui.cli import main
from prefilltui.measure.runfile import read_run

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.timeout(900)]

#: The users' prompts (words); vLLM counts their tokens (usage.prompt_tokens).
USER_WORDS = (30, 200, 700, 1200)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def test_probes_matched_to_their_spans_and_users_seen(vllm_target, tmp_path, capsys,
                                                      monkeypatch):
    from prefilltui.demo.vllm import VllmServer

    port = _free_port()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "5000")  # the SDK's default, not the demo's
    endpoint = f"http://127.0.0.1:{port}/v1/traces"
    with VllmServer(vllm_target, startup_timeout=600, otlp_endpoint=endpoint,
                    log_path=tmp_path / "vllm.log") as srv:
        counted: list[int] = []

        def users() -> None:
            """As another user: wait for the receiver, then send each prompt once."""
            for _ in range(600):
                if _listening(port):
                    break
                time.sleep(0.05)
            with httpx.Client(timeout=120, trust_env=False) as c:
                model = c.get(f"{srv.base_url}/v1/models").json()["data"][0]["id"]
                for n in USER_WORDS:
                    r = c.post(f"{srv.base_url}/v1/completions",
                               json={"model": model, "prompt": " ".join(["tree"] * n) + " end",
                                     "max_tokens": 2, "temperature": 0})
                    counted.append(r.json()["usage"]["prompt_tokens"])

        t = threading.Thread(target=users, daemon=True)
        t.start()
        out = tmp_path / "run.jsonl"
        rc = main(["sweep", srv.base_url, "--lengths", "64,512,1500", "--repeats", "2",
                   "--warmup", "1", "--no-telemetry", "--out", str(out), "--format", "json",
                   "--otlp-listen", f"127.0.0.1:{port}"])
        cap = capsys.readouterr()
        t.join(60)
    assert rc == 0, cap.err
    live = json.loads(cap.out)["live"]
    spans, users = live["spans"], live["users"]
    results, problems = read_run(out)
    assert problems == []
    ok = [r for r in results if r.ok]
    assert len(ok) == 7
    matched = [r for r in ok if r.span is not None]
    with capsys.disabled():
        print(f"\nvLLM spans: {len(matched)}/{len(ok)} probes matched, span latency median "
              f"{spans['latency_p50_s']:.3f} s; users {users['requests']} "
              f"(counted {counted}); {spans}")
    assert spans["probes_matched"] == len(matched) == len(ok)
    assert spans["match_rate"] == 1.0
    for r in matched:
        # the span's own TTFT is the probe's server TTFT, exactly as vLLM sent it
        assert abs(r.server_ttft_s - r.span.ttft_s) < 1e-3 and r.queue_source == "span"
        assert r.span.request_id == f"cmpl-{r.notes.request_id}-0"
        assert r.span.prompt_tokens == r.prompt_tokens
        # the server's TTFT is inside the client's: what is left is HTTP, network, client
        assert 0 < r.server_ttft_s <= r.ttft_s
        assert r.span.prefill_s is not None and r.span.prefill_s <= r.span.ttft_s
    assert 0 < spans["latency_p50_s"] < 15
    assert len(counted) == len(USER_WORDS)
    assert users["source"] == "traces" and users["requests"] == len(USER_WORDS)
    lengths = sorted(counted)
    assert users["prompt_tokens_p50"] == pytest.approx((lengths[1] + lengths[2]) / 2)
    assert users["ttft_p50_s"] > 0 and users["expected_ttft_p50_s"] is not None
