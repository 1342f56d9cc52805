"""The real alerting pipeline on loopback, time-scaled: fake prefill targets ->
``prefilltui exporter`` (a subprocess) -> Prometheus -> Alertmanager -> a webhook.

Shared by the end-to-end test (tests/integration/test_alerts_e2e.py) and the
measurement (``python -m tests.bench.bench_alerts``).  Everything runs ``factor``
times faster than the shipped defaults: the exporter's interval, timeout and hang
threshold, Prometheus' scrape and evaluation intervals and alert resend delay, every
duration in deploy/prefilltui-alerts.yml (``for``, ``keep_firing_for``, group
intervals, range selectors) and Alertmanager's group timings.  The rules' logic and
thresholds, the inhibit rules and the exporter's code are the shipped ones.  What does
not scale: the probe's own TTFT (the fakes answer in 20-225 ms at any factor) and the
exporter's back-off after a failed probe (2 s per failure in a row, unscaled).

Binaries: ``prometheus`` and ``alertmanager`` (Debian: ``prometheus-alertmanager``)
on PATH; ``missing_binaries()`` names the absent ones.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import yaml

from prefilltui.demo.server import free_port
from tests.fakeserver import FakeServer, Reply, models_reply, sse_data, sse_done, sse_text

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
#: The line that installs both servers on Debian/Ubuntu (CI runs it as root).
INSTALL_LINE = "apt-get install prometheus prometheus-alertmanager"
#: Shipped defaults the stack scales (s): probe interval, timeout, hang threshold,
#: Prometheus scrape/evaluation interval and alert resend delay.
DEFAULT_INTERVAL_S = 15.0
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_HANG_AFTER_S = 30.0
DEFAULT_SCRAPE_S = 15.0
DEFAULT_RESEND_S = 60.0

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def binaries() -> dict[str, str | None]:
    return {"prometheus": shutil.which("prometheus"),
            "alertmanager": shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")}


def missing_binaries() -> list[str]:
    return [k for k, v in binaries().items() if v is None]


def seconds(duration: str) -> float:
    """A Prometheus duration ("1h30m", "90s", "500ms") in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|[smhdw])", duration)
    if not parts or "".join(a + b for a, b in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(float(a) * _UNITS[b] for a, b in parts)


def scaled(duration: str, factor: float) -> str:
    """``duration`` divided by ``factor``, in whole milliseconds (at least 1 ms)."""
    return f"{max(1, round(seconds(duration) * 1000 / factor))}ms"


def scale_rules(text: str, factor: float) -> str:
    """The rule file ``text`` with every duration divided by ``factor``: group
    ``interval``, ``for``, ``keep_firing_for``, and range selectors / subquery ranges in
    expressions and annotation templates."""
    doc = yaml.safe_load(text)

    def ranges(s: str) -> str:
        return re.sub(r"\[(\d+(?:ms|[smhdw])(?:\d+(?:ms|[smhdw]))*)(:[^\]]*)?\]",
                      lambda m: f"[{scaled(m.group(1), factor)}{m.group(2) or ''}]", s)

    for g in doc["groups"]:
        if "interval" in g:
            g["interval"] = scaled(g["interval"], factor)
        for r in g["rules"]:
            for k in ("for", "keep_firing_for"):
                if k in r:
                    r[k] = scaled(r[k], factor)
            r["expr"] = ranges(r["expr"])
            for k, v in (r.get("annotations") or {}).items():
                r["annotations"][k] = ranges(v)
    return yaml.safe_dump(doc, sort_keys=False, width=1000)


# ------------------------------------------------------------------ fake targets


@dataclass
class FakePrefill:
    """A fake OpenAI-compatible target whose TTFT = (a + b * prompt words) * U(1 - j,
    1 + j), with usage counting words as prompt tokens.  Change ``b_s`` (slow it down),
    ``hang`` (accept requests, never answer) or ``down`` (HTTP 500) at any time."""

    a_s: float = 0.020
    b_s: float = 1e-4
    jitter: float = 0.2
    hang: bool = False
    down: bool = False
    seed: int = 0
    server: FakeServer | None = None
    _rng: random.Random = field(default_factory=random.Random)

    def _complete(self, req) -> Reply:
        words = len(str(req.json.get("prompt", "")).split())
        if self.down:
            return Reply.json({"error": {"message": "down"}}, status=500)
        if self.hang:
            return Reply.sse([(3600.0, sse_text("x"))])
        t = (self.a_s + self.b_s * words) * (1 + self._rng.uniform(-self.jitter, self.jitter))
        return Reply.sse([(t, sse_text("x")),
                          (t + 0.001, sse_data({"choices": [], "usage": {"prompt_tokens": words}})),
                          (t + 0.002, sse_done())])

    def start(self) -> "FakePrefill":
        self._rng.seed(self.seed)
        self.server = FakeServer({"GET /v1/models": models_reply("fake-model"),
                                  "POST /v1/completions": self._complete}).__enter__()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.__exit__(None, None, None)

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.base_url


# ------------------------------------------------------------------ the webhook


@dataclass
class Notification:
    at: float  # time.monotonic() when it arrived
    status: str  # "firing" | "resolved" (the group's)
    alerts: list[dict[str, Any]]  # Alertmanager's alerts: status, labels, annotations


class Webhook:
    """Alertmanager's receiver: records every notification."""

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                d = json.loads(body or b"{}")
                with outer._lock:
                    outer.notifications.append(Notification(time.monotonic(), d.get("status", ""),
                                                            d.get("alerts", [])))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def pages(self, alertname: str | None = None, target: str | None = None,
              status: str = "firing") -> list[tuple[float, dict]]:
        """(arrival, alert) of every alert notified with ``status``, in order."""
        with self._lock:
            out = []
            for n in self.notifications:
                for a in n.alerts:
                    lab = a.get("labels", {})
                    if (a.get("status") == status and (alertname is None or lab.get("alertname") == alertname)
                            and (target is None or lab.get("target") == target)):
                        out.append((n.at, a))
            return out

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


# ------------------------------------------------------------------ the stack


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_for(pred: Callable[[], Any], timeout: float, what: str, step: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except OSError:  # not listening yet
            last = None
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


@dataclass
class TargetSpec:
    """One exporter target: its name, fake, and extra TOML lines (e.g. expected_throughput)."""

    name: str
    fake: FakePrefill
    toml: str = ""


class AlertStack:
    """Context manager: starts the fakes, the exporter, Alertmanager and Prometheus
    (in that order; stopped in reverse), all on loopback ports picked at random, logs
    and data in ``workdir``.  ``factor``: how much faster than the defaults."""

    def __init__(self, workdir: Path, targets: list[TargetSpec], *, factor: float = 15.0,
                 window: int = 40) -> None:
        missing = missing_binaries()
        if missing:
            raise RuntimeError(f"missing {', '.join(missing)}: {INSTALL_LINE}")
        self.workdir = Path(workdir)
        self.targets = targets
        self.factor = factor
        self.window = window
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.webhook: Webhook | None = None
        self.prom = self.am = ""
        self.t0 = 0.0

    # -- configs
    def exporter_toml(self) -> str:
        f = self.factor
        lines = ["[defaults]", f"interval = {DEFAULT_INTERVAL_S / f!r}",
                 f"timeout = {DEFAULT_TIMEOUT_S / f!r}", f"hang_after = {DEFAULT_HANG_AFTER_S / f!r}",
                 f"window = {self.window}", ""]
        for t in self.targets:
            lines += ["[[target]]", f'name = "{t.name}"', f'url = "{t.fake.url}"', t.toml, ""]
        return "\n".join(lines)

    def prometheus_yml(self, exporter_port: int, am_port: int, rules: Path) -> str:
        s = scaled(f"{DEFAULT_SCRAPE_S:g}s", self.factor)
        return (f"global:\n  scrape_interval: {s}\n  scrape_timeout: {s}\n"
                f"  evaluation_interval: {s}\n"
                f"rule_files:\n  - {rules}\n"
                "alerting:\n  alertmanagers:\n    - static_configs:\n"
                f"        - targets: ['127.0.0.1:{am_port}']\n"
                "scrape_configs:\n  - job_name: prefilltui\n"
                f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")

    def alertmanager_yml(self, webhook_port: int) -> str:
        doc = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())

        def walk(route: dict) -> None:
            for k in ("group_wait", "group_interval", "repeat_interval"):
                if k in route:
                    route[k] = scaled(route[k], self.factor)
            for r in route.get("routes", []):
                walk(r)

        walk(doc["route"])
        for r in doc["receivers"]:
            for w in r.get("webhook_configs", []):
                w["url"] = f"http://127.0.0.1:{webhook_port}/{r['name']}"
        return yaml.safe_dump(doc, sort_keys=False)

    # -- life cycle
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             cwd=self.workdir)
        log.close()
        self.procs.append((name, p))
        return p

    def __enter__(self) -> "AlertStack":
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        bins = binaries()
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        for t in self.targets:
            t.fake.start()
        self.webhook = Webhook()
        (w / "targets.toml").write_text(self.exporter_toml())
        rules = w / "prefilltui-alerts.yml"
        rules.write_text(scale_rules((DEPLOY / "prefilltui-alerts.yml").read_text(), self.factor))
        ex_port, am_port, prom_port = free_port(), free_port(), free_port()
        (w / "alertmanager.yml").write_text(self.alertmanager_yml(self.webhook.port))
        (w / "prometheus.yml").write_text(self.prometheus_yml(ex_port, am_port, rules))
        self._spawn("exporter", [sys.executable, "-m", "prefilltui", "exporter", "--config",
                                 str(w / "targets.toml"), "--listen", f"127.0.0.1:{ex_port}",
                                 "--run-dir", str(w / "runs"), "--seed", "7"])
        self._spawn("alertmanager", [
            bins["alertmanager"], f"--config.file={w / 'alertmanager.yml'}",
            f"--storage.path={w / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=", "--log.level=info"])
        self._spawn("prometheus", [
            bins["prometheus"], f"--config.file={w / 'prometheus.yml'}",
            f"--storage.tsdb.path={w / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
            f"--rules.alert.resend-delay={scaled(f'{DEFAULT_RESEND_S:g}s', self.factor)}",
            f"--query.lookback-delta={scaled('5m', self.factor)}"])
        self.prom, self.am = f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}"
        self.t0 = time.monotonic()
        for name, url in (("exporter", f"http://127.0.0.1:{ex_port}/-/healthy"),
                          ("alertmanager", f"{self.am}/-/ready"),
                          ("prometheus", f"{self.prom}/-/ready")):
            wait_for(lambda u=url: self._alive() and urllib.request.urlopen(u, timeout=2).status == 200,
                     60, f"{name} to be ready (log: {w / (name + '.log')})")

    def _alive(self) -> bool:
        for name, p in self.procs:
            if p.poll() is not None:
                raise AssertionError(f"{name} exited with {p.returncode}: "
                                     + (self.workdir / f"{name}.log").read_text()[-2000:])
        return True

    def __exit__(self, *exc) -> None:
        for _name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _name, p in reversed(self.procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        if self.webhook is not None:
            self.webhook.close()
        for t in self.targets:
            t.fake.stop()

    # -- reading
    def query(self, expr: str) -> list[dict]:
        """An instant query through Prometheus' HTTP API."""
        d = _get_json(f"{self.prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert d["status"] == "success", d
        return d["data"]["result"]

    def firing(self) -> set[tuple[str, str]]:
        """(alertname, target) of the alerts Prometheus has firing now."""
        self._alive()
        return {(r["metric"]["alertname"], r["metric"].get("target", ""))
                for r in self.query('ALERTS{alertstate="firing"}')}

    def am_alerts(self) -> list[dict]:
        """Alertmanager's alerts (API v2): labels, annotations, status.state
        (active / suppressed) and status.inhibitedBy."""
        return _get_json(f"{self.am}/api/v2/alerts")

    def since(self, t: float) -> float:
        """Seconds from ``t`` (monotonic) to now."""
        return time.monotonic() - t
