"""A file_sd file caught holding no document is a file being written, not "no targets":
the last good list is kept, the refusal counted (``prefilltui_sd_refresh_failures``)
and said (the log line a half-written file gets); only a well-formed ``[]`` empties
the list.  The handed case: one good target, the file truncated to 0 bytes, a wait,
then a new list."""

from __future__ import annotations

import json
import os

import pytest

from prefilltui.exporter.config import TargetConfig
from prefilltui.exporter.discovery import Discovery, FileSource, HttpSource, Shard, decode, sd_metrics

BASE = TargetConfig(url="http://unset")


def _families(d: Discovery) -> dict:
    return {m.name: m.samples[0].value for m in sd_metrics(d, Shard(), len(d.targets()))
            if m.samples}


def _replace(path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_the_handed_sequence_truncated_then_rewritten(tmp_path, caplog, capsys):
    f = tmp_path / "targets.json"
    f.write_text(json.dumps([{"targets": ["http://gpu-01:8000"]}]))
    d = Discovery([FileSource(str(f))], BASE)
    assert d.refresh() is True and [t.label for t in d.targets()] == ["http://gpu-01:8000"]
    with open(f, "w"):
        pass  # the writer truncates it to 0 bytes ...
    assert d.refresh() is False
    assert [t.label for t in d.targets()] == ["http://gpu-01:8000"]  # kept
    st = d.states[0]
    assert st.failures == 1 and "empty" in st.error and "write [] for no target" in st.error
    said = caplog.text + capsys.readouterr().err
    assert "the last good list is kept: 1 kept" in said and "targets.json: empty" in said
    fam = _families(d)
    assert (fam["prefilltui_sd_targets"], fam["prefilltui_sd_last_refresh_ok"],
            fam["prefilltui_sd_refresh_failures"]) == (1, 0, 1)
    for _ in range(3):  # ... waits (refreshes come and go) ...
        assert d.refresh() is False
    assert [t.label for t in d.targets()] == ["http://gpu-01:8000"] and st.failures == 1
    # ... then writes the new list
    f.write_text(json.dumps([{"targets": ["http://gpu-02:8000", "http://gpu-03:8000"]}]))
    assert d.refresh() is True
    assert [t.label for t in d.targets()] == ["http://gpu-02:8000", "http://gpu-03:8000"]
    assert st.error is None and _families(d)["prefilltui_sd_last_refresh_ok"] == 1
    f.write_text("[]")  # a well-formed empty list: no target, as asked
    assert d.refresh() is True and d.targets() == [] and st.error is None


@pytest.mark.parametrize("name,text,why", [
    ("sd.json", "", "empty"),
    ("sd.json", " \n\t\r\n", "empty"),
    ("sd.json", "\ufeff", "empty"),  # a byte-order mark alone (an editor's save)
    ("sd.json", "\ufeff\n  ", "empty"),
    ("sd.yml", "# prefilltui targets, written by the sidecar\n", "empty YAML document"),
    ("sd.yml", "---\n", "empty YAML document"),
    ("sd.yml", "~\n", "empty YAML document"),
    ("sd.json", "null", "JSON null"),
], ids=["zero-bytes", "whitespace", "bom-only", "bom-whitespace", "yaml-comments",
        "yaml-document-marker", "yaml-null", "json-null"])
def test_a_source_with_no_document_keeps_the_last_good_list(tmp_path, name, text, why):
    f = tmp_path / name
    f.write_text(json.dumps([{"targets": ["gpu-01:8000"]}]))
    d = Discovery([FileSource(str(f))], BASE)
    d.refresh()
    _replace(f, text)
    assert d.refresh() is False
    assert [t.label for t in d.targets()] == ["gpu-01:8000"]
    assert why in d.states[0].error and d.states[0].failures == 1
    with pytest.raises(ValueError, match="write \\[\\] for no target"):
        decode(text.removeprefix("\ufeff"), name, True)


def test_a_file_gone_for_a_moment_keeps_the_list_and_is_read_when_back(tmp_path):
    """A writer that deletes the file, then writes it (or a rename caught between its
    unlink and its link): the file is missing for a moment."""
    f = tmp_path / "sd.json"
    f.write_text(json.dumps([{"targets": ["gpu-01:8000"]}]))
    d = Discovery([FileSource(str(f))], BASE)
    d.refresh()
    f.unlink()
    assert d.refresh() is False
    assert [t.label for t in d.targets()] == ["gpu-01:8000"]
    assert "No such file now" in d.states[0].error and d.states[0].failures == 1
    f.write_text(json.dumps([{"targets": ["gpu-01:8000"]}]))  # back, the same list
    assert d.refresh() is False and d.states[0].error is None
    assert [t.label for t in d.targets()] == ["gpu-01:8000"]


def test_an_empty_http_sd_answer_keeps_the_last_good_list():
    class Src(HttpSource):
        def __init__(self, texts):
            super().__init__("http://sd.example/targets", 30.0)
            self.texts = texts

        def read(self):
            return self.texts.pop(0)

    d = Discovery([Src([json.dumps([{"targets": ["gpu-01:8000"]}]), "", "  \n"])], BASE)
    d.refresh()
    d.refresh()
    d.refresh()
    assert [t.label for t in d.targets()] == ["gpu-01:8000"] and d.states[0].failures == 2
