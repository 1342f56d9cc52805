"""The real thing: `prefilltui demo --headless` starts llama-server + SmolLM2-135M,
runs a short sweep (prompts of 32..512 tokens, a handful of probes) and stops the
server.  What a real run must show: every probe ok, prompt tokens as the server
counts them equal to what was asked, no cached tokens, TTFT growing with length,
a positive slope, and no server left afterwards.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlparse

import numpy as np
import pytest
from tests.procwait import gone

LENGTHS = [32, 128, 512]  # 4x apart, so the ordering survives a busy shared machine
REPEATS = 3


@pytest.mark.timeout(900)  # ~20 s on an idle 2-core machine; minutes on a busy one
def test_headless_demo_sweep_on_real_llama_server(tmp_path, llama_server_binary, demo_gguf):
    run = tmp_path / "run.jsonl"
    cmd = [sys.executable, "-m", "prefilltui", "demo", "--headless",
           "--llama-server", str(llama_server_binary), "--gguf", str(demo_gguf),
           "--lengths", ",".join(map(str, LENGTHS)), "--repeats", str(REPEATS),
           "--warmup", "1", "--seed", "7", "--out", str(run), "--no-telemetry"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"

    # the server is gone, and nothing listens on its port any more
    m = re.search(r"llama-server ready at (\S+) \(pid (\d+)", proc.stderr)
    assert m, proc.stderr
    url, pid = m.group(1), int(m.group(2))
    assert gone(pid), f"llama-server {pid} still running after the demo exited"
    with socket.socket() as s:
        assert s.connect_ex((urlparse(url).hostname, urlparse(url).port)) != 0

    lines = [json.loads(x) for x in run.read_text().splitlines() if x.strip()]
    records = [d for d in lines if "requested_tokens" in d and "ok" in d]
    assert records, f"no probe records in {run}"
    bad = [d for d in records if not d["ok"]]
    assert not bad, "failed probes: " + "; ".join(
        f"{d['requested_tokens']} tok: {d['error_kind']} {d['error_message']}" for d in bad)
    probes = [d for d in records if not d.get("warmup")]
    assert sorted(d["requested_tokens"] for d in probes) == sorted(LENGTHS * REPEATS)
    for d in probes:
        # prompt tokens as the server counted them (usage / timings / tokenize), which
        # the prompt builder keeps within 2 % of the request
        assert d["prompt_tokens_source"] in ("usage", "timings", "tokenize"), d
        assert abs(d["prompt_tokens"] - d["requested_tokens"]) <= \
            max(2, 0.02 * d["requested_tokens"]), d
        assert d["cached_tokens"] == 0, d
        assert d["ttft_s"] and d["ttft_s"] > 0

    req = np.array([d["requested_tokens"] for d in probes])
    x = np.array([d["prompt_tokens"] for d in probes], dtype=float)
    y = np.array([d["ttft_s"] for d in probes])
    # TTFT grows with length: the fastest probe at each length (load only adds time)
    # is slower than the fastest at the length below
    fastest = [float(y[req == n].min()) for n in LENGTHS]
    assert all(b > a for a, b in zip(fastest, fastest[1:])), fastest
    slope, intercept = np.polyfit(x, y, 1)
    assert slope > 0, (slope, intercept)
    print(f"TTFT min (s) at {LENGTHS}: {[round(v, 4) for v in fastest]}; "
          f"slope {slope * 1e3:.3f} ms/token -> {1 / slope:.0f} prompt tokens/s")


@pytest.mark.timeout(600)
def test_sigterm_mid_sweep_stops_demo_and_server(tmp_path, llama_server_binary, demo_gguf):
    """SIGTERM while probes are in flight: the demo exits 143 promptly, no server left."""
    cmd = [sys.executable, "-m", "prefilltui", "demo", "--headless",
           "--llama-server", str(llama_server_binary), "--gguf", str(demo_gguf),
           "--lengths", "256", "--repeats", "100", "--warmup", "0",
           "--out", str(tmp_path / "run.jsonl"), "--no-telemetry", "--threads", "1"]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
    pid = None
    try:
        for line in child.stderr:
            m = re.search(r"llama-server ready at \S+ \(pid (\d+)", line)
            if m:
                pid = int(m.group(1))
                break
        assert pid, "the demo never reported a ready server"
        time.sleep(1.0)  # a probe is in flight now
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 143
        assert gone(pid), f"llama-server {pid} still running after SIGTERM"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
