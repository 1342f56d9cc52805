"""UsersTrace: users' requests kept in a bounded window, probes matched to their own
spans by request id whichever comes first, late spans appended to the run file and
read back onto the probe; and the pure window figures of model.users."""

from __future__ import annotations

import pytest

from prefilltui.measure.otlp import users as U
from prefilltui.measure.otlp.spans import read_batch
from prefilltui.measure.runfile import RunWriter
from prefilltui.measure.runfile import read_run
from prefilltui.model.fit import LinearFit
from prefilltui.model.types import ProbeResult
from prefilltui.model.users import UserRequest, users_window
from tests.unit.otlp_bodies import export


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _probe(seq: int, rid: str, ttft: float = 0.080) -> ProbeResult:
    r = ProbeResult(seq=seq, started_at=999_000.0 + seq, requested_tokens=100,
                    prompt_tokens=100, ttft_s=ttft, ok=True, queue_s=0.02,
                    queue_source="metrics")
    r.notes.request_id = rid
    return r


def _fit(a: float = 0.010, b: float = 0.0005) -> LinearFit:
    return LinearFit(intercept_s=a, slope_s_per_token=b, intercept_ci=(a, a), slope_ci=(b, b),
                     prefill_tokens_per_s=1 / b, prefill_tokens_per_s_ci=(None, None), r2=1.0,
                     n=10, method="ols")


def _user(t: float, n: int, ttft: float, **kw) -> UserRequest:
    return UserRequest(arrival_s=t, prompt_tokens=n, ttft_s=ttft, end_s=t + ttft,
                       received_s=t + ttft + 1, **kw)


def test_a_late_span_amends_the_probe_and_its_run_file(tmp_path):
    path = tmp_path / "run.jsonl"
    w = RunWriter(path)
    clock = Clock()
    tr = U.UsersTrace("t", runfile=w, clock=clock)
    r = _probe(1, "prefilltui-0a1b2c3d-1")
    tr.register_probe(r)
    w.append(r)  # the probe's line, written before its span came
    tr.add(UserRequest(arrival_s=999_001.0, prompt_tokens=101, ttft_s=0.0712, queue_s=0.0009,
                       prefill_s=0.065, e2e_s=0.072, request_id="cmpl-prefilltui-0a1b2c3d-1-0",
                       end_s=999_001.072, received_s=999_006.1))
    assert r.span is not None and r.server_ttft_s == 0.0712
    assert r.queue_s == 0.0009 and r.queue_source == "span" and r.server_prefill_s == 0.065
    assert r.overhead_s == pytest.approx(0.080 - 0.0712) and r.ttft_s == 0.080
    assert r.span.latency_s == pytest.approx(5.028)
    w.close()
    back, problems = read_run(path)
    assert problems == []
    (b,) = back
    assert b.span == r.span and b.server_ttft_s == 0.0712 and b.queue_source == "span"
    assert tr.stats().probes_matched == 1 and tr.recent() == ()  # a probe is never a user


def test_a_span_before_its_probe_is_kept_for_it():
    tr = U.UsersTrace(clock=Clock())
    tr.add(UserRequest(arrival_s=1.0, ttft_s=0.05, request_id="cmpl-prefilltui-ff-7-0"))
    r = _probe(7, "prefilltui-ff-7")
    tr.register_probe(r)
    assert r.server_ttft_s == 0.05 and tr.stats().probes_matched == 1


def test_a_probe_without_its_span_expires_and_counts_against_the_match_rate():
    clock = Clock()
    tr = U.UsersTrace(clock=clock)
    tr.register_probe(_probe(1, "prefilltui-aa-1"))
    tr.register_probe(_probe(2, "prefilltui-aa-2"))
    tr.add(UserRequest(arrival_s=1.0, ttft_s=0.05, request_id="cmpl-prefilltui-aa-2-0"))
    clock.t += U.PENDING_S + 1
    st = tr.stats()
    assert (st.probes_matched, st.probes_expired, st.probes_waiting) == (1, 1, 0)
    assert st.match_rate == 0.5


def test_another_prefilltuis_probe_is_not_a_user():
    tr = U.UsersTrace(clock=Clock())
    tr.add(UserRequest(arrival_s=1.0, ttft_s=0.05, request_id="cmpl-prefilltui-bb-3-0"))
    assert tr.recent() == ()


def test_users_are_bounded_in_time_by_receipt():
    clock = Clock()
    tr = U.UsersTrace("t", clock=clock)
    tr.add(_user(clock.t - 2, 10, 0.1))
    clock.t += U.KEEP_S + 5
    tr.add(_user(clock.t - 2, 20, 0.1))
    assert [u.prompt_tokens for u in tr.recent()] == [20]
    assert tr.recent()[0].target == "t"


def test_window_and_before():
    clock = Clock()
    tr = U.UsersTrace(clock=clock)
    now = clock.t
    for i in range(10):  # the window before: short prompts
        tr.add(_user(now - 100 + i, 100, 0.06))
    for i in range(10):  # now: long prompts
        tr.add(_user(now - 30 + i, 2000, 1.1))
    w = tr.window(fit=_fit())
    assert w.source == "traces" and w.requests == 10 and w.prompt_tokens_p50 == 2000
    assert w.expected_ttft_p50_s == pytest.approx(0.010 + 0.0005 * 2000)
    b = tr.before()
    assert b is not None and b.prompt_tokens_p50 == 100 and b.ttft_p50_s == pytest.approx(0.06)


def _vllm_counters(requests: int, queries: int, hits: int) -> str:
    lab = 'engine="0",model_name="m"'
    return (f"vllm:time_to_first_token_seconds_count{{{lab}}} {requests}\n"
            f"vllm:prefix_cache_queries_total{{{lab}}} {queries}\n"
            f"vllm:prefix_cache_hits_total{{{lab}}} {hits}\n")


def test_the_hit_rate_from_metrics_when_the_spans_count_no_cached_tokens():
    """vLLM 0.32's ``llm_request`` spans carry no cached-token count: the users' hit rate
    was None, and on the real vLLM a prefix cache that stopped hitting read "no single
    cause found", then head-of-line (tests/integration/test_vllm_incidents.py).  It is
    the server's prefix-cache counters over the same window, the probes' own (fresh)
    prompt tokens taken off."""
    import asyncio

    from prefilltui.measure.users_metrics import UsersMetrics

    clock = Clock()
    t0 = clock.t
    metrics = UsersMetrics(clock=clock)
    tr = U.UsersTrace("t", clock=clock)
    metrics.feed("vllm", _vllm_counters(0, 0, 0))
    for i in range(20):  # the probes: 256 fresh tokens each, nothing cached
        asyncio.run(metrics.after_probe(ProbeResult(started_at=t0 + 1 + i, prompt_tokens=256,
                                                    cached_tokens=0)))
    for i in range(24):  # the users: 900-token prompts, 768 of them a cached system prompt
        tr.add(_user(t0 + 2 + 2 * i, 900, 0.15))
    clock.t = t0 + 55
    metrics.feed("vllm", _vllm_counters(44, 24 * 900 + 20 * 256, 24 * 768))
    assert tr.window().prefix_cache_hit_rate is None  # the spans alone cannot tell
    tr.fallback = metrics
    w = tr.window()
    assert w.source == "traces" and w.requests == 24 and not w.estimate
    assert w.prefix_cache_hit_rate == pytest.approx(768 / 900)  # the users' own, not 0.66
    # a span that counts its cached tokens is the spans' own figure
    tr.add(_user(t0 + 52, 900, 0.15, cached_tokens=0))
    assert tr.window().prefix_cache_hit_rate == 0.0


def test_users_window_figures():
    t = 1000.0
    rs = [UserRequest(arrival_s=t - 10, prompt_tokens=1000, ttft_s=0.6, queue_s=0.1,
                      prefill_s=0.5, end_s=t - 9, cached_tokens=0),
          UserRequest(arrival_s=t - 5, prompt_tokens=1000, ttft_s=0.4, queue_s=0.1,
                      prefill_s=0.25, end_s=t - 4, cached_tokens=500),
          UserRequest(arrival_s=t - 500, prompt_tokens=9, ttft_s=9.0, end_s=t - 499)]  # outside
    w = users_window(rs, now_s=t, window_s=60, fit=_fit(0.01, 0.0005), waiting=3.0)
    assert w.requests == 2 and w.ttft_p50_s == pytest.approx(0.5)
    assert w.ttft_p90_s == pytest.approx(0.58)
    assert w.queue_share == pytest.approx(0.2 / 1.0)
    # slope x uncached tokens: 0.5 + 0.25 = 0.75 s of the 0.75 s measured: all explained
    assert w.unexplained_prefill_share == pytest.approx(0.0)
    assert w.prefix_cache_hit_rate == pytest.approx(0.25)
    assert w.expected_ttft_p50_s == pytest.approx(0.51) and w.waiting == 3.0
    assert users_window([], now_s=t, window_s=60).ttft_p50_s is None


def test_router_by_service_name_and_unknown():
    router = U.TraceRouter()
    a = router.add(U.UsersTrace("a", U.target_names("a", "http://127.0.0.1:8001")))
    b = router.add(U.UsersTrace("b", U.target_names("b", "http://127.0.0.1:8002")))
    router.deliver(read_batch(export({"rid": "1", "service": "127.0.0.1:8002"},
                                     {"rid": "2", "service": "a"},
                                     {"rid": "3", "service": "vllm"}), received_s=0.0))
    assert [u.request_id for u in a.recent(-1)] == ["2"]
    assert [u.request_id for u in b.recent(-1)] == ["1"]
    assert router.unknown == 1


def test_a_span_line_without_its_probe_is_a_bad_line(tmp_path):
    path = tmp_path / "run.jsonl"
    w = RunWriter(path)
    w.append(_probe(1, "prefilltui-aa-1"))
    w.append_record("span", {"seq": 9, "request_id": "prefilltui-aa-9",
                             "span": {"request_id": "cmpl-prefilltui-aa-9-0", "ttft_s": 0.1}})
    w.append_record("span", {"seq": 1, "request_id": "prefilltui-aa-1", "span": "junk"})
    w.close()
    (r,), problems = read_run(path)
    assert r.span is None and r.queue_source == "metrics"  # nothing applied to another probe
    assert [p.split(":")[0] for p in problems] == ["line 3", "line 4"]


def test_users_prefill_faster_than_the_fit_is_worded_so():
    """"prefill unexplained by the fit -47 %" meant the users' prefill ran faster than
    the fit (their prefill time 1/1.47 of slope x tokens: cache hits the spans did not
    count, say): it says so, and the positive share says what it is a share of."""
    from prefilltui.model.users import UsersWindow
    from prefilltui.render.users import users_lines

    w = UsersWindow("traces", 60.0, 12, ttft_p50_s=0.2, unexplained_prefill_share=-0.47)
    assert users_lines(w)[-1] == "users' prefill 47 % faster than the fit (cache hits?)"
    from prefilltui.render.users import unexplained_words

    assert unexplained_words(0.3) == "30 % of users' prefill unexplained by the fit"
    assert unexplained_words(-0.003) == "0 % of users' prefill unexplained by the fit"
    assert unexplained_words(0.0) == "0 % of users' prefill unexplained by the fit"
