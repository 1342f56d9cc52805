"""One worker's /metrics page read for its hop (``WorkerReading``), and the hops of one
probe from the readings around it (``split_hops``).  Pure.  Seconds in data.

The window is the one the rest of prefilltui reads around a probe (``MetricsHook``):
a scrape before, a scrape after; counters and histogram sums are differenced, gauges
read at the larger of the two.  One probe in flight at a time, so the window's
transfers and first tokens are the probe's own when the counts moved by one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from prefilltui.model.hops import Hops
from prefilltui.model.metrics import Exposition
from prefilltui.model.path.names import PATH_NAMES, PathNames

#: A negative residual (the hops took longer than the client waited) within this share
#: of the client's TTFT is clock and scrape jitter (the router hop is 0); beyond it the
#: readings are not this probe's and its hops are not used.  The contract's 5 %.
RESIDUAL_SLACK = 0.05


@dataclass(frozen=True, slots=True)
class WorkerReading:
    """One scrape of one worker, the series of its hop summed over engines/ranks.

    Each field None when the page does not publish it.  ttft_sum_s / ttft_count: its
    TTFT histogram; xfer_sum_s / xfer_count: the KV transfer time (s) and transfers;
    post_sum_s: posting time (s); bytes_sum: bytes transferred; speed_sum_gb_s /
    speed_count: SGLang's per-transfer GB/s; failed: failed transfers; deferred: requests
    waiting ``reason="deferred"``; external_tokens: prompt tokens whose KV came over the
    connector; consumer: the page carries a series only a KV consumer publishes.
    """

    kind: str
    ttft_sum_s: float | None = None
    ttft_count: float | None = None
    xfer_sum_s: float | None = None
    xfer_count: float | None = None
    post_sum_s: float | None = None
    bytes_sum: float | None = None
    speed_sum_gb_s: float | None = None
    speed_count: float | None = None
    failed: float | None = None
    deferred: float | None = None
    external_tokens: float | None = None
    consumer: bool = False


def _total(exp: Exposition, names: tuple[str, ...], suffix: str = "",
           label: tuple[str, str] | None = None) -> float | None:
    out = None
    for name in names:
        rows = exp.rows(name + suffix)
        if rows is None:
            continue
        vals = [v for labels, v in rows if math.isfinite(v) and v >= 0
                and (label is None or labels.get(label[0]) == label[1])]
        if vals:
            out = (out or 0.0) + sum(vals)
    return out


def read_worker(exp: Exposition, kind: str) -> WorkerReading:
    """The hop's series of one page (``kind``: the worker's server kind; a kind without
    a table reads nothing: every field None).

    Raises:
        ValueError: a family that is not Prometheus text (``Exposition.rows``).
    """
    n: PathNames | None = PATH_NAMES.get(kind)
    if n is None:
        return WorkerReading(kind)
    s = n.xfer_scale
    xs = _total(exp, n.xfer, "_sum")
    return WorkerReading(
        kind=kind,
        ttft_sum_s=_total(exp, n.ttft, "_sum"), ttft_count=_total(exp, n.ttft, "_count"),
        xfer_sum_s=xs * s if xs is not None else None, xfer_count=_total(exp, n.xfer, "_count"),
        post_sum_s=_total(exp, n.post, "_sum"), bytes_sum=_total(exp, n.xfer_bytes, "_sum"),
        speed_sum_gb_s=_total(exp, n.speed_gb_s, "_sum"),
        speed_count=_total(exp, n.speed_gb_s, "_count"),
        failed=_total(exp, n.failed),
        deferred=_total(exp, n.waiting_by_reason, label=("reason", "deferred")),
        external_tokens=_total(exp, n.external_tokens, label=("source", "external_kv_transfer")),
        consumer=any(exp.rows(x) is not None for x in n.consumer_only),
    )


def _d(a: float | None, b: float | None) -> float | None:
    """b - a for a counter; None when either is missing or it went back (a restart)."""
    if a is None or b is None or b < a:
        return None
    return b - a


def split_hops(ttft_s: float | None, prefill: tuple[WorkerReading | None, WorkerReading | None],
               decode: tuple[WorkerReading | None, WorkerReading | None]) -> Hops:
    """One probe's hops from the prefill and decode workers' readings (before, after)
    and the client's TTFT through the router (s).

    prefill_s: the prefill worker's TTFT sum moved over one request (its queue and
    compute); transfer_s: the transfer time moved (either worker's page, vLLM NIXL
    counts it where the KV is read; post time added), 0 when the transfer counters are
    published and no transfer ran; decode_s: the decode worker's TTFT moved (from its
    arrival, so it holds the transfer) minus the transfer; router_s: the client's TTFT
    minus the three (the path minus the hops).  A hop that cannot be read is None and
    ``problem`` says why (then the probe's hops are not used); no transfer series at
    all is no problem: ``transfer_s`` None, the transfer inside ``decode_s``.  Never
    raises.
    """
    pb, pa = prefill
    db, da = decode
    problems: list[str] = []
    if pb is None or pa is None:
        problems.append("the prefill worker's /metrics did not answer")
    if db is None or da is None:
        problems.append("the decode worker's /metrics did not answer")

    def one(b: WorkerReading | None, a: WorkerReading | None, who: str) -> float | None:
        if b is None or a is None:
            return None
        s, c = _d(b.ttft_sum_s, a.ttft_sum_s), _d(b.ttft_count, a.ttft_count)
        if s is None or c is None:
            problems.append(f"the {who} worker publishes no TTFT histogram")
            return None
        if round(c) != 1:
            problems.append(f"the {who} worker's TTFT counted {c:g} requests in the window, "
                            "not this probe's alone")
            return None
        return s

    prefill_s = one(pb, pa, "prefill")
    decode_ttft = one(db, da, "decode")
    xfer = xbytes = failed = ext = None
    estimated = False
    for b, a in ((pb, pa), (db, da)):
        if b is None or a is None:
            continue
        t = _d(b.xfer_sum_s, a.xfer_sum_s)
        if t is not None:
            post = _d(b.post_sum_s, a.post_sum_s) or 0.0
            xfer = (xfer or 0.0) + t + post
        by = _d(b.bytes_sum, a.bytes_sum)
        if by is None and t is not None:  # SGLang: bytes = GB/s x time, per transfer
            sp, sc = _d(b.speed_sum_gb_s, a.speed_sum_gb_s), _d(b.speed_count, a.speed_count)
            if sp is not None and sc:
                by, estimated = (sp / sc) * 1e9 * t, True
        if by is not None:
            xbytes = (xbytes or 0.0) + by
        f = _d(b.failed, a.failed)
        if f is not None:
            failed = (failed or 0.0) + f
        e = _d(b.external_tokens, a.external_tokens)
        if e is not None:
            ext = (ext or 0.0) + e
    # no transfer series (vLLM's ExampleConnector publishes none): transfer_s stays None
    # and the transfer is inside the decode hop; the other hops still hold
    deferred = max((r.deferred for r in (db, da) if r is not None and r.deferred is not None),
                   default=None)
    decode_s = None
    if decode_ttft is not None:
        decode_s = max(0.0, decode_ttft - (xfer or 0.0))
    hops = Hops(prefill_s=prefill_s, transfer_s=xfer, decode_s=decode_s,
                kv_bytes=int(xbytes) if xbytes is not None else None,
                kv_tokens=int(ext) if ext else None,
                failed_transfers=int(failed) if failed is not None else None,
                deferred=deferred, kv_estimated=estimated)
    if ttft_s is not None and math.isfinite(ttft_s) and prefill_s is not None and decode_s is not None:
        rest = ttft_s - prefill_s - (xfer or 0.0) - decode_s
        if rest < -RESIDUAL_SLACK * ttft_s:
            problems.append(f"the hops add up to {ttft_s - rest:.3f} s, more than the client's "
                            f"TTFT {ttft_s:.3f} s: the readings are not this probe's")
            return Hops(problem="; ".join(problems)[:300], failed_transfers=hops.failed_transfers)
        hops = replace(hops, router_s=max(0.0, rest))
    return replace(hops, problem="; ".join(problems)[:300] if problems else None)
