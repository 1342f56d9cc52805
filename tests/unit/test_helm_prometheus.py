"""A real Prometheus runs the chart's rendered scrape settings against the exporter on
loopback: the targets ConfigMap's file_sd file, two replicas started with
the StatefulSet's own arguments (``--shard ORDINAL/2``), and the scrape-config
ConfigMap's two jobs: every replica's /metrics, and each target's /probe page routed to
its replica by Prometheus' ``hashmod``.  Every target must be scraped up through /probe
(a target routed to the wrong replica answers 404: up 0), and seen in exactly one
replica's /metrics.  Then a target removed from the file stops being probed and its
series leave /metrics within one refresh.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from prefilltui.demo.server import free_port
from prefilltui.exporter.discovery import hashmod
from tests.components import require
from tests.procwait import stop
from tests.unit.test_helm_chart import containerfile_entrypoint, objects, render

pytestmark = pytest.mark.component
ROOT = Path(__file__).resolve().parents[2]



def _start_prometheus(prometheus: str, scrape: dict, tmp_path, procs: list) -> str:
    """Real Prometheus on the rendered scrape config (1-s interval), its process added to
    ``procs``; its base URL."""
    conf = tmp_path / "prometheus.yml"
    conf.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, **scrape}))
    prom_port = free_port()
    procs.append(subprocess.Popen(
        [prometheus, f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=open(tmp_path / "prometheus.log", "w"), stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL))
    return f"http://127.0.0.1:{prom_port}"

def _query(prom: str, expr: str) -> list[dict]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())["data"]["result"]


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except OSError as e:
            last = e
        if last is True or (last and not isinstance(last, Exception)):
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def test_prometheus_scrapes_the_rendered_settings_and_routes_probe_by_hashmod(tmp_path):
    prometheus = require("prometheus")
    from tests.bench.fastserver import FastServerProcess

    ports = [free_port(), free_port()]
    with FastServerProcess() as fast:
        names = [f"{fast.base_url}/t/{i}" for i in range(6)]
        sd = tmp_path / "targets.json"
        values = {"shards": 2, "intervalSeconds": 1, "sdRefreshSeconds": 1,
                  "targets": [{"targets": names, "labels": {"__prefilltui_model": "fast-model"}}],
                  "scrapeConfig": {"interval": "1s", "targetsPath": str(sd),
                                   "replicaAddresses": [f"127.0.0.1:{p}" for p in ports]}}
        objs = objects(render(values, namespace="t"))
        by_name = {o["metadata"]["name"]: o for o in objs}
        sd.write_text(by_name["pt-prefilltui-targets"]["data"]["targets.json"])
        scrape = yaml.safe_load(by_name["pt-prefilltui-scrape-config"]["data"]["prefilltui-scrape.yml"])
        (container,) = by_name["pt-prefilltui"]["spec"]["template"]["spec"]["containers"]
        procs = []
        try:
            for i, port in enumerate(ports):
                args = []
                for a in container["args"]:  # the StatefulSet's, with the pod's paths here
                    a = a.replace("$(PREFILLTUI_SHARD_INDEX)", str(i))
                    a = re.sub(r"^--listen=.*", f"--listen=127.0.0.1:{port}", a)
                    a = re.sub(r"^--file-sd=.*", f"--file-sd={sd}", a)
                    a = re.sub(r"^--run-dir=.*", f"--run-dir={tmp_path / f'runs-{i}'}", a)
                    args.append(a)
                # the image's entrypoint (`prefilltui exporter`) then the pod's args
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "prefilltui", *containerfile_entrypoint()[1:], *args],
                    cwd=str(ROOT),
                    stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"exporter-{i}.err", "w"),
                    stdin=subprocess.DEVNULL))
            prom = _start_prometheus(prometheus, scrape, tmp_path, procs)
            job = "pt-prefilltui"

            def every_probe_up():
                up = _query(prom, f'up{{job="{job}-probe"}} == 1')
                return len(up) == len(names) and up

            _wait(every_probe_up, 120, "every /probe scrape to be up")
            _wait(lambda: len(_query(prom, f'prefilltui_target_up{{job="{job}-probe"}} == 1'))
                  == len(names), 120, "every target's probe to succeed")
            # the replicas' /metrics job is scraped on its own clock: a target whose /probe
            # just came up may be in the next /metrics scrape, not yet in the last one
            # (a CI run queried between the two and missed one target)
            def every_target_once():
                seen = _query(prom, f'count by (target) (prefilltui_target_info{{job="{job}"}})')
                return sorted(r["metric"]["target"] for r in seen) == sorted(names) and seen

            seen = _wait(every_target_once, 30, "every target's info series in /metrics")
            assert all(r["value"][1] == "1" for r in seen), seen  # no target in two replicas
            per = _query(prom, f'count by (instance) (prefilltui_target_info{{job="{job}"}})')
            assert len(per) == 2 and all(int(r["value"][1]) >= 1 for r in per)

            # a target leaves the file: no longer probed, its series gone from /metrics
            gone = names[0]
            doc = json.loads(sd.read_text())
            doc[0]["targets"] = names[1:]
            tmp = sd.with_suffix(".new")
            tmp.write_text(json.dumps(doc))
            tmp.replace(sd)

            def dropped():
                pages = [urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=10)
                         .read().decode() for p in ports]
                return all(f'target="{gone}"' not in page for page in pages)

            _wait(dropped, 30, "the removed target's series to leave /metrics")
        finally:
            for p in reversed(procs):
                stop(p)


def _start_replicas(container: dict, ports: list[int], sd: Path, tmp_path: Path) -> list:
    """The StatefulSet's replicas on loopback: its own arguments, the pod's paths here."""
    procs = []
    for i, port in enumerate(ports):
        args = []
        for a in container["args"]:
            a = a.replace("$(PREFILLTUI_SHARD_INDEX)", str(i))
            a = re.sub(r"^--listen=.*", f"--listen=127.0.0.1:{port}", a)
            a = re.sub(r"^--file-sd=.*", f"--file-sd={sd}", a)
            a = re.sub(r"^--run-dir=.*", f"--run-dir={tmp_path / f'runs-{i}'}", a)
            args.append(a)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "prefilltui", *containerfile_entrypoint()[1:], *args], cwd=str(ROOT),
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"exporter-{i}.err", "w"),
            stdin=subprocess.DEVNULL))
    return procs


def _named_entry(base: str, name: str, n: int, taken: set[str]) -> str:
    """An entry under ``base`` whose shard by entry differs from its shard by ``name``
    (so a route by one and a shard by the other would miss it)."""
    for k in range(1000):
        entry = f"{base}/n/{k}"
        if entry not in taken and hashmod([entry], n) != hashmod([name], n):
            taken.add(entry)
            return entry
    raise AssertionError("no such entry")  # pragma: no cover - 1 in 3 fit


def test_named_targets_are_scraped_at_the_replica_that_probes_them(tmp_path):
    """The handed case: 3 replicas, four targets, two named (``__prefilltui_name``
    gpu-a0 / gpu-a1), each named entry picked so that its name hashes to another
    replica than its entry; one named group also carries ``__scheme__: https`` and
    ``__metrics_path__`` (the target's, not the exporter's).  Every target's /probe
    scrape must be up at its own replica, answer only that target's series, and every
    target's series must be in exactly one replica's /metrics."""
    prometheus = require("prometheus")
    from tests.bench.fastserver import FastServerProcess

    n = 3
    ports = [free_port() for _ in range(n)]
    with FastServerProcess() as fast:
        taken: set[str] = set()
        a0 = _named_entry(fast.base_url, "gpu-a0", n, taken)
        a1 = _named_entry(fast.base_url, "gpu-a1", n, taken)
        plain = [f"{fast.base_url}/t/{i}" for i in range(2)]
        groups = [{"targets": plain, "labels": {"__prefilltui_model": "fast-model"}},
                  {"targets": [a0], "labels": {"__prefilltui_model": "fast-model",
                                               "__prefilltui_name": "gpu-a0"}},
                  {"targets": [a1], "labels": {"__prefilltui_model": "fast-model",
                                               "__prefilltui_name": "gpu-a1",
                                               "__scheme__": "https",
                                               "__metrics_path__": "/metrics"}}]
        label_of = {plain[0]: plain[0], plain[1]: plain[1], a0: "gpu-a0", a1: "gpu-a1"}
        sd = tmp_path / "targets.json"
        values = {"shards": n, "intervalSeconds": 1, "sdRefreshSeconds": 1, "targets": groups,
                  "scrapeConfig": {"interval": "1s", "targetsPath": str(sd),
                                   "replicaAddresses": [f"127.0.0.1:{p}" for p in ports]}}
        by_name = {o["metadata"]["name"]: o for o in objects(render(values, namespace="t"))}
        sd.write_text(by_name["pt-prefilltui-targets"]["data"]["targets.json"])
        scrape = yaml.safe_load(by_name["pt-prefilltui-scrape-config"]["data"]["prefilltui-scrape.yml"])
        (container,) = by_name["pt-prefilltui"]["spec"]["template"]["spec"]["containers"]
        procs = _start_replicas(container, ports, sd, tmp_path)
        try:
            prom = _start_prometheus(prometheus, scrape, tmp_path, procs)
            job = "pt-prefilltui"

            def every_probe_up():
                up = _query(prom, f'up{{job="{job}-probe"}} == 1')
                return sorted(r["metric"]["instance"] for r in up) == sorted(label_of) and up

            _wait(every_probe_up, 120, "every /probe scrape to be up")

            def each_probe_page_is_its_own_target():
                got = _query(prom, f'count by (instance, target) '
                                   f'(prefilltui_target_info{{job="{job}-probe"}})')
                pairs = sorted((r["metric"]["instance"], r["metric"]["target"]) for r in got)
                return pairs == sorted(label_of.items()) and got

            _wait(each_probe_page_is_its_own_target, 60, "one target's series per /probe page")

            def every_target_once():
                seen = _query(prom, f'count by (target) (prefilltui_target_info{{job="{job}"}})')
                return sorted(r["metric"]["target"] for r in seen) == sorted(label_of.values()) \
                    and seen

            seen = _wait(every_target_once, 30, "every target's info series in /metrics")
            assert all(r["value"][1] == "1" for r in seen), seen  # no target in two replicas
            # and each in the replica its entry hashes to (the route above went there)
            where = _query(prom, f'prefilltui_target_info{{job="{job}"}}')
            replica = {r["metric"]["target"]: r["metric"]["instance"] for r in where}
            for entry, label in label_of.items():
                assert replica[label] == f"127.0.0.1:{ports[hashmod([entry], n)]}", (label, where)
        finally:
            for p in reversed(procs):
                stop(p)
