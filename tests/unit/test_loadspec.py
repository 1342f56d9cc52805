"""--load and --load-levels: what is accepted, what is refused and why."""

from __future__ import annotations

import pytest

from prefilltui.model.loadspec import LoadSpec, parse_levels, parse_load


def test_decode_and_rate_forms():
    d = parse_load("decode:4")
    assert (d.kind, d.streams, d.prompt_tokens, d.output_tokens) == ("decode", 4, 16, 1024)
    assert d.describe() == "4 decode streams" and d.label() == "decode:4"
    r = parse_load("rate:1.5,tokens:512,out:8,requests:100,for:10m")
    assert (r.kind, r.rate_per_s, r.prompt_tokens, r.output_tokens) == ("rate", 1.5, 512, 8)
    assert (r.max_requests, r.max_s) == (100, 600.0)
    assert r.label() == "rate:1.5,tokens:512,out:8,requests:100,for:600s"
    assert parse_load(r.label()) == r
    assert LoadSpec.from_json(r.to_json()) == r
    assert LoadSpec.from_json({"kind": "nope"}) is None


@pytest.mark.parametrize("text, why", [
    ("", "expected decode:N"), ("decode", "expected decode:N"), ("decode:0", "sends nothing"),
    ("decode:1.5", "whole number"), ("decode:100", "at most 64"), ("rate:2", "tokens:L"),
    ("rate:2,tokens:x", "expected"), ("rate:1000,tokens:8", "at most 100"),
    ("decode:2,tokens:5", "unknown key 'tokens'"), ("decode:2,for:-1s", "expected"),
    ("flood:9", "expected decode:N"), ("decode:2,decode:3", "expected"),
])
def test_bad_specs_say_why(text, why):
    with pytest.raises(ValueError, match=why):
        parse_load(text)


def test_levels():
    assert parse_levels("8,0,2,2,1") == (0.0, 1.0, 2.0, 8.0)
    for bad in ("", "a,1", "-1,2", "inf"):
        with pytest.raises(ValueError):
            parse_levels(bad)
    spec = parse_load("decode:1")
    assert spec.at(4).streams == 4 and not spec.at(0).active
    with pytest.raises(ValueError):
        spec.at(0.5)


def test_bad_load_flags_are_usage_errors(tmp_path, capsys):
    from prefilltui.cli import main

    with pytest.raises(SystemExit) as e:
        main(["sweep", "http://127.0.0.1:9", "--load", "flood:3"])
    assert e.value.code == 2 and "expected decode:N" in capsys.readouterr().err
    code = main(["sweep", "http://127.0.0.1:9", "--load-levels", "0,1.5", "--no-telemetry",
                 "--out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "--load-levels: decode streams must be a whole number" in err
    assert not (tmp_path / "r.jsonl").exists()
