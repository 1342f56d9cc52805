"""A real Prometheus scrapes ``prefilltui exporter`` probing the real llama-server.

``prefilltui sweep`` measures the demo target's prefill throughput; then the exporter
probes the same target with the same lengths (never at the same time: one server
slot), a Prometheus (Debian's ``prometheus`` package; .ci/run installs it) on loopback
scrapes it every second, and the throughput series read back through Prometheus' HTTP
API must be within 10 % of the sweep's; a second sweep brackets it.  Prompts stay <=
512 tokens (the CPU target does ~150-200 prompt tokens/s): about 1.5 minutes per cycle.
"""

from __future__ import annotations

import json
import os
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


def _query(prom: str, expr: str, at: float | None = None) -> list[dict]:
    """An instant query through Prometheus' HTTP API (at unix time ``at``, else now)."""
    args = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode(args)
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


def _sweep(url: str, path: Path, capsys) -> float:
    """``prefilltui sweep``'s robust-fit throughput (prompt tokens/s) on ``url``."""
    rc = main(["sweep", url, "--lengths", LENGTHS, "--repeats", "3", "--format", "json",
               "--no-telemetry", "--seed", "5", "--out", str(path)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    tps = json.loads(cap.out)["fit"]["prefill_tokens_per_s"]
    assert tps and tps > 0
    return tps


def _exporter_through_prometheus(url: str, port: int, prom: str, tmp_path: Path) -> dict:
    """Run the exporter on ``port`` until its window is full and Prometheus has scraped
    it, stop it (SIGTERM: exit 0), and return Prometheus' answers from just before."""
    err_path = tmp_path / "exporter.stderr"
    with open(err_path, "w") as err:
        exporter = subprocess.Popen(
            [sys.executable, "-m", "prefilltui", "exporter", url, "--listen", f"127.0.0.1:{port}",
             "--interval", "0.2", "--lengths", LENGTHS, "--window", str(WINDOW), "--seed", "5",
             "--run-dir", str(tmp_path / "runs")],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    sel = f'{{job="prefilltui",target="{url}"}}'
    try:
        def full():
            try:
                return _query(prom, f"prefilltui_fit_window_probes{sel} >= {WINDOW}")
            except OSError:  # Prometheus not listening yet (URLError is an OSError)
                return None
        _wait_for(full, 600, "Prometheus to hold a full window of probes")
        time.sleep(2.5)  # two more scrapes
        at = time.time() - 0.5  # before the SIGTERM: the series go stale after it
    finally:
        rc = _stop(exporter)
    assert rc == 0, err_path.read_text()[-2000:]
    q = lambda expr: _query(prom, expr, at)  # noqa: E731
    return {"at": at, "expr": f"prefilltui_prefill_throughput_tokens_per_second{sel}",
            "result": q(f"prefilltui_prefill_throughput_tokens_per_second{sel}"),
            "failed": q(f'sum(prefilltui_probes_total{{outcome="failed",target="{url}"}})'),
            "up": q(f"prefilltui_target_up{sel}")}


@pytest.mark.timeout(1800)  # up to 3 cycles; ~1.5 min each on a quiet 2-core machine
def test_prometheus_reads_the_sweeps_throughput(llama_server, prometheus_binary, tmp_path,
                                                capsys):
    """Sweep, exporter (through Prometheus), sweep again: the exporter's figure must be
    within 10 % of the two sweeps' mean.  The CPU target's speed follows the machine's
    load, so the two sweeps bracket the exporter's run; when they disagree by more than
    10 % themselves the load changed in between and the cycle is run again (3 at most)."""
    url = llama_server.base_url
    port, prom_port = _free_port(), _free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {ROOT / 'deploy' / 'prefilltui-alerts.yml'}\n"
        "scrape_configs:\n  - job_name: prefilltui\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
    with open(tmp_path / "prometheus.log", "w") as prom_log:
        prom_proc = subprocess.Popen(
            [prometheus_binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=prom_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    prom = f"http://127.0.0.1:{prom_port}"
    cycles = []
    try:
        for i in range(3):
            before = _sweep(url, tmp_path / f"sweep-{i}a.jsonl", capsys)
            got = _exporter_through_prometheus(url, port, prom, tmp_path)
            after = _sweep(url, tmp_path / f"sweep-{i}b.jsonl", capsys)
            cycles.append({"sweeps": [before, after], **got})
            if abs(before - after) <= AGREEMENT * (before + after) / 2:
                break
    finally:
        _stop(prom_proc)
    last = cycles[-1]
    report = {"query": last["expr"], "time": last["at"], "result": last["result"],
              "sweep_prefill_tokens_per_s": last["sweeps"], "cycles": len(cycles)}
    (tmp_path / "prometheus-query.json").write_text(json.dumps(report, indent=2))
    print("\nPrometheus query result:", json.dumps(report, indent=2))
    b, a = last["sweeps"]
    assert abs(b - a) <= AGREEMENT * (a + b) / 2, (
        f"the machine's load changed during every cycle: sweeps {[c['sweeps'] for c in cycles]}")
    result = last["result"]
    assert len(result) == 1 and result[0]["metric"]["model"], result
    got = float(result[0]["value"][1])
    ref = (a + b) / 2
    assert abs(got / ref - 1) <= AGREEMENT, (
        f"exporter {got:.1f} vs sweep {ref:.1f} prompt tokens/s (sweeps {a:.1f}, {b:.1f})")
    assert float(last["failed"][0]["value"][1]) == 0.0
    assert float(last["up"][0]["value"][1]) == 1.0
