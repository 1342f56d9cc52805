"""The exporter with background load: load and stall metrics only for a target whose
config asks for load, the verdict for every target, a bad load spec named."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from prefilltui.exporter.collector import families
from prefilltui.exporter.config import check, load_toml, target
from prefilltui.model.loadspec import parse_load
from prefilltui.exporter.target import TargetProber
from tests.schedserver import SchedServer
from tests.unit.test_exporter import _wait


def _samples(snaps):
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    class C:
        def collect(self):
            return families(snaps)

    reg = CollectorRegistry()
    reg.register(C())
    text = generate_latest(reg).decode()
    return {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}, text


def test_load_metrics_only_when_asked(tmp_path):
    with SchedServer(budget=64, step_s=0.02, per_token_s=0.002) as srv:
        loaded = TargetProber(check(target(srv.base_url, name="loaded", lengths=(24, 124),
                                           interval=0.3,
                                           load=parse_load("decode:2,out:300"))),
                              run_dir=tmp_path, seed=1).start()
        try:
            assert _wait(lambda: loaded.snapshot.load is not None
                         and loaded.snapshot.load.stall_s is not None, timeout=30)
        finally:
            loaded.stop(timeout=5)
        plain = TargetProber(check(target(srv.base_url, name="plain", lengths=(24, 124),
                                          interval=0.05)),
                             run_dir=tmp_path, seed=2).start()
        try:
            assert _wait(lambda: plain.snapshot.ttft_cause is not None, timeout=30)
        finally:
            plain.stop(timeout=5)
        load_sent = [r for r in srv.requests if r.path == "/v1/completions"
                     and r.json["max_tokens"] > 1]
    fig = loaded.snapshot.load
    assert fig.kind == "decode" and fig.requests >= 2 and fig.tokens > 0
    # a 124-token probe beside 2 decodes: capped at one 62-token chunk (124 ms), the
    # whole prompt paid for (248 ms); medians over 24- and 124-token probes
    assert 0.04 < fig.stall_s < 0.2 and fig.stall_s <= fig.excess_s + 0.03
    assert fig.itl_p50_s == pytest.approx(0.02, abs=0.006)
    by, text = _samples([loaded.snapshot])
    assert 'prefilltui_decode_stall_seconds{kind="decode",load_level="2",model=' in text
    assert 'prefilltui_decode_itl_seconds{kind="decode",load_level="2",model=' in text
    assert "prefilltui_load_requests_total" in by and "prefilltui_ttft_cause" in text
    _, text = _samples([plain.snapshot])
    assert "prefilltui_load" not in text and "prefilltui_decode_" not in text
    assert re.search(r'prefilltui_ttft_cause\{[^}]*prefilltui_ttft_cause="', text)
    # the plain target sent only one-token probes
    assert all(r.json.get("ignore_eos") for r in load_sent)
    assert not loaded.session.load.alive


def test_bad_load_in_a_config_names_the_target(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[[target]]\nurl = "http://a"\nname = "gpu-1"\nload = "decode:0"\n')
    with pytest.raises(ValueError, match=r"target 1: load: .*sends nothing"):
        load_toml(str(f))
    f.write_text('[[target]]\nurl = "http://a"\nload = 3\n')
    with pytest.raises(ValueError, match="load: expected decode:N"):
        load_toml(str(f))
