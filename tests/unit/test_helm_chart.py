"""The Helm chart in deploy/helm/prefilltui, checked offline with real tools.

Rendered by Helm's own Go engine without a cluster or a helm binary (``helm-python-sdk``
binds libhelm_c, Helm v4's SDK; the Capabilities it renders against are passed as
``api_versions``, as ``helm template --api-versions`` does).  Every built-in object is
validated against the Kubernetes schemas (``kubernetes-validate``, strict: an unknown
field fails), the Operator's objects against its models
(``cloudcoil-models-prometheus-operator``: parsed, and every field read back, so an
unknown one fails too).  The alert rules and the dashboard have one source: the chart's
``files/`` copies must be byte-identical to ``deploy/``.  Every values.yaml key has a
comment.  With the ``component`` marker: ``promtool check rules`` on the rendered
PrometheusRule's rules, ``yamllint`` on the chart's YAML and the rendered manifests.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.components import require

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "prefilltui"
OPERATOR = "monitoring.coreos.com/v1"
#: Kubernetes release the built-in objects are validated against (the chart needs
#: >= 1.27; the pod-index label it reads is on by default from 1.28).
KUBE_VERSION = "1.30"
EXAMPLE_TARGETS = [{"targets": ["http://vllm-0.vllm.llm.svc:8000", "vllm-1.vllm.llm.svc:8000"],
                    "labels": {"__prefilltui_model": "meta-llama/Llama-3.1-8B-Instruct",
                               "__prefilltui_key_env": "VLLM_API_KEY"}}]
EVERYTHING = {"targets": EXAMPLE_TARGETS, "apiKeysSecret": "llm-keys",
              "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
              "probe": {"enabled": True}, "httpSdUrl": "http://sd.example.svc/targets"}


def render(values: dict | None = None, *, api_versions: tuple[str, ...] = (OPERATOR,),
           name: str = "pt", namespace: str = "monitoring") -> dict[str, str]:
    """template path -> rendered text (Helm's engine, offline)."""
    helm = pytest.importorskip("helm_python")
    from helm_python import _native  # render()'s options lack api_versions; its C call has it

    opts = {"name": name, "namespace": namespace, "is_install": True,
            "api_versions": list(api_versions)}
    with helm.Chart.load(str(CHART)) as chart:
        return json.loads(_native.call_string("helm_render", chart._raw(),
                                              json.dumps(values or {}), json.dumps(opts)))


def objects(rendered: dict[str, str]) -> list[dict]:
    return [d for path, text in sorted(rendered.items()) if path.endswith((".yaml", ".yml"))
            for d in yaml.safe_load_all(text) if d]


def kinds(objs: list[dict]) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs)


def test_the_chart_renders_every_object_with_the_operator():
    objs = objects(render(EVERYTHING | {"probe": {"enabled": True}}))
    assert kinds(objs) == sorted([
        "ConfigMap/pt-prefilltui-dashboard", "ConfigMap/pt-prefilltui-scrape-config",
        "ConfigMap/pt-prefilltui-targets", "NetworkPolicy/pt-prefilltui",
        "Probe/pt-prefilltui", "PrometheusRule/pt-prefilltui", "Service/pt-prefilltui",
        "ServiceAccount/pt-prefilltui", "ServiceMonitor/pt-prefilltui",
        "StatefulSet/pt-prefilltui"])


def test_helm_lint_finds_no_warning_or_error():
    helm = pytest.importorskip("helm_python")
    report = helm.lint(str(CHART), EVERYTHING, strict=True, kube_version="v1.30.0")
    assert report["errors"] == []
    # severity 2 = warning, 3 = error; 1 = info ("icon is recommended")
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_operator_objects_need_the_capability_even_when_enabled():
    objs = objects(render(EVERYTHING, api_versions=()))
    assert not [o for o in objs if o["apiVersion"] == OPERATOR]
    assert "StatefulSet/pt-prefilltui" in kinds(objs)


def test_a_probe_with_several_shards_is_refused_with_the_reason():
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError, match="probe.enabled needs shards: 1"):
        render({"shards": 3, "probe": {"enabled": True}})


def _statefulset(objs):
    (sts,) = [o for o in objs if o["kind"] == "StatefulSet"]
    return sts


def test_the_statefulset_runs_non_root_read_only_with_probes_and_its_shard():
    objs = objects(render({"shards": 3, "targets": EXAMPLE_TARGETS}))
    sts = _statefulset(objs)
    assert sts["spec"]["replicas"] == 3
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}
    assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
    assert "--shard=$(PREFILLTUI_SHARD_INDEX)/3" in c["args"]
    (index_env,) = [e for e in c["env"] if e["name"] == "PREFILLTUI_SHARD_INDEX"]
    assert index_env["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['apps.kubernetes.io/pod-index']"
    (svc,) = [o for o in objs if o["kind"] == "Service"]
    assert svc["spec"]["ports"][0]["name"] == "metrics"
    assert svc["spec"]["clusterIP"] == "None"  # per-pod DNS for the /probe routing
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]


def containerfile_entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form) as deploy/Containerfile writes it."""
    (line,) = [ln for ln in (ROOT / "deploy" / "Containerfile").read_text().splitlines()
               if ln.startswith("ENTRYPOINT ")]
    return json.loads(line.removeprefix("ENTRYPOINT "))


def test_the_container_args_parse_as_the_exporters_command_line():
    from prefilltui.cli import build_parser

    c = _statefulset(objects(render({"shards": 3})))["spec"]["template"]["spec"]["containers"][0]
    # Kubernetes' args replace the image's CMD and follow its ENTRYPOINT
    entrypoint = containerfile_entrypoint()
    assert entrypoint[0] == "prefilltui"
    args = [a.replace("$(PREFILLTUI_SHARD_INDEX)", "2") for a in entrypoint[1:] + c["args"]]
    ns = build_parser().parse_args(args)
    assert ns.command == "exporter"
    assert (ns.shard.index, ns.shard.count) == (2, 3)
    assert ns.file_sd == ["/etc/prefilltui/targets.json"]
    assert ns.listen == "0.0.0.0:9464"


def test_every_builtin_object_passes_the_kubernetes_schemas():
    kv = pytest.importorskip("kubernetes_validate")
    for values in (EVERYTHING, {"shards": 3, "targets": EXAMPLE_TARGETS,
                                "networkPolicy": {"from": [{"namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "mon"}}}]}}):
        builtin = [o for o in objects(render(values)) if o["apiVersion"] != OPERATOR]
        assert len(builtin) >= 6
        for o in builtin:
            kv.validate(o, KUBE_VERSION, strict=True)  # raises ValidationError


def test_a_wrong_field_fails_the_kubernetes_schemas():
    """The validator is strict: the check above can fail."""
    kv = pytest.importorskip("kubernetes_validate")
    sts = _statefulset(objects(render()))
    sts["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFileSystem"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(sts, KUBE_VERSION, strict=True)


def _operator_model(kind: str):
    v1 = pytest.importorskip("cloudcoil.models.prometheus_operator.v1")
    return getattr(v1, kind)


def _strip_none(x):
    if isinstance(x, dict):
        return {k: _strip_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_strip_none(v) for v in x]
    return x


def check_operator_object(obj: dict) -> None:
    """Parse ``obj`` with the Operator's model and read every field back: a field the
    model does not know (pydantic ignores it) or a wrong type fails."""
    model = _operator_model(obj["kind"]).model_validate(obj)
    back = _strip_none(model.model_dump(by_alias=True, exclude_unset=True, mode="json"))
    assert back == obj, f"{obj['kind']}: fields the model does not read back"


def test_the_operator_objects_pass_the_operators_models():
    ops = [o for o in objects(render(EVERYTHING)) if o["apiVersion"] == OPERATOR]
    assert sorted(o["kind"] for o in ops) == ["Probe", "PrometheusRule", "ServiceMonitor"]
    for o in ops:
        check_operator_object(o)
    (probe,) = [o for o in ops if o["kind"] == "Probe"]
    assert probe["spec"]["prober"]["path"] == "/probe"
    assert probe["spec"]["targets"]["staticConfig"]["static"] == EXAMPLE_TARGETS[0]["targets"]


def test_a_misspelt_operator_field_fails_its_model():
    (sm,) = [o for o in objects(render(EVERYTHING)) if o["kind"] == "ServiceMonitor"]
    sm["spec"]["endpoints"][0]["scrapeTimeot"] = "10s"
    with pytest.raises(AssertionError, match="read back"):
        check_operator_object(sm)


def test_the_rules_and_dashboard_have_one_source():
    """The chart cannot read outside itself (Helm packages only its own directory), so it
    keeps copies; they must be byte-identical to deploy/ (copy with `make chart-files`)."""
    for name in ("prefilltui-alerts.yml", "grafana-dashboard.json"):
        assert (CHART / "files" / name).read_bytes() == (ROOT / "deploy" / name).read_bytes(), \
            f"deploy/helm/prefilltui/files/{name} differs from deploy/{name}: make chart-files"


def test_the_rendered_rule_and_dashboard_are_the_deploy_files():
    objs = objects(render(EVERYTHING))
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load((ROOT / "deploy" / "prefilltui-alerts.yml").read_text())
    (dash,) = [o for o in objs if o["metadata"]["name"].endswith("-dashboard")]
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dash["data"]["prefilltui-prefill.json"]) == \
        json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())


def test_the_targets_configmap_is_a_file_sd_file_the_exporter_reads():
    from prefilltui.exporter.config import TargetConfig
    from prefilltui.exporter.discovery import decode, parse_groups

    (cm,) = [o for o in objects(render({"targets": EXAMPLE_TARGETS}))
             if o["metadata"]["name"].endswith("-targets")]
    text = cm["data"]["targets.json"]
    got = parse_groups(decode(text, "cm", True), "cm", TargetConfig(url="http://unset"))
    assert [t.label for t in got] == EXAMPLE_TARGETS[0]["targets"]
    assert {t.probe.api_key_env for t in got} == {"VLLM_API_KEY"}


def test_every_values_key_is_documented():
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    prev = ""
    for line in lines:
        if re.match(r"^\s*[A-Za-z_][\w.-]*:", line) and not prev.lstrip().startswith("#"):
            undocumented.append(line.strip())
        if line.strip():
            prev = line
    assert not undocumented, f"values.yaml keys without a comment above: {undocumented}"
    # and every key there is one the chart's templates read (no dead documentation)
    templates = "".join(p.read_text() for p in (CHART / "templates").iterdir())
    top = [m.group(1) for m in re.finditer(r"^([A-Za-z]\w*):", "\n".join(lines), re.M)]
    assert [k for k in top if f".Values.{k}" not in templates] == []


@pytest.mark.component
def test_promtool_checks_the_rendered_prometheusrule(tmp_path):
    require("prometheus")  # promtool comes with it
    (rule,) = [o for o in objects(render(EVERYTHING)) if o["kind"] == "PrometheusRule"]
    f = tmp_path / "rules.yml"
    f.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    r = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"SUCCESS: \d+ rules found", r.stdout + r.stderr)


@pytest.mark.component
def test_yamllint_passes_the_chart_and_its_rendering(tmp_path):
    yamllint = require("yamllint")
    out = tmp_path / "rendered"
    out.mkdir()
    for path, text in render(EVERYTHING).items():
        if path.endswith(".yaml") and text.strip():
            (out / Path(path).name).write_text(text)
    conf = ROOT / ".yamllint.yml"
    r = subprocess.run([yamllint, "-c", str(conf), "--strict", str(CHART / "values.yaml"),
                        str(CHART / "Chart.yaml"), str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
