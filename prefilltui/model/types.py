"""Records shared by every part of prefilltui: one probe, one server.

All times are seconds (floats); wall-clock stamps are unix seconds, intervals are
measured with ``time.perf_counter`` (monotonic).  Milliseconds appear only on screen.
A value the server or the machine did not report is ``None``, never 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from prefilltui.model.hops import Hops
from prefilltui.model.jsontypes import JsonObject
from prefilltui.model.loadspec import LoadKind
from prefilltui.model.probe_notes import (DepthInfo, ProbeNotes, QueueSource, ServerSpan,
                                          number, text)

#: Why a probe failed (``ProbeResult.error_kind``).
ErrorKind = Literal["connect", "timeout", "http", "rate_limited", "context_length",
                    "stream_error", "no_token", "protocol", "buffered", "html_page",
                    "redirect"]
#: Where ``ProbeResult.prompt_tokens`` came from: the response's ``usage``, llama.cpp
#: ``timings``, or the server's tokenize endpoint (counted by the server); or
#: "estimate": the server reports no count, the length is the client's prediction
#: (the fit built on it is labelled estimated).
PromptTokensSource = Literal["usage", "timings", "tokenize", "estimate"]
#: Where a probe's cached-token count came from: the response (usage
#: ``prompt_tokens_details.cached_tokens``, llama.cpp ``timings.cache_n``) or the
#: server's ``/metrics`` counters around the probe (vLLM ``prompt_tokens_by_source``
#: / ``prefix_cache_hits``), attributed only when the window held this probe alone.
CachedTokensSource = Literal["usage", "timings", "metrics"]
#: The sweep runner's state, reported through ``on_state(state, detail)``: "idle" is
#: the gap after a probe, "burst" back-to-back probes at the longest length (core.pacing).
RunnerState = Literal["connecting", "probing", "idle", "burst", "retrying", "paused",
                      "stopped", "done", "failed"]
#: The datatypes whose dense peak the GPU catalog holds (``--dtype``).
Dtype = Literal["bf16", "fp16", "fp8"]
#: Which estimator a fit shown to the user comes from (``--fit``).
FitMethod = Literal["robust", "ols"]
#: Which probes a fit covers: every eligible probe, or the sliding window.
FitScope = Literal["all", "window"]
#: Why an ok probe is kept out of the idle fit (``ProbeResult.left_out``).
LeftOut = Literal["warm-up", "cache hit", "under load", "no TTFT or length"]
#: What the telemetry samples: GPUs (NVML, AMD, Intel, a GPU page), the CPU fallback, or nothing.
TelemetryKind = Literal["gpu", "cpu", "none"]
#: A telemetry device's state: sampling, or a query failed (retried with back-off).
DeviceStatus = Literal["ok", "error"]
#: What a utilization reading measures (``measure.telemetry.snapshots.UTIL_WORDS``).
UtilKind = Literal["kernel_active", "busy_percent", "gfx_activity", "awake_share", "cpu_busy"]

#: The fit methods ``--fit`` accepts, in --help order.
FIT_METHODS: tuple[FitMethod, ...] = get_args(FitMethod)

#: The failure kinds a probe can end with, with what each means.
ERROR_KINDS: tuple[ErrorKind, ...] = (
    "connect",  # TCP/TLS connection refused, reset or DNS failure
    "timeout",  # no first token / body within the probe's time cap
    "http",  # a non-2xx status not covered below
    "rate_limited",  # 429 or 503; Retry-After honoured by the sweep
    "context_length",  # prompt longer than the server's context (any status)
    "stream_error",  # an error object or `event: error` inside a 200 stream
    "no_token",  # the stream ended without any generated token
    "protocol",  # malformed SSE / JSON, or a body over the size cap
    "buffered",  # the answer came all at once (a buffering gateway): TTFT unknown
    "html_page",  # an HTML page (sign-in portal, web UI) instead of an API answer
    "redirect",  # a redirect the POST cannot follow (301/302/303, a loop, no Location)
)


@dataclass(slots=True)
class ProbeResult:
    """One probe: one streaming request with one output token.

    Written to the run file as one JSON line (``to_json``); ``from_json`` reads it
    back, ignoring keys it does not know so older/newer run files still load.

    Timing fields (seconds, ``None`` when not measured):
      ttfb_s   -- request sent -> first response body byte.
      ttft_s   -- request sent -> first SSE event carrying a generated token is complete.
      total_s  -- request sent -> stream closed.
      connect_s -- TCP(+TLS) connect time, only when a new connection was opened.
      server_prefill_s -- the server's own prefill time (llama.cpp ``timings.prompt_ms``
                  / 1000, vLLM per-request prefill metric), when it reports one.
      queue_s  -- the server's queue time for this request, when it reports one.
      overhead_s -- client/network overhead = ttft_s - server-side TTFT (or - server
                  prefill when the server gives no TTFT of its own).
    Token fields: ``requested_tokens`` is what the sweep asked for; ``prompt_tokens``
    is what the server counted (usage / tokenize / timings); ``cached_tokens`` is
    the part of the prompt the server served from its prefix cache, counted by the
    server (``cached_tokens_source`` says where; None = the server counted nothing,
    so a hit is neither proven nor ruled out).  ``server_flops`` is the server's own
    FLOP count for this probe (vLLM ``--enable-mfu-metrics``), when published.
    Telemetry fields are joined in after the probe from the sampler's samples in
    the request window [t_send, t_end] (``telemetry_device`` names what was sampled,
    e.g. "GPU 0" or "CPU").

    Declared notes, kept in the run file's ``extra`` object under their old keys:
      server_ttft_s -- the server's own TTFT (its histogram), when it reports one;
      queue_source  -- where ``queue_s`` came from (``QueueSource``);
      power_mean_w / energy_source -- mean power over the window and how ``energy_j``
                  was found ("counter" | "integrated");
      arrival_s -- when a buffered answer arrived (never a TTFT: ``error_kind`` "buffered");
      notes     -- ``ProbeNotes``: stream end, ignored server values, rejected fields...;
      depth     -- ``DepthInfo`` for a probe of the ``--depth`` phase, else None;
      span      -- ``ServerSpan``: the server's own trace span of this request (OTLP,
                  ``--otlp-listen``), else None; ``model.users.apply_span`` sets it and
                  takes ``server_ttft_s`` / ``queue_s`` / ``server_prefill_s`` from it.
    ``extra`` holds only what this version does not know (a newer file's keys).
    """

    seq: int = 0
    started_at: float = 0.0  # unix seconds when the request was sent
    requested_tokens: int = 0
    prompt_tokens: int | None = None
    prompt_tokens_source: PromptTokensSource | None = None
    cached_tokens: int | None = None
    cached_tokens_source: CachedTokensSource | None = None
    server_flops: float | None = None
    ttft_s: float | None = None
    ttfb_s: float | None = None
    total_s: float | None = None
    connect_s: float | None = None
    server_prefill_s: float | None = None
    queue_s: float | None = None
    overhead_s: float | None = None
    ok: bool = False
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    http_status: int | None = None
    retry_after_s: float | None = None
    warmup: bool = False
    burst: bool = False
    api: str = "completions"
    model: str | None = None
    # perf_counter() stamps of the request window, for telemetry attribution.
    t_send: float | None = None
    t_end: float | None = None
    # server load around the probe (from /metrics), when available
    server_running: float | None = None
    server_waiting: float | None = None
    # telemetry attribution: the sampler's samples in [t_send, t_end]
    telemetry_device: str | None = None
    util_peak_pct: float | None = None
    util_mean_pct: float | None = None
    power_peak_w: float | None = None
    energy_j: float | None = None
    # background load around the probe (``--load``, docs/load.md); None: no load ran.
    # ``load_level`` is decode streams or requests/s; 0 is the idle level of a sweep.
    load_kind: LoadKind | None = None
    load_level: float | None = None
    # what this probe's prefill did to the decode streams (``model.load.stall``), seconds:
    # the longest gap overlapping the window minus the median gap without a probe
    # (stall), the extra decode time summed over the window (excess), that median gap,
    # the decode tokens that arrived inside the window and the streams measured
    # (medians over streams)
    decode_stall_s: float | None = None
    decode_excess_s: float | None = None
    decode_gap_s: float | None = None
    decode_tokens: int | None = None
    decode_streams: int | None = None
    # the server's own inter-token latency over the window (vLLM
    # ``vllm:inter_token_latency_seconds``): upper bound of the highest bucket that
    # grew (the longest gap is at most this) and the mean
    server_itl_max_s: float | None = None
    server_itl_mean_s: float | None = None
    # prompt tokens of load requests still in prefill when the probe was sent
    load_ahead_tokens: int | None = None
    # the server's prompt-token counter's rise over the probe's /metrics window: every
    # request's prompt prefilled meanwhile, the probe's own included (a long prompt
    # that held the probe's step shows here when no span names it)
    window_prompt_tokens: int | None = None
    # declared notes (the run file's ``extra`` object, see the class docstring)
    server_ttft_s: float | None = None
    queue_source: QueueSource | None = None
    power_mean_w: float | None = None
    energy_source: str | None = None
    arrival_s: float | None = None
    notes: ProbeNotes = field(default_factory=ProbeNotes)
    depth: DepthInfo | None = None
    span: ServerSpan | None = None
    # a probe through a disaggregated path: its TTFT by hop (``model.hops``)
    hops: Hops | None = None
    extra: JsonObject = field(default_factory=dict)

    @property
    def cache_hit(self) -> bool:
        """True when the server served part of this prompt from its prefix cache."""
        return bool(self.cached_tokens)

    @property
    def fit_eligible(self) -> bool:
        """True when this probe may enter the idle-server fit: ok, not warm-up, no
        cache hit, a TTFT, a server-counted (or requested) prompt length, and no
        background load running (``load_level`` None or 0): a probe under load is
        fitted only with its own level (``model.load.levels``)."""
        return self.level_eligible and not self.load_level

    @property
    def level_eligible(self) -> bool:
        """``fit_eligible`` whatever the load: the fit of the probe's own load level."""
        return (
            self.ok
            and not self.warmup
            and not self.cache_hit
            and self.ttft_s is not None
            and self.tokens is not None
        )

    @property
    def left_out(self) -> LeftOut | None:
        """Why this ok probe is not in the idle fit (``fit_eligible``), the first that
        holds: "warm-up", "cache hit", "under load" (a load level's probe), "no TTFT
        or length"; None for a probe in the fit or a failed one."""
        if not self.ok or self.fit_eligible:
            return None
        if self.warmup:
            return "warm-up"
        if self.cache_hit:
            return "cache hit"
        if self.ttft_s is None or self.tokens is None:
            return "no TTFT or length"
        return "under load"

    @property
    def tokens(self) -> int | None:
        """The x value of the fit: prompt tokens as the server counts them
        (uncached part when a cache hit is reported), else the requested length."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        return self.requested_tokens or None

    def to_json(self) -> JsonObject:
        """A JSON-ready dict (the run file's line schema, docs/runfile.md): the line
        fields, and the declared notes under ``extra`` with their keys."""
        d: JsonObject = {k: getattr(self, k) for k in LINE_FIELDS}
        extra: JsonObject = {k: v for k, v in ((k, getattr(self, k)) for k in _EXTRA_SCALARS)
                             if v is not None}
        extra.update(self.notes.to_extra())
        if self.depth is not None:
            extra.update(self.depth.to_extra())
        if self.span is not None:
            extra["span"] = self.span.to_json()
        extra.update((k, v) for k, v in self.extra.items() if k not in extra)
        if extra:
            d["extra"] = extra
        if self.hops is not None:
            d["hops"] = self.hops.to_json()
        return d

    @classmethod
    def from_json(cls, d: JsonObject) -> "ProbeResult":
        """Build from a run-file line.  The ``extra`` object's known keys fill the
        declared notes (a value of the wrong type is left in ``extra``); keys this
        version does not know go into ``extra``.

        Raises:
            TypeError: when ``d`` is not a dict.
        """
        if not isinstance(d, dict):
            raise TypeError(f"run-file line is {type(d).__name__}, not an object")
        known = {k: v for k, v in d.items() if k in _LINE_SET}
        raw = d.get("extra")
        extra: JsonObject = dict(raw) if isinstance(raw, dict) else {}
        extra.update({k: v for k, v in d.items() if k not in _LINE_SET and k != "extra"})
        r = cls(**known)
        r.server_ttft_s = number(extra.get("server_ttft_s"))
        source = text(extra.get("queue_source"))
        r.queue_source = source if source in get_args(QueueSource) else None
        r.power_mean_w = number(extra.get("power_mean_w"))
        r.energy_source = text(extra.get("energy_source"))
        r.arrival_s = number(extra.get("arrival_s"))
        took = {k for k in _EXTRA_SCALARS if getattr(r, k) is not None}
        r.notes, n_took = ProbeNotes.from_extra(extra)
        r.depth, d_took = DepthInfo.from_extra(extra)
        r.span = ServerSpan.from_json(extra.get("span"))
        if r.span is not None:
            d_took = d_took | {"span"}
        r.hops = Hops.from_json(extra.get("hops"))
        if r.hops is not None:
            d_took = d_took | {"hops"}
        r.extra = {k: v for k, v in extra.items() if k not in took | n_took | d_took}
        return r


#: The run file's top-level probe fields (docs/runfile.md), in order.
LINE_FIELDS = tuple(f.name for f in dataclasses.fields(ProbeResult)
                    if f.name not in ("server_ttft_s", "queue_source", "power_mean_w",
                                      "energy_source", "arrival_s", "notes", "depth", "span",
                                      "hops", "extra"))
_LINE_SET = frozenset(LINE_FIELDS)
#: Declared notes kept as plain values under ``extra``.
_EXTRA_SCALARS = ("server_ttft_s", "queue_source", "power_mean_w", "energy_source", "arrival_s")


@dataclass(slots=True)
class ServerInfo:
    """What discovery learned about the server (``/v1/models``, ``/props``, ``/metrics``).

    kind: "vllm" | "sglang" | "tgi" | "llama.cpp" | "ollama" | "openai" (generic).
    context_tokens: the server's context limit in tokens, when exposed.
    params / hidden / layers: model shape when the server exposes it (llama.cpp
    ``/v1/models`` ``meta.n_params`` / ``n_embd`` / ``n_layer``), else None; named as
    in ``catalog.ModelShape``.
    n_batch / n_ubatch: chunk sizes when exposed (llama.cpp ``/props``).
    max_num_batched_tokens: vLLM's token budget per engine step (its prefill chunk)
    when exposed (``/server_info``, served with VLLM_SERVER_DEV_MODE=1).
    chunked_prefill_size: SGLang's prefill chunk in tokens (``/server_info``), None
    when not stated or chunked prefill is off (SGLang -1).
    facts: what the engine states about its own setup, by its own names (SGLang
    ``/server_info``: tp_size, dp_size, enable_dp_attention, disable_radix_cache...;
    TGI ``/info``: max_batch_total_tokens, max_waiting_tokens, support_chunking,
    prefix_caching), scalars only (``measure.server_facts``).
    config_path: a local ``config.json`` of the served model (vLLM ``/v1/models``
    ``root`` naming a directory on this machine), for the model shape.
    metrics_url: the Prometheus endpoint if it answered, else None.
    """

    base_url: str = ""
    kind: str = "openai"
    model: str | None = None
    context_tokens: int | None = None
    params: float | None = None
    hidden: int | None = None
    layers: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    max_num_batched_tokens: int | None = None
    chunked_prefill_size: int | None = None
    config_path: str | None = None
    facts: dict[str, int | float | bool | str] = field(default_factory=dict)
    has_tokenize: bool = False
    tokenize_url: str | None = None  # the endpoint discovery found counting tokens
    tokenize_style: str | None = None  # "llama.cpp" | "openai" | "tgi" (core.server)
    metrics_url: str | None = None
    notes: list[str] = field(default_factory=list)
    #: every model id /v1/models lists (raw server text; shown through model.sanitize)
    models: list[str] = field(default_factory=list)
    #: the proxy requests go through, as it may be shown (``measure.proxy``), or None
    proxy: str | None = None

    def to_json(self) -> JsonObject:
        return dataclasses.asdict(self)


#: The ServerInfo fields a run file's session line keeps (what the analysis reads).
SESSION_SERVER_FIELDS = ("kind", "model", "context_tokens", "params", "hidden", "layers",
                         "n_batch", "n_ubatch", "max_num_batched_tokens",
                         "chunked_prefill_size", "config_path")


def session_facts(info: ServerInfo) -> JsonObject:
    """The part of ``info`` a run file keeps in its session line."""
    return {k: getattr(info, k) for k in SESSION_SERVER_FIELDS}


def server_info_from_session(facts: Any, *, model: str | None = None) -> ServerInfo:
    """A ServerInfo from a session line's ``server`` object (bad values dropped), with
    ``model`` as the fallback model name."""
    kw: JsonObject = {}
    if isinstance(facts, dict):
        for k in SESSION_SERVER_FIELDS:
            v = facts.get(k)
            if k in ("kind", "model", "config_path"):
                ok = isinstance(v, str) and bool(v)
            elif k == "params":
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            else:
                ok = isinstance(v, int) and not isinstance(v, bool) and v > 0
            if ok:
                kw[k] = v
    kw.setdefault("model", model)
    return ServerInfo(**kw)
