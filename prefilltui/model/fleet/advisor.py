"""The advisor: which server knob to turn, from what was measured.  Silent when healthy.

Each rule needs its own measurement and quotes it; with no measurement it says nothing
(never a guess):

- prefix caching off: a cache check (``c`` in the dashboard, ``status
  --cache-check``) found the repeat of a prompt served cold (``measure.prefix_cache``);
- chunk budget too big for the decodes beside it: the measured decode stall of probes
  under background load (``stall_reading``: ``--load``, model/load/stall.py) exceeds the
  ITL goal; the knob is the prefill chunk size, scaled down by goal / stall;
- MFU below the verdict threshold: the roofline verdict is "below" or "wrong"
  (``roofline.LOW_MFU`` / ``HEALTHY_MFU``), with the usual causes;
- context cap far above the longest prompt seen: the server's context limit is at
  least ``CONTEXT_FACTOR`` x the longest prompt its own prompt-length histogram has
  counted (vLLM ``vllm:request_prompt_tokens``), and above ``CONTEXT_MIN`` tokens:
  the KV cache reserved per sequence could batch more requests.

The knob's name depends on the server kind (``KNOBS``: vLLM, SGLang, llama.cpp, TGI;
others get the generic words).  Pure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal, Sequence

from prefilltui.model import defaults
from prefilltui.model.jsontypes import JsonObject
from prefilltui.model.metrics import MetricsSample
from prefilltui.model.roofline import HEALTHY_MFU, LOW_MFU
from prefilltui.model.summary import RunSummary
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.model.units import duration

#: The ITL goal (s) a decode stall is held against unless ``--itl-goal`` says
#: otherwise (``defaults.ITL_GOAL_S``: 50 ms, 20 tokens/s, about reading speed).
ITL_GOAL_S = defaults.ITL_GOAL_S
#: Context limit this many times the longest prompt seen is "far above" it.
CONTEXT_FACTOR = 4.0
#: ... and only above this many tokens (a small context is never worth trimming).
CONTEXT_MIN = 16384

Knob = Literal["prefix_cache", "chunk_budget", "mfu", "context"]
#: Server kind -> knob -> the flag (or setting) that turns it.
KNOBS: dict[str, dict[str, str]] = {
    "vllm": {"prefix_cache": "--enable-prefix-caching",
             "chunk_budget": "--max-num-batched-tokens", "context": "--max-model-len"},
    "sglang": {"prefix_cache": "the radix cache (drop --disable-radix-cache)",
               "chunk_budget": "--chunked-prefill-size", "context": "--context-length"},
    "llama.cpp": {"prefix_cache": "cache_prompt (per request) / --cache-reuse",
                  "chunk_budget": "-b / -ub (batch / micro-batch size)",
                  "context": "-c (--ctx-size)"},
    "tgi": {"prefix_cache": "PREFIX_CACHING=1", "chunk_budget": "--max-batch-prefill-tokens",
            "context": "--max-input-tokens / --max-total-tokens"},
}
GENERIC = {"prefix_cache": "the server's prefix cache", "chunk_budget":
           "the prefill chunk size (chunked prefill budget)", "context": "the context limit"}


@dataclass(frozen=True, slots=True)
class CacheFinding:
    """A cache check's verdict ("on", "off", "unclear", "failed") and its one line."""

    verdict: str
    line: str


@dataclass(frozen=True, slots=True)
class StallReading:
    """Decode stall under background load: the median over recent probes (s), the
    probes it rests on, and the chunk budget in tokens (None: unknown)."""

    stall_s: float
    probes: int
    budget_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class AdvisorInputs:
    """What the advisor reads.  summary: the target's run summary (verdict, MFU);
    kind: the server kind; context_tokens: its context limit; longest_prompt_tokens:
    an upper bound of the longest prompt it served, with ``longest_prompt_source``;
    cache: the last cache check; stall: the decode stall reading; itl_goal_s."""

    summary: RunSummary | None = None
    kind: str | None = None
    context_tokens: int | None = None
    longest_prompt_tokens: float | None = None
    longest_prompt_source: str = ""
    cache: CacheFinding | None = None
    stall: StallReading | None = None
    itl_goal_s: float = ITL_GOAL_S


def target_inputs(summary: RunSummary, info: ServerInfo | None,
                  results: Sequence[ProbeResult], *, cache: CacheFinding | None,
                  itl_goal_s: float, metrics: MetricsSample | None) -> AdvisorInputs:
    """The advisor's inputs for one target: its summary, the server ``info`` (kind,
    context limit), the decode stall of its recent ``results`` (``stall_reading``) and
    the longest prompt bound of its latest ``/metrics`` sample (None: not scraped)."""
    return AdvisorInputs(
        summary=summary, kind=info.kind if info else None,
        context_tokens=info.context_tokens if info else None,
        longest_prompt_tokens=metrics.longest_prompt_le if metrics is not None else None,
        longest_prompt_source="the server's prompt-length histogram",
        cache=cache, stall=stall_reading(results, info), itl_goal_s=itl_goal_s)


@dataclass(frozen=True, slots=True)
class Advice:
    """One knob to turn and why, with the numbers."""

    knob: Knob
    text: str

    def to_json(self) -> JsonObject:
        return {"knob": self.knob, "text": self.text}


def stall_reading(results: Sequence[ProbeResult], info: ServerInfo | None
                  ) -> StallReading | None:
    """The decode stall of the recent probes under background load (median over those
    that measured one, ``ProbeResult.decode_stall_s``, model/load/stall.py) and the server's
    chunk budget where it states one (vLLM ``max_num_batched_tokens``, SGLang
    ``chunked_prefill_size``, llama.cpp ``n_ubatch``, else ``n_batch``); None without
    probes under load."""
    stalls = [r.decode_stall_s for r in results
              if r.ok and r.load_level and r.decode_stall_s is not None]
    if not stalls:
        return None
    budget = ((info.max_num_batched_tokens or info.chunked_prefill_size or info.n_ubatch
               or info.n_batch)
              if info is not None else None)
    return StallReading(stall_s=statistics.median(stalls), probes=len(stalls),
                        budget_tokens=int(budget) if budget else None)


def knob(kind: str | None, name: str) -> str:
    return KNOBS.get(kind or "", GENERIC).get(name, GENERIC[name])


def advise(inp: AdvisorInputs) -> tuple[Advice, ...]:
    """The advice the measurements support (module docstring), in the order above;
    empty when nothing calls for a change.  Never raises."""
    out: list[Advice] = []
    kind = inp.kind or (inp.summary.server.kind if inp.summary and inp.summary.server else None)
    if inp.cache is not None and inp.cache.verdict == "off":
        out.append(Advice("prefix_cache", f"prefix caching is off ({inp.cache.line}): turn on "
                          f"{knob(kind, 'prefix_cache')} so shared prompt prefixes (system "
                          "prompts, chat history) skip their prefill"))
    st = inp.stall
    if st is not None and st.stall_s > inp.itl_goal_s and st.probes:
        size = f"{st.budget_tokens:,}-token " if st.budget_tokens else ""
        to = ""
        if st.budget_tokens:
            to = (f" toward ~{max(16, int(st.budget_tokens * inp.itl_goal_s / st.stall_s)):,}"
                  " tokens")
        out.append(Advice("chunk_budget", f"a {size}prefill chunk stalls decodes "
                          f"{duration(st.stall_s)} (median of {st.probes} probes under load) "
                          f"> the ITL goal {duration(inp.itl_goal_s)}: lower "
                          f"{knob(kind, 'chunk_budget')}{to} (more, shorter steps; TTFT of "
                          "long prompts grows a little)"))
    s = inp.summary
    roof = s.roofline if s is not None else None
    if s is not None and roof is not None and roof.mfu is not None and s.verdict.level in (
            "below", "wrong"):
        limit = LOW_MFU if s.verdict.level == "wrong" else HEALTHY_MFU
        tps = s.fit.prefill_tokens_per_s if s.fit is not None else None
        facts = f"{tps:,.0f} prompt tok/s, " if tps else ""
        out.append(Advice("mfu", f"MFU {roof.mfu:.1%} ({facts}estimate) is below "
                          f"{limit:.0%}: usual causes: another process on the GPU, clocks "
                          "or power capped (check the GPU gauges), weights in fp32 or "
                          "de-quantised on the fly, CPU offload or swapping, eager mode "
                          "without fused kernels, or queueing inside TTFT (queue column)"))
    ctx, seen = inp.context_tokens, inp.longest_prompt_tokens
    if ctx and seen and ctx >= CONTEXT_MIN and ctx >= CONTEXT_FACTOR * seen:
        out.append(Advice("context", f"context limit {ctx:,} tokens is {ctx / seen:.0f}x the "
                          f"longest prompt seen (≤ {seen:,.0f} tokens, "
                          f"{inp.longest_prompt_source or 'the server'}): "
                          f"{knob(kind, 'context')} nearer {int(seen * 2):,} frees KV cache "
                          "for more concurrent requests"))
    return tuple(out)
