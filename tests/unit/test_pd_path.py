"""A target that is a path (router ▸ prefill ▸ transfer ▸ decode): the workers' pages
read, each probe's TTFT split into hops, the KV size checked, the hop causes, on the
fake pair (tests/pdengine.py, a stand-in shaped on vLLM's names) and on bad input."""

from __future__ import annotations

import json
import statistics
import threading
import time

import pytest

from prefilltui.cli import main
from prefilltui.model.diagnosis import HeldExpectation, ttft_verdict
from prefilltui.model.fit import fit_ols
from prefilltui.model.hops import Hops
from prefilltui.model.metrics import Exposition
from prefilltui.model.path import (
    HOP_CAUSES, WorkerReading, kv_bytes_per_token, kv_figures, read_worker,
    role_from_labels, role_from_server_info, role_notice, split_hops,
)
from prefilltui.model.roofline import lookup_model
from prefilltui.model.types import ProbeResult
from prefilltui.options import PathOptions, ProbeOptions, SessionOptions, SweepDesign
from prefilltui.options import RunFileOptions, TelemetryOptions
from prefilltui.session import build_session
from tests.pdengine import KV_BYTES_PER_TOKEN, PdKnobs, PdPair


VLLM_DECODE = """# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0"} %(ttft)s
vllm:time_to_first_token_seconds_count{engine="0"} %(n)s
vllm:nixl_xfer_time_seconds_sum{engine="0"} %(xfer)s
vllm:nixl_xfer_time_seconds_count{engine="0"} %(n)s
vllm:nixl_post_time_seconds_sum{engine="0"} 0.0
vllm:nixl_bytes_transferred_sum{engine="0"} %(bytes)s
vllm:nixl_num_failed_transfers_total{engine="0"} %(failed)s
vllm:num_requests_waiting_by_reason{engine="0",reason="deferred"} %(deferred)s
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 3
vllm:prompt_tokens_by_source_total{engine="0",source="external_kv_transfer"} %(ext)s
vllm:prompt_tokens_by_source_total{engine="0",source="local_compute"} 999
vllm:num_requests_kv_fetch_by_stage{engine="0",stage="in_progress"} 0
"""
VLLM_PREFILL = """vllm:time_to_first_token_seconds_sum{engine="0"} %(ttft)s
vllm:time_to_first_token_seconds_count{engine="0"} %(n)s
"""


def _page(tpl: str, **kw) -> WorkerReading:
    base = dict(ttft=0.0, n=0, xfer=0.0, bytes=0, failed=0, deferred=0, ext=0)
    return read_worker(Exposition(tpl % {**base, **kw}), "vllm")


def test_read_worker_vllm_names():
    r = _page(VLLM_DECODE, ttft=1.5, n=3, xfer=0.25, bytes=4096, failed=1, deferred=2, ext=512)
    assert (r.ttft_sum_s, r.ttft_count, r.xfer_sum_s, r.bytes_sum) == (1.5, 3, 0.25, 4096)
    assert (r.failed, r.deferred, r.external_tokens, r.consumer) == (1, 2, 512, True)
    assert not _page(VLLM_PREFILL).consumer


def test_sglang_names_ms_to_seconds_and_estimated_bytes():
    text = ("sglang:time_to_first_token_seconds_sum 0\nsglang:time_to_first_token_seconds_count 0\n"
            "sglang:kv_transfer_latency_ms_sum %s\nsglang:kv_transfer_latency_ms_count %s\n"
            "sglang:kv_transfer_speed_gb_s_sum %s\nsglang:kv_transfer_speed_gb_s_count %s\n"
            "sglang:num_transfer_failed_reqs_total 0\n")
    b = read_worker(Exposition(text % (0, 0, 0, 0)), "sglang")
    a = read_worker(Exposition(text % (50, 1, 4, 1)), "sglang")
    assert a.xfer_sum_s == pytest.approx(0.05)
    h = split_hops(0.2, (b, a), (b, a))
    assert h.transfer_s == pytest.approx(0.1)  # both pages counted it: added
    assert h.kv_estimated and h.kv_bytes == pytest.approx(2 * 4e9 * 0.05, rel=1e-6)


def test_split_adds_up_and_router_is_the_rest():
    pb, pa = _page(VLLM_PREFILL), _page(VLLM_PREFILL, ttft=0.2, n=1)
    db = _page(VLLM_DECODE)
    da = _page(VLLM_DECODE, ttft=0.08, n=1, xfer=0.05, bytes=512 * 131072, ext=512)
    h = split_hops(0.30, (pb, pa), (db, da))
    assert h.problem is None and h.complete
    assert (h.prefill_s, h.transfer_s) == (0.2, 0.05)
    assert h.decode_s == pytest.approx(0.03) and h.router_s == pytest.approx(0.02)
    assert h.router_s + h.prefill_s + h.transfer_s + h.decode_s == pytest.approx(0.30)
    assert h.kv_tokens == 512 and h.kv_bytes == 512 * 131072


def test_bad_readings_never_enter_the_split():
    pb, pa = _page(VLLM_PREFILL), _page(VLLM_PREFILL, ttft=0.2, n=1)
    db, da = _page(VLLM_DECODE), _page(VLLM_DECODE, ttft=0.08, n=1)
    # a worker that did not answer
    h = split_hops(0.3, (pb, pa), (None, None))
    assert h.decode_s is None and h.router_s is None and "decode worker" in h.problem
    # another request in the window: not this probe's alone
    h = split_hops(0.3, (pb, _page(VLLM_PREFILL, ttft=0.4, n=2)), (db, da))
    assert h.prefill_s is None and "2 requests" in h.problem
    # a counter that went back (a restart)
    h = split_hops(0.3, (pa, pb), (db, da))
    assert h.prefill_s is None and h.problem
    # hops longer than the client waited: not this probe's readings, none used
    h = split_hops(0.1, (pb, pa), (db, da))
    assert h.problem and "more than the client's" in h.problem and h.prefill_s is None
    # garbage is refused by the page parser, before any reading
    with pytest.raises(ValueError):
        Exposition("<html><body>502</body></html>")


def test_kv_size_per_token_and_the_check():
    shape = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
    assert kv_bytes_per_token(shape) == 32 * 8 * 128 * 2 * 2 == KV_BYTES_PER_TOKEN
    assert kv_bytes_per_token(shape, "fp8") == KV_BYTES_PER_TOKEN // 2
    assert kv_bytes_per_token(None) is None
    ok = kv_figures([(512, 512 * 131072.0, 0.01)], 0, 131072)
    assert ok.check == "ok" and ok.bytes_per_s == pytest.approx(512 * 131072 / 0.01)
    more = kv_figures([(512, 2 * 512 * 131072.0, 0.01)], 0, 131072)
    assert more.check == "more" and "2.00x" in more.words
    fewer = kv_figures([(512, 0.5 * 512 * 131072.0, 0.01)], 0, 131072)
    assert fewer.check == "fewer" and "not sent" in fewer.words
    assert kv_figures([(512, 1.0, 0.01)], 0, None).check == "unknown"


def test_roles_where_the_engine_says_them():
    assert role_from_server_info({"disaggregation_mode": "prefill"}) == ("prefill",
                                                                         "disaggregation_mode")
    assert role_from_server_info({"disaggregation_mode": "null"}) is None
    assert role_from_server_info({"vllm_config": {"kv_transfer_config": {
        "kv_role": "kv_consumer"}}}) == ("decode", "kv_role")
    assert role_from_server_info({"kv_role": "kv_both"}) is None
    assert role_from_server_info("garbage") is None
    assert role_from_labels([{"worker_type": "prefill"}]) == ("prefill", "worker_type")
    assert role_from_labels([{"worker_type": "prefill"}, {"worker_type": "decode"}]) is None
    assert role_from_labels([], consumer=True) == ("decode", "kv_role")
    # a stated role against the flag is said, never swapped
    said = role_notice("prefill", ("decode", "disaggregation_mode"), "http://w:1")
    assert said.startswith("http://w:1 was given as the prefill worker but says it is the decode")
    assert role_notice("decode", ("decode", "kv_role"), "http://w:1") is None


def test_hops_round_trip_in_the_run_file():
    r = ProbeResult(ok=True, ttft_s=0.3, requested_tokens=64,
                    hops=Hops(0.01, 0.2, 0.05, 0.04, kv_bytes=10, kv_tokens=1))
    d = r.to_json()
    assert d["hops"]["transfer_s"] == 0.05
    back = ProbeResult.from_json(json.loads(json.dumps(d)))
    assert back.hops == r.hops and "hops" not in back.extra
    bad = ProbeResult.from_json({**d, "hops": {"router_s": "fast", "prefill_s": -1}})
    assert bad.hops.router_s is None and bad.hops.prefill_s is None


def test_prefill_without_decode_is_a_usage_error(capsys):
    assert main(["sweep", "http://127.0.0.1:9", "--prefill", "http://127.0.0.1:9"]) == 2
    assert "--prefill and --decode go together" in capsys.readouterr().err


# -- on the fake pair, over loopback

def _sweep_json(pair: PdPair, tmp_path, lengths="64,256,512", repeats=2) -> dict:
    out = tmp_path / "run.jsonl"
    args = ["sweep", pair.router, "--prefill", pair.prefill, "--decode", pair.decode,
            "--lengths", lengths, "--repeats", str(repeats), "--no-telemetry",
            "--out", str(out), "--format", "json"]
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(args) == 0
    return json.loads(buf.getvalue()), out


def test_a_probes_ttft_splits_into_hops_that_add_up(tmp_path):
    knobs = PdKnobs(transfer_delay_s=0.02, decode_defer_s=0.01)
    with PdPair(knobs) as pair:
        d, out = _sweep_json(pair, tmp_path)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    probes = [x for x in lines if "hops" in x and not x.get("warmup")]
    assert len(probes) == 6
    for p in probes:
        h = p["hops"]
        assert h["problem"] is None
        total = h["router_s"] + h["prefill_s"] + h["transfer_s"] + h["decode_s"]
        assert total == pytest.approx(p["ttft_s"], rel=0.05)
        # each hop is the worker's own measured time: the knobs are a floor of it
        assert h["transfer_s"] >= 0.02 and h["decode_s"] >= 0.01 + 0.008
        assert h["router_s"] < 0.5 * p["ttft_s"]
    direct = [x for x in lines if x.get("record") == "prefill_probe"]
    assert len(direct) == 6 and all(x["ok"] for x in direct)
    path = d["path"]
    assert path["probes"] == 6 and path["roles"] == {"prefill": "flag", "decode": "kv_role"}
    assert path["kv"]["check"] == "ok"
    assert path["kv"]["bytes_per_token"] == pytest.approx(KV_BYTES_PER_TOKEN, rel=0.01)
    assert path["fits"]["prefill"]["per_token_s"] == pytest.approx(0.0002, rel=0.5)
    assert sum(path["shares"].values()) == pytest.approx(1.0, abs=0.05)


def test_more_bytes_than_the_kv_needs_is_named(tmp_path):
    with PdPair(PdKnobs(bytes_factor=2.0)) as pair:
        d, _ = _sweep_json(pair, tmp_path, repeats=1)
    kv = d["path"]["kv"]
    assert kv["check"] == "more" and kv["ratio"] == pytest.approx(2.0, rel=0.02)
    assert "2.00x the KV the prompt needs" in d["path"]["verdict"]


def test_failed_transfers_are_named_kv_transfer(tmp_path):
    with PdPair(PdKnobs(failed_transfers=100)) as pair:
        d, _ = _sweep_json(pair, tmp_path, repeats=1)
    assert d["path"]["cause"] == "kv_transfer"
    assert "failed" in d["path"]["verdict"] and d["path"]["kv"]["failed_transfers"] >= 3


def test_decode_admission_and_router_named(tmp_path):
    with PdPair(PdKnobs(decode_defer_s=0.25)) as pair:
        d, _ = _sweep_json(pair, tmp_path, repeats=1)
    assert d["path"]["cause"] == "decode_admission"
    with PdPair(PdKnobs(router_delay_s=0.25)) as pair:
        d, _ = _sweep_json(pair, tmp_path, repeats=1)
    assert d["path"]["cause"] == "router"


def test_a_decode_worker_of_garbage_or_no_transfer_series(tmp_path):
    with PdPair(PdKnobs(garbage_metrics=True)) as pair:
        d, out = _sweep_json(pair, tmp_path, repeats=1)
    path = d["path"]
    assert path["probes"] == 0 and path["hops_s"]["prefill_s"] is None
    assert any("decode worker" in p for p in path["problems"])
    assert d["probes"]["ok"] >= 3  # the probes themselves are fine, and in the fit
    with PdPair(PdKnobs(no_transfer_metrics=True)) as pair:
        d, _ = _sweep_json(pair, tmp_path, repeats=1)
    path = d["path"]
    assert path["hops_s"]["transfer_s"] is None and path["hops_s"]["prefill_s"] > 0
    assert any("inside the decode hop" in p for p in path["problems"])


def test_a_worker_down_is_said_and_never_crashes(tmp_path):
    with PdPair() as pair:
        pair.decode_server.script["GET /metrics"] = lambda req: __import__(
            "tests.fakeserver", fromlist=["Reply"]).Reply(drop=True)
        d, _ = _sweep_json(pair, tmp_path, repeats=1)
    assert d["path"]["probes"] == 0 and d["path"]["problems"]


def _watch(pair: PdPair, tmp_path, *, slow_after: int | None, deadline_s: float):
    """Probe the path continuously and judge the verdict after every probe as the
    exporter does (a held expectation over a 40-probe window); returns (verdicts after
    the change with their seconds since it, direct prefill probes before/after)."""
    opts = SessionOptions(probe=ProbeOptions(timeout_s=10.0),
                          design=SweepDesign(lengths=(64, 128, 256, 384), warmup=1, seed=1,
                                            pause_s=0.0),
                          telemetry=TelemetryOptions(enabled=False),
                          run_file=RunFileOptions(path=str(tmp_path / "watch.jsonl")),
                          path=PathOptions(pair.prefill, pair.decode))
    session = build_session(opts, pair.router, continuous=True)
    results: list[ProbeResult] = []
    got = threading.Event()
    runner = session.new_runner(lambda r: (results.append(r), got.set()))
    hold = HeldExpectation()
    verdicts: list[tuple[float, str]] = []
    changed_at = None
    runner.start()
    try:
        end = time.monotonic() + deadline_s
        seen = 0
        while time.monotonic() < end:
            got.wait(2.0)
            got.clear()
            if len(results) == seen:
                continue
            seen = len(results)
            window = [r for r in results if r.ok and not r.warmup][-40:]
            hold.offer(fit_ols([r.tokens for r in window], [r.ttft_s for r in window]), window)
            v = ttft_verdict(window, hold.expectation())
            hold.observe(v, None)
            if changed_at is None and slow_after is not None and len(window) >= slow_after:
                pair.knobs.transfer_delay_s = 0.3
                changed_at, n_before = time.monotonic(), len(session.path.prefill_probes)
            if changed_at is not None:
                verdicts.append((time.monotonic() - changed_at, v.cause))
                if v.cause == "kv_transfer" and len(session.path.prefill_probes) > n_before + 4:
                    break
            elif slow_after is None:
                verdicts.append((0.0, v.cause))
                if len(window) >= 30:
                    break
    finally:
        runner.stop()
        session.close()
    direct = list(session.path.prefill_probes)
    return verdicts, direct, (n_before if changed_at is not None else len(direct))


def test_a_slowed_transfer_is_named_kv_transfer_within_30s(tmp_path):
    with PdPair() as pair:
        verdicts, direct, n_before = _watch(pair, tmp_path, slow_after=15, deadline_s=90)
    named = [t for t, c in verdicts if c == "kv_transfer"]
    assert named, verdicts
    assert named[0] <= 30.0
    # the prefill worker's own line is unchanged: its probes after the change sit on
    # the line fitted before it
    before, after = direct[:n_before], direct[n_before:]
    f = fit_ols([p.tokens for p in before], [p.ttft_s for p in before])
    ratio = statistics.median(p.ttft_s / (f.intercept_s + f.slope_s_per_token * p.tokens)
                              for p in after)
    assert 0.75 < ratio < 1.33


def test_a_control_stays_clean(tmp_path):
    with PdPair() as pair:
        verdicts, _, _ = _watch(pair, tmp_path, slow_after=None, deadline_s=120)
    assert len(verdicts) >= 30
    assert not [c for _, c in verdicts if c in HOP_CAUSES]


# -- the exporter: the TOML and file_sd forms, the series

def test_toml_and_file_sd_forms_of_a_path(tmp_path):
    from prefilltui.exporter.config import load_toml
    from prefilltui.exporter.discovery import parse_groups
    from prefilltui.exporter.config import TargetConfig

    f = tmp_path / "t.toml"
    f.write_text('[[target]]\nurl = "http://r:8000"\nname = "pd-a"\n'
                 'prefill = "http://p:8100"\ndecode = "http://d:8200"\n')
    (t,) = load_toml(str(f))
    assert (t.url, t.prefill, t.decode) == ("http://r:8000", "http://p:8100", "http://d:8200")
    f.write_text('[[target]]\nurl = "http://r:8000"\nprefill = "http://p:8100"\n')
    with pytest.raises(ValueError, match="prefill and decode go together"):
        load_toml(str(f))
    base = TargetConfig(url="http://unset")
    doc = [{"targets": ["r:8000"], "labels": {"__prefilltui_path": "pd-a",
                                              "__prefilltui_role": "router"}},
           {"targets": ["p:8100"], "labels": {"__prefilltui_path": "pd-a",
                                              "__prefilltui_role": "prefill"}},
           {"targets": ["d:8200"], "labels": {"__prefilltui_path": "pd-a",
                                              "__prefilltui_role": "decode"}},
           {"targets": ["solo:8000"]}]
    got = parse_groups(doc, "sd.json", base)
    pd = next(t for t in got if t.prefill)
    assert (pd.label, pd.url, pd.prefill, pd.decode) == ("pd-a", "http://r:8000",
                                                         "http://p:8100", "http://d:8200")
    assert [t.url for t in got if not t.prefill] == ["http://solo:8000"]
    with pytest.raises(ValueError, match="path 'pd-a' needs one router, one prefill and one "
                                         "decode entry"):
        parse_groups(doc[:2], "sd.json", base)
    with pytest.raises(ValueError, match="__prefilltui_role"):
        parse_groups([{"targets": ["r:1"], "labels": {"__prefilltui_path": "x",
                                                      "__prefilltui_role": "gateway"}}],
                     "sd.json", base)


def test_the_exporter_publishes_the_hops(tmp_path):
    from prefilltui.exporter.collector import families
    from prefilltui.exporter.config import check, target
    from prefilltui.exporter.target import TargetProber

    with PdPair(PdKnobs(failed_transfers=2)) as pair:
        cfg = check(target(pair.router, name="pd-a", lengths=(64, 256), interval=0.05,
                           prefill=pair.prefill, decode=pair.decode))
        p = TargetProber(cfg, run_dir=tmp_path, seed=3).start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                    p.snapshot.path is not None and p.snapshot.path.probes >= 6):
                time.sleep(0.1)
        finally:
            p.stop(timeout=5)
    fams = {f.name: f for f in families([p.snapshot])}
    hops = {s.labels["hop"]: s.value for s in fams["prefilltui_path_hop_seconds"].samples}
    assert set(hops) == {"router", "prefill", "transfer", "decode"} and hops["prefill"] > 0
    shares = [s.value for s in fams["prefilltui_path_hop_share_ratio"].samples]
    assert sum(shares) == pytest.approx(1.0)
    (exp,) = fams["prefilltui_kv_expected_bytes_per_token"].samples
    assert exp.value == KV_BYTES_PER_TOKEN
    (bpt,) = fams["prefilltui_kv_transfer_bytes_per_token"].samples
    assert bpt.value == pytest.approx(KV_BYTES_PER_TOKEN, rel=0.01)
    failed = [s for s in fams["prefilltui_kv_transfer_failed"].samples
              if s.name.endswith("_total")]
    assert failed[0].value == 2
    roles = {s.labels["role"] for s in fams["prefilltui_path_worker_info"].samples}
    assert roles == {"router", "prefill", "decode"}
    # the verdict's state set offers the hop causes
    states = {s.labels["prefilltui_ttft_cause"] for s in fams["prefilltui_ttft_cause"].samples}
    assert {"kv_transfer", "decode_admission", "router"} <= states


def test_the_demo_connectors_load_series_are_the_transfer():
    """Shaped on the real vLLM 0.32 CPU pair's pages (prefilltui's ExampleConnector
    subclass; both instances register its series, the prefill's stay 0): one probe of a
    1,273-token prompt moved 1,152 tokens (whole 128-token blocks) of SmolLM2-135M's KV,
    30 layers x 3 KV heads x 64 x 2 x 2 B = 23,040 B a token."""
    page = ('vllm:time_to_first_token_seconds_sum{engine="0"} %s\n'
            'vllm:time_to_first_token_seconds_count{engine="0"} %s\n'
            'vllm:example_connector_load_time_seconds_sum{engine="0"} %s\n'
            'vllm:example_connector_load_time_seconds_count{engine="0"} %s\n'
            'vllm:example_connector_load_bytes_sum{engine="0"} %s\n'
            'vllm:prompt_tokens_by_source_total{engine="0",source="external_kv_transfer"} %s\n')
    rd = lambda *v: read_worker(Exposition(page % v), "vllm")  # noqa: E731
    h = split_hops(0.62, (rd(0, 0, 0, 0, 0, 0), rd(0.45, 1, 0, 0, 0, 0)),
                   (rd(0, 0, 0, 0, 0, 0), rd(0.11, 1, 0.04, 1, 1152 * 23040, 1152)))
    assert h.problem is None and h.transfer_s == pytest.approx(0.04)
    assert h.decode_s == pytest.approx(0.07) and h.router_s == pytest.approx(0.06)
    shape = lookup_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    kv = kv_figures([(h.kv_tokens, float(h.kv_bytes), h.transfer_s)], 0, kv_bytes_per_token(shape))
    assert kv.expected_bytes_per_token == 23040 and kv.check == "ok" and kv.ratio == 1.0
