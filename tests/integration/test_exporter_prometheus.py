"""A real Prometheus scrapes ``prefilltui exporter`` probing the real llama-server.

``prefilltui sweep`` measures the demo target's prefill throughput first; then the
exporter probes the same target with the same lengths, a Prometheus (Debian's
``prometheus`` package; .ci/run installs it) on loopback scrapes it every second,
and the throughput series read back through Prometheus' HTTP API must be within
10 % of the sweep's.  Prompts stay <= 512 tokens (the CPU target does ~150-200
prompt tokens/s), so the test takes about a minute.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from prefilltui.cli import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = "64,128,256,512"
WINDOW = 12  # three rounds of the four lengths
AGREEMENT = 0.10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(pred, timeout: float, what: str, step: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def _query(prom: str, expr: str) -> list[dict]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        d = json.loads(r.read())
    assert d["status"] == "success", d
    return d["data"]["result"]


def _stop(proc: subprocess.Popen) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
    return proc.returncode


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("the prometheus server is not installed: install Debian's prometheus "
                    "package (.ci/run does when promtool is missing)")
    return path


def test_prometheus_reads_the_sweeps_throughput(llama_server, prometheus_binary, tmp_path,
                                                capsys):
    url = llama_server.base_url
    # 1. the sweep's figure
    rc = main(["sweep", url, "--lengths", LENGTHS, "--repeats", "2", "--format", "json",
               "--no-telemetry", "--seed", "5", "--out", str(tmp_path / "sweep.jsonl")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    sweep_tps = json.loads(cap.out)["fit"]["prefill_tokens_per_s"]
    assert sweep_tps and sweep_tps > 0

    # 2. the exporter, probing the same target with the same lengths
    err_path = tmp_path / "exporter.stderr"
    with open(err_path, "w") as err:
        exporter = subprocess.Popen(
            [sys.executable, "-m", "prefilltui", "exporter", url, "--listen", "127.0.0.1:0",
             "--interval", "0.2", "--lengths", LENGTHS, "--window", str(WINDOW), "--seed", "5",
             "--run-dir", str(tmp_path / "runs")],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    prom_proc = None
    try:
        port = int(_wait_for(lambda: re.search(r"serving http://127\.0\.0\.1:(\d+)/",
                                                err_path.read_text()), 30,
                             "the exporter to listen").group(1))
        # 3. a real Prometheus on loopback scraping it every second
        prom_port = _free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {ROOT / 'deploy' / 'prefilltui-alerts.yml'}\n"
            "scrape_configs:\n  - job_name: prefilltui\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
        prom_log = open(tmp_path / "prometheus.log", "w")
        prom_proc = subprocess.Popen(
            [prometheus_binary, f"--config.file={cfg}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=prom_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        prom = f"http://127.0.0.1:{prom_port}"
        _wait_for(lambda: _query(prom, 'up{job="prefilltui"} == 1'), 60,
                  "Prometheus to scrape the exporter")
        sel = f'{{job="prefilltui",target="{url}"}}'
        _wait_for(lambda: _query(prom, f"prefilltui_fit_window_probes{sel} >= {WINDOW}"), 240,
                  "a full window of probes")
        time.sleep(1.5)  # one more scrape after the window filled
        result = _query(prom, f"prefilltui_prefill_throughput_tokens_per_second{sel}")
        failed = _query(prom, f'sum(prefilltui_probes_total{{outcome="failed",target="{url}"}})')
        up = _query(prom, f"prefilltui_target_up{sel}")
    finally:
        exporter_rc = _stop(exporter)
        if prom_proc is not None:
            _stop(prom_proc)
    report = {"query": f"prefilltui_prefill_throughput_tokens_per_second{sel}",
              "result": result, "sweep_prefill_tokens_per_s": sweep_tps}
    (tmp_path / "prometheus-query.json").write_text(json.dumps(report, indent=2))
    print("\nPrometheus query result:", json.dumps(report, indent=2))
    assert len(result) == 1 and result[0]["metric"]["model"], result
    got = float(result[0]["value"][1])
    assert abs(got / sweep_tps - 1) <= AGREEMENT, (
        f"exporter {got:.1f} vs sweep {sweep_tps:.1f} prompt tokens/s")
    assert float(failed[0]["value"][1]) == 0.0 and float(up[0]["value"][1]) == 1.0
    assert exporter_rc == 0, err_path.read_text()[-2000:]
