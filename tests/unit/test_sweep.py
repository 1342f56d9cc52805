"""SweepRunner against the fake server: order, warm-up, caps, back-off, controls."""

import math
import threading
import time

import pytest

from tests.fakeserver import Reply, models_reply, per_token_completion, sse_data, sse_done, sse_text, tokenize_route
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.runfile import RunWriter
from prefilltui.measure.runfile import read_run
from prefilltui.measure.sweep import SweepRunner
from prefilltui.measure.sweep import SweepConfig, cap_for_context, make_lengths
from prefilltui.measure.sweep.config import expected_ttft, time_cap


def usage_server(fake_server, n_ctx=None, extra=None):
    """Completions whose TTFT grows with the prompt, usage = words counted as tokens."""
    def complete(req):
        words = len(req.json["prompt"].split())
        return Reply.sse([(0.002 + words * 1e-5, sse_text("x")),
                          (0.01, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                          (0.011, sse_done())])
    entry = {"max_model_len": n_ctx} if n_ctx else {}
    routes = {"GET /v1/models": models_reply("m", **entry), "POST /v1/completions": complete}
    routes.update(extra or {})
    return fake_server(routes)


def run(srv, cfg, **kw):
    states = []
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5), cfg,
                         on_state=lambda s, d: states.append(s), **kw)
    runner.start()
    return runner, states


def test_make_lengths():
    assert make_lengths(32, 4096, 8) == [32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert make_lengths(100, 100, 5) == [100]
    assert cap_for_context(4096) == 4007


def test_sweep_runs_all_and_writes_runfile(fake_server, tmp_path):
    srv = usage_server(fake_server)
    got = []
    w = RunWriter(tmp_path / "run.jsonl")
    runner, states = run(srv, SweepConfig([16, 64, 256], repeats=2, warmup=2, seed=1),
                         runfile=w, on_result=got.append)
    runner.join(30)
    w.close()
    assert runner.state == "done" and states[0] == "connecting"
    assert len(got) == 8 and [r.seq for r in got] == list(range(1, 9))
    assert [r.warmup for r in got] == [True, True] + [False] * 6
    assert all(r.ok for r in got)
    assert sorted(r.requested_tokens for r in got[2:]) == [16, 16, 64, 64, 256, 256]
    # usage calibration: counted tokens within 2 % once calibrated (after the warm-ups)
    for r in got[2:]:
        assert abs(r.prompt_tokens - r.requested_tokens) <= max(1, 0.02 * r.requested_tokens)
    back, problems = read_run(tmp_path / "run.jsonl")
    assert problems == [] and [b.seq for b in back] == [r.seq for r in got]


def test_context_cap_from_discovery_and_errors(fake_server):
    srv = usage_server(fake_server, n_ctx=200)
    runner, _ = run(srv, SweepConfig([64, 1000], warmup=0))
    runner.join(30)
    assert sorted(r.requested_tokens for r in runner.results) == [64, cap_for_context(200)]
    assert runner.cap_note == "context cap"

    def ctx_err(req):
        if len(req.json["prompt"].split()) > 500:
            return Reply.json({"error": {"type": "exceed_context_size_error",
                                         "n_prompt_tokens": 1000, "n_ctx": 400}}, status=400)
        return Reply.sse([(0, sse_text("x")), (0.01, sse_done())])
    srv.set("POST /v1/completions", ctx_err)
    srv.set("GET /v1/models", models_reply("m"))
    runner, _ = run(srv, SweepConfig([1000, 1000], repeats=3, warmup=0, seed=0))
    runner.join(30)
    kinds = [r.error_kind for r in runner.results]
    assert kinds[0] == "context_length" and all(k is None for k in kinds[1:])
    assert all(r.requested_tokens == cap_for_context(400) for r in runner.results[1:])


def test_expected_ttft_and_time_cap_err_long():
    """From (tokens, TTFT s): at or below the shortest length its TTFT; between two
    measured lengths the line between their fastest TTFTs; beyond the longest,
    t_m (n / n_m)^e with e from the two longest in [1, 2]."""
    assert expected_ttft([], 100) is None and time_cap([], 5.0) is None
    pts = [(4, 0.045), (188, 1.20), (188, 1.15), (406, 2.46)]
    assert expected_ttft(pts, 2) == 0.045 and expected_ttft(pts, 406) == 2.46
    assert expected_ttft(pts, 100) == pytest.approx(0.045 + (1.15 - 0.045) * 96 / 184)
    # 188 -> 406 grew slower than n (the fixed cost): e = 1, a straight line through 0
    assert expected_ttft(pts, 812) == 2 * 2.46
    cap = time_cap(pts, 5.0)
    assert cap == (int(406 * 5.0 / 2.46), (406, 2.46), None, 1.0) and cap.tokens == 825
    # attention's n² on a CPU: TTFT grew 3x over 2x the length, so e = log2(3)
    quad = [(1000, 2.0), (2000, 6.0)]
    assert expected_ttft(quad, 4000) == pytest.approx(18.0)
    assert time_cap(quad, 10.0).tokens == int(2000 * (10 / 6.0) ** (1 / math.log2(3)))
    assert time_cap(quad, 10.0).growth == pytest.approx(math.log2(3))
    assert time_cap([(4, 6.0)], 5.0) is None  # the fixed cost alone is over: no cap


def test_time_cap_between_the_probes_around_the_budget():
    """The longest probe over the budget: the cap is where the line between it and the
    longest probe within the budget reaches the budget, never below the latter.  The
    user's llama.cpp on a loaded CPU: 40 tokens 0.09 s, 1,896 tokens 9.7 s; the cap was
    40 tokens (the longest length measured within 5 s), the lengths between them were
    expected at 9.7 s (the next length up's TTFT)."""
    cpu = [(4, 0.05), (9, 0.06), (19, 0.07), (40, 0.09), (1896, 9.7)]
    assert expected_ttft(cpu, 406) == pytest.approx(0.09 + 9.61 * 366 / 1856)  # 1.99 s, was 9.7
    cap = time_cap(cpu, 5.0)
    assert cap == (40 + int(4.91 * 1856 / 9.61), (40, 0.09), (1896, 9.7), 1.0)
    assert cap.tokens == 988  # was 40
    # a length that ran within the budget is never capped: 878 took 2 s, 1,896 9.7 s
    cap = time_cap([(100, 1.0), (878, 2.0), (1896, 9.7)], 5.0)
    assert cap.tokens == 878 + int(3.0 * 1018 / 7.7) == 1274 and cap.below == (878, 2.0)
    # a slow probe below a faster longer one: the cap is past the longer one
    cap = time_cap([(100, 1.0), (406, 7.0), (878, 2.0)], 5.0)
    assert cap.tokens == int(878 * 5.0 / 2.0) and cap.above is None


def test_time_cap_after_one_slow_probe(fake_server):
    """TTFT = 20 ms + 0.2 ms a token (a 0.6-s cap is 2,900 tokens), but the first
    1,896-token probe takes 3x (1.16 s): the cap is on the line between the longest
    probe within the cap (878) and it, not 878 itself; the note lists only the length
    left over, as requested (4,007 under the 4,096-token context, not 4096), never the
    1,896 that ran, and its numbers give its cap."""
    slow_once = []

    def line(req):
        words = len(req.json["prompt"].split())
        t = 0.02 + 2e-4 * words
        if words >= 1800 and not slow_once:
            slow_once.append(words)
            t *= 3
        return Reply.sse([(t, sse_text("x")),
                          (t + 0.001, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                          (t + 0.002, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=4096),
                       "POST /tokenize": tokenize_route(), "POST /v1/completions": line})
    runner, _ = run(srv, SweepConfig(make_lengths(4, 4096, 10), warmup=0, seed=3,
                                     time_cap_s=0.6))
    runner.join(60)
    assert runner.state == "done" and slow_once == [1896]
    took = {r.requested_tokens: r.ttft_s for r in runner.results}
    t_w, t_o = took[878], took[1896]
    assert t_w < 0.6 < t_o
    cap = max(x for x in took if x != 1896)
    assert cap == 878 + int((0.6 - t_w) * (1896 - 878) / (t_o - t_w))
    assert 1150 < cap < 1450  # was 878, the longest length measured within the cap
    assert sorted(took) == [4, 9, 19, 40, 87, 188, 406, 878, cap, 1896]
    (note,) = runner.notes[1:]  # after the context's
    assert note.startswith("length 4007 is over the longest prompt expected within 0.6 s a "
                           f"probe (878 tokens took {t_w:.2f} s, 1,896 tokens took {t_o:.2f} s: "
                           "0.6 s on the line between; --lengths runs every length given): "
                           f"capped to {cap} tokens")
    assert note.endswith(f"capped to {cap} tokens") and "1896" not in note
    # the note's rounded figures give its cap
    w, o = round(t_w, 2), round(t_o, 2)
    assert 878 + (0.6 - w) * 1018 / (o - w) == pytest.approx(cap, rel=0.03)
    assert runner.cap_note == "time cap"


def test_time_cap_bounds_the_longest_probe(fake_server):
    """A slow target (1 ms a token): the default lengths to 4,096 under a 0.4-s cap
    probe nothing expected over it; the lengths left over run once, merged at the cap,
    and a note says which, to what and why.  Without a cap every length runs."""
    srv = fake_server({"GET /v1/models": models_reply("m", max_model_len=8192),
                       "POST /v1/completions": per_token_completion()})
    lengths = make_lengths(4, 4096, 10)
    plans = []
    runner, _ = run(srv, SweepConfig(lengths, warmup=1, seed=3, time_cap_s=0.4),
                    on_plan=lambda ls, notes: plans.append((ls, list(notes))))
    runner.join(60)
    assert runner.state == "done"
    sent = [r.requested_tokens for r in runner.results if not r.warmup]
    cap = max(sent)
    assert 188 <= cap < 406 and sorted(sent) == [x for x in lengths if x < cap] + [cap]
    assert sent[0] == 4  # nothing measured yet: the shortest first
    assert runner.lengths == sorted(sent) and runner.cap_note == "time cap"
    (note,) = runner.notes
    assert note.startswith("lengths 406, 878, 1896, 4096 are over the longest prompt expected "
                           "within 0.4 s a probe (") and f"capped to {cap} tokens" in note
    assert "merged: 7 lengths run, not 10" in note and plans[-1] == (sorted(sent), [note])
    assert max(r.ttft_s for r in runner.results if not r.warmup) < 0.4 * 1.5
    runner, _ = run(srv, SweepConfig([4, 1000], warmup=0))
    runner.join(30)
    assert sorted(r.requested_tokens for r in runner.results) == [4, 1000] and not runner.notes


def test_rate_limit_backoff_counted(fake_server):
    # a tokenize endpoint: no calibration request takes the scripted 429
    srv = usage_server(fake_server, extra={"POST /tokenize": tokenize_route()})
    ok = Reply.sse([(0, sse_text("x")), (0.01, sse_done())])
    srv.set("POST /v1/completions", [Reply.json({"error": {"message": "busy"}}, status=429,
                                                headers={"Retry-After": "0.2"}), ok])
    t0 = time.monotonic()
    runner, states = run(srv, SweepConfig([32], warmup=0))
    runner.join(30)
    assert [r.error_kind for r in runner.results] == ["rate_limited", None]
    assert runner.rate_limited == 1 and "retrying" in states
    assert time.monotonic() - t0 >= 0.2


def test_unreachable_fails():
    runner = SweepRunner(lambda: ProbeClient("http://127.0.0.1:9", timeout=2), SweepConfig([8]))
    runner.start()
    runner.join(30)
    assert runner.state == "failed" and "cannot reach" in runner.state_detail


def test_continuous_pause_resume_burst_stop(fake_server):
    srv = usage_server(fake_server)
    seen = threading.Event()
    results = []

    def on_result(r):
        results.append(r)
        if len(results) >= 3:
            seen.set()
    runner, states = run(srv, SweepConfig([8, 16], warmup=0, continuous=True, pause_s=0.02),
                         on_result=on_result)
    assert seen.wait(20)
    runner.pause()
    time.sleep(0.3)
    n = len(results)
    assert runner.state == "paused"
    time.sleep(0.2)
    assert len(results) == n
    runner.set_range(40, 50)
    runner.burst()
    runner.resume()
    deadline = time.monotonic() + 10
    while len(results) < n + 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    runner.stop(5)
    assert runner.state == "stopped"
    assert results[n].burst and results[n].requested_tokens == 50
    assert all(r.requested_tokens in (40, 50) for r in results[n:])
    # one probe in flight at a time: request windows never overlap
    spans = sorted((r.t_send, r.t_end) for r in results)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_hooks_never_break_the_sweep(fake_server):
    srv = usage_server(fake_server)

    class Hook:
        async def before_probe(self, client):
            raise RuntimeError("boom")

        async def after_probe(self, result):
            result.queue_s = 0.5

    runner, _ = run(srv, SweepConfig([8], warmup=0), hooks=[Hook()])
    runner.join(30)
    assert runner.state == "done" and runner.results[0].ok and runner.results[0].queue_s == 0.5


def test_idle_gap_follows_each_probe(fake_server):
    """Duty-cycled pacing: after each probe the runner idles max(floor, TTFT) (duty
    0.5), in the "idle" state, before the next probe is sent."""
    from prefilltui.model.pacing import Pacing

    srv = usage_server(fake_server)
    details = []
    pacing = Pacing(duty=0.5, idle_floor_s=0.02)
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5),
                         SweepConfig([8, 6000], warmup=0, repeats=2, pacing=pacing),
                         on_state=lambda s, d: details.append((s, d)))
    runner.start()
    runner.join(30)
    res = list(runner.results)
    assert len(res) == 4 and all(r.ok for r in res)
    for a, b in zip(res, res[1:]):
        gap = b.t_send - a.t_end
        assert gap >= pacing.idle_after(a.ttft_s) - 0.005
        assert gap >= (a.ttft_s if a.requested_tokens == 6000 else 0.02) - 0.005
    assert max(r.ttft_s for r in res) > 0.05  # the TTFT share, not only the floor
    assert sum(1 for s, _ in details if s == "idle") >= 3


def test_burst_fires_while_paused_and_lasts_the_minimum(fake_server):
    """b while paused: the burst starts at once (no resume), runs back-to-back probes
    at the longest length for at least burst_min_s, then the runner is paused again."""
    from prefilltui.model.pacing import Pacing

    srv = usage_server(fake_server)
    states = []
    results = []
    pacing = Pacing(duty=0.5, idle_floor_s=1.0, burst_min_s=0.3)
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5),
                         SweepConfig([8, 64], warmup=0, continuous=True, pacing=pacing),
                         on_state=lambda s, d: states.append((s, d)), on_result=results.append)
    runner.pause()
    runner.start()
    deadline = time.monotonic() + 10
    while runner.state != "paused" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.state == "paused" and results == []
    t0 = time.perf_counter()
    runner.burst()
    while not any(s == "burst" and d.startswith("done") for s, d in states) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    runner.stop(5)
    burst = [r for r in results if r.burst]
    assert burst and len(burst) == len(results)  # paused: only the burst ran
    assert burst[0].t_send - t0 < 0.5  # at once (paused: without it, never)
    assert burst[-1].t_end - burst[0].t_send >= pacing.burst_min_s
    assert all(r.requested_tokens == 64 for r in burst)
    spans = [(r.t_send, r.t_end) for r in burst]
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    assert all(g < 0.5 for g in gaps), gaps  # back to back, not the 1 s idle
    n, length, secs = runner.last_burst
    assert (n, length) == (len(burst), 64) and secs >= pacing.burst_min_s
    done = [d for s, d in states if s == "burst" and d.startswith("done")]
    assert done == [f"done: {n} × 64 tokens, {secs:.1f} s"]
    after = states[states.index(("burst", done[0])) + 1]
    assert after == ("paused", f"burst: {n} × 64 tokens, {secs:.1f} s")


def test_pacing_rules():
    from prefilltui.model.pacing import (DEFAULT_DUTY, Pacing, auto_pacing, burst_min_s,
                                        idle_floor_s)

    assert idle_floor_s(0.1, 0.1) == 0.2 and idle_floor_s(0.1, 1.0) == 2.0
    # the 80-column history's 1.58 s column is the longest window: 2 * 60/38 + 2 * 0.1
    assert abs(burst_min_s(0.1, 1.0) - 3.358) < 1e-3 and burst_min_s(0.1, 0.1) == burst_min_s(0.1, 1.0)
    assert abs(burst_min_s(0.1, 2.0) - 4.2) < 1e-9  # a longer sensor window wins
    p = auto_pacing(0.1, 0.1)
    assert p.duty == DEFAULT_DUTY == 0.5 and p.idle_floor_s == 0.2
    assert p.idle_after(6.0) == 6.0 and p.idle_after(0.05) == 0.2 and p.idle_after(None) == 0.2
    assert auto_pacing(0.1, 0.1, pause_s=0) == Pacing(duty=1.0, idle_floor_s=0,
                                                      burst_min_s=burst_min_s(0.1, 0.1))
    assert auto_pacing(0.1, 0.1, pause_s=0).idle_after(5.0) == 0  # back-to-back
    assert auto_pacing(None, None).idle_floor_s == 2.0  # unknown sensor: NVML worst case
    assert auto_pacing(0.1, 0.1, duty=0.25).idle_after(1.0) == 3.0
    assert Pacing().idle_after(3.0) == 0.0
    import pytest

    with pytest.raises(ValueError):
        Pacing(duty=0)


def test_session_pacing_defaults():
    """The TUI paces by default (duty 0.5, the sensor's idle floor); the headless sweep
    keeps back-to-back probing unless --duty is given; --pause 0 is back-to-back."""
    from prefilltui.options import SweepDesign
    from prefilltui.session import SessionError, session_pacing

    class Cpu:  # a CPU sampler at 10 Hz: one period is its window
        period_s = sensor_window_s = 0.1

    tui = session_pacing(SweepDesign(), Cpu(), continuous=True)
    assert (tui.duty, tui.idle_floor_s) == (0.5, 0.2) and abs(tui.burst_min_s - 3.358) < 1e-3
    assert session_pacing(SweepDesign(), None, continuous=True).idle_floor_s == 2.0
    assert session_pacing(SweepDesign(pause_s=0.0), Cpu(), continuous=True).idle_after(9.0) == 0
    assert session_pacing(SweepDesign(), Cpu(), continuous=False) is None
    assert session_pacing(SweepDesign(duty=0.25), None, continuous=False).idle_after(1.0) == 3.0
    import pytest

    with pytest.raises(SessionError):
        session_pacing(SweepDesign(duty=2.0), None, continuous=True)


def test_pacing_describe():
    from prefilltui.model.pacing import Pacing, auto_pacing

    assert auto_pacing(0.1, 0.1).describe() == "duty 50 %: idle ≥ TTFT, ≥ 0.2 s"
    assert auto_pacing(0.1, 0.1, pause_s=1.5).describe() == "idle 1.5 s after each probe"
    assert Pacing().describe() == "back-to-back probes"
