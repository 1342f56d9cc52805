"""One key decides a target's shard and the route of its ``/probe`` scrape: its file
entry (Prometheus' ``__address__``), whatever labels its group carries.

The handed case: 3 replicas, four targets, two of them named (``__prefilltui_name``).
The exporter used to shard a named target by its name while the chart's ``/probe``
job routed it by its entry: ``gpu-a0`` below hashes to shard 1 by name and 2 by entry,
so its scrape went to a replica that does not probe it (404).  Here the chart's own
rendered relabel rules are applied, as Prometheus applies them, to each target of its
own rendered targets file, and each scrape must land on the replica whose ``--shard``
keeps that target, at ``/probe`` over http, asking for a value that replica finds.
A real Prometheus does the same in ``test_helm_prometheus.py``.
"""

from __future__ import annotations

import hashlib
import json
import re

import yaml

from prefilltui.exporter.config import TargetConfig
from prefilltui.exporter.discovery import Shard, decode, parse_groups
from tests.unit.test_helm_chart import objects, render

BASE = TargetConfig(url="http://unset")
#: The handed example: two unnamed entries, two named ones (one with its own
#: __scheme__, which Prometheus would also apply to the /probe scrape of the replica).
HANDED = [
    {"targets": ["http://vllm-0.llm.svc:8000", "vllm-1.llm.svc:8000"],
     "labels": {"__prefilltui_model": "m", "rack": "r7"}},
    {"targets": ["http://gpu-a0.llm.svc:8000"], "labels": {"__prefilltui_name": "gpu-a0"}},
    {"targets": ["gpu-a1.llm.svc:8444"],
     "labels": {"__prefilltui_name": "gpu-a1", "__scheme__": "https",
                "__metrics_path__": "/metrics"}},
]
REPLICAS = [f"10.0.0.{i}:9464" for i in range(3)]


def _hashmod(value: str, n: int) -> int:
    """Prometheus' relabel.go ``HashMod``, spelt out: md5, the digest's last 8 bytes as
    a big-endian uint64, modulo n."""
    return int(hashlib.md5(value.encode()).hexdigest()[16:], 16) % n


def test_the_shard_key_is_the_entry_as_written_never_the_name():
    got = parse_groups(HANDED, "targets.json", BASE)
    keys = {t.label: t.shard_key for t in got}
    assert keys == {"http://vllm-0.llm.svc:8000": "http://vllm-0.llm.svc:8000",
                    "vllm-1.llm.svc:8000": "vllm-1.llm.svc:8000",
                    "gpu-a0": "http://gpu-a0.llm.svc:8000", "gpu-a1": "gpu-a1.llm.svc:8444"}
    # the example's point: by name, both named targets would fall to other shards
    assert [_hashmod("gpu-a0", 3), _hashmod("http://gpu-a0.llm.svc:8000", 3)] == [1, 2]
    assert [_hashmod("gpu-a1", 3), _hashmod("gpu-a1.llm.svc:8444", 3)] == [2, 1]
    owner = {t.label: next(i for i in range(3) if Shard(i, 3).keeps(t)) for t in got}
    assert owner == {label: _hashmod(key, 3) for label, key in keys.items()}
    assert sorted(t.label for i in range(3) for t in Shard(i, 3).select(got)) == sorted(keys)
    # a rename keeps the target where it is
    renamed = [dict(g, labels={**g["labels"], "__prefilltui_name": "gpu-b0"})
               if g["labels"].get("__prefilltui_name") == "gpu-a0" else g for g in HANDED]
    (b0,) = [t for t in parse_groups(renamed, "targets.json", BASE) if t.label == "gpu-b0"]
    assert Shard(owner["gpu-a0"], 3).keeps(b0)
    # a command-line / TOML target: its url, also when named
    assert TargetConfig(url="http://gpu-07:8000", name="gpu-07").shard_key == "http://gpu-07:8000"


def _relabel(labels: dict[str, str], rules: list[dict]) -> dict[str, str]:
    """Prometheus' relabelling (model/relabel/relabel.go) for the actions the chart uses:
    ``replace`` (the default; regex anchored, default ``(.*)``, replacement ``$1``,
    separator ``;``; no match leaves the labels alone) and ``hashmod``."""
    out = dict(labels)
    for r in rules:
        value = r.get("separator", ";").join(out.get(s, "") for s in r.get("source_labels", []))
        action = r.get("action", "replace")
        if action == "hashmod":
            out[r["target_label"]] = str(_hashmod(value, int(r["modulus"])))
            continue
        assert action == "replace", r
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        if m is None:
            continue
        repl = re.sub(r"\$\{?(\d+)\}?", lambda g, m=m: m.group(int(g.group(1))) or "",
                      str(r.get("replacement", "$1")))
        if repl:
            out[r["target_label"]] = repl
        else:
            out.pop(r["target_label"], None)
    return out


def test_the_charts_probe_job_routes_each_target_to_the_replica_that_probes_it():
    values = {"shards": 3, "targets": HANDED,
              "scrapeConfig": {"replicaAddresses": REPLICAS, "targetsPath": "/t/targets.json"}}
    by_name = {o["metadata"]["name"]: o for o in objects(render(values))}
    text = by_name["pt-prefilltui-targets"]["data"]["targets.json"]
    scrape = yaml.safe_load(by_name["pt-prefilltui-scrape-config"]["data"]["prefilltui-scrape.yml"])
    (job,) = [j for j in scrape["scrape_configs"] if j.get("metrics_path") == "/probe"]
    exporter_side = parse_groups(decode(text, "targets.json", True), "targets.json", BASE)
    routed = {}
    for group in json.loads(text):  # what Prometheus' file_sd makes of the same file
        for entry in group["targets"]:
            labels = {"__address__": entry, **group["labels"]}
            # the job's settings fill what a target's labels do not set (scrape.go)
            for k, v in (("__scheme__", job.get("scheme", "http")),
                         ("__metrics_path__", job["metrics_path"])):
                labels.setdefault(k, v)
            routed[entry] = _relabel(labels, job["relabel_configs"])
    assert len(routed) == 4
    for t in exporter_side:
        got = routed[t.entry]
        shard = next(i for i in range(3) if Shard(i, 3).keeps(t))
        assert got["__address__"] == REPLICAS[shard], (t.label, got)
        assert (got["__scheme__"], got["__metrics_path__"]) == ("http", "/probe"), got
        # the replica finds the target by the value asked for (Pages.find's keys)
        assert got["__param_target"].rstrip("/") in {k.rstrip("/") for k in t.lookup_names}
