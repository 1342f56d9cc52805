"""Chunked prefill told from the n² curve.

A server that prefills in chunks of C tokens runs ceil(n/C) forward passes (vLLM's
``--max-num-batched-tokens`` token budget per engine step; llama.cpp's ``n_ubatch``),
and each pass has a fixed cost, so TTFT may step up at multiples of C.  But TTFT also
curves up with n (attention's n² term), and a step function fitted to a smooth curve
"finds" steps in the curvature: vLLM with a 2,048-token budget, probed up to 1,024
tokens, was once said to step "every 960 tokens" (and "every 320" here).

So the null model always has the n² term:

    H0: TTFT = a + b·n + c·n²
    H1: TTFT = a + b·n + c·n² + s·ceil(n/C)

on the median TTFT of each distinct length when lengths repeat (a probe slowed by
another tenant is one of several; measured on the real vLLM under a load average of
4 on 2 cores: p 0.023 over 81 probes, 3.7e-05 over their 27 per-length medians),
fitted by weighted least squares, weights 1/ŷ² from an unweighted H0 fit (prefill
noise scales with TTFT), after leaving out points whose relative residual from H0 is
beyond ``OUTLIER_MADS`` robust scales (queueing spikes).  The test is the partial F
test of the step column, F(1, m−4), p from Student's t (F(1, k) = t²(k)).  A chunk
size the server states (``server_info``) is tested alone; without one, every
candidate C (powers of two and multiples of 64 up to max n / 2) is tried and the
smallest p is Bonferroni-corrected by the number tried.  Steps are claimed only when
s > 0 and the (corrected) p < ``ALPHA``; otherwise the line says so, with the p.
Imports no textual; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from prefilltui.model.fit import t_cdf
from prefilltui.model.types import JsonObject, ProbeResult, ServerInfo
from prefilltui.model.units import duration

#: Significance level of the step test (after the Bonferroni correction).
ALPHA = 0.01
#: Points whose relative residual from the n² fit is beyond this many robust scales
#: (1.4826 × MAD) are left out of the test (queueing spikes on a shared machine).
OUTLIER_MADS = 5.0
#: Fewest points the test runs on (4 parameters and a few degrees of freedom).
MIN_POINTS = 8


@dataclass(frozen=True)
class StepTest:
    """The best step model against the n² fit: chunk size (tokens), step (s per
    chunk), partial F, its p, p after Bonferroni over ``candidates`` sizes, and the
    points used (``m``) and left out as outliers (``dropped``)."""

    chunk_tokens: int
    step_s: float
    f_stat: float
    p_value: float
    p_adjusted: float
    candidates: int
    m: int
    dropped: int

    @property
    def significant(self) -> bool:
        return self.step_s > 0 and self.p_adjusted < ALPHA

    def describe(self, probes: int | None = None) -> str:
        """The test in words; ``probes`` > points: the points are per-length medians."""
        corr = (f", Bonferroni over {self.candidates} sizes p {_p(self.p_adjusted)}"
                if self.candidates > 1 else "")
        pts = self.m + self.dropped
        med = (f" over the medians of {pts} lengths ({probes} probes)"
               if probes and probes > pts else "")
        if self.dropped:
            med += f", {self.dropped} left out as outliers"
        return (f"step vs n² fit at {self.chunk_tokens:,} tokens{med}: F(1,{self.m - 4}) = "
                f"{self.f_stat:.1f}, p {_p(self.p_value)}{corr}; alpha {ALPHA}")


def _p(p: float) -> str:
    return "< 1e-6" if p < 1e-6 else f"= {p:.2g}"


def _f_pvalue(f: float, df: int) -> float:
    """Upper tail of F(1, df) at ``f``: 2·(1 − T_df(√f))."""
    if not math.isfinite(f):
        return 0.0
    if f <= 0:
        return 1.0
    return max(0.0, min(1.0, 2.0 * (1.0 - t_cdf(math.sqrt(f), df))))


def _wls(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
    sw = np.sqrt(w)
    beta, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
    r = (y - X @ beta) * sw
    return float(r @ r), beta


def default_candidates(hi: float, min_steps: int = 2) -> list[int]:
    """Chunk sizes tried without a server-stated one: powers of two from 64 and
    multiples of 64 up to 4,096, at most ``hi / min_steps``."""
    cands = sorted({*(2 ** k for k in range(6, 16)), *range(64, 4097, 64)})
    return [c for c in cands if c <= hi / min_steps]


def step_test(x: Sequence[float], y: Sequence[float], candidates: Sequence[int] | None = None,
              *, min_steps: int = 2) -> StepTest | None:
    """The best step model among ``candidates`` (default ``default_candidates``) against
    the n² fit (module docstring).  None when there are fewer than MIN_POINTS points,
    no spread, or no candidate with ``min_steps`` boundaries inside the data."""
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    ok = np.isfinite(xa) & np.isfinite(ya) & (ya > 0)
    xa, ya = xa[ok], ya[ok]
    if len(xa) < MIN_POINTS or np.ptp(xa) <= 0:
        return None
    scale_x = float(xa.max())
    X0 = np.column_stack([np.ones(len(xa)), xa / scale_x, (xa / scale_x) ** 2])
    _, b0 = _wls(X0, ya, np.ones(len(xa)))
    floor = 0.5 * float(ya.min())
    yhat = np.maximum(X0 @ b0, floor)
    rel = (ya - yhat) / yhat
    mad = 1.4826 * float(np.median(np.abs(rel - np.median(rel))))
    keep = np.abs(rel) <= OUTLIER_MADS * mad if mad > 0 else np.ones(len(xa), bool)
    if keep.sum() < MIN_POINTS:
        keep = np.ones(len(xa), bool)
    dropped = int(len(xa) - keep.sum())
    xa, ya, X0, yhat = xa[keep], ya[keep], X0[keep], yhat[keep]
    m = len(xa)
    w = 1.0 / yhat ** 2
    rss0, _ = _wls(X0, ya, w)
    cands = sorted({int(c) for c in candidates} if candidates is not None
                   else set(default_candidates(float(xa.max()), min_steps)))
    tried: list[tuple[float, int, float, float]] = []
    for c in cands:
        if c <= 0:
            continue
        steps = np.ceil(xa / c)
        if len(np.unique(steps)) < min_steps + 1:
            continue
        # a step column the n² curve already explains is not identifiable
        _, bs = _wls(X0, steps, w)
        resid = steps - X0 @ bs
        if float(np.sqrt(np.mean(resid ** 2))) < 1e-6 * max(1.0, float(np.abs(steps).max())):
            continue
        rss1, beta = _wls(np.column_stack([X0, steps]), ya, w)
        f = float("inf") if rss1 <= 0 else (rss0 - rss1) / (rss1 / (m - 4))
        tried.append((_f_pvalue(f, m - 4), c, float(beta[3]), f))
    if not tried:
        return None
    p, c, s, f = min(tried, key=lambda t: (t[0], -t[3]))
    return StepTest(c, s, f, p, min(1.0, p * len(tried)), len(tried), m, dropped)


def find_steps(x: Sequence[float], y: Sequence[float], *,
               candidates: Sequence[int] | None = None, min_steps: int = 2
               ) -> tuple[int, float, float] | None:
    """``(C, step_s, F)`` when a step every C tokens beats the n² fit
    (``StepTest.significant``), else None."""
    t = step_test(x, y, candidates, min_steps=min_steps)
    if t is None or not t.significant:
        return None
    return t.chunk_tokens, t.step_s, t.f_stat


# ------------------------------------------------------------------ the verdict

@dataclass(frozen=True)
class ChunkInfo:
    """Chunked prefill: ``chunk_tokens`` per step and where the steps fall.

    source: "server" (the server states its chunk size: llama.cpp ``n_ubatch``/
    ``n_batch``, vLLM ``max_num_batched_tokens``, SGLang ``chunked_prefill_size``),
    "detected" (no size stated; a step model beat the n² fit), or None.  ``step_s`` is the TTFT added per chunk when the
    steps are measurable (tested at the server's size, or detected).  ``boundaries``
    are token counts inside the measured range (for the plot).  ``p_value`` is the
    step test's (Bonferroni-corrected when searched); ``test`` says it in words.
    ``line`` names the effect in one sentence.
    """

    chunk_tokens: int | None
    source: str | None
    boundaries: tuple[int, ...] = ()
    step_s: float | None = None
    f_stat: float | None = None
    line: str = ""
    p_value: float | None = None
    test: str = ""

    def to_json(self) -> JsonObject:
        return asdict(self)


def _boundaries(c: int, lo: float, hi: float, cap: int = 64) -> tuple[int, ...]:
    k0 = max(1, math.ceil(lo / c))
    out = []
    k = k0
    while k * c <= hi and len(out) < cap:
        out.append(k * c)
        k += 1
    return tuple(out)


def per_length_medians(x: Sequence[float], y: Sequence[float],
                       keys: Sequence[float] | None = None
                       ) -> tuple[list[float], list[float], int]:
    """(lengths, median TTFT per length, probes) when some length repeats, else the
    points unchanged (and their count).  ``keys`` group the points (the requested
    length, whose server counts may differ by a token or two); x is then each group's
    median count."""
    keys = x if keys is None else keys
    groups: dict[float, list[tuple[float, float]]] = {}
    for k, a, b in zip(keys, x, y):
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
            groups.setdefault(float(k), []).append((float(a), float(b)))
    n = sum(len(v) for v in groups.values())
    if all(len(v) == 1 for v in groups.values()):
        return list(x), list(y), len(list(x))
    rows = sorted((float(np.median([a for a, _ in v])), float(np.median([b for _, b in v])))
                  for v in groups.values())
    return [a for a, _ in rows], [b for _, b in rows], n


def server_chunk(info: ServerInfo | None) -> tuple[int | None, str]:
    """The chunk size the server states and how it says it, else (None, reason or "")."""
    if info is None:
        return None, ""
    if info.max_num_batched_tokens:
        return info.max_num_batched_tokens, (f"vLLM max_num_batched_tokens "
                                             f"{info.max_num_batched_tokens}")
    if info.chunked_prefill_size:
        return info.chunked_prefill_size, (f"SGLang chunked_prefill_size "
                                           f"{info.chunked_prefill_size}")
    c = info.n_ubatch or info.n_batch
    if info.n_ubatch and info.n_batch:
        return c, f"n_ubatch {info.n_ubatch}, n_batch {info.n_batch}"
    if c:
        return c, f"batch {c}"
    if info.kind == "llama.cpp":
        return None, "llama-server does not report n_batch/n_ubatch; set with -b/-ub"
    if info.kind == "vllm":
        return None, ("vLLM states its token budget (max_num_batched_tokens) only in its "
                      "log and, with VLLM_SERVER_DEV_MODE=1, at /server_info")
    if info.kind == "sglang":
        if info.facts.get("chunked_prefill_size") == -1:
            return None, "SGLang runs with chunked prefill off (chunked_prefill_size -1)"
        return None, "SGLang states its chunked_prefill_size at /server_info, which did not answer"
    return None, ""


def detect_chunking(results: Sequence[ProbeResult] = (), *, server_info: ServerInfo | None = None,
                    x: Sequence[float] | None = None, y: Sequence[float] | None = None
                    ) -> ChunkInfo:
    """Chunked prefill from the server's stated chunk size (tested alone) or, without
    one, a Bonferroni-corrected search (module docstring); fit-eligible probes of
    ``results``, or ``x`` tokens and ``y`` TTFT seconds."""
    keys = None
    if x is None or y is None:
        pts = [r for r in results if r.fit_eligible]
        x = [r.tokens for r in pts]
        y = [r.ttft_s for r in pts]
        keys = [r.requested_tokens or r.tokens for r in pts]
    x, y, probes = per_length_medians(x, y, keys)
    lo = min(x) if len(x) else 0
    hi = max(x) if len(x) else 0
    server_c, what = server_chunk(server_info)
    if server_c:
        b = _boundaries(server_c, lo, hi)
        t = step_test(x, y, [server_c], min_steps=1) if b else None
        head = f"the server prefills in chunks of {server_c:,} tokens ({what})"
        if t is not None and t.significant:
            return ChunkInfo(server_c, "server", b, t.step_s, t.f_stat,
                             f"chunked prefill: {head}; TTFT steps up ~{duration(t.step_s)} per "
                             f"chunk ({t.describe(probes)})", t.p_value, t.describe(probes))
        if not b:
            tail = " every measured prompt fits in one chunk"
        elif t is None:
            tail = " too few probes to test for TTFT steps at those boundaries"
        else:
            tail = f" no TTFT step beyond the n² curve at those boundaries ({t.describe(probes)})"
        return ChunkInfo(server_c, "server", b, None, t.f_stat if t else None,
                         f"{head};{tail}", t.p_value if t else None, t.describe(probes) if t else "")
    t = step_test(x, y)
    if t is not None and t.significant:
        c = t.chunk_tokens
        return ChunkInfo(c, "detected", _boundaries(c, lo, hi), t.step_s, t.f_stat,
                         f"chunked prefill: TTFT steps up ~{duration(t.step_s)} every {c:,} "
                         f"tokens beyond the n² curve ({t.describe(probes)}); each chunk is a "
                         "separate forward pass", t.p_adjusted, t.describe(probes))
    if len(x) < MIN_POINTS:
        return ChunkInfo(None, None, (), None, None, "")
    line = "no chunk size exposed and no TTFT steps beyond the n² curve"
    if t is not None:
        line += f" (best: {t.describe(probes)})"
    if what:
        line += f" ({what})"
    return ChunkInfo(None, None, (), None, None, line, t.p_adjusted if t else None,
                     t.describe(probes) if t else "")
