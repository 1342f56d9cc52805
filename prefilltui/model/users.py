"""The users' own requests: what the server says about traffic prefilltui did not send.

Pure types shared by the producers (the OTLP receiver's span reader, the /metrics
histogram deltas) and the consumers (the TTFT verdict, the dashboard, the exporter).
Seconds everywhere; ``None`` is "not reported", never 0.

Sources:
- spans: vLLM 0.32's ``llm_request`` span (``--otlp-traces-endpoint``) carries
  ``gen_ai.usage.prompt_tokens``, ``gen_ai.latency.time_to_first_token``,
  ``gen_ai.latency.time_in_queue``, ``gen_ai.latency.time_in_model_prefill``,
  ``gen_ai.latency.e2e``, ``gen_ai.request.id`` (vllm/tracing.py SpanAttributes);
- metrics: the engines' histograms and counters (vLLM ``vllm:time_to_first_token_seconds``,
  ``vllm:request_prompt_tokens``, ``vllm:request_queue_time_seconds``,
  ``vllm:prefix_cache_queries_total`` / ``hits_total``; SGLang and TGI likewise), whose
  quantiles are bucket estimates (``UsersWindow.estimate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Literal

from prefilltui.model.fit import LinearFit
from prefilltui.model.probe_notes import ServerSpan
from prefilltui.model.server_change import ServerChange
from prefilltui.model.types import ProbeResult

UsersSource = Literal["traces", "metrics", "none"]


@dataclass(frozen=True, slots=True)
class UserRequest:
    """One request somebody else sent, as the server's own span tells it.

    arrival_s -- unix seconds when the server received it (the span's start);
    prompt_tokens -- the prompt as the server counted it;
    ttft_s, queue_s, prefill_s, e2e_s -- the server's time to first token, time in
      queue, time in model prefill and end-to-end time (s);
    cached_tokens -- prompt tokens served from the prefix cache, when the span says;
    request_id -- the server's request id (``gen_ai.request.id``), for matching probes;
    target -- the label of the target the span was matched to ("" = the only one);
    end_s -- unix seconds when the span ended (the request finished), when known;
    received_s -- unix seconds when prefilltui received the span (``received_s -
      end_s`` is the span's latency: the engine's export batching plus the network);
    max_tokens -- the output cap the request asked for (``gen_ai.request.max_tokens``);
    output_tokens -- the tokens it generated (``gen_ai.usage.output_tokens``, vLLM's
      ``completion_tokens``), when the span says.
    The prefill interval is [arrival_s + queue_s, arrival_s + queue_s + prefill_s]
    when both are known.  No prompt text is ever carried (spans have none).
    """

    arrival_s: float
    prompt_tokens: int | None = None
    ttft_s: float | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    e2e_s: float | None = None
    cached_tokens: int | None = None
    request_id: str = ""
    target: str = ""
    end_s: float | None = None
    received_s: float | None = None
    max_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def finished_s(self) -> float:
        """Unix seconds when it finished: the span's end, else arrival + e2e, else
        arrival + TTFT, else the arrival."""
        if self.end_s is not None:
            return self.end_s
        return self.arrival_s + (self.e2e_s if self.e2e_s is not None else self.ttft_s or 0.0)

    @property
    def latency_s(self) -> float | None:
        """Seconds from the span's end to its receipt by prefilltui, when both are known."""
        if self.received_s is None or self.end_s is None:
            return None
        return self.received_s - self.end_s

    @property
    def prefill_start_s(self) -> float | None:
        """Unix seconds when its prefill began (arrival + queue), when known."""
        return None if self.queue_s is None else self.arrival_s + self.queue_s

    @property
    def prefill_end_s(self) -> float | None:
        """Unix seconds when its prefill ended, when queue and prefill are known."""
        if self.queue_s is None or self.prefill_s is None:
            return None
        return self.arrival_s + self.queue_s + self.prefill_s


@dataclass(frozen=True, slots=True)
class UsersWindow:
    """The users' traffic over one window, summarised.

    source -- "traces" (exact, from spans), "metrics" (from /metrics deltas: quantiles
      are bucket estimates, ``estimate`` True) or "none" (nothing known);
    window_s -- the window's length (s); requests -- users' requests finished in it;
    ttft_p50_s / p90 / p99 -- the users' TTFT quantiles (s);
    prompt_tokens_p50 / p90 -- their prompt lengths (tokens);
    prompt_tokens_mean -- their mean prompt (tokens): exact from spans, and from a
      histogram's sum and count (no bucket estimate) from /metrics;
    queue_share -- their summed queue time / summed TTFT (0..1);
    expected_ttft_p50_s -- the median over users of the TTFT the probes' fit expects
      at each user's prompt length (s);
    unexplained_prefill_share -- the share of the users' summed prefill time the fit's
      slope does not explain (0..1; negative = faster than the fit, e.g. cache hits);
    prefix_cache_hit_rate -- cached / queried prompt tokens of the users' traffic (0..1);
    running / waiting -- the server's running and waiting requests as read at the
      window's end (gauges, not medians);
    estimate -- True when the quantiles come from histogram buckets.
    """

    source: UsersSource = "none"
    window_s: float = 0.0
    requests: int = 0
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    prompt_tokens_p50: float | None = None
    prompt_tokens_p90: float | None = None
    prompt_tokens_mean: float | None = None
    queue_share: float | None = None
    expected_ttft_p50_s: float | None = None
    unexplained_prefill_share: float | None = None
    prefix_cache_hit_rate: float | None = None
    running: float | None = None
    waiting: float | None = None
    estimate: bool = False


@dataclass(frozen=True, slots=True)
class UsersEvidence:
    """What the users' own requests tell the TTFT verdict (``diagnosis.ttft_verdict``).

    users_now -- the users' window now (spans, or /metrics bucket estimates); None:
      no receiver and no /metrics window;
    users_before -- its reference, the window before a change (``HeldExpectation``
      keeps it: the field-by-field median of the last healthy windows); None: none yet;
    user_requests -- the users' kept requests from their spans, oldest first (their
      prefill intervals, for head-of-line); () from /metrics alone;
    server_changes -- the server-side events around the users' and the probes'
      traffic: restarts, another server behind the URL, a changed config, several
      replicas (``model.server_change.ServerChange``, oldest first, the last
      ``RECENT_S`` = 10 min); a reference taken before one of them describes another
      server (``server_change.change_after``, ``change_words``); () when none was seen.
    The empty record (every default) is "nothing known about the users": the verdict
    then reads the probes alone.  ``user_requests`` and ``server_changes`` are stored
    as tuples whatever iterable is given, so the record is hashable (a cache key).
    """

    users_now: UsersWindow | None = None
    users_before: UsersWindow | None = None
    user_requests: tuple[UserRequest, ...] = ()
    server_changes: tuple[ServerChange, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.user_requests, tuple):
            object.__setattr__(self, "user_requests", tuple(self.user_requests))
        if not isinstance(self.server_changes, tuple):
            object.__setattr__(self, "server_changes", tuple(self.server_changes))

    def with_before(self, before: UsersWindow | None) -> "UsersEvidence":
        """This evidence with ``before`` as its reference when it has none (a held
        expectation's ``users_before``); itself when it has one or ``before`` is None."""
        if self.users_before is not None or before is None:
            return self
        return replace(self, users_before=before)


@dataclass(frozen=True, slots=True)
class TraceStats:
    """Counts of one target's spans: users' requests seen, probes matched to their
    span, probes whose span never came within ``PENDING_S`` (30 s) (expired), spans of
    prefilltui requests this session did not wait for (another prefilltui, or late),
    probes still waiting, and the median span latency (end to receipt, s);
    ``measure.otlp.UsersTrace.stats``."""

    users: int = 0
    probes_matched: int = 0
    probes_expired: int = 0
    foreign_probes: int = 0
    probes_waiting: int = 0
    latency_p50_s: float | None = None

    @property
    def match_rate(self) -> float | None:
        """Matched / (matched + expired), or None before any probe settled."""
        n = self.probes_matched + self.probes_expired
        return self.probes_matched / n if n else None

    def to_json(self) -> dict:
        return {"users": self.users, "probes_matched": self.probes_matched,
                "probes_expired": self.probes_expired, "foreign_probes": self.foreign_probes,
                "probes_waiting": self.probes_waiting, "match_rate": self.match_rate,
                "latency_p50_s": self.latency_p50_s}


#: The longest time a request span may say it took (s, each of TTFT, queue, prefill,
#: end-to-end): a week.  A span past it (``gen_ai.latency.*`` of 1e300) is no request
#: any server ran, and its sums would overflow the window's shares to inf or NaN.
MAX_REQUEST_S = 7 * 86_400.0
#: The most prompt, cached or output tokens a span may count for one request: ten times
#: the longest context offered (``limits.MAX_PROMPT_TOKENS``, 10 M tokens).
MAX_REQUEST_TOKENS = 100_000_000
#: How far a queue or prefill time may pass its request's TTFT (s + share of the TTFT):
#: both lie inside the TTFT (vLLM: the engine core's queued -> scheduled -> first token
#: interval, inside the front end's arrival -> first token), up to clock noise.
NESTED_SLACK_S, NESTED_SLACK = 0.01, 0.01


def request_problem(u: UserRequest) -> str | None:
    """Why ``u`` cannot be a request a server ran, in words (the span's attribute
    named), or None: a time not in [0, ``MAX_REQUEST_S``], a token count not in
    [0, ``MAX_REQUEST_TOKENS``], more cached tokens than the prompt, a queue or prefill
    time longer than the TTFT they are part of.  The OTLP reader rejects such a span
    (``partial_success``), so it never reaches a window, a probe or the verdict."""
    for name, v in (("time_to_first_token", u.ttft_s), ("time_in_queue", u.queue_s),
                    ("time_in_model_prefill", u.prefill_s), ("e2e", u.e2e_s)):
        if v is not None and not (math.isfinite(v) and 0.0 <= v <= MAX_REQUEST_S):
            return f"gen_ai.latency.{name} is {v:.4g} s, not in 0 .. {MAX_REQUEST_S:,.0f} s"
    for name, n in (("usage.prompt_tokens", u.prompt_tokens),
                    ("usage.cached_tokens", u.cached_tokens),
                    ("request.max_tokens", u.max_tokens),
                    ("usage.output_tokens", u.output_tokens)):
        if n is not None and not 0 <= n <= MAX_REQUEST_TOKENS:
            return f"gen_ai.{name} is {n:.4g}, not in 0 .. {MAX_REQUEST_TOKENS:,} tokens"
    if u.cached_tokens is not None and u.prompt_tokens is not None \
            and u.cached_tokens > u.prompt_tokens:
        return (f"gen_ai.usage.cached_tokens {u.cached_tokens:,} is more than the prompt's "
                f"{u.prompt_tokens:,} tokens")
    if u.ttft_s is not None:
        room = u.ttft_s * (1 + NESTED_SLACK) + NESTED_SLACK_S
        for name, v in (("time_in_queue", u.queue_s), ("time_in_model_prefill", u.prefill_s)):
            if v is not None and v > room:
                return (f"gen_ai.latency.{name} {v:.4g} s is longer than the request's "
                        f"time_to_first_token {u.ttft_s:.4g} s it is part of")
    return None


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def window_to_json(w: UsersWindow) -> dict:
    """The window as JSON (seconds, tokens, shares 0..1; docs/schema.md ``live.users``)."""
    return {k: getattr(w, k) for k in UsersWindow.__slots__}


def expected_ttft_s(fit: LinearFit | None, prompt_tokens: int | None) -> float | None:
    """The TTFT the probes' fit expects at ``prompt_tokens`` (intercept + slope x n, s);
    None without a fit or a length."""
    if fit is None or prompt_tokens is None:
        return None
    return fit.intercept_s + fit.slope_s_per_token * prompt_tokens


def _q(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (linear between order statistics, numpy's default), or None."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def in_window(requests: Iterable[UserRequest], now_s: float, window_s: float
              ) -> list[UserRequest]:
    """The requests that finished in ``(now_s - window_s, now_s]`` (``finished_s``)."""
    lo = now_s - window_s
    return [u for u in requests if lo < u.finished_s <= now_s]


def users_window(requests: Iterable[UserRequest], *, now_s: float, window_s: float,
                 fit: LinearFit | None = None, running: float | None = None,
                 waiting: float | None = None) -> UsersWindow:
    """The ``UsersWindow`` of the spans' requests that finished in the last ``window_s``
    seconds before ``now_s`` (source "traces": exact values, no bucket estimate).

    ttft quantiles over requests with a TTFT; prompt quantiles over those with a count;
    queue_share = sum(queue) / sum(TTFT) over requests with both;
    expected_ttft_p50_s = median of ``expected_ttft_s(fit, n)`` over the users' lengths;
    unexplained_prefill_share = 1 - sum(slope x uncached n) / sum(prefill) over requests
    with a prefill time and a length (cached tokens taken off when the span counts them);
    prefix_cache_hit_rate = sum(cached) / sum(prompt) over requests that count both.
    ``running`` / ``waiting``: the server's gauges as read now, passed through.
    """
    rs = in_window(requests, now_s, window_s)
    ttft = [u.ttft_s for u in rs if u.ttft_s is not None]
    lengths = [float(u.prompt_tokens) for u in rs if u.prompt_tokens is not None]
    both = [(u.queue_s, u.ttft_s) for u in rs if u.queue_s is not None and u.ttft_s is not None]
    ttft_sum = sum(t for _, t in both)
    # each queue inside its TTFT (``request_problem`` allows clock noise past it): 0..1
    queue_share = (sum(min(q, t) for q, t in both) / ttft_sum if both and ttft_sum > 0
                   else None)
    expected = [e for e in (expected_ttft_s(fit, u.prompt_tokens) for u in rs) if e is not None]
    unexplained = None
    if fit is not None:
        pre = [(u.prefill_s, u.prompt_tokens - (u.cached_tokens or 0)) for u in rs
               if u.prefill_s is not None and u.prompt_tokens is not None]
        total = sum(p for p, _ in pre)
        if pre and total > 0:
            unexplained = 1.0 - sum(fit.slope_s_per_token * max(n, 0) for _, n in pre) / total
    counted = [(u.cached_tokens, u.prompt_tokens) for u in rs
               if u.cached_tokens is not None and u.prompt_tokens]
    prompt_sum = sum(p for _, p in counted)
    hit = sum(c for c, _ in counted) / prompt_sum if counted and prompt_sum > 0 else None
    return UsersWindow(
        source="traces", window_s=window_s, requests=len(rs),
        ttft_p50_s=_q(ttft, 0.5), ttft_p90_s=_q(ttft, 0.9), ttft_p99_s=_q(ttft, 0.99),
        prompt_tokens_p50=_q(lengths, 0.5), prompt_tokens_p90=_q(lengths, 0.9),
        prompt_tokens_mean=sum(lengths) / len(lengths) if lengths else None,
        queue_share=_finite(queue_share), expected_ttft_p50_s=_finite(_q(expected, 0.5)),
        unexplained_prefill_share=_finite(unexplained), prefix_cache_hit_rate=_finite(hit),
        running=running, waiting=waiting, estimate=False)


def span_of(u: UserRequest) -> ServerSpan:
    """The ``ServerSpan`` a probe keeps of its own request's span ``u``."""
    return ServerSpan(request_id=u.request_id, ttft_s=u.ttft_s, queue_s=u.queue_s,
                      prefill_s=u.prefill_s, e2e_s=u.e2e_s, prompt_tokens=u.prompt_tokens,
                      latency_s=u.latency_s)


def apply_span(r: ProbeResult, span: ServerSpan) -> None:
    """Give probe ``r`` its server's own span: ``r.span``, and the span's TTFT, queue
    (``queue_source`` "span") and prefill in place of the /metrics estimates, with
    ``overhead_s`` = client TTFT - the span's TTFT.  The client's own TTFT (the fit's
    y) is never changed.  Used live (``measure.otlp``) and when a run file is read back,
    so both give the same probe.

    The server sees the request inside the client's TTFT (it arrives after the first
    byte is sent, its first token leaves before the client reads it): a span whose TTFT,
    queue or prefill is longer than the client's TTFT (past clock noise,
    ``NESTED_SLACK``) is not this request's timing (another request under the same id,
    or a sender's made-up numbers).  It is kept as ``r.span`` and named in
    ``r.notes.ignored``, and none of its times reach the probe (so never the server-side
    fixed-cost fit or the breakdown)."""
    r.span = span
    if r.ttft_s is not None:
        room = r.ttft_s * (1 + NESTED_SLACK) + NESTED_SLACK_S
        for name, v in (("TTFT", span.ttft_s), ("queue", span.queue_s),
                        ("prefill", span.prefill_s)):
            if v is not None and v > room:
                note = (f"the server's span says {name} {v:.4g} s, longer than the client's "
                        f"TTFT {r.ttft_s:.4g} s: its times are not this request's (not used)")
                if note not in r.notes.ignored:
                    r.notes.ignored.append(note)
                return
    if span.ttft_s is not None:
        r.server_ttft_s = span.ttft_s
        if r.ttft_s is not None:
            r.overhead_s = r.ttft_s - span.ttft_s
    if span.queue_s is not None:
        r.queue_s = span.queue_s
        r.queue_source = "span"
    if span.prefill_s is not None:
        r.server_prefill_s = span.prefill_s
