"""``prefilltui status``: one snapshot of a fleet, exit 4 when a target is unhealthy by
the exporter's alert rules, JSON for scripts."""

from __future__ import annotations

import json
import re

from tests.fleetserver import linear_target

from prefilltui.cli import main

FAST = ["--lengths", "16,64,256,1024", "--no-telemetry"]


def test_healthy_fleet_exits_0(fake_server, capsys):
    a, _ = linear_target(fake_server)
    b, _ = linear_target(fake_server, b=3e-5)
    code = main(["status", a.base_url, b.base_url, *FAST])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "healthy: every target" in out and out.count("● ok") == 2
    assert "prefill tok/s" in out.splitlines()[0]
    # the table's "±22%", "5/0" and "0 ✓" in words under each target (a busy machine's
    # timings may leave an interval unbounded)
    words = re.findall(r"^  prefill [\d,]+ tok/s (?:± \d+ % \(95 % interval\)|\(interval not "
                       r"bounded yet\)) · probes 5 ok / 0 failed · cache hits 0 \(the server "
                       r"counted every miss\)$", out, re.M)
    assert len(words) == 2, out


def test_a_dead_target_makes_it_exit_4_and_comes_first(fake_server, capsys):
    a, _ = linear_target(fake_server)
    code = main(["status", a.base_url, "http://127.0.0.1:9", *FAST, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 4
    assert doc["schema"] == "prefilltui.status/1" and doc["healthy"] is False
    assert doc["unhealthy"] == ["http://127.0.0.1:9"]
    dead, live = doc["targets"]  # worst first
    assert dead["status"] == "down" and dead["health"]["findings"][0]["rule"] == "PrefillTargetDown"
    assert live["healthy"] and live["prefill_tokens_per_s"] > 1000
    assert live["summary"]["schema"] == "prefilltui.summary/2"
    assert live["probes"] == 5 and live["failed"] == 0  # one warm-up + 4 lengths


def test_fixed_cost_above_half_a_second_is_unhealthy(fake_server, capsys):
    slow, _ = linear_target(fake_server, a=0.6)
    code = main(["status", slow.base_url, *FAST, "--lengths", "16,64,256,1024,2048",
                 "--repeats", "2"])
    out = capsys.readouterr().out
    assert code == 4 and "PrefillFixedCostHigh" in out and "▲ warn" in out


def test_throughput_below_the_baseline_run(fake_server, tmp_path, capsys):
    fast, _ = linear_target(fake_server, b=2e-5)
    run = tmp_path / "fast.jsonl"
    assert main(["sweep", fast.base_url, *FAST, "--out", str(run)]) == 0
    capsys.readouterr()
    slow, _ = linear_target(fake_server, b=2e-4)  # 10x slower prefill
    code = main(["status", slow.base_url, *FAST, "--repeats", "2", "--baseline", str(run),
                 "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    rules = [f["rule"] for f in doc["targets"][0]["health"]["findings"]]
    assert code == 4 and rules == ["PrefillThroughputBelowBaseline"]
    assert "--baseline run" in doc["targets"][0]["health"]["findings"][0]["text"]


def test_status_reads_the_exporters_toml(fake_server, tmp_path, capsys):
    a, _ = linear_target(fake_server)
    toml = tmp_path / "targets.toml"
    toml.write_text(f'[defaults]\nlengths = [16, 64, 256, 1024]\n\n[[target]]\nurl = "{a.base_url}"\n'
                    'name = "gpu-01"\n\n[[target]]\nurl = "http://127.0.0.1:9"\nname = "gpu-02"\n')
    code = main(["status", "--config", str(toml), "--no-telemetry"])
    out = capsys.readouterr().out
    assert code == 4 and "gpu-02: down" in out and "gpu-01: ok" in out
    assert main(["status"]) == 2  # no target: usage error


def test_status_with_an_objective_lists_replicas_worst_first_and_the_merged_fleet(fake_server, capsys):
    fast, _ = linear_target(fake_server, a=0.002, b=1e-5)
    slow, _ = linear_target(fake_server, a=0.002, b=4e-4)
    # 256 tokens: 4.6 ms on the fast one, 104 ms on the slow one; 1024: 12 / 412 ms
    code = main(["status", fast.base_url, slow.base_url, *FAST, "--slo", "ttft=50ms@p90"])
    out = capsys.readouterr().out
    assert code in (0, 4), out
    block = out[out.index("SLO 50 ms p90, each replica worst first:"):].splitlines()
    slow_line, fast_line, fleet_line = block[1:4]
    assert slow_line.startswith(f"  {slow.base_url}: ") and fast_line.startswith(f"  {fast.base_url}: ")
    assert "probes' requests" in slow_line and "budget left" in slow_line
    assert fleet_line.startswith("  fleet (merged counts): ")
    # merged counts, not an average: the fleet's share is the summed good over summed total
    shares = [float(re.search(r": ([\d.]+) % within", ln).group(1)) for ln in block[1:4]]
    counts = [int(re.search(r", ([\d,]+) (?:probes' )?requests\)", ln).group(1).replace(",", ""))
              for ln in block[1:4]]
    assert counts[2] == counts[0] + counts[1]
    good = shares[0] * counts[0] + shares[1] * counts[1]
    assert abs(shares[2] - good / counts[2]) < 0.1
