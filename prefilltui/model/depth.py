"""Prefill at context depth, the pure part: which probes belong to the depth phase,
their verification against the server's cached-token count, the expected slope from
the FLOP formula, and the slope-vs-depth table.  The requests (priming a prefix,
probing after it) are in ``prefilltui.measure.depth``; the module docstring there
describes the method and the run-file keys.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Sequence

from prefilltui.model.roofline import Shape, count, polynomial
from prefilltui.model.fit import LinearFit
from prefilltui.model.types import JsonObject, ProbeResult

if TYPE_CHECKING:
    from prefilltui.model.roofline import ModelShape

#: What the depth table's formula column compares against (an estimate).
FORMULA = ("per new token at depth D: linear matmuls + 4*L*d_attn*(D + (n+1)/2) FLOPs "
           "(causal attention; estimate)")

#: Cached tokens may differ from the prefix's own count by this many tokens, or this
#: fraction of it, whichever is larger: a chat template's closing tokens are not part
#: of the shared prefix, and the first new word may share a token with the prefix's
#: continuation in the slot.
TOLERANCE_TOKENS = 16
TOLERANCE_FRACTION = 0.03


def tolerance(prefix_tokens: int) -> int:
    """Allowed |cached tokens - prefix tokens| for a verified depth probe."""
    return max(TOLERANCE_TOKENS, round(TOLERANCE_FRACTION * prefix_tokens))


def depth_of(r: ProbeResult) -> int:
    """The context depth a probe was sent at (0 for an ordinary probe)."""
    return r.depth.depth if r.depth is not None and r.depth.depth > 0 else 0


def is_depth_probe(r: ProbeResult) -> bool:
    """True for a probe (or prefix) of the depth phase, depth 0 included: these have
    their own table and stay out of the ordinary sweep's summary."""
    return r.depth is not None


def verify(r: ProbeResult, prefix_tokens: int | None) -> str | None:
    """Why the depth probe ``r`` is not verified, or None when it is."""
    if not r.ok:
        return f"failed: {r.error_kind}"
    if prefix_tokens is None:
        return "the prefix's token count is unknown"
    if r.cached_tokens is None:
        return "the server reports no cached-token count"
    if abs(r.cached_tokens - prefix_tokens) > tolerance(prefix_tokens):
        return f"{r.cached_tokens:,} cached tokens, prefix has {prefix_tokens:,}"
    if r.prompt_tokens is None or r.prompt_tokens - r.cached_tokens < 1:
        return "no new tokens counted"
    return None


def lengths_for_depth(lengths: Iterable[int], depth: int, cap: int | None) -> list[int]:
    """The new-token counts that fit after ``depth`` under the prompt cap ``cap``."""
    return sorted({n for n in lengths if cap is None or depth + n <= cap})


def expected_slope(xs: Sequence[float], depth: int, model: Shape) -> float | None:
    """Least-squares slope (FLOPs per new token) of the request's matmul FLOPs
    F(n; D) = f0 + f1(D)·n + f2·n² (``flops.polynomial``, causal attention) over the
    new-token counts ``xs``; None with fewer than 2 distinct counts.  An estimate.
    Raises ValueError as ``flops.count``."""
    if len(set(xs)) < 2:
        return None
    mx = statistics.fmean(xs)
    var = statistics.fmean([(x - mx) ** 2 for x in xs])
    mx2 = statistics.fmean([x * x for x in xs])
    cov = statistics.fmean([(x - mx) * (x * x - mx2) for x in xs])
    _f0, f1, f2 = polynomial(model, depth)
    return f1 + f2 * cov / var


def _verified(r: ProbeResult) -> bool:
    """A depth probe's cache proof held (an ordinary probe standing in for depth 0
    counts as verified)."""
    return r.depth is None or r.depth.verified is not False


def _points(results: Iterable[ProbeResult]) -> dict[int, list[tuple[int, float, ProbeResult]]]:
    """(new tokens, TTFT s, result) per depth, from the depth phase's probes; depth 0
    falls back to the ordinary sweep's fit-eligible probes when the phase has none."""
    by: dict[int, list[tuple[int, float, ProbeResult]]] = {}
    plain: list[tuple[int, float, ProbeResult]] = []
    for r in results:
        if r.warmup:
            continue
        if r.depth is not None and r.depth.role == "probe":
            by.setdefault(depth_of(r), []).append(
                (r.depth.new_tokens or 0, r.ttft_s if r.ttft_s is not None else math.nan, r))
        elif r.depth is None and r.fit_eligible and r.tokens:
            plain.append((int(r.tokens), r.ttft_s, r))
    if by and 0 not in by and plain:
        by[0] = plain
    return by


@dataclass(frozen=True, slots=True)
class DepthRow:
    """One context depth D (tokens of cached prefix; 0 = cold prompts).

    prefix_tokens: the prefix's server count (median); cached_tokens: the cached-token
    count of the verified probes (median; None at depth 0); probes sent, verified,
    flagged (not verified, left out) and the flags' reasons; fit: TTFT over new tokens
    (None with too few points); mean_new_tokens; ratio: slope / depth-0 slope;
    expected_ratio: the formula's ratio and per_token_flops: the matmul FLOPs per new
    token at the mean new-token count, linear + 4·L·d_attn·(D + (n+1)/2)
    (``model.roofline.flops``, causal; both estimates).
    """

    depth: int
    prefix_tokens: int | None
    cached_tokens: int | None
    probes: int
    verified: int
    flagged: int
    flags: tuple[str, ...]
    fit: LinearFit | None
    mean_new_tokens: float | None
    ratio: float | None = None
    expected_ratio: float | None = None
    per_token_flops: float | None = None

    @property
    def slope_s_per_token(self) -> float | None:
        return self.fit.slope_s_per_token if self.fit is not None else None

    def to_json(self) -> JsonObject:
        return {"depth": self.depth, "prefix_tokens": self.prefix_tokens,
                "cached_tokens": self.cached_tokens, "probes": self.probes,
                "verified": self.verified, "flagged": self.flagged, "flags": list(self.flags),
                "fit": self.fit.to_json() if self.fit is not None else None,
                "slope_s_per_token": self.slope_s_per_token,
                "mean_new_tokens": self.mean_new_tokens, "ratio": self.ratio,
                "expected_ratio": self.expected_ratio, "per_token_flops": self.per_token_flops}


@dataclass(frozen=True, slots=True)
class DepthTable:
    """Slope vs depth: one row per depth, sorted; ``notes`` say what is missing (no
    depth-0 row); ``formula`` names the FLOP model of the expected ratios."""

    rows: tuple[DepthRow, ...]
    notes: tuple[str, ...] = ()
    formula: str = FORMULA
    estimate: bool = True

    def to_json(self) -> JsonObject:
        return {"rows": [r.to_json() for r in self.rows], "estimate": self.estimate,
                "notes": list(self.notes), "formula": self.formula}


def depth_table(results: Iterable[ProbeResult], model: ModelShape | None = None
                ) -> DepthTable | None:
    """Slope vs depth (``DepthTable``), or None when the run has no depth probes.
    ``model``: the resolved model shape, for the formula's expected ratio."""
    from prefilltui.model.fit import fit_ols
    from prefilltui.model.fit import fit_robust

    results = list(results)
    by = _points(results)
    if not any(d > 0 for d in by):
        return None
    shape = model if model is not None and model.params and model.layers and model.d_attn \
        else None
    rows: list[DepthRow] = []
    xs_of: dict[int, list[float]] = {}
    for d in sorted(by):
        pts = by[d]
        ok = lambda p: _verified(p[2]) and math.isfinite(p[1])  # noqa: E731
        good = [p for p in pts if ok(p)]
        bad = [p for p in pts if not ok(p)]
        xs = [float(p[0]) for p in good]
        ys = [p[1] for p in good]
        f = None
        if len(good) >= 3 and len(set(xs)) >= 2:
            f = fit_robust(xs, ys) or fit_ols(xs, ys)
        pref = [p[2].depth.prefix_tokens for p in pts if p[2].depth is not None]
        pref = [v for v in pref if v is not None]
        cached = [p[2].cached_tokens for p in good if d > 0 and p[2].cached_tokens is not None]
        mean_new = statistics.fmean(xs) if xs else None
        rows.append(DepthRow(
            depth=d, prefix_tokens=int(statistics.median(pref)) if pref else None,
            cached_tokens=int(statistics.median(cached)) if cached else None,
            probes=len(pts), verified=len(good), flagged=len(bad),
            flags=tuple(sorted({str(p[2].depth.flag if p[2].depth else None) for p in bad})),
            fit=f, mean_new_tokens=mean_new,
            per_token_flops=(_per_token(shape, mean_new, d)
                             if shape is not None and mean_new else None)))
        xs_of[d] = xs
    base = rows[0] if rows[0].depth == 0 else None
    e0 = expected_slope(xs_of[0], 0, shape) if base is not None and shape is not None else None
    out = []
    for row in rows:
        ratio = expected = None
        if base is not None:
            if base.slope_s_per_token and row.slope_s_per_token is not None:
                ratio = row.slope_s_per_token / base.slope_s_per_token
            e = expected_slope(xs_of[row.depth], row.depth, shape) if e0 else None
            if e0 and e:
                expected = e / e0
        out.append(replace(row, ratio=ratio, expected_ratio=expected))
    notes = () if base is not None else ("no depth-0 probes: ratios need the ordinary sweep",)
    return DepthTable(tuple(out), notes)


def _per_token(model: Shape, mean_new: float, depth: int) -> float:
    """Matmul FLOPs per new token at ``depth`` for ``mean_new`` new tokens (the LM head,
    once per request, left out)."""
    c = count(model, mean_new, depth)
    return (c.total - c.lm_head) / mean_new
