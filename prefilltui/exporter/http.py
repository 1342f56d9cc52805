"""The exporter's HTTP side: ``/metrics``, ``/probe?target=NAME``, ``/-/healthy``, ``/``.

``/metrics``   every target, the build info and the process metrics.
``/probe``     one configured target's series only (blackbox-exporter style, so a
               Prometheus job can list targets and relabel ``__param_target``); the
               probing itself stays continuous and paced: a scrape never fires a
               request at the target.  Unknown target: 404; missing: 400.
``/-/healthy`` 200 "OK" while the process serves.
A threaded WSGI server (prometheus-client's): a slow client holds one thread only.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable
import socket
from urllib.parse import parse_qs, quote

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler, make_wsgi_app
from wsgiref.simple_server import make_server

from prefilltui.exporter.collector import HealthCollector


def _registry(sources, *, process: bool) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HealthCollector(sources, with_build_info=process))
    if process:
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
    return reg


def make_app(probers: Iterable) -> Callable:
    """The WSGI app over ``probers`` (objects with ``cfg.label``, ``cfg.url`` and
    ``snapshot``)."""
    probers = list(probers)
    metrics = make_wsgi_app(_registry(probers, process=True))
    by_name: dict[str, Callable] = {}
    for p in probers:
        app = make_wsgi_app(_registry([p], process=False))
        # looked up by name or URL (as shown, or as configured: a lookup key only,
        # never written anywhere)
        for key in (p.cfg.label, p.cfg.shown_url, p.cfg.url):
            by_name.setdefault(key, app)
            by_name.setdefault(key.rstrip("/"), app)

    def text(start_response, status: str, body: str, ctype: str = "text/plain; charset=utf-8"):
        data = body.encode()
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(data)))])
        return [data]

    def app(environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/probe":
            q = parse_qs(environ.get("QUERY_STRING", ""))
            name = (q.get("target") or [""])[0]
            if not name:
                return text(start_response, "400 Bad Request", "missing ?target=NAME\n")
            target_app = by_name.get(name) or by_name.get(name.rstrip("/"))
            if target_app is None:
                return text(start_response, "404 Not Found", "unknown target (the exporter "
                            "probes only the targets it was started with)\n")
            env = dict(environ)
            env["QUERY_STRING"] = ""
            return target_app(env, start_response)
        if path in ("/-/healthy", "/-/ready"):
            return text(start_response, "200 OK", "OK\n")
        if path == "/":
            rows = "".join(f'<li><a href="/probe?target={quote(p.cfg.label, safe="")}">{_esc(p.cfg.label)}</a> '
                           f"{_esc(p.snapshot.state)}</li>" for p in probers)
            return text(start_response, "200 OK",
                        "<html><head><title>prefilltui exporter</title></head><body>"
                        "<h1>prefilltui exporter</h1><p><a href=\"/metrics\">/metrics</a></p>"
                        f"<ul>{rows}</ul></body></html>\n", "text/html; charset=utf-8")
        return text(start_response, "404 Not Found", "not found\n")

    return app


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class MetricsServer:
    """Serves ``make_app(probers)`` on ``host:port`` in a daemon thread.

    Raises (constructor):
        OSError: the address is in use or cannot be bound.
    """

    def __init__(self, host: str, port: int, probers: Iterable) -> None:
        server_class = ThreadingWSGIServer
        if ":" in host:  # an IPv6 address
            server_class = type("ThreadingWSGIServer6", (ThreadingWSGIServer,),
                                {"address_family": socket.AF_INET6})
        self._httpd = make_server(host, port, make_app(probers), server_class,
                                  handler_class=_SilentHandler)
        self._httpd.daemon_threads = True
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="prefilltui-http",
                                        daemon=True)

    def start(self) -> "MetricsServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever that never ran
            self._httpd.shutdown()
        self._httpd.server_close()
