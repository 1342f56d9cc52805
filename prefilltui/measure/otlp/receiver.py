"""The OTLP/HTTP trace receiver: ``POST /v1/traces`` on ``--otlp-listen HOST:PORT``.

An engine (vLLM ``--otlp-traces-endpoint http://HOST:PORT/v1/traces`` with
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``) or an OpenTelemetry Collector's
``otlphttp`` exporter posts its spans here; each body is decoded (``codec``), its
request spans read (``spans``) and handed to the targets (``users.TraceRouter``).

Answers (the OTLP specification): 200 with an ``ExportTraceServiceResponse``
(``partial_success`` when spans were rejected); 400 with a ``google.rpc.Status`` for a
malformed body, 413 for one over ``codec.MAX_BODY_BYTES``, 415 for another content
type or encoding, 404 / 405 for another path or method; in the request's encoding.
A bad body is answered and forgotten: the receiver keeps serving.

Served by ``measure.httpserver.HttpServer`` (as the exporter's pages; its docstring
says how it is bounded) with ``MAX_CONNECTIONS``, ``REQUEST_DEADLINE_S`` from a
request's first byte to its whole body, and ``max_body_bytes``.
"""

from __future__ import annotations

import time

from prefilltui.measure.httpserver import Answer, HttpServer, Request
from prefilltui.measure.otlp import codec
from prefilltui.measure.otlp.spans import read_batch
from prefilltui.measure.otlp.users import TraceRouter

#: Open connections at most (an engine keeps one or two; a Collector a few).
MAX_CONNECTIONS = 64
#: Seconds from a request's first byte (or the previous answer) to its whole body.
REQUEST_DEADLINE_S = 30.0
#: The path OTLP/HTTP posts traces to.
TRACES_PATH = "/v1/traces"


class OtlpReceiver(HttpServer):
    """Serves OTLP/HTTP traces on ``host:port`` into ``router`` (module docstring).

    ``counts``: answers by status; ``spans``: request spans taken; ``start()`` returns
    self once listening; ``port`` is the bound port (0 asks the system for one).

    Raises (constructor):
        OSError: the address is in use or cannot be bound.
    """

    def __init__(self, host: str, port: int, router: TraceRouter | None = None, *,
                 max_body_bytes: int = codec.MAX_BODY_BYTES) -> None:
        super().__init__(host, port, name="prefilltui-otlp", max_connections=MAX_CONNECTIONS,
                         backlog=128, request_deadline_s=REQUEST_DEADLINE_S,
                         max_body_bytes=max_body_bytes)
        self.router = router if router is not None else TraceRouter()
        self.spans = 0

    @property
    def endpoint(self) -> str:
        """The URL an engine posts to (``--otlp-traces-endpoint``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{TRACES_PATH}"

    def error_answer(self, status: int, message: str, req: Request | None) -> Answer:
        """A ``google.rpc.Status`` in the request's encoding (protobuf without one)."""
        return _http(codec.failure(status, message, codec.answer_encoding(
            req.headers.get("content-type") if req is not None else None)))

    async def handle(self, req: Request) -> Answer:
        ctype = req.headers.get("content-type")
        enc = codec.answer_encoding(ctype)
        if req.path != TRACES_PATH:
            return self.error_answer(404, "not found: prefilltui receives traces at "
                                     f"{TRACES_PATH}", req)
        if req.method != "POST":
            return self.error_answer(405, "only POST", req)
        try:
            msg = codec.decode_request(req.body, ctype, req.headers.get("content-encoding"),
                                       self.max_body_bytes)
        except codec.OtlpError as e:
            return self.error_answer(e.status, str(e), req)
        batch = read_batch(msg, received_s=time.time())  # a bug here: 500 (the core's)
        self.spans += len(batch.found)
        self.router.deliver(batch)
        if batch.rejected:
            return _http(codec.success(batch.rejected, batch.reason[:200], enc))
        return _http(codec.success(enc=enc))


def _http(ans: codec.Answer) -> Answer:
    return ans.status, [("Content-Type", ans.content_type)], ans.body
