"""Prefill at context depth, the pure part: which probes belong to the depth phase,
their verification against the server's cached-token count, the expected slope from
the FLOP formula, and the slope-vs-depth table.  The requests (priming a prefix,
probing after it) are in ``prefilltui.measure.depth``; the module docstring there
describes the method and the run-file keys.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Sequence

from prefilltui.model import flops
from prefilltui.model.catalog import shape_from_json
from prefilltui.model.types import ProbeResult
from prefilltui.model.units import MISSING

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
    d = r.extra.get("depth")
    return d if isinstance(d, int) and not isinstance(d, bool) and d > 0 else 0


def is_depth_probe(r: ProbeResult) -> bool:
    """True for a probe (or prefix) of the depth phase, depth 0 included: these have
    their own table and stay out of the ordinary sweep's summary."""
    return "depth_role" in r.extra


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


def expected_slope(xs: Sequence[float], depth: int, model: flops.Shape) -> float | None:
    """Least-squares slope (FLOPs per new token) of the request's matmul FLOPs
    F(n; D) = f0 + f1(D)·n + f2·n² (``flops.polynomial``, causal attention) over the
    new-token counts ``xs``; None with fewer than 2 distinct counts.  An estimate."""
    if len(set(xs)) < 2:
        return None
    mx = statistics.fmean(xs)
    var = statistics.fmean([(x - mx) ** 2 for x in xs])
    mx2 = statistics.fmean([x * x for x in xs])
    cov = statistics.fmean([(x - mx) * (x * x - mx2) for x in xs])
    _f0, f1, f2 = flops.polynomial(model, depth)
    return f1 + f2 * cov / var


def _points(results: Iterable[ProbeResult]) -> dict[int, list[tuple[int, float, ProbeResult]]]:
    """(new tokens, TTFT s, result) per depth, from the depth phase's probes; depth 0
    falls back to the ordinary sweep's fit-eligible probes when the phase has none."""
    by: dict[int, list[tuple[int, float, ProbeResult]]] = {}
    plain: list[tuple[int, float, ProbeResult]] = []
    for r in results:
        if r.warmup:
            continue
        if r.extra.get("depth_role") == "probe":
            new = r.extra.get("depth_new_tokens")
            by.setdefault(depth_of(r), []).append(
                (int(new) if isinstance(new, int) else 0,
                 r.ttft_s if r.ttft_s is not None else math.nan, r))
        elif "depth_role" not in r.extra and r.fit_eligible and r.tokens:
            plain.append((int(r.tokens), r.ttft_s, r))
    if by and 0 not in by and plain:
        by[0] = plain
    return by


def depth_table(results: Iterable[ProbeResult], model: dict[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """Slope vs depth: one row per depth, or None when the run has no depth probes.

    ``model``: the analysis' model dict (``params``, ``layers``, ``attn_width``) for the
    formula's expected ratio.  Rows: depth, prefix_tokens, cached_tokens (median of the
    verified probes), probes, verified, flagged, fit (LinearFit JSON over new tokens,
    None with too few points), ratio (slope / depth-0 slope), expected_ratio (formula,
    estimate), per_token_flops (matmul FLOPs per new token at the mean new-token count:
    linear + 4·L·d_attn·(D + (n+1)/2), ``model.flops``, causal; estimate).
    """
    from prefilltui.model import fit as fitmod

    results = list(results)
    by = _points(results)
    if not any(d > 0 for d in by):
        return None
    shape = shape_from_json(model) if model else None
    if shape is not None and not (shape.params and shape.layers and shape.d_attn):
        shape = None
    rows: list[dict[str, Any]] = []
    for d in sorted(by):
        pts = by[d]
        ok = lambda p: p[2].extra.get("depth_verified", True) and math.isfinite(p[1])  # noqa: E731
        good = [p for p in pts if ok(p)]
        bad = [p for p in pts if not ok(p)]
        xs = [float(p[0]) for p in good]
        ys = [p[1] for p in good]
        f = None
        if len(good) >= 3 and len(set(xs)) >= 2:
            f = fitmod.fit_robust(xs, ys) or fitmod.fit_ols(xs, ys)
        pref = [p[2].extra.get("depth_prefix_tokens") for p in pts]
        pref = [v for v in pref if isinstance(v, int)]
        cached = [p[2].cached_tokens for p in good if d > 0 and p[2].cached_tokens is not None]
        row: dict[str, Any] = {
            "depth": d, "prefix_tokens": int(statistics.median(pref)) if pref else None,
            "cached_tokens": int(statistics.median(cached)) if cached else None,
            "probes": len(pts), "verified": len(good),
            "flagged": len(bad), "flags": sorted({str(p[2].extra.get("depth_flag")) for p in bad}),
            "fit": f.to_json() if f is not None else None,
            "slope_s_per_token": f.slope_s_per_token if f is not None else None,
            "mean_new_tokens": statistics.fmean(xs) if xs else None,
            "ratio": None, "expected_ratio": None, "per_token_flops": None,
            "_xs": xs,
        }
        if shape is not None and xs:
            c = flops.count(shape, row["mean_new_tokens"], d)
            row["per_token_flops"] = (c.total - c.lm_head) / row["mean_new_tokens"]
        rows.append(row)
    base = rows[0] if rows[0]["depth"] == 0 else None
    e0 = expected_slope(base["_xs"], 0, shape) if base is not None and shape is not None else None
    for row in rows:
        xs = row.pop("_xs")
        if base is None:
            continue
        if base["slope_s_per_token"] and row["slope_s_per_token"] is not None:
            row["ratio"] = row["slope_s_per_token"] / base["slope_s_per_token"]
        e = expected_slope(xs, row["depth"], shape) if e0 else None
        if e0 and e:
            row["expected_ratio"] = e / e0
    notes = []
    if base is None:
        notes.append("no depth-0 probes: ratios need the ordinary sweep")
    return {"rows": rows, "estimate": True, "notes": notes,
            "formula": "per new token at depth D: linear matmuls + 4*L*d_attn*(D + (n+1)/2) FLOPs "
                       "(causal attention; estimate)"}


def format_depth(t: dict[str, Any] | None) -> list[str]:
    """Text lines for a ``depth_table`` (ms/µs on screen); [] for None."""
    if not t:
        return []
    out = ["Prefill at context depth (x = new tokens after a cached prefix of D tokens):",
           f"  {'depth':>6} {'prefix':>7} {'cached':>7} {'probes':>7}  "
           f"{'slope µs/token [95%]':<26} {'tok/s':>7} {'ratio':>6} {'formula':>8}"]
    for r in t["rows"]:
        f = r["fit"]
        if f and f.get("slope_s_per_token") is not None:
            lo, hi = f["slope_ci"] or (None, None)
            ci = f"[{lo * 1e6:,.0f} to {hi * 1e6:,.0f}]" if lo is not None and hi is not None else ""
            slope = f"{f['slope_s_per_token'] * 1e6:,.0f} {ci}"
            tps = f"{f['prefill_tokens_per_s']:,.0f}" if f.get("prefill_tokens_per_s") else MISSING
        else:
            slope, tps = "too few probes", MISSING
        probes = f"{r['verified']}/{r['probes']}"
        cached = MISSING if not r["depth"] else (f"{r['cached_tokens']:,}" if r["cached_tokens"]
                                             is not None else "?")
        prefix = f"{r['prefix_tokens']:,}" if r["prefix_tokens"] else MISSING
        out.append(f"  {r['depth']:>6,} {prefix:>7} {cached:>7} {probes:>7}  "
                   f"{slope:<26} {tps:>7} "
                   f"{_x(r['ratio']):>6} {_x(r['expected_ratio']):>8}")
    out.append("  prefix, cached: server-counted tokens; probes: verified/sent; ratio: slope / "
               "depth-0 slope;")
    out.append("  formula: the same ratio from the matmul FLOPs per new token, linear + "
               "4·L·d_attn·(D + (n+1)/2) (estimate)")
    for r in t["rows"]:
        if r["flagged"]:
            out.append(f"  depth {r['depth']:,}: {r['flagged']} probe(s) left out: "
                       + "; ".join(r["flags"][:3]))
    out += [f"  note: {n}" for n in t.get("notes", [])]
    return out


def _x(v: float | None) -> str:
    return MISSING if v is None else f"{v:.2f}×"
