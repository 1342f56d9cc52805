"""What a probe noted beyond its timings, as declared fields: ``ProbeNotes`` (how the
stream ended, server values ignored, fields rejected, redirects, how the token came)
and ``DepthInfo`` (a ``--depth`` probe's place and its cache proof).

The run file keeps them where it always did, in each line's ``extra`` object, under the
same keys (docs/runfile.md): ``to_extra`` writes exactly those keys, ``from_extra``
reads them back; a value of the wrong type is left out of the typed field (kept, with
keys this version does not know, in ``ProbeResult.extra``), so any old or foreign file
still loads.  No I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from prefilltui.model.jsontypes import Json, JsonObject

#: Where a probe's queue time came from: the server's queue histogram ("metrics"), an
#: idle server ("idle": 0), TTFT - prefill - the quiet overhead ("estimated"), or the
#: server's own span of this request (``ServerSpan``, "span": exact).
QueueSource = Literal["metrics", "idle", "estimated", "span"]
#: Where the first generated token was (``sse.classify_chunk``): visible text / content,
#: reasoning deltas, a tool call, or only counted by the server ("hidden").
TokenChannel = Literal["text", "content", "reasoning", "tool_call", "hidden"]
#: A depth-phase request: the cached prefix sent once, or a probe after it.
DepthRole = Literal["prefix", "probe"]


def _int(v: Json) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Json) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def _str(v: Json) -> str | None:
    return v if isinstance(v, str) else None


def _strs(v: Json) -> list[str] | None:
    return list(v) if isinstance(v, list) and all(isinstance(x, str) for x in v) else None


@dataclass(slots=True)
class RejectedField:
    """An optional request field the server rejected (HTTP 400/422): the probe was
    resent without it, or with ``replaced_by`` ("max_completion_tokens: 1")."""

    field: str
    http_status: int | None
    message: str
    replaced_by: str | None = None

    def to_json(self) -> JsonObject:
        d: JsonObject = {"field": self.field, "http_status": self.http_status,
                         "message": self.message}
        if self.replaced_by is not None:
            d["replaced_by"] = self.replaced_by
        return d

    @classmethod
    def from_json(cls, v: Json) -> "RejectedField | None":
        if not isinstance(v, dict) or _str(v.get("field")) is None:
            return None
        return cls(field=v["field"], http_status=_int(v.get("http_status")),
                   message=_str(v.get("message")) or "", replaced_by=_str(v.get("replaced_by")))


@dataclass(slots=True)
class Redirect:
    """The POST followed a 307/308: the last ``status``, where ``to`` (credentials
    shown as ***), how many ``hops``, and whether the API key was sent there
    (``key_sent``: only to the same origin)."""

    status: int
    to: str
    hops: int = 1
    key_sent: bool = True

    def to_json(self) -> JsonObject:
        return {"status": self.status, "to": self.to, "hops": self.hops,
                "key_sent": self.key_sent}

    @classmethod
    def from_json(cls, v: Json) -> "Redirect | None":
        if not isinstance(v, dict) or _int(v.get("status")) is None or _str(v.get("to")) is None:
            return None
        key = v.get("key_sent")
        return cls(status=v["status"], to=v["to"], hops=_int(v.get("hops")) or 1,
                   key_sent=key if isinstance(key, bool) else True)


@dataclass(slots=True)
class Resend:
    """The request was sent once more: ``reason`` (a keep-alive connection the server
    closed before any response byte; an optional field it rejected), the id of the
    send it follows when that was another request (``request_id``), and what the
    resend met when it failed (``resend_error``; None when it was answered)."""

    reason: str
    resend_error: str | None = None
    request_id: str | None = None

    def to_json(self) -> JsonObject:
        d: JsonObject = {"reason": self.reason}
        if self.resend_error is not None:
            d["resend_error"] = self.resend_error
        if self.request_id is not None:
            d["request_id"] = self.request_id
        return d

    @classmethod
    def from_json(cls, v: Json) -> "Resend | None":
        if not isinstance(v, dict) or _str(v.get("reason")) is None:
            return None
        return cls(reason=v["reason"], resend_error=_str(v.get("resend_error")),
                   request_id=_str(v.get("request_id")))


@dataclass(slots=True)
class ProbeNotes:
    """How a probe went, beyond its timings (each None/empty/False when not seen).

    ignored: server values that cannot be true, named ("cached tokens '98' is more than
        the 48 prompt tokens"); never fitted.
    after_complete: errors the stream carried after the token and its finish_reason (the
        probe stands).
    stream_end: how the stream ended when it did not end cleanly after completion.
    cap_ignored: the server streamed past max_tokens 1 (the client closed the stream).
    rejected_field: a field the server rejected and the probe was resent without.
    redirected: the POST followed a 307/308.
    resent_on_stale_connection: the request was resent on a new connection after a
        stale keep-alive one failed; connect_excluded: a new connection was opened and
        its set-up time taken out of TTFT (``connect_s``).
    content_encoding / content_type: a compressed stream (decoded) / an event stream
        under another content type.
    token_channel: where the first token was; token_with_end: the token's read also
        brought the end of the stream (the mark of a buffering gateway).
    n_ctx / n_prompt_tokens: the numbers of a context-length rejection.
    request_id: the ``X-Request-Id`` the request was sent with (a server's log can be
        matched with the run file request by request); resends: each time it was sent
        again, with the reason; calibration: a request ``ProbeClient.calibrate`` sent to
        learn the prompt length (a calibration line of the run file, no result).
    metrics_window: why the server's /metrics counters were not attributed to this
        probe (another request's prompt was counted in its window).
    metrics_cached_tokens: the server's /metrics cached-token count for this probe when
        it differs from the response's own (kept beside it, never instead).
    """

    ignored: list[str] = field(default_factory=list)
    after_complete: list[str] = field(default_factory=list)
    stream_end: str | None = None
    cap_ignored: str | None = None
    rejected_field: RejectedField | None = None
    redirected: Redirect | None = None
    resent_on_stale_connection: bool = False
    connect_excluded: bool = False
    content_encoding: str | None = None
    content_type: str | None = None
    token_channel: TokenChannel | None = None
    token_with_end: bool = False
    n_ctx: int | None = None
    n_prompt_tokens: int | None = None
    request_id: str | None = None
    resends: list[Resend] = field(default_factory=list)
    calibration: bool = False
    metrics_window: str | None = None
    metrics_cached_tokens: int | None = None

    def to_extra(self) -> JsonObject:
        """The run file's ``extra`` keys of these notes (only those seen)."""
        d: JsonObject = {}
        if self.ignored:
            d["ignored"] = list(self.ignored)
        if self.after_complete:
            d["after_complete"] = list(self.after_complete)
        for k in ("stream_end", "cap_ignored", "content_encoding", "content_type",
                  "token_channel", "n_ctx", "n_prompt_tokens", "request_id", "metrics_window",
                  "metrics_cached_tokens"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if self.rejected_field is not None:
            d["rejected_field"] = self.rejected_field.to_json()
        if self.redirected is not None:
            d["redirected"] = self.redirected.to_json()
        if self.resends:
            d["resends"] = [x.to_json() for x in self.resends]
        for k in ("resent_on_stale_connection", "connect_excluded", "token_with_end",
                  "calibration"):
            if getattr(self, k):
                d[k] = True
        return d

    @classmethod
    def from_extra(cls, x: JsonObject) -> tuple["ProbeNotes", set[str]]:
        """The notes in a run-file line's ``extra``, and the keys taken."""
        n = cls()
        took: set[str] = set()

        def take(k: str, v: object) -> None:
            if v is not None:
                setattr(n, k, v)
                took.add(k)

        take("ignored", _strs(x.get("ignored")))
        take("after_complete", _strs(x.get("after_complete")))
        for k in ("stream_end", "cap_ignored", "content_encoding", "content_type", "request_id"):
            take(k, _str(x.get(k)))
        raw = x.get("resends")
        if isinstance(raw, list):
            got = [r for r in (Resend.from_json(v) for v in raw) if r is not None]
            if len(got) == len(raw):
                take("resends", got)
        take("metrics_window", _str(x.get("metrics_window")))
        take("metrics_cached_tokens", _int(x.get("metrics_cached_tokens")))
        channel = _str(x.get("token_channel"))
        take("token_channel", channel if channel in get_args(TokenChannel) else None)
        take("n_ctx", _int(x.get("n_ctx")))
        take("n_prompt_tokens", _int(x.get("n_prompt_tokens")))
        take("rejected_field", RejectedField.from_json(x.get("rejected_field")))
        take("redirected", Redirect.from_json(x.get("redirected")))
        for k in ("resent_on_stale_connection", "connect_excluded", "token_with_end",
                  "calibration"):
            if isinstance(x.get(k), bool):
                take(k, x[k])
        return n, took


@dataclass(slots=True)
class DepthInfo:
    """A ``--depth`` request: its context ``depth`` (tokens of cached prefix; 0 = the
    cold reference), its ``role`` (the prefix sent once, or a probe after it), the
    prefix's server count, and for a probe: the new tokens after the prefix and the
    cache proof -- ``verified`` (the server's cached-token count matches the prefix)
    or ``flag``, why not (model.depth.verify)."""

    depth: int
    role: DepthRole
    prefix_tokens: int | None = None
    new_tokens: int | None = None
    verified: bool | None = None
    flag: str | None = None

    def to_extra(self) -> JsonObject:
        d: JsonObject = {"depth": self.depth, "depth_role": self.role,
                         "depth_prefix_tokens": self.prefix_tokens}
        if self.verified is not None:
            d["depth_verified"] = self.verified
        if self.new_tokens is not None:
            d["depth_new_tokens"] = self.new_tokens
        if self.flag is not None:
            d["depth_flag"] = self.flag
        return d

    @classmethod
    def from_extra(cls, x: JsonObject) -> tuple["DepthInfo | None", set[str]]:
        role = x.get("depth_role")
        if role not in get_args(DepthRole):
            return None, set()
        took = {"depth_role"} | {k for k in ("depth", "depth_prefix_tokens", "depth_new_tokens",
                                             "depth_verified", "depth_flag") if k in x}
        verified = x.get("depth_verified")
        return cls(depth=_int(x.get("depth")) or 0, role=role,
                   prefix_tokens=_int(x.get("depth_prefix_tokens")),
                   new_tokens=_int(x.get("depth_new_tokens")),
                   verified=verified if isinstance(verified, bool) else None,
                   flag=_str(x.get("depth_flag"))), took


@dataclass(frozen=True, slots=True)
class ServerSpan:
    """The server's own span of one probe (vLLM's ``llm_request``, ``--otlp-traces-endpoint``;
    ``measure.otlp``): its TTFT, queue, prefill and end-to-end times (s), its prompt
    count, its ``gen_ai.request.id``, and ``latency_s``: seconds from the span's end to
    its receipt (the engine's export batching plus the network).  Exact for this
    request, unlike the /metrics deltas.  Run file: the ``span`` object under ``extra``,
    or a later ``{"record": "span"}`` line (docs/runfile.md)."""

    request_id: str
    ttft_s: float | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    latency_s: float | None = None

    def to_json(self) -> JsonObject:
        d: JsonObject = {"request_id": self.request_id}
        for k in ("ttft_s", "queue_s", "prefill_s", "e2e_s", "prompt_tokens", "latency_s"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return d

    @classmethod
    def from_json(cls, v: Json) -> "ServerSpan | None":
        """The span of a ``to_json`` object; None when it is not one (no request id)."""
        if not isinstance(v, dict) or _str(v.get("request_id")) is None:
            return None
        return cls(request_id=str(v["request_id"]), ttft_s=_num(v.get("ttft_s")),
                   queue_s=_num(v.get("queue_s")), prefill_s=_num(v.get("prefill_s")),
                   e2e_s=_num(v.get("e2e_s")), prompt_tokens=_int(v.get("prompt_tokens")),
                   latency_s=_num(v.get("latency_s")))


def number(v: Json) -> float | None:
    """A finite JSON number as a float (not a bool), else None."""
    return _num(v)


def text(v: Json) -> str | None:
    """A JSON string, else None."""
    return _str(v)
