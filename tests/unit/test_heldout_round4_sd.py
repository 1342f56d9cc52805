"""Held-out, service discovery: a file_sd / http_sd list nested deeper than
Python's parsers recurse is a bad list like any other (its reason said, the last good
list kept, the exporter's start a usage error), never a RecursionError traceback."""

from __future__ import annotations

import os
import threading

import pytest

from prefilltui.cli import build_parser
from prefilltui.commands.exporter import make_discovery
from prefilltui.exporter.config import TargetConfig
from prefilltui.exporter.discovery import Discovery, FileSource, decode
from prefilltui.model import localfile

BASE = TargetConfig(url="http://unset")
DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_YAML = "a: " + "[" * 100_000 + "]" * 100_000
DEEP_MAP = "{\"a\": " * 50_000 + "1" + "}" * 50_000


@pytest.mark.parametrize("text,yaml_ok", [(DEEP_JSON, False), (DEEP_JSON, True),
                                          (DEEP_YAML, True), (DEEP_MAP, True)],
                         ids=["json-http", "json-file", "yaml", "mapping"])
def test_a_list_nested_past_the_recursion_limit_is_a_named_error(text, yaml_ok):
    with pytest.raises(ValueError) as e:
        decode(text, "sd.json", yaml_ok)
    assert "sd.json" in str(e.value) and "nested" in str(e.value)


def test_a_deeply_nested_file_keeps_the_last_good_list(tmp_path):
    f = tmp_path / "sd.json"
    f.write_text('[{"targets": ["gpu-01:8000"]}]')
    disc = Discovery([FileSource(str(f))], BASE)
    disc.refresh()
    assert [t.label for t in disc.targets()] == ["gpu-01:8000"]
    f.write_text(DEEP_JSON + " ")  # a new size: read again
    assert disc.refresh() is False
    st = disc.states[0]
    assert st.error and "nested" in st.error and st.failures == 1
    assert [t.label for t in disc.targets()] == ["gpu-01:8000"]


def test_the_exporter_start_reads_a_deeply_nested_file_without_a_traceback(tmp_path):
    f = tmp_path / "sd.json"
    f.write_text(DEEP_JSON)
    args = build_parser().parse_args(["exporter", "--file-sd", str(f)])
    disc = make_discovery(args)  # the exporter's first read, before it serves
    assert disc is not None and disc.targets() == []
    assert "nested" in disc.states[0].error and disc.states[0].failures == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_at_the_file_sd_path_is_refused_not_waited_on_forever(tmp_path):
    """A FIFO with no writer at the file_sd path (or the exporter's --config): open()
    blocked for ever, at the exporter's start (nothing served) or in the refresh
    thread (no refresh again)."""
    f = tmp_path / "sd.json"
    os.mkfifo(f)
    disc = Discovery([FileSource(str(f))], BASE)
    done = threading.Event()
    t = threading.Thread(target=lambda: (disc.refresh(), done.set()), daemon=True)
    t.start()
    assert done.wait(5), "the refresh blocked on the FIFO"
    assert "not a regular file" in disc.states[0].error
    with pytest.raises(ValueError, match="not a regular file"):
        localfile.read_text(f)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_the_exporter_config_reads_a_pipe_as_a_shell_gives_it(tmp_path):
    """``prefilltui exporter --config <(envsubst < targets.toml)``: the shell hands a
    pipe, read once at the start (and at a reload); it waits for its writer instead of
    being refused.  The discovery's refresh, which reads its file again and again,
    still refuses one (above)."""
    from prefilltui.exporter.config import load_toml

    f = tmp_path / "targets.toml"
    os.mkfifo(f)
    body = '[[target]]\nname = "a"\nurl = "http://127.0.0.1:9"\n'
    writer = threading.Thread(target=f.write_text, args=(body,), daemon=True)
    writer.start()
    targets = load_toml(str(f))
    writer.join(5)
    assert [t.label for t in targets] == ["a"]
    with pytest.raises(ValueError, match="not a regular file"):
        localfile.read_text(tmp_path)  # a directory: never, pipe or not


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_pipe_whose_writer_is_done_before_the_reader_settles_is_read_whole(tmp_path,
                                                                              monkeypatch):
    """A shell's ``<(...)`` writer is let in by the reader's first open and may write
    everything and close at once.  The reader used to close that descriptor and open
    the FIFO again, blocking: the writer was gone, so it waited for ever (the SIGHUP
    test's exporter hung at its start under load).  The writer is given all the time it
    needs here: the reader's fstat waits until the writer has closed."""
    f = tmp_path / "targets.toml"
    os.mkfifo(f)
    body = "x = 1\n" * 100
    done = threading.Event()

    def writer():
        with open(f, "w") as w:  # opens once the reader's first open is in
            w.write(body)
        done.set()

    real_fstat = os.fstat

    def slow_fstat(fd):
        done.wait(10)  # the writer has written and closed: only the pipe holds the text
        return real_fstat(fd)

    monkeypatch.setattr(localfile.os, "fstat", slow_fstat)
    threading.Thread(target=writer, daemon=True).start()
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(localfile.read_text(f, pipe=True)),
                              daemon=True)
    reader.start()
    reader.join(10)
    assert got == [body], "the reader waited for a writer that had already been and gone"
