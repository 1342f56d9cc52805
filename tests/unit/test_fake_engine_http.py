"""The fake engine on a real loopback socket (tests/fakeengine.EngineServer): prefilltui's
own sweep probes it through the real client and /metrics reader, while the engine's
background users' spans go out as OTLP/HTTP JSON; and an idle sweep's summary states
the expected TTFT per length instead of a "why is TTFT high?" alarm."""

from __future__ import annotations

import json
import time

from prefilltui.cli import main
from tests.fakeengine import Engine, EngineServer, Traffic
from tests.fakeserver import FakeServer, Reply


def test_idle_sweep_states_the_expectation_not_an_alarm(capsys):
    with EngineServer(Engine(step_s=0.004, per_token_s=0.0002)) as srv:
        code = main(["sweep", srv.base_url, "--lengths", "32,256", "--repeats", "4",
                     "--no-telemetry", "--seed", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "why is TTFT high?" not in out, out
    assert "TTFT: nothing stands out" in out
    line = next(x for x in out.splitlines() if x.startswith("  expected TTFT"))
    assert "32 tok " in line and "256 tok " in line and " ± " in line


def test_users_spans_reach_an_otlp_receiver_while_the_sweep_probes(capsys):
    got = []

    def traces(req):
        got.append(req.json)
        return Reply.json({})

    with FakeServer({"POST /v1/traces": traces}) as otlp, \
            EngineServer(Engine(step_s=0.004, per_token_s=0.0002),
                         users=Traffic(rate=20.0, prompt=(100, 400), max_tokens=(2, 4)),
                         max_users=12, otlp_url=otlp.base_url + "/v1/traces") as srv:
        code = main(["sweep", srv.base_url, "--lengths", "32,256", "--repeats", "3",
                     "--no-telemetry", "--format", "json", "--seed", "1"])
        deadline = time.monotonic() + 10
        while len(got) < len(srv.spans) or len(srv.spans) < 12:
            assert time.monotonic() < deadline, (len(got), len(srv.spans))
            time.sleep(0.05)
        spans = list(srv.spans)
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    v = d["ttft_verdict"]
    assert v["whose"] == "probes" and "above" in v and v["expected"]
    assert len(spans) == 12 and len(got) == 12  # bounded: max_users, each span once
    by_id = {s.request_id: s for s in spans}
    for body in got:
        span = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        attrs = {a["key"]: a["value"] for a in span["attributes"]}
        assert span["name"] == "llm_request"
        u = by_id[attrs["gen_ai.request.id"]["stringValue"]]
        assert int(attrs["gen_ai.usage.prompt_tokens"]["intValue"]) == u.prompt_tokens
        assert attrs["gen_ai.latency.time_to_first_token"]["doubleValue"] == u.ttft_s
        assert {"gen_ai.latency.time_in_queue", "gen_ai.latency.time_in_model_prefill",
                "gen_ai.latency.e2e"} <= set(attrs)
        assert u.ttft_s >= u.queue_s >= 0 and abs(u.queue_s + u.prefill_s - u.ttft_s) < 1e-9
