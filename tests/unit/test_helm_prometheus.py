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
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.components import require
from tests.unit.test_helm_chart import containerfile_entrypoint, objects, render

pytestmark = pytest.mark.component
ROOT = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_prometheus_scrapes_the_rendered_settings_and_routes_probe_by_hashmod(tmp_path):
    prometheus = require("prometheus")
    from tests.bench.fastserver import FastServerProcess

    ports = [_port(), _port()]
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
            conf = tmp_path / "prometheus.yml"
            conf.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, **scrape}))
            prom_port = _port()
            procs.append(subprocess.Popen(
                [prometheus, f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                stdout=open(tmp_path / "prometheus.log", "w"), stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL))
            prom = f"http://127.0.0.1:{prom_port}"
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
                _stop(p)
