"""``prefilltui exporter``: targets, pacing, rotation, /metrics against the fake server,
``promtool check metrics`` on its output, a dead target, SIGTERM, keys."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fakeserver import Reply, models_reply, sse_data, sse_done, sse_text
from prefilltui.measure.probe import ProbeClient
from prefilltui.measure.runfile import RotatingRunWriter
from prefilltui.measure.runfile import read_run, read_session
from prefilltui.measure.sweep import SweepRunner
from prefilltui.measure.sweep import SweepConfig
from prefilltui.model.types import ProbeResult
from prefilltui.exporter.config import TargetConfig, check, load_toml, target, unique
from prefilltui.exporter.http import MetricsServer
from prefilltui.exporter.target import TargetProber

ROOT = Path(__file__).resolve().parents[2]
A_S, B_S = 0.004, 40e-6  # the fake server's TTFT = A + B x words: 25,000 tokens/s


def prefill_server(fake_server, *, b=B_S):
    """Completions whose TTFT grows with the prompt; usage counts words as tokens."""
    def complete(req):
        words = len(req.json["prompt"].split())
        t = A_S + words * b
        return Reply.sse([(t, sse_text("x")),
                          (t + 0.001, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                          (t + 0.002, sse_done())])
    return fake_server({"GET /v1/models": models_reply("fake-model"),
                        "POST /v1/completions": complete})


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _sample(text: str, name: str, **labels) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _wait(pred, timeout: float = 20.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


# ------------------------------------------------------------------ targets


def test_toml_targets_defaults_and_overrides(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[defaults]\ninterval = 20\nlengths = [512, 64]\n\n'
                 '[[target]]\nurl = "http://a:8000"\nname = "gpu-a"\napi_key_env = "A_KEY"\n'
                 'peak_tflops = 989\n\n[[target]]\nurl = "https://b/v1"\ninterval = 30\n')
    base = TargetConfig(url="http://unset", window=25)
    a, b = load_toml(str(f), base)
    assert (a.label, a.interval_s, a.lengths, a.probe.api_key_env, a.roofline.peak_tflops,
            a.window) == ("gpu-a", 20.0, (64, 512), "A_KEY", 989.0, 25)
    assert (b.label, b.interval_s, b.slug) == ("https://b/v1", 30.0, "b_v1")
    # one probe time cap for every tool: the sweep's default, not a shorter one
    assert a.probe.timeout_s == b.probe.timeout_s == 120.0


@pytest.mark.parametrize("body,words", [
    ('[[target]]\nurl = "http://a"\napi_key = "sk-1"\n', "environment variable"),
    ('[[target]]\nurl = "http://a"\nintervall = 3\n', "unknown key 'intervall'"),
    ('[[target]]\nname = "x"\n', "url is missing"),
    ('[[target]]\nurl = "ftp://a"\n', "http:// or https://"),
    ('[[target]]\nurl = "http://a"\ninterval = 0.001\n', "interval must be >="),
    ('[[target]]\nurl = "http://a"\nlengths = [0]\n', "lengths = [0]: must be"),
    ('[targets]\nurl = "http://a"\n', "unknown table"),
])
def test_toml_errors_name_the_field(tmp_path, body, words):
    f = tmp_path / "t.toml"
    f.write_text(body)
    with pytest.raises(ValueError, match=re.escape(words)):
        load_toml(str(f))


def test_duplicate_targets_refused():
    t = check(target("http://a:1"))
    with pytest.raises(ValueError, match="twice"):
        unique([t, t])
    with pytest.raises(ValueError, match="run file"):
        unique([check(target("http://a/b")), check(target("http://a_b"))])


# ------------------------------------------------------------------ rotation


def test_rotating_run_writer_bounds_disk(tmp_path):
    p = tmp_path / "t.jsonl"
    w = RotatingRunWriter(p, max_bytes=2000, keep=2)
    w.set_session(server={"kind": "vllm", "model": "m"})
    for i in range(60):
        w.append(ProbeResult(seq=i + 1, ok=True, ttft_s=0.1, requested_tokens=64))
    w.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["t.jsonl", "t.jsonl.1", "t.jsonl.2"]
    assert all(f.stat().st_size <= 2000 for f in files) and w.rotations >= 3
    seqs = []
    for f in (p.with_name("t.jsonl.2"), p.with_name("t.jsonl.1"), p):
        back, problems = read_run(f)
        assert problems == []
        assert read_session(f)["server"]["kind"] == "vllm"  # each file stands alone
        seqs += [r.seq for r in back]
    assert seqs == list(range(seqs[0], 61))  # the newest probes, in order, none split


# ------------------------------------------------------------------ pacing


class _Starts:
    """A probe hook that notes each probe's start on the runner's own clock (the loop's
    monotonic time, after the pacing let it go) and whether it succeeded: what the rate
    ceiling is about, free of the server's view of a busy machine's client jitter."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ok: list[bool] = []

    async def before_probe(self, client) -> None:
        self.starts.append(time.monotonic())

    async def after_probe(self, result: ProbeResult) -> None:
        self.ok.append(result.ok)


def test_interval_is_a_ceiling_for_probes_and_failures(fake_server):
    """Probe starts are at least ``interval_s`` apart, failed probes included.  Checked
    on the runner's own clock, and by a count of the server's arrivals no larger than
    the span allows: no sleep decides how many probes a loaded machine manages."""
    srv = prefill_server(fake_server)
    interval = 0.25
    hook = _Starts()
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5),
                         SweepConfig([16, 32], warmup=0, continuous=True, interval_s=interval,
                                     jitter=0.2, keep_results=4))
    runner.hooks.append(hook)
    runner.start()
    try:
        assert _wait(lambda: hook.ok.count(True) >= 5, timeout=60)
        srv.set("POST /v1/completions", Reply.json({"error": "boom"}, status=500))
        assert _wait(lambda: hook.ok.count(False) >= 4, timeout=120)
    finally:
        runner.stop()
    gaps = [b - a for a, b in zip(hook.starts, hook.starts[1:])]
    assert min(gaps) >= interval - 1e-3, gaps  # each slot books the next one interval on
    # the server's view: the first two completions calibrate (no tokenize endpoint
    # here) right after discovery; then never more arrivals than the span holds slots
    posts = [r.t_received for r in srv.requests if r.path == "/v1/completions"][2:]
    assert len(posts) <= (posts[-1] - posts[0]) / interval + 2, len(posts)
    assert len(runner.results) == 4  # keep_results bounds the runner's memory


def test_the_first_probe_goes_at_once_then_at_the_interval(fake_server):
    """At a 600 s interval the first probe follows discovery at once (it used to wait
    a whole interval: ready, 'connecting', no probe for ten minutes)."""
    srv = prefill_server(fake_server)
    hook = _Starts()
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5),
                         SweepConfig([16, 32], continuous=True, interval_s=600.0, jitter=0.2))
    runner.hooks.append(hook)
    t0 = time.monotonic()
    runner.start()
    try:
        assert _wait(lambda: hook.ok == [True], timeout=60), runner.state_detail
        assert runner.server_info is not None
        took = hook.starts[0] - t0
    finally:
        runner.stop()
    assert took < 60 and len(hook.starts) == 1  # one probe; the next one 600+ s on


def test_a_server_that_answers_late_is_asked_again_within_the_retry_cap(fake_server,
                                                                        monkeypatch):
    """A server not answering yet (down at the exporter's start) is asked again every
    interval clamped to DISCOVERY_RETRY_MAX_S (30 s; 2.5 s here), not every 600 s."""
    from prefilltui.measure.sweep import loop

    monkeypatch.setattr(loop, "DISCOVERY_RETRY_MAX_S", 2.5)
    srv = prefill_server(fake_server)
    # dropped without an answer (twice: a pooled connection is resent once)
    srv.set("GET /v1/models", [Reply(drop=True)] * 2 + [models_reply("fake-model")])
    states: list[tuple[float, str, str]] = []
    hook = _Starts()
    runner = SweepRunner(lambda: ProbeClient(srv.base_url, timeout=5),
                         SweepConfig([16], warmup=0, continuous=True, interval_s=600.0),
                         on_state=lambda st, d: states.append((time.monotonic(), st, d)))
    runner.hooks.append(hook)
    runner.start()
    try:
        assert _wait(lambda: hook.ok == [True], timeout=60), states
    finally:
        runner.stop()
    retrying = [(t, d) for t, st, d in states if st == "retrying"]
    assert len(retrying) == 1 and "retrying in 2.5 s" in retrying[0][1], retrying
    asked = [r.t_received for r in srv.requests if r.path == "/v1/models"]
    assert len(asked) >= 2 and asked[-1] - asked[0] >= 2.5 - 0.05, asked


def test_unreachable_target_retries_at_the_interval():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens: connection refused
    states = []
    runner = SweepRunner(lambda: ProbeClient(f"http://127.0.0.1:{port}", timeout=2),
                         SweepConfig([16], warmup=0, continuous=True, interval_s=2.3),
                         on_state=lambda st, d: states.append((time.monotonic(), st)))
    runner.start()
    time.sleep(2.7)
    runner.stop()
    tries = [t for t, st in states if st == "retrying"]  # one per failed discovery
    assert len(tries) == 2 and tries[1] - tries[0] >= 2.29  # the interval, not the 2 s retry


# ------------------------------------------------------------------ /metrics


@pytest.fixture
def exporter(fake_server, tmp_path):
    """One live target (the fake server) and one that stalls forever, served on a free
    port; yields (server, probers, live fake server)."""
    live = prefill_server(fake_server)
    stall = fake_server({"GET /v1/models": Reply.sse([(60.0, b"")])})
    cfgs = [check(target(live.base_url, name="live", lengths=(64, 256, 1024),
                         interval=0.05, timeout=30, window=12, params=8e9, peak_tflops=989)),
            check(target(stall.base_url, name="stalled", interval=0.05, timeout=30))]
    probers = [TargetProber(c, run_dir=tmp_path / "runs", seed=1).start() for c in cfgs]
    server = MetricsServer("127.0.0.1", 0, probers).start()
    yield server, probers, live
    for p in probers:
        p.request_stop()
    for p in probers:
        p.stop(timeout=2)
    server.stop()


def test_metrics_page_names_fit_and_promtool(exporter):
    server, probers, live = exporter
    url = f"http://127.0.0.1:{server.port}"
    assert _wait(lambda: (probers[0].snapshot.fit is not None
                          and probers[0].snapshot.fit.n >= 9), timeout=30)
    t0 = time.perf_counter()
    status, text = _get(url + "/metrics")
    assert status == 200 and time.perf_counter() - t0 < 1.0  # the stalled target waits nobody
    lv = {"target": "live", "model": "fake-model"}
    tp = _sample(text, "prefilltui_prefill_throughput_tokens_per_second", **lv)
    lo = _sample(text, "prefilltui_prefill_throughput_lower_tokens_per_second", **lv)
    assert tp is not None and lo is not None and lo <= tp
    assert abs(tp * B_S - 1) < 0.25  # the server's 25,000 tokens/s, within loopback noise
    assert _sample(text, "prefilltui_target_up", **lv) == 1.0
    assert _sample(text, "prefilltui_probes_total", outcome="ok", **lv) >= 9
    assert _sample(text, "prefilltui_probes_total", outcome="failed", error_kind="timeout",
                   **lv) == 0.0
    assert _sample(text, "prefilltui_ttft_seconds_count", prompt_tokens="1024", **lv) >= 1
    assert _sample(text, "prefilltui_prefill_mfu_ratio", **lv) is not None
    assert _sample(text, "prefilltui_verdict", prefilltui_verdict="wrong", **lv) in (0.0, 1.0)
    assert _sample(text, "prefilltui_fit_window_probes", **lv) <= 12
    assert "process_resident_memory_bytes" in text and "prefilltui_build_info{" in text
    # the stalled target: no up series yet (discovery still waiting), no probes, no fit
    assert _sample(text, "prefilltui_probes_total", target="stalled", outcome="ok") == 0.0
    assert _sample(text, "prefilltui_prefill_throughput_tokens_per_second",
                   target="stalled") is None


@pytest.mark.component
def test_metrics_page_passes_promtool(exporter):
    from tests.components import require

    require("prometheus")
    server, probers, _live = exporter
    assert _wait(lambda: probers[0].snapshot.fit is not None, timeout=30)
    _status, text = _get(f"http://127.0.0.1:{server.port}/metrics")
    out = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "" and out.stderr.strip() == "", (
        out.stdout + out.stderr)


def test_probe_endpoint_is_one_target(exporter):
    server, probers, live = exporter
    url = f"http://127.0.0.1:{server.port}"
    assert _wait(lambda: probers[0].snapshot.up is not None)
    status, text = _get(url + "/probe?target=live")
    assert status == 200 and 'target="live"' in text and 'target="stalled"' not in text
    assert "process_cpu_seconds_total" not in text
    status, text2 = _get(url + "/probe?target=" + live.base_url)
    assert status == 200 and 'target="live"' in text2
    assert _get(url + "/probe?target=nope")[0] == 404
    assert _get(url + "/probe")[0] == 400
    assert _get(url + "/-/healthy") == (200, "OK\n")
    assert _get(url + "/nothing")[0] == 404


def test_window_and_histograms_stay_bounded(fake_server, tmp_path):
    srv = prefill_server(fake_server)
    cfg = check(target(srv.base_url, lengths=(16, 64), interval=0.05, window=5))
    p = TargetProber(cfg, run_dir=tmp_path, seed=2).start()
    try:
        assert _wait(lambda: p.snapshot.probes and dict(p.snapshot.probes)[("ok", "")] >= 14,
                     timeout=30)
    finally:
        p.stop(timeout=2)
    s = p.snapshot
    assert len(p._window) == 5 and s.fit is not None and s.fit.n <= 5
    assert [h.tokens for h in s.histograms] == [16, 64]
    assert sum(h.count for h in s.histograms) == dict(s.probes)[("ok", "")] - 1  # warm-up out
    assert len(p.runner.results) <= 8


def test_cache_hits_counted_and_kept_out_of_the_fit(fake_server, tmp_path):
    def complete(req):
        words = len(req.json["prompt"].split())
        usage = {"prompt_tokens": words, "prompt_tokens_details": {"cached_tokens": 10}}
        return Reply.sse([(0.002, sse_text("x")), (0.003, sse_data({"choices": [], "usage": usage})),
                          (0.004, sse_done())])
    srv = fake_server({"GET /v1/models": models_reply("m"), "POST /v1/completions": complete})
    p = TargetProber(check(target(srv.base_url, lengths=(16, 64), interval=0.05)),
                     run_dir=tmp_path).start()
    try:
        assert _wait(lambda: p.snapshot.cache_hit_probes >= 3)
    finally:
        p.stop(timeout=2)
    assert p.snapshot.cached_tokens == 10 * p.snapshot.cache_hit_probes
    assert p.snapshot.cache_counted_probes >= p.snapshot.cache_hit_probes  # all server-counted
    assert p.snapshot.fit is None


def test_exporter_imports_no_textual():
    code = ("import sys, prefilltui.commands.exporter, prefilltui.exporter.http, "
            "prefilltui.exporter.target; "
            "print(any(m == 'textual' or m.startswith('textual.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, cwd=str(ROOT),
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False"


def test_refused_target_is_down_and_logged_once(tmp_path):
    import logging
    import socket

    from prefilltui.exporter.collector import families

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("prefilltui.exporter.target")
    logger.addHandler(handler)
    p = TargetProber(check(target(f"http://127.0.0.1:{port}", name="gone", interval=0.05)),
                     run_dir=tmp_path).start()
    try:
        assert _wait(lambda: p.snapshot.up is False, timeout=10)
    finally:
        p.stop(timeout=2)
        logger.removeHandler(handler)
    up = next(f for f in families([p.snapshot]) if f.name == "prefilltui_target_up")
    assert [(s.labels["target"], s.value) for s in up.samples] == [("gone", 0.0)]
    downs = [r for r in records if "gone is down" in r.getMessage()]
    assert len(downs) == 1
