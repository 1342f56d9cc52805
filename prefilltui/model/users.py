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

from dataclasses import dataclass
from typing import Literal

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
    target -- the label of the target the span was matched to ("" = the only one).
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
    queue_share: float | None = None
    expected_ttft_p50_s: float | None = None
    unexplained_prefill_share: float | None = None
    prefix_cache_hit_rate: float | None = None
    running: float | None = None
    waiting: float | None = None
    estimate: bool = False
