"""A redeploy of the real vLLM 0.32 behind one URL, seen by the real exporter's target:
vLLM (random weights, ``--load-format dummy``, prefix caching on: vLLM's default) is
probed every 2 s, then stopped and started again on the same port with
``--no-enable-prefix-caching``.  The target must publish one restart whose changed facts
name ``enable_prefix_caching True → False`` (vLLM's ``vllm:cache_config_info`` labels,
``process_start_time_seconds`` moved), on ``/metrics`` and in the verdict's evidence.

The seconds from the new vLLM answering to the change being published are printed
(docs/server-changes.md quotes them); they include the sweep's back-off after the
probes that failed while vLLM was down.  Two vLLM starts (~1-2 min each on 2 cores),
one vLLM at a time (~3.5 GB).
"""

from __future__ import annotations

import time

import pytest

from prefilltui.exporter.collector import families
from prefilltui.exporter.config import check, target
from prefilltui.exporter.target import TargetProber
from tests.unit.test_exporter import _wait
from prefilltui.measure.runfile import read_run, read_server_changes

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.timeout(1500)]

INTERVAL_S = 2.0




def test_restart_without_prefix_caching_is_named(vllm_target, tmp_path, monkeypatch):
    from prefilltui.demo import server as demo_server
    from prefilltui.demo.vllm import VllmServer

    first = VllmServer(vllm_target, startup_timeout=900).start()
    second = None
    port = first.port
    p = TargetProber(check(target(first.base_url, name="vllm", lengths=(16, 64),
                                  interval=INTERVAL_S)), run_dir=tmp_path, seed=5).start()
    try:
        watch = p.session.server_watch
        # the first vLLM known: its start time from /metrics, its stated facts read once
        assert _wait(lambda: p.snapshot.server_start_time_s is not None
                     and watch.tracker._last_stated is not None, timeout=180)
        before = p.snapshot.server_start_time_s
        first.stop()
        monkeypatch.setattr(demo_server, "free_port", lambda host: port)  # the same URL
        second = VllmServer(vllm_target, startup_timeout=900,
                            extra_args=["--no-enable-prefix-caching"]).start()
        answered = time.time()
        assert _wait(lambda: dict(p.snapshot.server_changes).get("restart", 0) >= 1,
                     timeout=300)
        published = time.time()
        ev = p._users_evidence()
        fams = families([p.snapshot])
    finally:
        p.stop(timeout=5)
        if second is not None:
            second.stop()
        first.stop()
    (change,) = [c for c in ev.server_changes if c.kind == "restart"]
    assert read_server_changes(p.writer.path)[0] == [change]
    probes, _ = read_run(p.writer.path)
    down = [r for r in probes if not r.ok and before < r.started_at < answered]
    first_after = min(r.started_at for r in probes if r.started_at >= answered)
    assert ("enable_prefix_caching", "True", "False") in change.changed, change
    assert change.at_s > before and any("process_start_time_seconds moved" in e
                                        for e in change.evidence), change
    restarts = next(f for f in fams if f.name == "prefilltui_server_changes")
    assert {s.labels["kind"]: s.value for s in restarts.samples
            if s.name.endswith("_total")}["restart"] == 1
    started = next(f for f in fams if f.name == "prefilltui_server_start_time_seconds")
    assert started.samples[0].value == change.at_s
    print(f"\nvLLM restart: answered {answered - change.at_s:.1f} s after its process start; "
          f"change published {published - answered:.1f} s after it answered "
          f"({published - change.at_s:.1f} s after the process start); "
          f"the first probe after it answered started {first_after - answered:.1f} s after it "
          f"({len(down)} probes failed while vLLM was down: the sweep's back-off); "
          f"changed: {change.changed}; evidence: {'; '.join(change.evidence)}")
