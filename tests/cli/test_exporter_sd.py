"""The exporter as a process following a file_sd file: a new target
starts within one refresh, a removed one's series leave /metrics, a half-written file
keeps the running targets and says why (log line and prefilltui_sd_* series), and the
start says what a restart of this shard loses."""

from __future__ import annotations

import json
import os
import re
import signal
import time

from tests.cli.test_exporter_cli import _start_exporter
from tests.unit.test_exporter import _get, _wait, prefill_server


def _write(path, entries):
    tmp = path.with_suffix(".new")
    tmp.write_text(json.dumps([{"targets": entries, "labels": {"__prefilltui_interval": "0.2",
                                                               "__prefilltui_lengths": "16,64"}}]))
    os.replace(tmp, path)



def _watch(port, tmp_path):
    """(the exporter's stderr so far, whether a target is up, its /metrics URL)."""
    url = f"http://127.0.0.1:{port}/metrics"

    def log():
        return (tmp_path / "stderr.txt").read_text()

    def up(name):
        return re.search(rf'prefilltui_target_up{{[^}}]*target="{re.escape(name)}"}} 1\.0',
                         _get(url)[1]) is not None
    return log, up, url

def test_the_exporter_follows_its_file_sd_file(fake_server, tmp_path):
    srv = prefill_server(fake_server)
    a, b = f"{srv.base_url}/", srv.base_url.replace("127.0.0.1", "localhost")
    sd = tmp_path / "sd.json"
    _write(sd, [a])
    with _start_exporter(["--file-sd", str(sd), "--sd-refresh", "0.5",
                          "--shard", "0/1", "--run-dir", str(tmp_path / "r")],
                         tmp_path=tmp_path) as (proc, port):
        log, up, url = _watch(port, tmp_path)
        assert port is not None, log()
        assert _wait(lambda: "shard 0/1: 1 of 1 listed targets" in log(), timeout=10)
        assert "a restart loses these 1 windows" in log()
        assert _wait(lambda: up(a), timeout=30)
        _write(sd, [a, b])
        assert _wait(lambda: up(b), timeout=30), log()
        assert "reloaded service discovery: 1 added, 0 removed" in log()
        sd.write_text('[{"targets": ["http://x')  # a writer caught mid-write
        assert _wait(lambda: "the last good list is kept: 2 kept" in log(), timeout=10)
        refused = r'^prefilltui_sd_last_refresh_ok\{source="[^"]+"\} 0\.0$'
        assert _wait(lambda: re.search(refused, _get(url)[1], re.M), timeout=10)  # 1 s cache
        assert re.search(r'^prefilltui_sd_targets\{source="[^"]+"\} 2\.0$', _get(url)[1], re.M)
        assert up(a) and up(b) and proc.poll() is None
        _write(sd, [b])
        assert _wait(lambda: f'target="{a}"' not in _get(url)[1], timeout=10)
        assert up(b)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert "Traceback" not in log()


def test_a_file_truncated_to_zero_bytes_keeps_the_target_until_the_new_list(fake_server,
                                                                           tmp_path):
    """The handed case: one good target; a writer truncates the file to 0 bytes, waits,
    then writes a new list.  The empty file is a file being written: the target keeps
    probing, the refusal is counted and said; the new list then applies."""
    srv = prefill_server(fake_server)
    a, b = f"{srv.base_url}/", srv.base_url.replace("127.0.0.1", "localhost")
    sd = tmp_path / "targets.json"
    _write(sd, [a])
    with _start_exporter(["--file-sd", str(sd), "--sd-refresh", "0.5",
                          "--run-dir", str(tmp_path / "r")], tmp_path=tmp_path) as (proc, port):
        log, up, url = _watch(port, tmp_path)
        assert port is not None, log()
        assert _wait(lambda: up(a), timeout=30), log()
        with open(sd, "w"):
            pass  # truncated to 0 bytes
        assert _wait(lambda: "targets.json: empty" in log()
                     and "the last good list is kept: 1 kept" in log(), timeout=10), log()
        failures = r'^prefilltui_sd_refresh_failures_total\{source="[^"]+"\} 1\.0$'
        assert _wait(lambda: re.search(failures, _get(url)[1], re.M), timeout=10)
        time.sleep(2.0)  # the writer's wait: four refreshes of the empty file
        page = _get(url)[1]
        assert re.search(r'^prefilltui_sd_targets\{source="[^"]+"\} 1\.0$', page, re.M)
        assert re.search(failures, page, re.M)  # one refusal: unchanged, not read again
        assert up(a) and "reloaded service discovery" not in log()
        _write(sd, [b])  # the new list
        assert _wait(lambda: up(b), timeout=30), log()
        assert _wait(lambda: f'target="{a}"' not in _get(url)[1], timeout=10)
        assert "reloaded service discovery: 1 added, 1 removed" in log()
        proc.send_signal(signal.SIGTERM)  # a graceful stop, for the Traceback check
        proc.wait(10)
    assert "Traceback" not in log()
