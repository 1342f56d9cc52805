"""Background load against a simulated scheduler with a chunk budget (tests/schedserver.py,
real sockets): exact stalls and excesses, the chunk boundary, the level sweep, faults,
bounds, and that nothing is sent unasked.  Short prompts, a few seconds each."""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import pytest

from prefilltui.cli import main
from prefilltui.measure.load import LoadGenerator
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.runfile import read_load, read_run, read_session
from prefilltui.model.loadspec import parse_load
from prefilltui.options import (LoadOptions, RunFileOptions, SessionOptions, SweepDesign,
                                TelemetryOptions)
from prefilltui.session import build_session
from tests.schedserver import SchedServer, expected

STEP_S = 0.02
PER_TOKEN_S = 0.002
#: Client-side timing on a loaded 2-core machine: a stall read to +-15 ms.
TOL_S = 0.015


def _session(srv, tmp_path, spec="decode:2,out:400", lengths=(40,)):
    opts = SessionOptions(design=SweepDesign(lengths=tuple(lengths), seed=1, warmup=0),
                          telemetry=TelemetryOptions(enabled=False),
                          run_file=RunFileOptions(path=str(tmp_path / "run.jsonl")),
                          load=LoadOptions(spec=parse_load(spec)))
    return build_session(opts, srv.base_url)


def _sweep(session, lengths, repeats=2):
    out = []
    session.config.lengths = list(lengths)
    session.config.repeats = repeats
    runner = session.new_runner(out.append)
    runner.start()
    while runner.alive:
        runner.join(0.1)
    return out


@pytest.mark.parametrize("budget", [64, None])
def test_stall_and_excess_are_the_schedulers(tmp_path, budget):
    """Medians of 3 probes per length: one scheduling hiccup of the shared test process
    (server and client share it, on a busy machine) must not decide the test."""
    with SchedServer(budget=budget, step_s=STEP_S, per_token_s=PER_TOKEN_S) as srv:
        s = _session(srv, tmp_path, lengths=[40, 124])
        try:
            assert s.start_load(wait_s=20, min_tokens=8), s.load.describe()
            rs = _sweep(s, [40, 124], repeats=3)
        finally:
            s.close()
    assert len(rs) == 6 and all(r.ok for r in rs)
    assert all(r.load_kind == "decode" and r.load_level == 2.0 and r.decode_streams == 2
               for r in rs)
    for n in (40, 124):
        at = [r for r in rs if r.prompt_tokens == n]
        med = lambda f, at=at: statistics.median(getattr(r, f) for r in at)  # noqa: E731
        stall, excess = expected(budget, 2, n, PER_TOKEN_S)
        assert med("decode_gap_s") == pytest.approx(STEP_S, abs=0.005)
        assert med("decode_stall_s") == pytest.approx(stall, abs=TOL_S), (n, budget)
        assert med("decode_excess_s") == pytest.approx(excess, abs=2 * TOL_S), (n, budget)
        # the server's ITL histogram over the window: its longest gap's bucket
        assert med("server_itl_max_s") >= stall + STEP_S - 0.005
    long_ = [r for r in rs if r.prompt_tokens == 124]
    stall = statistics.median(r.decode_stall_s for r in long_)
    excess = statistics.median(r.decode_excess_s for r in long_)
    if budget:  # capped at one 62-token chunk, the whole prompt still paid for
        assert stall < excess / 1.6
    else:
        assert stall == pytest.approx(excess, abs=2 * TOL_S)


def test_a_prompt_one_token_over_the_budget_takes_two_chunks(tmp_path):
    """Budget 64 with 2 decode streams: 62 prompt tokens fit one step, 63 need two (the
    decode tokens use the budget's slots).  Steps of 100 ms make the extra step plain
    in TTFT and in the decode tokens that arrive during the prefill."""
    step = 0.1
    with SchedServer(budget=64, step_s=step, per_token_s=PER_TOKEN_S) as srv:
        s = _session(srv, tmp_path)
        out: dict[int, list] = {62: [], 63: []}

        async def go():
            async with s.new_client(seed_offset=5) as c:
                await c.discover()
                for _ in range(3):
                    for n in (62, 63):
                        for h in s.hooks:
                            await h.before_probe(c)
                        r = await c.probe(n, prompt=" ".join(["w"] * n))
                        for h in s.hooks:
                            await h.after_probe(r)
                        out[n].append(r)
        try:
            assert s.start_load(wait_s=20, min_tokens=8)
            asyncio.run(go())
        finally:
            s.close()
        chunks = {n: {c for p, c in srv.stats.prefills if p == n} for n in (62, 63)}
    assert chunks == {62: {1}, 63: {2}}
    med = lambda n, f: sorted(getattr(r, f) for r in out[n])[1]  # noqa: E731
    assert all(r.prompt_tokens == n for n in out for r in out[n])
    assert med(63, "ttft_s") - med(62, "ttft_s") == pytest.approx(step, abs=0.05)
    assert med(63, "decode_tokens") == med(62, "decode_tokens") + 1
    # the stall stays one chunk (62 tokens), the excess is the whole prompt
    assert med(63, "decode_stall_s") == pytest.approx(62 * PER_TOKEN_S, abs=TOL_S)
    assert med(63, "decode_excess_s") == pytest.approx(63 * PER_TOKEN_S, abs=2 * TOL_S)


def test_level_sweep_cli_table_run_file_and_idle_fit(tmp_path, capsys):
    out = tmp_path / "levels.jsonl"
    with SchedServer(budget=64, step_s=STEP_S, per_token_s=PER_TOKEN_S) as srv:
        code = main(["sweep", srv.base_url, "--lengths", "24,124", "--repeats", "3",
                     "--no-telemetry", "--load", "decode:1,out:300", "--load-levels", "0,2",
                     "--format", "json", "--out", str(out), "--seed", "3"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    rows = d["load"]["levels"]["rows"]
    assert [r["level"] for r in rows] == [0.0, 2.0]
    # medians of 3 probes (a busy machine: one hiccup must not decide)
    assert rows[0]["stall_s"] is None and rows[1]["stall_s"] == pytest.approx(
        62 * PER_TOKEN_S, abs=2 * TOL_S)
    assert rows[1]["itl_p50_s"] == pytest.approx(STEP_S, abs=0.008)
    assert d["load"]["levels"]["knee"] is None
    assert d["load"]["levels"]["knee_line"].startswith("queueing never")
    assert d["load"]["stall"]["chunked"] is True and d["load"]["stall_level"] == 2.0
    assert d["ttft_verdict"]["cause"] in ("none", "slow_prefill", "head_of_line")
    assert d["load"]["facts"]["spec"]["label"] == "decode:2,out:300"
    results, problems = read_run(out)
    assert not problems
    idle = [r for r in results if r.fit_eligible]
    assert {r.load_level for r in idle} == {0.0}  # level 2 never enters the idle fit
    assert d["fit"]["n"] <= len(idle) and all(r.load_level == 2.0 for r in results
                                                if r.level_eligible and not r.fit_eligible)
    traces, bad = read_load(out)
    assert traces and not bad and {t.level for t in traces} == {2.0}
    assert read_session(out)["load"]["label"] == "decode:2,out:300"


def test_a_failing_load_request_stops_the_load_and_the_sweep_says_so(tmp_path, capsys):
    with SchedServer(budget=64, step_s=STEP_S, per_token_s=PER_TOKEN_S) as srv:
        probe_route = srv.script["POST /v1/completions"]

        def route(req):
            if (req.json or {}).get("max_tokens", 1) > 1:
                from tests.fakeserver import Reply
                return Reply.json({"error": {"message": "boom"}}, status=500)
            return probe_route(req)
        srv.set("POST /v1/completions", route)
        code = main(["sweep", srv.base_url, "--lengths", "24", "--no-telemetry",
                     "--load", "decode:1", "--out", str(tmp_path / "f.jsonl")])
        load_requests = [r for r in srv.requests if (r.json or {}).get("max_tokens", 1) > 1
                         if r.path == "/v1/completions"]
    err = capsys.readouterr().err
    assert code == 1
    assert "background load did not reach its level: load stopped: load request answered HTTP 500" in err
    assert len(load_requests) == 1  # stopped at the first fault, never retried


def _refusing(srv, field):
    """Wrap ``srv``'s completions: a request carrying ``field`` is answered 400 naming it."""
    from tests.fakeserver import Reply
    route = srv.script["POST /v1/completions"]

    def refuse(req):
        if field in (req.json or {}):
            return Reply.json({"error": {"message": f"Unknown field: {field}"}}, status=400)
        return route(req)
    srv.set("POST /v1/completions", refuse)


def _until_done(load, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while load.state != "done" and time.monotonic() < deadline:
        time.sleep(0.05)


def _posts(srv):
    return [r.json for r in srv.requests if r.path == "/v1/completions"]


@pytest.mark.parametrize("field", ["cache_prompt", "stream_options"])
def test_the_load_never_sends_a_field_the_probes_learned_is_rejected(tmp_path, field):
    """One home for the body: the load builds it with the probe client's part, and the
    session's clients share what the server rejected.  A llama.cpp that rejects
    ``cache_prompt`` (which the load did not know it could drop: the load stopped at its
    first request) or ``stream_options`` (which the load learned again for itself,
    one failing request more) is hit by the probe's one rejected request only."""
    with SchedServer(budget=64, step_s=0.005, per_token_s=0.0001, kind="llama.cpp") as srv:
        _refusing(srv, field)
        s = _session(srv, tmp_path, spec="decode:1,out:5,requests:3")
        try:
            rs = _sweep(s, [24], repeats=1)
            assert [r.ok for r in rs] == [True] and rs[0].notes.rejected_field.field == field
            n = len(_posts(srv))
            s.load.start()
            _until_done(s.load)
            assert s.load.state == "done", s.load.describe()
        finally:
            s.close()
        load = _posts(srv)[n:]
    assert [field in b for b in _posts(srv)[:n]].count(True) == 1  # the probe's first
    assert len(load) == 3 and not any(field in b for b in load)
    assert all(b["max_tokens"] == 5 and b["ignore_eos"] for b in load)


def test_a_field_the_load_learned_is_rejected_is_never_sent_by_the_probes(tmp_path):
    """The other way: the load learns it first (its 400 read as the probes read one:
    any sub-key named, ``include_usage``), and the session's probes never send it; the
    probes' notices say it."""
    from tests.fakeserver import Reply
    with SchedServer(budget=64, step_s=0.005, per_token_s=0.0001, kind="llama.cpp") as srv:
        route = srv.script["POST /v1/completions"]

        def refuse(req):
            if "stream_options" in (req.json or {}):
                return Reply.json({"detail": "extraneous key [include_usage] is not permitted"},
                                  status=422)
            return route(req)
        srv.set("POST /v1/completions", refuse)
        s = _session(srv, tmp_path, spec="decode:1,out:5,requests:2")
        try:
            s.load.start()
            _until_done(s.load)
            assert s.load.state == "done", s.load.describe()
            n = len(_posts(srv))
            rs = _sweep(s, [24], repeats=2)
            notices = s.runner.notices
        finally:
            s.close()
    assert "stream_options" in _posts(srv)[0]  # the load's first
    assert sum("stream_options" in b for b in _posts(srv)) == 1
    assert len(_posts(srv)[n:]) == 2 and all(r.ok and r.notes.rejected_field is None for r in rs)
    assert "sent without stream_options" in notices


def test_a_refusal_naming_no_field_of_the_body_stops_the_load(tmp_path):
    from tests.fakeserver import Reply
    with SchedServer(budget=64, step_s=0.005, per_token_s=0.0001) as srv:
        route = srv.script["POST /v1/completions"]
        srv.set("POST /v1/completions", lambda req: (
            Reply.json({"error": {"message": "prompt is too silly"}}, status=400)
            if (req.json or {}).get("max_tokens", 1) > 1 else route(req)))
        s = _session(srv, tmp_path, spec="decode:1,out:5")
        try:
            assert not s.start_load(wait_s=10)
        finally:
            s.close()
        load = [b for b in _posts(srv) if b.get("max_tokens", 1) > 1]
    assert s.load.state == "fault" and "answered HTTP 400" in s.load.fault
    assert "prompt is too silly" in s.load.fault
    assert len(load) == 1


def test_the_load_is_not_counted_as_users(tmp_path):
    """The users' window from /metrics takes the load's requests off the server's count
    as it takes the probes': against a server with no user at all, 0 users (before: every
    load request the TTFT histogram counted was a user).  Streams of 400 tokens: none
    ends, or is cut before its first token (the server may count one the client never
    read), within the test."""
    import httpx

    with SchedServer(budget=64, step_s=0.005, per_token_s=0.0001) as srv:
        s = _session(srv, tmp_path, spec="decode:3,out:400")
        scrape = lambda: s.users_metrics.feed("vllm", httpx.get(srv.base_url + "/metrics").text)  # noqa: E731
        try:
            scrape()
            time.sleep(1.1)  # the users' series are read at most once a second
            assert s.start_load(wait_s=20, min_tokens=2)
            rs = _sweep(s, [24], repeats=2)
            s.load.stop()
            time.sleep(1.1)
            scrape()
            w = s.users_metrics.window()
        finally:
            s.close()
        served = len(srv.stats.phases)
    assert len(rs) == 2 and s.load.requests == 3 and served == 5
    assert w.source == "metrics" and w.requests == 0, (w.requests, served)


def test_a_load_requests_span_is_not_a_users():
    """Each load request carries an X-Request-Id of its own (prefilltui-load-...): its
    span is counted apart, never a user's, never waiting for a probe."""
    from prefilltui.measure.otlp import UsersTrace
    from prefilltui.model.users import UserRequest

    with SchedServer(budget=64, step_s=0.005, per_token_s=0.0001) as srv:
        load = LoadGenerator(parse_load("decode:1,out:3,requests:2"),
                             lambda seed_offset, max_connections: ProbeClient(
                                 srv.base_url, max_connections=max_connections)).start()
        _until_done(load)
        load.stop()
        ids = [r.headers.get("x-request-id", "") for r in srv.requests
               if r.path == "/v1/completions"]
    assert len(ids) == 2 and all(i.startswith("prefilltui-load-") for i in ids), ids
    trace = UsersTrace("t")
    for i in ids + ["cmpl-user-1-0"]:  # vLLM: cmpl-<X-Request-Id>-0
        trace.add(UserRequest(arrival_s=1.0, prompt_tokens=16, ttft_s=0.01, received_s=time.time(),
                              request_id=f"cmpl-{i}-0" if i.startswith("prefilltui") else i))
    st = trace.stats()
    assert st.users == 1 and st.foreign_probes == 0 and trace.load_spans == 2
    assert [u.request_id for u in trace.recent()] == ["cmpl-user-1-0"]


def test_bounds_stop_the_load(tmp_path):
    with SchedServer(budget=64, step_s=0.005, per_token_s=0.0001) as srv:
        s = _session(srv, tmp_path, spec="decode:1,out:5,requests:3")
        try:
            s.load.start()
            _until_done(s.load)
            assert s.load.state == "done" and "3 requests" in s.load.detail
            time.sleep(0.3)
        finally:
            s.close()
        sent = [r for r in srv.requests if r.path == "/v1/completions"]
    assert len(sent) == 3 and all(r.json["max_tokens"] == 5 and r.json["ignore_eos"] for r in sent)


def test_close_stops_every_stream_and_nothing_is_sent_unasked(tmp_path, capsys):
    with SchedServer(budget=64, step_s=STEP_S, per_token_s=0.0001) as srv:
        s = _session(srv, tmp_path, spec="decode:3")
        assert s.start_load(wait_s=20)
        s.close()
        assert not s.load.alive and s.load.state == "stopped"
        n = len(srv.requests)
        time.sleep(0.3)
        assert len(srv.requests) == n  # nothing restarted after the stop
        assert main(["sweep", srv.base_url, "--lengths", "24,48", "--no-telemetry",
                     "--out", str(tmp_path / "plain.jsonl")]) == 0
        plain = [r for r in srv.requests[n:] if r.path == "/v1/completions"]
    assert plain and all(r.json["max_tokens"] == 1 for r in plain)
    assert "background load" not in capsys.readouterr().out


def test_the_first_levels_time_cap_holds_for_every_level():
    """--load-levels with the default lengths: the first level's time cap decides the
    lengths of every level after it (no level capped by its own slower probes: the
    levels compare the same lengths), and its note is kept for the summary."""
    import io
    from types import SimpleNamespace

    from prefilltui.commands.load_sweep import run_probes
    from prefilltui.measure.sweep import SweepConfig

    note = "lengths 1000 are over the longest prompt expected within 5 s a probe (...)"
    made = []

    class Runner:
        def __init__(self, config):
            made.append((list(config.lengths), config.time_cap_s))
            self.results, self.state, self.alive = [], "done", False
            first = config.time_cap_s is not None
            self.lengths = [4, 100, 480] if first else list(config.lengths)
            self.notes = [note] if first else []

        def start(self):
            pass

        def join(self, timeout=None):
            pass

    gen = SimpleNamespace(state="steady", requests=0, set_level=lambda level: None,
                          current_spec=lambda: SimpleNamespace(describe=lambda: "decode:2"),
                          describe=lambda: "decode:2")
    session = SimpleNamespace(load=gen, start_load=lambda **kw: True,
                              config=SweepConfig([4, 100, 1000], time_cap_s=5.0))
    _, _, notes = run_probes(session, [0, 2, 4], lambda: Runner(session.config), io.StringIO())
    assert made == [([4, 100, 1000], 5.0), ([4, 100, 480], None), ([4, 100, 480], None)]
    assert notes == [note]
