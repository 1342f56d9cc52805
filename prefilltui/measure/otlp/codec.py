"""OTLP/HTTP trace bodies in and answers out (the OTLP specification, "OTLP/HTTP").

``decode_request(body, content_type, content_encoding)`` turns one ``POST /v1/traces``
body into an ``ExportTraceServiceRequest`` (the ``opentelemetry-proto`` messages: binary
protobuf for ``application/x-protobuf``, protobuf's ``json_format`` for
``application/json``), inflating a gzip body in bounded pieces (``measure.bounded``:
never more than ``MAX_BODY_BYTES`` decoded, whatever the compression ratio).  A body
that cannot be read raises ``OtlpError`` with the HTTP status the specification gives
(400 malformed, 413 too large, 415 an unsupported content type or encoding).

``success(rejected, message, json)`` and ``failure(status, message, json)`` are the
answers: an ``ExportTraceServiceResponse`` (with ``partial_success`` when spans were
rejected) or a ``google.rpc.Status``, in the request's encoding.  No socket here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import zlib

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse)

from prefilltui.measure.bounded import DECODE_CHUNK

#: Largest trace body accepted, bytes on the wire and decoded (a vLLM export batch of
#: 512 spans is ~300 KiB; an OpenTelemetry Collector's default batch 8192 spans, ~5 MiB).
MAX_BODY_BYTES = 8 * 2**20
#: The content types of OTLP/HTTP and the encoding each names.
Encoding = Literal["protobuf", "json"]
PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class OtlpError(Exception):
    """A body the receiver refuses: ``status`` (400, 413, 415) and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer: status, content type and body bytes."""

    status: int
    content_type: str
    body: bytes


def encoding_of(content_type: str | None) -> Encoding | None:
    """The body encoding a Content-Type names (parameters ignored), or None."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return "protobuf" if media == PROTOBUF else "json" if media == JSON else None


def answer_encoding(content_type: str | None) -> Encoding:
    """The encoding to answer in: the request's, JSON for any other ``*json*`` type,
    else protobuf (the specification's default)."""
    enc = encoding_of(content_type)
    if enc is not None:
        return enc
    return "json" if "json" in (content_type or "").lower() else "protobuf"


def inflate(body: bytes, content_encoding: str | None, max_bytes: int = MAX_BODY_BYTES
            ) -> bytes:
    """``body`` decoded from its Content-Encoding (identity, gzip, deflate), at most
    ``max_bytes`` decoded bytes.

    Raises:
        OtlpError: 413 past ``max_bytes`` (a gzip bomb stops there), 415 an encoding
            other than those, 400 a corrupt compressed body.
    """
    enc = (content_encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        if len(body) > max_bytes:
            raise OtlpError(413, f"body of {len(body):,} bytes is over {max_bytes:,}")
        return body
    if enc not in ("gzip", "x-gzip", "deflate"):
        raise OtlpError(415, f"unsupported Content-Encoding {enc[:40]!r} (gzip or identity)")
    # zlib's max_length: each call returns at most DECODE_CHUNK bytes (measure.bounded),
    # so a gzip bomb stops at the cap; a stream that never ends is a corrupt body
    z = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in enc else 0))
    out = bytearray()
    data = body
    try:
        while data and not z.eof:
            out += z.decompress(data, DECODE_CHUNK)
            if len(out) > max_bytes:
                raise OtlpError(413, f"{enc} body inflates past {max_bytes:,} bytes")
            data = z.unconsumed_tail
    except zlib.error as e:
        raise OtlpError(400, f"corrupt {enc} body: {e}") from None
    if not z.eof:
        raise OtlpError(400, f"truncated {enc} body")
    return bytes(out)


def decode_request(body: bytes, content_type: str | None, content_encoding: str | None,
                   max_bytes: int = MAX_BODY_BYTES) -> ExportTraceServiceRequest:
    """One ``POST /v1/traces`` body as an ``ExportTraceServiceRequest``.

    Raises:
        OtlpError: 415 a content type other than application/x-protobuf or
            application/json (or an unsupported encoding), 413 too large, 400 a body
            that is not a valid message.
    """
    enc = encoding_of(content_type)
    if enc is None:
        raise OtlpError(415, f"unsupported Content-Type {str(content_type)[:60]!r} "
                             f"({PROTOBUF} or {JSON})")
    data = inflate(body, content_encoding, max_bytes)
    msg = ExportTraceServiceRequest()
    try:
        if enc == "protobuf":
            msg.ParseFromString(data)
        else:
            # OTLP/JSON: unknown fields are ignored (the specification); trace/span ids
            # are hex there, read as base64 here (only compared, for a span sent again);
            # a leading byte-order mark is dropped (RFC 8259 lets a parser ignore it)
            json_format.Parse(data.decode("utf-8-sig"), msg, ignore_unknown_fields=True)
    except (DecodeError, json_format.ParseError, UnicodeDecodeError, RecursionError,
            ValueError) as e:
        raise OtlpError(400, f"not an OTLP trace export ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:160] if str(e) else ''})") from None
    return msg


def _encode(msg, enc: Encoding) -> Answer:
    if enc == "json":
        return Answer(200, JSON, json_format.MessageToJson(msg, indent=None).encode())
    return Answer(200, PROTOBUF, msg.SerializeToString())


def success(rejected: int = 0, message: str = "", enc: Encoding = "protobuf") -> Answer:
    """200 with an ``ExportTraceServiceResponse``; ``partial_success`` set when
    ``rejected`` spans were refused (``message`` says why)."""
    resp = ExportTraceServiceResponse()
    if rejected or message:
        resp.partial_success.rejected_spans = rejected
        resp.partial_success.error_message = message
    return _encode(resp, enc)


#: The google.rpc code for each HTTP status this receiver answers with.
_CODES = {400: code_pb2.INVALID_ARGUMENT, 413: code_pb2.RESOURCE_EXHAUSTED,
          415: code_pb2.INVALID_ARGUMENT, 404: code_pb2.NOT_FOUND,
          405: code_pb2.UNIMPLEMENTED, 500: code_pb2.INTERNAL,
          503: code_pb2.UNAVAILABLE}


def failure(status: int, message: str, enc: Encoding = "protobuf") -> Answer:
    """``status`` with a ``google.rpc.Status`` body saying ``message``."""
    st = status_pb2.Status(code=_CODES.get(status, code_pb2.UNKNOWN), message=message)
    a = _encode(st, enc)
    return Answer(status, a.content_type, a.body)
