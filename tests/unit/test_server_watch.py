"""The exporter sees the server restart behind its URL: the fake engine (vLLM-named
/metrics with ``process_start_time_seconds`` and ``vllm:cache_config_info``) stopped and
a new one started on the same port with prefix caching off.  Within two probes of the
new server the target's snapshot, its ``/metrics`` families, the verdict's evidence and
the run file all carry one restart naming ``enable_prefix_caching True → False``.
Also the watch's own rules: the stated facts read at most every 30 s."""

from __future__ import annotations

import asyncio
import time

from prometheus_client.core import Metric

from prefilltui.exporter.collector import families
from prefilltui.exporter.config import check, target
from prefilltui.exporter.target import TargetProber
from prefilltui.measure.runfile import read_run, read_server_changes
from prefilltui.measure.server_watch import STATED_EVERY_S, ServerWatch, read_stated
from prefilltui.model.server_change import ServerReading
from tests.unit.test_exporter import _wait
from tests.fakeengine import Engine, EngineServer
from tests.fakeserver import Reply




def _samples(fams: list[Metric], name: str) -> dict[tuple, float]:
    fam = next(f for f in fams if f.name == name)
    return {tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("target", "model"))):
            s.value for s in fam.samples if s.name.endswith("_total") or s.name == name}


def _engine() -> Engine:
    return Engine(step_s=0.002, per_token_s=0.00002)


def test_exporter_sees_a_restart_with_its_config_diff(tmp_path):
    old = EngineServer(_engine()).__enter__()
    old._t0 -= 120.0  # its process started two minutes ago (the new one: now)
    port = old.port
    cfg = check(target(old.base_url, name="t", lengths=(16, 64), interval=0.3))
    p = TargetProber(cfg, run_dir=tmp_path, seed=3).start()
    new = None
    try:
        watch = p.session.server_watch
        # the old server known: its start time and its stated facts read once
        assert _wait(lambda: p.snapshot.server_start_time_s is not None
                     and watch.tracker._last_stated is not None)
        assert abs(p.snapshot.server_start_time_s - old._t0) < 0.02
        old.__exit__(None, None, None)  # the redeploy: stop it, start another there
        eng = _engine()
        eng.cache_enabled = False
        new = EngineServer(eng, port=port).__enter__()
        restarted = time.time()
        assert _wait(lambda: dict(p.snapshot.server_changes).get("restart") == 1)
        published = time.time()
        results = list(p.runner.results)
        ev = p._users_evidence()
    finally:
        p.stop(timeout=3)
        if new is not None:
            new.__exit__(None, None, None)
    (change,) = ev.server_changes
    assert change.kind == "restart"
    assert ("enable_prefix_caching", "True", "False") in change.changed
    assert abs(change.at_s - new._t0) < 0.02  # the new process's own start time
    # seen within two probes of the new server (each probe scrapes before and after)
    probes_between = [r for r in results if restarted <= (r.started_at or 0) <= change.seen_s]
    print(f"restart -> published {published - restarted:.2f} s, {len(probes_between)} probe(s)")
    assert len(probes_between) <= 2, (probes_between, published - restarted)
    fams = families([p.snapshot])
    assert _samples(fams, "prefilltui_server_changes") == {
        (("kind", "config"),): 0, (("kind", "replicas"),): 0, (("kind", "restart"),): 1,
        (("kind", "upstream_switch"),): 0}
    started = next(f for f in fams if f.name == "prefilltui_server_start_time_seconds")
    assert abs(started.samples[0].value - new._t0) < 0.02
    # the run file keeps it as a record of its own; the probes still read as before
    changes, problems = read_server_changes(p.writer.path)
    assert changes == [change] and problems == []
    probes, bad = read_run(p.writer.path)
    assert probes and bad == []


def test_stated_facts_read_at_most_every_30_s_unless_a_change_is_pending():
    calls: list[str] = []
    with EngineServer(_engine()) as srv:
        def version(req):
            calls.append("v")
            return Reply.json({"version": "0.32.0"})

        srv.script["GET /version"] = version
        t = [1_800_000_000.0]
        watch = ServerWatch(clock=lambda: t[0])

        class Client:  # what the hook reads of a probe client
            root = srv.base_url
            info = type("I", (), {"kind": "vllm"})()

        async def run() -> None:
            import httpx

            async with httpx.AsyncClient() as http:
                Client.http = http
                for _ in range(3):
                    await watch.before_probe(Client())
                    await watch.after_probe(None)
                assert calls == ["v"]  # the first read, then not again within 30 s
                watch._stated_at -= STATED_EVERY_S
                await watch.after_probe(None)
                assert calls == ["v", "v"]
                # a new state pending on /metrics: read again at once (after 1 s)
                watch.feed(ServerReading.make(t[0], start_time_s=1.7e9))
                watch.feed(ServerReading.make(t[0] + 1, start_time_s=1.7e9 + 50))
                assert watch.tracker.wants_stated
                watch._stated_at -= 1.0
                await watch.after_probe(None)
                assert calls == ["v", "v", "v"]
                r = await read_stated(http, srv.base_url, "vllm", at_s=t[0])
                assert r.fact_map == {"model": "fake-engine", "max_model_len": 16384,
                                      "version": "0.32.0"}
                r = await read_stated(http, "http://127.0.0.1:1", "vllm", timeout=1.0)
                assert r is None  # nothing answered: no reading, no error

        asyncio.run(run())
