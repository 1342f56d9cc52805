"""The exporter's Prometheus metrics, built from target snapshots at scrape time.

Every series carries ``target`` (the target's name, else its URL, a password in it
shown as ``***``) and ``model``
labels.  Names follow the Prometheus conventions: base units (seconds, ratios),
``_total`` on counters, units in the name and never in label values.

==============================================  =========  ==================================
metric                                          type       meaning
==============================================  =========  ==================================
prefilltui_build_info                           gauge      version, python_version; always 1
prefilltui_target_info                          gauge      server_kind, api, url (password ***); 1
prefilltui_target_up                            gauge      1 last probe ok, 0 failed/unreachable
prefilltui_target_ready                         gauge      1 probing (started, server found), 0 not yet
prefilltui_probe_interval_seconds               gauge      shortest gap between probe starts
prefilltui_probes_total                         counter    probes by outcome (ok/failed), error_kind
prefilltui_cache_hit_probes_total               counter    ok probes the prefix cache served part of
prefilltui_cached_tokens_total                  counter    prompt tokens those probes had cached
prefilltui_cache_counted_probes_total           counter    ok probes whose hit or miss the server counted
prefilltui_prompt_tokens_total                  counter    prompt tokens of ok probes (the added load)
prefilltui_last_probe_timestamp_seconds         gauge      unix time the last probe started
prefilltui_last_success_timestamp_seconds       gauge      unix time the last ok probe started
prefilltui_last_error_info                      gauge      error_kind, http_status of the last failure
prefilltui_probe_in_flight_seconds              gauge      age of the probe in flight (0: none)
prefilltui_probe_hang_threshold_seconds         gauge      in flight longer than this = a hang
prefilltui_probe_timeout_seconds                gauge      the probe's time cap
prefilltui_ttft_seconds                         histogram  TTFT, by requested ``prompt_tokens``
prefilltui_prefill_fixed_cost_seconds           gauge      fit intercept a (+ _lower_/_upper_ 95 %)
prefilltui_prefill_time_per_token_seconds       gauge      fit slope b
prefilltui_prefill_throughput_tokens_per_second gauge      1/b (+ _lower_/_upper_ 95 % bounds)
prefilltui_prefill_mfu_ratio                    gauge      MFU, 0..1 (+ _lower_/_upper_); needs a peak
prefilltui_fit_window_probes                    gauge      probes in the window fit
prefilltui_fit_window_size                      gauge      probes the window holds (``window``)
prefilltui_fit_age_seconds                      gauge      since the fit's newest probe finished
prefilltui_fit_stale                            gauge      1 when the age is over stale_after
prefilltui_fit_stale_after_seconds              gauge      the stated staleness window
prefilltui_prefill_throughput_expected_tokens_per_second
                                                gauge      explicit baseline, by ``source``:
                                                           config, baseline_run, roofline
prefilltui_ttft_window_median_seconds           gauge      window median TTFT by prompt_tokens
prefilltui_verdict                              stateset   analysis verdict level
prefilltui_ttft_component_seconds               gauge      window median by ``component``:
                                                           overhead, queue, prefill
prefilltui_ttft_cause                           stateset   why TTFT is high (model.diagnosis.verdict):
                                                           queueing, head_of_line, ...
prefilltui_ttft_cause_seconds                   gauge      seconds of TTFT each cause that
                                                           holds explains, by ``cause``
prefilltui_server_start_time_seconds            gauge      the server's process start (unix s)
prefilltui_server_changes_total                 counter    the server's restarts and changes,
                                                           by ``kind`` (model.server_change)
==============================================  =========  ==================================

Only for a target whose config asks for background load (``load = "decode:2"``;
never by default), with ``kind`` (decode, rate) and ``load_level`` labels:

==============================================  =========  ==================================
prefilltui_load_level                           gauge      decode streams / requests/s now
prefilltui_load_requests_total                  counter    load requests sent (the cost)
prefilltui_load_tokens_total                    counter    tokens the load received
prefilltui_decode_stall_seconds                 gauge      window median: longest decode gap
                                                           over a probe's prefill - quiet gap
prefilltui_decode_excess_seconds                gauge      window median: extra decode time
                                                           a probe's prefill cost each stream
prefilltui_decode_itl_seconds                   gauge      decode gaps of the last minute, by
                                                           ``quantile`` 0.5 / 0.99
prefilltui_users_requests                       gauge      users' requests in the 60 s window,
                                                           by ``source`` (traces / metrics)
prefilltui_users_ttft_seconds                   gauge      users' TTFT by ``quantile`` 0.5/0.9/0.99
prefilltui_users_prompt_tokens                  gauge      users' prompt tokens, ``quantile`` 0.5/0.9
prefilltui_users_queue_ratio                    gauge      users' queue time / their TTFT
prefilltui_users_expected_ttft_seconds          gauge      the fit's TTFT at the users' lengths
prefilltui_users_unexplained_prefill_ratio      gauge      users' prefill the fit's slope misses
prefilltui_users_prefix_cache_hit_ratio         gauge      users' prefix-cache hit rate
prefilltui_probe_spans_total                    counter    probes whose own span came (``outcome``
                                                           matched) or not in 30 s (expired)
prefilltui_span_latency_seconds                 gauge      median span end -> receipt
==============================================  =========  ==================================

Only for a target with a TTFT objective (``slo``; docs/slo.md), by ``objective``
(``ttft=2s@p99``) and ``source`` (users: their spans; probes: prefilltui's own):

==============================================  =========  ==================================
prefilltui_slo_objective_seconds                gauge      the objective's TTFT threshold
prefilltui_slo_target_ratio                     gauge      the share that must meet it (0.99)
prefilltui_slo_requests_total                   counter    requests counted, by ``source``
prefilltui_slo_good_requests_total              counter    of them within the threshold
prefilltui_slo_attainment_ratio                 gauge      share within over the kept requests
                                                           (+ _lower_/_upper_ 95 %, Wilson)
prefilltui_slo_error_budget_remaining_ratio     gauge      1 - missed / (budget x requests)
prefilltui_slo_max_prompt_tokens                gauge      n_max by ``line`` (idle, now), an
                                                           estimate (+ _lower_/_upper_ 95 %)
prefilltui_slo_users_over_max_prompt_ratio      gauge      users' prompts longer than n_max now
==============================================  =========  ==================================

Only for a target that is a path (``prefill`` / ``decode``; docs/disaggregated.md):

==============================================  =========  ==================================
prefilltui_path_hop_seconds                     gauge      median of each ``hop`` (router,
                                                           prefill, transfer, decode)
prefilltui_path_hop_share_ratio                 gauge      each hop's share of TTFT
prefilltui_kv_transfer_bytes_per_token          gauge      KV bytes moved per token moved
prefilltui_kv_expected_bytes_per_token          gauge      KV bytes per token the model needs
prefilltui_kv_transfer_bytes_per_second         gauge      KV bytes per second of transfer
prefilltui_kv_transfer_failed_total             counter    failed transfers around probes
prefilltui_path_worker_info                     gauge      1 per ``role`` and ``worker`` URL
==============================================  =========  ==================================

Fit series are absent until the window holds a fit (3 probes at 2+ lengths); an
unbounded upper bound (the slope's interval reaches 0) is absent rather than +Inf.
Ages are taken at scrape time, so a scrape that finds a probe hanging says so.
Process metrics (``process_*``, ``python_*``) come from prometheus-client's collectors.
"""

from __future__ import annotations

import math
import platform
import time
from typing import Iterable, Iterator, Sequence

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, InfoMetricFamily, Metric,
                                    StateSetMetricFamily)
from prometheus_client.registry import Collector

from prefilltui import __version__
from prefilltui.exporter.snapshot import TargetSnapshot
from prefilltui.model.sanitize import clean
from prefilltui.model.hops import HOP_NAMES
from prefilltui.model.summary import VERDICTS
from prefilltui.model.diagnosis import CAUSES

LABELS = ("target", "model")


def _le(b: float) -> str:
    return f"{b:g}" if b != int(b) else f"{b:.1f}"


def families(snaps: Sequence[TargetSnapshot], now: float | None = None) -> list[Metric]:
    """The metric families of ``snaps`` (targets' series only; no build/process info);
    ages are taken at unix time ``now`` (default: the current time)."""
    now = time.time() if now is None else now
    g = lambda name, doc, labels=(): GaugeMetricFamily(name, doc, labels=LABELS + labels)  # noqa: E731
    c = lambda name, doc, labels=(): CounterMetricFamily(name, doc, labels=LABELS + labels)  # noqa: E731
    info = InfoMetricFamily("prefilltui_target", "The probed server: kind (from discovery), "
                            "API flavour and URL (a password in it shown as ***)", labels=LABELS)
    up = g("prefilltui_target_up", "1 when the last probe succeeded, 0 when it failed or the "
           "server is unreachable")
    ready = g("prefilltui_target_ready", "1 when the target's prober runs and has discovered "
              "its server; 0 while it waits to start, connects, or failed to start")
    interval = g("prefilltui_probe_interval_seconds", "Shortest gap between two probe starts "
                 "(probe rate ceiling = 1/this)")
    probes = c("prefilltui_probes", "Probes sent, by outcome (ok, failed) and error_kind",
               ("outcome", "error_kind"))
    hit = c("prefilltui_cache_hit_probes", "Successful probes the server partly served from "
            "its prefix cache (the cache-defeat failed; kept out of the fit)")
    cached = c("prefilltui_cached_tokens", "Prompt tokens the server reported as cached on probes")
    counted = c("prefilltui_cache_counted_probes", "Successful probes whose prefix-cache hit or "
                "miss the server itself counted (usage cached_tokens, llama.cpp timings, or "
                "vLLM's /metrics); zero hits prove no hit only where this grows too")
    ptoks = c("prefilltui_prompt_tokens", "Prompt tokens of successful probes (server-counted)")
    last = g("prefilltui_last_probe_timestamp_seconds", "Unix time the last probe started")
    last_ok = g("prefilltui_last_success_timestamp_seconds", "Unix time the last successful "
                "probe started")
    error = InfoMetricFamily("prefilltui_last_error", "The last failed probe or discovery: "
                             "error kind and HTTP status (empty when none)", labels=LABELS)
    inflight = g("prefilltui_probe_in_flight_seconds", "Seconds the probe in flight has run "
                 "(0 when none is): a hang shows here before the timeout")
    hang = g("prefilltui_probe_hang_threshold_seconds", "A probe in flight longer than this is "
             "a hang: hang_after, or 3x the slowest TTFT of the window when longer")
    timeout = g("prefilltui_probe_timeout_seconds", "The probe's time cap (a probe over it fails "
                "with error_kind timeout)")
    age = g("prefilltui_fit_age_seconds", "Seconds since the newest probe of the window fit "
            "finished")
    stale = g("prefilltui_fit_stale", "1 when the window fit is older than "
              "prefilltui_fit_stale_after_seconds (the alerts ignore it), else 0")
    stale_after = g("prefilltui_fit_stale_after_seconds", "Age over which the window fit is stale")
    expected = g("prefilltui_prefill_throughput_expected_tokens_per_second", "Explicit baseline "
                 "of the prefill throughput in prompt tokens/s, by source: config "
                 "(expected_throughput), baseline_run (a healthy run's fit), roofline (estimate)",
                 ("source",))
    medians = g("prefilltui_ttft_window_median_seconds", "Median TTFT of the window's probes at "
                "each requested prompt length (exact, not from histogram buckets)",
                ("prompt_tokens",))
    ttft = HistogramMetricFamily("prefilltui_ttft_seconds", "Time to first token of "
                                 "successful probes, by requested prompt length in tokens",
                                 labels=LABELS + ("prompt_tokens",))
    a = g("prefilltui_prefill_fixed_cost_seconds", "Fixed cost per request: intercept a of the "
          "window fit TTFT = a + b*n (robust)")
    a_lo = g("prefilltui_prefill_fixed_cost_lower_seconds", "Lower 95 % bound of the fixed cost")
    a_hi = g("prefilltui_prefill_fixed_cost_upper_seconds", "Upper 95 % bound of the fixed cost")
    b = g("prefilltui_prefill_time_per_token_seconds", "Prefill time per prompt token: slope b "
          "of the window fit")
    tp = g("prefilltui_prefill_throughput_tokens_per_second", "Prefill throughput 1/b in prompt "
           "tokens per second (window fit)")
    tp_lo = g("prefilltui_prefill_throughput_lower_tokens_per_second",
              "Lower 95 % bound of the prefill throughput")
    tp_hi = g("prefilltui_prefill_throughput_upper_tokens_per_second",
              "Upper 95 % bound of the prefill throughput (absent when unbounded)")
    mfu = g("prefilltui_prefill_mfu_ratio", "Model FLOPs utilisation of prefill, 0..1 "
            "(estimate: the matmul FLOPs per prompt token, counted from the model shape, over "
            "the dense peak)")
    mfu_lo = g("prefilltui_prefill_mfu_lower_ratio", "Lower 95 % bound of the MFU")
    mfu_hi = g("prefilltui_prefill_mfu_upper_ratio", "Upper 95 % bound of the MFU")
    npts = g("prefilltui_fit_window_probes", "Probes in the window fit")
    wsize = g("prefilltui_fit_window_size", "Probes the sliding window holds when full (the "
              "window setting)")
    parts = g("prefilltui_ttft_component_seconds", "Median TTFT component over the window: "
              "client/network overhead, server queue, server prefill", ("component",))
    verdict = StateSetMetricFamily("prefilltui_verdict", "Prefill verdict of the window fit "
                                   "(healthy, below, wrong, ...; see docs/exporter.md)", labels=LABELS)
    cause = StateSetMetricFamily("prefilltui_ttft_cause", "Why TTFT is high over the window: "
                                 "queueing, head_of_line, slow_prefill, prefix_cache, overhead, "
                                 "none, not_enough_data (docs/load.md)", labels=LABELS)
    cause_s = g("prefilltui_ttft_cause_seconds", "Seconds of the median TTFT each cause that "
                "holds explains", ("cause",))
    started = g("prefilltui_server_start_time_seconds", "Unix time the server's process "
                "started, as its own process_start_time_seconds says (absent where it "
                "publishes none); a step is a restart")
    changes = c("prefilltui_server_changes", "Changes of the server behind the target's URL, "
                "by kind: restart, upstream_switch (another server), config (a stated "
                "setting), replicas (several servers answer)", ("kind",))
    ll = ("kind", "load_level")
    load_level = g("prefilltui_load_level", "Background load on the target: decode streams or "
                   "requests/s (0 while paused)", ("kind",))
    load_req = c("prefilltui_load_requests", "Background load requests sent to the target",
                 ("kind",))
    load_tok = c("prefilltui_load_tokens", "Tokens the background load received", ("kind",))
    stall = g("prefilltui_decode_stall_seconds", "Median over the window: the longest decode "
              "gap overlapping a probe's prefill minus the quiet median gap", ll)
    excess = g("prefilltui_decode_excess_seconds", "Median over the window: the extra decode "
               "time a probe's prefill cost each decode stream in all", ll)
    itl = g("prefilltui_decode_itl_seconds", "Decode inter-token latency of the last minute "
            "(client side), by quantile", ll + ("quantile",))
    for s in snaps:
        lv = [clean(s.target), clean(s.model)]  # a server's model id: controls escaped
        info.add_metric(lv, {"server_kind": s.server_kind or "unknown", "api": s.api,
                             "url": clean(s.url)})
        if s.up is not None:
            up.add_metric(lv, 1.0 if s.up else 0.0)
        ready.add_metric(lv, 1.0 if s.ready else 0.0)
        interval.add_metric(lv, s.interval_s)
        for (outcome, kind), n in s.probes:
            probes.add_metric(lv + [outcome, kind], n)
        hit.add_metric(lv, s.cache_hit_probes)
        cached.add_metric(lv, s.cached_tokens)
        counted.add_metric(lv, s.cache_counted_probes)
        ptoks.add_metric(lv, s.prompt_tokens)
        if s.last_probe_ts is not None:
            last.add_metric(lv, s.last_probe_ts)
        if s.last_success_ts is not None:
            last_ok.add_metric(lv, s.last_success_ts)
        if s.last_error is not None:
            kind, status = s.last_error
            error.add_metric(lv, {"error_kind": kind, "http_status": str(status or "")})
        inflight.add_metric(lv, max(0.0, now - s.in_flight_since) if s.in_flight_since else 0.0)
        hang.add_metric(lv, s.hang_threshold_s)
        timeout.add_metric(lv, s.timeout_s)
        stale_after.add_metric(lv, s.stale_after_s)
        wsize.add_metric(lv, s.window_size)
        if s.expected is not None:
            expected.add_metric(lv + [s.expected.source], s.expected.tokens_per_s)
        for n, m in s.length_medians_s:
            medians.add_metric(lv + [str(n)], m)
        for h in s.histograms:
            buckets = [(_le(bound), h.cumulative[i]) for i, bound in enumerate(s.ttft_bounds_s)]
            buckets.append(("+Inf", h.count))
            ttft.add_metric(lv + [str(h.tokens)], buckets, h.sum_s)
        f = s.fit
        if f is not None:
            roof = s.summary.roofline if s.summary is not None else None
            m_lo, m_hi = (roof.mfu_ci or (None, None)) if roof is not None else (None, None)
            npts.add_metric(lv, f.n)
            if s.fit_ts is not None:
                a_s = max(0.0, now - s.fit_ts)
                age.add_metric(lv, a_s)
                stale.add_metric(lv, 1.0 if a_s > s.stale_after_s else 0.0)
            a.add_metric(lv, f.intercept_s)
            b.add_metric(lv, f.slope_s_per_token)
            for fam, v in ((a_lo, f.intercept_ci[0]), (a_hi, f.intercept_ci[1]),
                           (tp, f.prefill_tokens_per_s), (tp_lo, f.prefill_tokens_per_s_ci[0]),
                           (tp_hi, f.prefill_tokens_per_s_ci[1]),
                           (mfu, roof.mfu if roof is not None else None), (mfu_lo, m_lo),
                           (mfu_hi, m_hi)):
                if v is not None and math.isfinite(v):
                    fam.add_metric(lv, float(v))
        if s.verdict is not None:
            verdict.add_metric(lv, {v: v == s.verdict for v in VERDICTS})
        for name, v in s.parts_s:
            parts.add_metric(lv + [name], v)
        if s.ttft_cause is not None:
            cause.add_metric(lv, {v: v == s.ttft_cause for v in CAUSES})
        for name, v in s.ttft_cause_s:
            cause_s.add_metric(lv + [name], v)
        if s.server_start_time_s is not None:
            started.add_metric(lv, s.server_start_time_s)
        for kind, n in s.server_changes:
            changes.add_metric(lv + [kind], n)
        fig = s.load
        if fig is not None:  # only when the target's config asks for load
            load_level.add_metric(lv + [fig.kind], fig.level)
            load_req.add_metric(lv + [fig.kind], fig.requests)
            load_tok.add_metric(lv + [fig.kind], fig.tokens)
            lvl = lv + [fig.kind, f"{fig.level:g}"]
            for fam, v in ((stall, fig.stall_s), (excess, fig.excess_s)):
                if v is not None:
                    fam.add_metric(lvl, v)
            for q, v in (("0.5", fig.itl_p50_s), ("0.99", fig.itl_p99_s)):
                if v is not None:
                    itl.add_metric(lvl + [q], v)
    users = users_families(snaps, g, c) + slo_families(snaps, g, c) + path_families(snaps, g, c)
    out = [info, up, ready, interval, probes, hit, cached, counted, ptoks, last, last_ok,
           error, inflight, hang, timeout, ttft, medians, a, a_lo, a_hi, b, tp, tp_lo, tp_hi,
           expected, mfu, mfu_lo, mfu_hi, npts, wsize, age, stale, stale_after, verdict, parts,
           cause, cause_s, started, changes]
    if any(s.load is not None for s in snaps):
        out += [load_level, load_req, load_tok, stall, excess, itl]
    return out + users


def path_families(snaps: Sequence[TargetSnapshot], g, c) -> list[Metric]:
    """A disaggregated path's series (``TargetSnapshot.path``, docs/disaggregated.md):
    absent for a single server, none at all when no target is a path."""
    if not any(s.path is not None for s in snaps):
        return []
    hop = g("prefilltui_path_hop_seconds", "Median over the window of each hop of a probe's "
            "TTFT through the router: router, prefill, transfer (KV), decode", ("hop",))
    share = g("prefilltui_path_hop_share_ratio", "Each hop's share of TTFT (its median over "
              "the medians' sum)", ("hop",))
    bpt = g("prefilltui_kv_transfer_bytes_per_token", "KV bytes the transfers moved per "
            "token transferred (the workers' counters around the window's probes)")
    ebpt = g("prefilltui_kv_expected_bytes_per_token", "KV cache bytes per token the model "
             "shape needs: layers x KV heads x head dim x 2 x dtype bytes")
    rate = g("prefilltui_kv_transfer_bytes_per_second", "KV bytes moved per second of transfer "
             "over the window")
    failed = c("prefilltui_kv_transfer_failed", "Failed KV transfers counted in the workers' "
               "windows around the probes")
    worker = g("prefilltui_path_worker_info", "The path's workers: 1 per role (router, "
               "prefill, decode), the worker's URL (a password in it shown as ***)",
               ("role", "worker"))
    for s in snaps:
        p = s.path
        if p is None:
            continue
        lv = [clean(s.target), clean(s.model)]
        for h in HOP_NAMES:
            v, r = p.hops_s.get(f"{h}_s"), p.shares.get(h)
            if v is not None:
                hop.add_metric(lv + [h], v)
            if r is not None:
                share.add_metric(lv + [h], r)
        for fam, v in ((bpt, p.kv.bytes_per_token), (ebpt, p.kv.expected_bytes_per_token),
                       (rate, p.kv.bytes_per_s)):
            if v is not None:
                fam.add_metric(lv, float(v))
        failed.add_metric(lv, s.kv_failed_total)
        for role, url in (("router", p.router), ("prefill", p.prefill), ("decode", p.decode)):
            worker.add_metric(lv + [role, clean(url)], 1.0)
    return [hop, share, bpt, ebpt, rate, failed, worker]


def users_families(snaps: Sequence[TargetSnapshot], g, c) -> list[Metric]:
    """The users' window series (``TargetSnapshot.users`` / ``spans``): absent for a
    target without them, none at all when no target has them.  ``source``: "traces"
    (exact, from spans) or "metrics" (bucket estimates from the server's /metrics)."""
    if not any(s.users is not None or s.spans is not None for s in snaps):
        return []
    src = ("source",)
    n = g("prefilltui_users_requests", "Users' requests (not prefilltui's) that finished in "
          "the users' window (60 s)", src)
    ttft = g("prefilltui_users_ttft_seconds", "Users' TTFT by quantile over the window "
             "(bucket estimates when source is metrics)", src + ("quantile",))
    ptok = g("prefilltui_users_prompt_tokens", "Users' prompt tokens by quantile over the window",
             src + ("quantile",))
    queue = g("prefilltui_users_queue_ratio", "Users' summed queue time / summed TTFT", src)
    exp = g("prefilltui_users_expected_ttft_seconds", "Median over users of the TTFT the "
            "window fit expects at each user's prompt length", src)
    unexp = g("prefilltui_users_unexplained_prefill_ratio", "Share of the users' prefill time "
              "the fit's slope does not explain (negative: faster, e.g. cache hits)", src)
    hit = g("prefilltui_users_prefix_cache_hit_ratio", "Users' prefix-cache hit rate (cached / "
            "queried prompt tokens)", src)
    spans = c("prefilltui_probe_spans", "Probes by whether their own server span came "
              "(matched) or not within 30 s (expired)", ("outcome",))
    lat = g("prefilltui_span_latency_seconds", "Median seconds from a span's end to its receipt "
            "(the engine's export delay plus the network)")
    for s in snaps:
        lv = [clean(s.target), clean(s.model)]
        w = s.users
        if w is not None:
            lw = lv + [w.source]
            n.add_metric(lw, w.requests)
            for fam, q, v in ((ttft, "0.5", w.ttft_p50_s), (ttft, "0.9", w.ttft_p90_s),
                              (ttft, "0.99", w.ttft_p99_s), (ptok, "0.5", w.prompt_tokens_p50),
                              (ptok, "0.9", w.prompt_tokens_p90)):
                if v is not None and math.isfinite(v):
                    fam.add_metric(lw + [q], v)
            for fam, v in ((queue, w.queue_share), (exp, w.expected_ttft_p50_s),
                           (unexp, w.unexplained_prefill_share), (hit, w.prefix_cache_hit_rate)):
                if v is not None and math.isfinite(v):
                    fam.add_metric(lw, v)
        st = s.spans
        if st is not None:
            spans.add_metric(lv + ["matched"], st.probes_matched)
            spans.add_metric(lv + ["expired"], st.probes_expired)
            if st.latency_p50_s is not None:
                lat.add_metric(lv, st.latency_p50_s)
    return [n, ttft, ptok, queue, exp, unexp, hit, spans, lat]


def slo_families(snaps: Sequence[TargetSnapshot], g, c) -> list[Metric]:
    """Each TTFT objective's series (``TargetSnapshot.slo``, ``exporter.slo``): none at all
    when no target has an objective.  ``objective`` is its key (``ttft=2s@p99``);
    ``source`` "users" (their spans) or "probes" (prefilltui's own requests)."""
    if not any(s.slo for s in snaps):
        return []
    ob, src = ("objective",), ("objective", "source")
    thr = g("prefilltui_slo_objective_seconds", "The objective's TTFT threshold", ob)
    tgt = g("prefilltui_slo_target_ratio", "The share of requests that must meet the threshold "
            "(0.99 for p99); the error budget is 1 - this", ob)
    req = c("prefilltui_slo_requests", "Requests counted against the objective: the users' "
            "spans as they arrive, or the fit's probes", src)
    good = c("prefilltui_slo_good_requests", "Of them, those whose TTFT met the threshold", src)
    att = g("prefilltui_slo_attainment_ratio", "Share within the threshold over the kept "
            "users' spans / the recent probes (exact)", src)
    att_lo = g("prefilltui_slo_attainment_lower_ratio", "Lower 95 % bound of the attainment "
               "(Wilson)", src)
    att_hi = g("prefilltui_slo_attainment_upper_ratio", "Upper 95 % bound of the attainment "
               "(Wilson)", src)
    left = g("prefilltui_slo_error_budget_remaining_ratio", "1 - missed / (budget x requests) "
             "over the same requests (negative: overspent)", src)
    line = ("objective", "line")
    nmax = g("prefilltui_slo_max_prompt_tokens", "The longest prompt meeting the objective by "
             "the fit (estimate), at the held idle line or the window's (line = idle, now)", line)
    nmax_lo = g("prefilltui_slo_max_prompt_lower_tokens", "Lower 95 % bound of it", line)
    nmax_hi = g("prefilltui_slo_max_prompt_upper_tokens", "Upper 95 % bound of it (absent "
                "when unbounded)", line)
    over = g("prefilltui_slo_users_over_max_prompt_ratio", "Share of the users' prompts longer "
             "than the longest prompt meeting the objective now", ob)
    for s in snaps:
        lv = [clean(s.target), clean(s.model)]
        for f in s.slo:
            lo = lv + [f.objective.key]
            thr.add_metric(lo, f.objective.threshold_s)
            tgt.add_metric(lo, f.objective.target)
            for source, n, k in f.counts:
                req.add_metric(lo + [source], n)
                good.add_metric(lo + [source], k)
            st = f.status
            if st is None:
                continue
            for source, a in (("users", st.users), ("probes", st.probes)):
                if a is None or not a.total:
                    continue
                ci = a.ci
                for fam, v in ((att, a.share), (att_lo, ci[0]), (att_hi, ci[1]),
                               (left, a.budget_left)):
                    if v is not None and math.isfinite(v):
                        fam.add_metric(lo + [source], v)
            for name, lim in (("idle", st.idle), ("now", st.now)):
                if lim is None or lim.tokens is None:
                    continue
                nmax.add_metric(lo + [name], lim.tokens)
                for fam, v in ((nmax_lo, lim.ci[0]), (nmax_hi, lim.ci[1])):
                    if v is not None:
                        fam.add_metric(lo + [name], v)
            if st.users_over is not None:
                over.add_metric(lo, st.users_over)
    return [thr, tgt, req, good, att, att_lo, att_hi, left, nmax, nmax_lo, nmax_hi, over]


def build_info() -> Metric:
    f = InfoMetricFamily("prefilltui_build", "prefilltui version and Python version")
    f.add_metric([], {"version": __version__, "python_version": platform.python_version()})
    return f


class HealthCollector(Collector):
    """A prometheus-client collector over probers' newest snapshots (never does I/O,
    never waits for a probe).  ``sources``: objects with a ``snapshot`` attribute."""

    def __init__(self, sources: Iterable, *, with_build_info: bool = True) -> None:
        self.sources = sources  # read at every scrape: a Fleet changes on reload
        self.with_build_info = with_build_info

    def collect(self) -> Iterator[Metric]:
        if self.with_build_info:
            yield build_info()
        yield from families([s.snapshot for s in list(self.sources)])

    def describe(self) -> Iterator[Metric]:
        return iter(())
