"""The counts and times a server reports in a probe's stream (``usage``, llama.cpp's
``timings``), taken only when they can be true.

``take_usage`` reads prompt tokens, cached tokens and the server's prefill time as
the stream brings them; ``vet`` drops what contradicts the whole probe.  Each value
left out is named in ``notes.ignored`` (described, never copied).
"""

from __future__ import annotations

import math
from typing import Any

from prefilltui.model.types import ProbeResult

#: Largest token count accepted from a server whose context is unknown (the longest
#: context windows offered are 10 M tokens, e.g. Llama 4 Scout's model card); a
#: larger, negative or non-integer count is ignored and noted in ``notes.ignored``.
MAX_PLAUSIBLE_TOKENS = 10_000_000
#: How much longer than the client's own TTFT a server prefill time may be
#: (seconds): the two clocks start apart, but the server cannot have spent much
#: longer on the prompt than the client waited for its first token.
SERVER_TIME_TOLERANCE_S = 1.0


def _count(v: Any, ceiling: int = MAX_PLAUSIBLE_TOKENS) -> int | None:
    """A token count from server JSON: an int (not a bool) in [0, ceiling]."""
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= ceiling:
        return v
    return None


def _bad(r: ProbeResult, field: str, v: Any, why: str = "is not a token count") -> None:
    """Note an ignored server value.  A number is quoted; anything else is described
    by its type and size, never copied: a server echoing a secret into a count
    field must not get it into the summary or the run file."""
    r.notes.ignored.append(f"{field} {_describe_value(v)} {why}")


def _describe_value(v: Any) -> str:
    """A server value as it may be quoted: a number, bool or null as its text (cut at
    40 characters), a string or a container by its type and length only."""
    if v is None or isinstance(v, (bool, int, float)):
        return repr(str(v)[:40])
    if isinstance(v, str):
        return f"(a string of {len(v)} characters)"
    return f"(a {type(v).__name__} of {len(v) if hasattr(v, '__len__') else '?'} items)"


def token_ceiling(context_tokens: int | None) -> int:
    """The largest prompt a server can have counted: its context when known."""
    if context_tokens and context_tokens > 0:
        return min(context_tokens, MAX_PLAUSIBLE_TOKENS)
    return MAX_PLAUSIBLE_TOKENS


def take_usage(r: ProbeResult, usage: dict | None, timings: dict | None,
                ceiling: int = MAX_PLAUSIBLE_TOKENS) -> None:
    """Server-counted prompt tokens, cached tokens and server prefill time.

    Values that are not plausible (negative, bool, non-integer, over ``ceiling``
    = the server's context or MAX_PLAUSIBLE_TOKENS, non-finite or negative times)
    are ignored, so they never reach the fit, the length model or the run file;
    each is named in ``notes.ignored``.  ``vet`` checks what needs the whole
    stream (cached vs prompt tokens, server time vs TTFT)."""
    if usage:
        pt = usage.get("prompt_tokens")
        if _count(pt, ceiling):
            r.prompt_tokens, r.prompt_tokens_source = pt, "usage"
        elif pt is not None:
            _bad(r, "usage.prompt_tokens", pt)
        det = usage.get("prompt_tokens_details")
        if isinstance(det, dict) and det.get("cached_tokens") is not None:
            if _count(det["cached_tokens"], ceiling) is not None:
                r.cached_tokens, r.cached_tokens_source = det["cached_tokens"], "usage"
            else:
                _bad(r, "usage.prompt_tokens_details.cached_tokens", det["cached_tokens"])
    if timings:
        pn, cn, pms = timings.get("prompt_n"), timings.get("cache_n"), timings.get("prompt_ms")
        if cn is not None and _count(cn, ceiling) is None:
            _bad(r, "timings.cache_n", cn)
            cn = None
        if pn is not None and _count(pn, ceiling) is None:
            _bad(r, "timings.prompt_n", pn)
            pn = None
        if cn is not None and r.cached_tokens is None:
            r.cached_tokens, r.cached_tokens_source = cn, "timings"
        total = (pn or 0) + (cn or 0)
        if pn is not None and r.prompt_tokens_source != "usage" and total > 0:
            if total <= ceiling:
                r.prompt_tokens, r.prompt_tokens_source = total, "timings"
            else:
                _bad(r, "timings.prompt_n + cache_n", total)
        if pms is not None:
            if (isinstance(pms, (int, float)) and not isinstance(pms, bool)
                    and math.isfinite(pms) and pms >= 0):
                r.server_prefill_s = pms / 1000.0
            else:
                _bad(r, "timings.prompt_ms", pms, "is not a time")


def vet(r: ProbeResult) -> None:
    """Drop what contradicts the rest of the probe, noted in ``notes.ignored``:
    more cached tokens than prompt tokens (not a count: the probe stays a miss and
    stays in the fit), and a server prefill time longer than the client's TTFT +
    SERVER_TIME_TOLERANCE_S (or any server time on a probe without a TTFT)."""
    if (r.cached_tokens is not None and r.prompt_tokens is not None
            and r.cached_tokens > r.prompt_tokens):
        _bad(r, "cached tokens", r.cached_tokens,
             f"is more than the {r.prompt_tokens} prompt tokens: not a token count")
        r.cached_tokens = r.cached_tokens_source = None
    sp = r.server_prefill_s
    if sp is not None and (r.ttft_s is None or sp > r.ttft_s + SERVER_TIME_TOLERANCE_S):
        _bad(r, "server prefill (s)", sp,
             "is longer than the measured TTFT" + (f" {r.ttft_s:.3f} s" if r.ttft_s else "")
             + ": not a prefill time")
        r.server_prefill_s = None
