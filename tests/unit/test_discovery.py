"""Targets from file_sd / http_sd and the --shard split (exporter/discovery.py)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import time

import pytest

from prefilltui.cli import build_parser
from prefilltui.commands.exporter import make_discovery, targets_from_args
from prefilltui.exporter.config import TargetConfig
from prefilltui.exporter.discovery import (Discovery, FileSource, HttpSource, Shard, decode,
                                           hashmod, parse_groups, sd_metrics)

BASE = TargetConfig(url="http://unset")


def groups(*entries, **labels):
    return [{"targets": list(entries), "labels": labels}]


def parse(doc):
    return parse_groups(doc, "sd.json", BASE)


# -- hashmod, as Prometheus' relabel.go computes it

def _prometheus_hashmod(value: str, n: int) -> int:
    """The rule spelt out from relabel.go's HashMod case: md5 of the joined values,
    bytes 8..15 of the digest read as a big-endian uint64, modulo n."""
    digest = hashlib.md5(value.encode()).hexdigest()
    return int(digest[16:], 16) % n


def test_hashmod_is_prometheus_rule_on_the_joined_values():
    for v in ("http://gpu-01:8000", "vllm-3.vllm.llm.svc:8000", "", "ü"):
        for n in (1, 2, 3, 7, 1000):
            assert hashmod([v], n) == _prometheus_hashmod(v, n)
    assert hashmod(["a", "b"], 5) == _prometheus_hashmod("a;b", 5)  # default separator ';'
    # a value computed by hand: md5("a") = 0cc175b9c0f1b6a8 31c399e269772661
    assert hashmod(["a"], 2**64 - 1) == 0x31C399E269772661 % (2**64 - 1)


def test_shards_split_every_target_exactly_once():
    labels = [f"http://127.0.0.1:8000/t/{i:04d}" for i in range(600)]
    cfgs = [TargetConfig(url=u) for u in labels]
    parts = [Shard(i, 3).select(cfgs) for i in range(3)]
    assert sorted(t.label for p in parts for t in p) == sorted(labels)
    assert all(150 < len(p) < 250 for p in parts)


@pytest.mark.parametrize("text", ["3/3", "-1/2", "1/0", "a/b", "1", "0/20000"])
def test_a_bad_shard_is_refused(text):
    with pytest.raises(ValueError, match="I/N"):
        Shard.parse(text)


def test_the_exporter_command_line_keeps_its_shard(tmp_path):
    urls = [f"http://127.0.0.1:{9000 + i}" for i in range(40)]
    mine = []
    for i in range(4):
        args = build_parser().parse_args(["exporter", *urls, "--shard", f"{i}/4"])
        mine.append({t.label for t in targets_from_args(args)})
    assert set().union(*mine) == set(urls)
    assert sum(map(len, mine)) == len(urls)
    assert mine[1] == {u for u in urls if _prometheus_hashmod(u, 4) == 1}


# -- parsing

def test_entries_and_labels_become_targets():
    doc = groups("http://gpu-01:8000", "gpu-02:8000", __prefilltui_model="llama",
                 __prefilltui_key_env="GPU_KEY", __prefilltui_interval="30",
                 __prefilltui_lengths="64,512", __prefilltui_window="20", rack="r1")
    a, b = parse(doc)
    assert (a.url, a.label) == ("http://gpu-01:8000", "http://gpu-01:8000")
    assert (b.url, b.label) == ("http://gpu-02:8000", "gpu-02:8000")  # label = entry as written
    assert a.probe.model == "llama" and a.roofline.model == "llama"
    assert a.probe.api_key_env == "GPU_KEY"
    assert (a.interval_s, a.lengths, a.window) == (30.0, (64, 512), 20)


def test_scheme_label_and_name_label():
    (t,) = parse(groups("gpu:8443", __scheme__="https", __prefilltui_name="gpu-a"))
    assert (t.url, t.label) == ("https://gpu:8443", "gpu-a")


def test_yaml_and_a_well_formed_empty_list():
    doc = decode("- targets: ['http://a:1']\n  labels: {__prefilltui_model: m}\n", "f.yml", True)
    assert [t.label for t in parse(doc)] == ["http://a:1"]
    assert parse(decode("[]", "f.json", True)) == [] and parse(decode("[]\n", "f.yml", True)) == []


@pytest.mark.parametrize("doc,message", [
    ({"targets": []}, "list of target groups"),
    ([{"targets": "http://a:1"}], "'targets' must be a list"),
    ([{"targets": ["http://a:1"], "extra": 1}], "only 'targets' and 'labels'"),
    (groups("http://a:1", __prefilltui_modle="m"), "unknown label '__prefilltui_modle'"),
    (groups("http://a:1", __prefilltui_interval="fast"), "is not a number"),
    (groups("http://a:1", __prefilltui_interval="0.001"), "interval"),
    (groups("http://a:1", __prefilltui_api_key="sk-123"), "looks like a credential"),
    (groups("http://a:1", auth_token="sk-123"), "looks like a credential"),
    (groups("http://user:pw@a:1"), "carries a credential"),
    (groups("http://a:1/?api_key=sk-123"), "carries a credential"),
    (groups(""), "URL or host:port"),
    (groups("http://a:1", __scheme__="ftp"), "__scheme__"),
])
def test_bad_lists_are_refused_with_the_reason(doc, message):
    with pytest.raises(ValueError, match=message) as e:
        parse(doc)
    assert "sk-123" not in str(e.value) and "pw@" not in str(e.value)


def test_not_json_nor_yaml():
    with pytest.raises(ValueError, match="neither JSON nor YAML"):
        decode('[{"targets": ["x', "f.json", True)
    with pytest.raises(ValueError, match="not JSON"):
        decode("- targets: []", "http_sd", False)  # http_sd is JSON only


# -- the file source, refreshed

def _write(path, doc):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    os.replace(tmp, path)  # as a ConfigMap update or an SD sidecar writes it


def test_a_file_is_followed_and_a_bad_version_keeps_the_last_good_list(tmp_path, caplog,
                                                                        capsys):
    f = tmp_path / "sd.json"
    _write(f, groups("http://a:1", "http://b:1"))
    d = Discovery([FileSource(str(f))], BASE)
    assert d.refresh() is True
    assert [t.label for t in d.targets()] == ["http://a:1", "http://b:1"]
    assert d.refresh() is False  # unchanged: not even read
    assert d.states[0].reads == 1
    _write(f, groups("http://b:1", "http://c:1"))  # a removed, c new
    assert d.refresh() is True
    assert [t.label for t in d.targets()] == ["http://b:1", "http://c:1"]
    _write(f, '[{"targets": ["http://d:1"')  # a writer caught mid-write
    assert d.refresh() is False
    assert [t.label for t in d.targets()] == ["http://b:1", "http://c:1"]
    st = d.states[0]
    assert st.failures == 1 and "neither JSON nor YAML" in st.error
    # logged: to pytest's capture, or to stderr once the CLI has set up its handler
    said = caplog.text + capsys.readouterr().err
    assert "the last good list is kept: 2 kept" in said
    fam = {m.name: m for m in sd_metrics(d, Shard(), 2)}
    assert fam["prefilltui_sd_last_refresh_ok"].samples[0].value == 0
    assert fam["prefilltui_sd_targets"].samples[0].value == 2
    assert fam["prefilltui_sd_refresh_failures"].samples[0].value == 1
    assert fam["prefilltui_shard_targets"].samples[0].labels == {"shard": "0", "shards": "1"}
    _write(f, groups("http://d:1"))  # the writer finished
    assert d.refresh() is True
    assert [t.label for t in d.targets()] == ["http://d:1"] and st.error is None


def test_a_missing_file_is_an_error_not_a_crash(tmp_path):
    d = Discovery([FileSource(str(tmp_path / "none.json"))], BASE)
    assert d.refresh() is False
    assert d.targets() == [] and "No such file" in d.states[0].error


def test_validate_refuses_a_list_and_the_last_good_one_stays(tmp_path):
    f = tmp_path / "sd.json"
    _write(f, groups("http://a:1"))

    def at_most_two(targets):
        if len(targets) > 2:
            raise ValueError(f"{len(targets)} targets: too many")

    d = Discovery([FileSource(str(f))], BASE, validate=at_most_two)
    d.refresh()
    _write(f, groups("http://a:1", "http://b:1", "http://c:1"))
    d.refresh()
    assert [t.label for t in d.targets()] == ["http://a:1"]
    assert "3 targets: too many" in d.states[0].error


def test_the_refresh_thread_calls_on_change_within_one_refresh(tmp_path):
    f = tmp_path / "sd.json"
    _write(f, groups("http://a:1"))
    changed = threading.Event()
    d = Discovery([FileSource(str(f))], BASE, refresh_s=0.05, on_change=changed.set)
    d.refresh()
    d.start()
    try:
        _write(f, groups("http://a:1", "http://b:1"))
        assert changed.wait(10)
        assert len(d.targets()) == 2
    finally:
        d.stop()


def test_make_discovery_reads_the_flags_and_the_shard_applies(tmp_path):
    f = tmp_path / "sd.json"
    entries = [f"http://127.0.0.1:{9000 + i}" for i in range(30)]
    _write(f, groups(*entries))
    args = build_parser().parse_args(["exporter", "--file-sd", str(f), "--shard", "2/3"])
    d = make_discovery(args)
    mine = targets_from_args(args, d.targets())
    assert {t.label for t in mine} == {e for e in entries if _prometheus_hashmod(e, 3) == 2}


# -- http_sd

class _Handler(http.server.BaseHTTPRequestHandler):
    answers: list = []
    seen: list = []

    def do_GET(self):  # noqa: N802 - the stdlib's name
        _Handler.seen.append(dict(self.headers))
        status, body = _Handler.answers.pop(0) if len(_Handler.answers) > 1 else _Handler.answers[0]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def http_sd():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/targets"
    srv.shutdown()
    srv.server_close()


def test_http_sd_is_polled_and_a_failure_keeps_the_last_list(http_sd):
    good = json.dumps(groups("http://a:1")).encode()
    _Handler.answers = [(200, good), (500, b"oops"), (200, b"x" * (4 * 2**20 + 10)),
                        (200, json.dumps(groups("http://b:1")).encode())]
    d = Discovery([HttpSource(http_sd, 30.0)], BASE)
    assert d.refresh() is True and [t.label for t in d.targets()] == ["http://a:1"]
    assert _Handler.seen[-1]["X-Prometheus-Refresh-Interval-Seconds"] == "30"
    d.refresh()
    assert "HTTP 500" in d.states[0].error and len(d.targets()) == 1
    d.refresh()
    assert "larger than 4 MiB" in d.states[0].error and len(d.targets()) == 1
    assert d.refresh() is True and [t.label for t in d.targets()] == ["http://b:1"]


def test_an_http_sd_answer_with_a_byte_order_mark_is_read(http_sd):
    _Handler.answers = [(200, b"\xef\xbb\xbf" + json.dumps(groups("gpu-01:8000")).encode())]
    d = Discovery([HttpSource(http_sd, 30)], BASE)
    d.refresh()
    assert d.states[0].error is None and [t.label for t in d.targets()] == ["gpu-01:8000"]


def test_http_sd_url_credentials_never_show(http_sd):
    src = HttpSource(http_sd.replace("http://", "http://u:secretpw@") + "?token=tok123", 30)
    assert "secretpw" not in src.name and "tok123" not in src.name


def test_an_unreachable_http_sd_says_so_quickly():
    d = Discovery([HttpSource("http://127.0.0.1:9/targets", 30)], BASE)
    t0 = time.monotonic()
    d.refresh()
    assert time.monotonic() - t0 < 11
    assert d.states[0].error and d.targets() == []


def test_the_fleet_overview_reads_file_sd_once_with_its_shard(tmp_path):
    from prefilltui.commands.fleet import fleet_targets

    f = tmp_path / "sd.yml"
    entries = [f"http://127.0.0.1:{9000 + i}" for i in range(12)]
    f.write_text("- targets: [" + ", ".join(entries) + "]\n  labels: {__prefilltui_model: m}\n")
    args = build_parser().parse_args(["watch", "--file-sd", str(f), "--shard", "1/2"])
    got = fleet_targets(args)
    assert {t.label for t in got} == {e for e in entries if _prometheus_hashmod(e, 2) == 1}
    assert {t.probe.model for t in got} == {"m"}
    f.write_text("- targets: [http://u:pw@h:1]\n")
    with pytest.raises(ValueError, match="carries a credential"):
        fleet_targets(build_parser().parse_args(["watch", "--file-sd", str(f)]))


def test_a_discovered_key_that_cannot_be_sent_refuses_the_list(tmp_path, monkeypatch):
    from prefilltui.commands.exporter import _check_discovered

    monkeypatch.setenv("BAD_KEY", "sk-\x01-bad")
    f = tmp_path / "sd.json"
    _write(f, groups("http://127.0.0.1:9001", __prefilltui_key_env="BAD_KEY"))
    args = build_parser().parse_args(["exporter", "--file-sd", str(f)])
    d = make_discovery(args, validate=lambda found: _check_discovered(args, found))
    assert d.targets() == []
    assert "cannot be sent" in d.states[0].error and "sk-" not in d.states[0].error
