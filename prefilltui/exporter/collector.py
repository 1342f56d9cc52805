"""The exporter's Prometheus metrics, built from target snapshots at scrape time.

Every series carries ``target`` (the target's name, else its URL) and ``model``
labels.  Names follow the Prometheus conventions: base units (seconds, ratios),
``_total`` on counters, units in the name and never in label values.

==============================================  =========  ==================================
metric                                          type       meaning
==============================================  =========  ==================================
prefilltui_build_info                           gauge      version, python_version; always 1
prefilltui_target_info                          gauge      server_kind, api; always 1
prefilltui_target_up                            gauge      1 last probe ok, 0 failed/unreachable
prefilltui_target_ready                         gauge      1 probing (started, server found), 0 not yet
prefilltui_probe_interval_seconds               gauge      shortest gap between probe starts
prefilltui_probes_total                         counter    probes by outcome (ok/failed), error_kind
prefilltui_cache_hit_probes_total               counter    ok probes the prefix cache served part of
prefilltui_cached_tokens_total                  counter    prompt tokens those probes had cached
prefilltui_prompt_tokens_total                  counter    prompt tokens of ok probes (the added load)
prefilltui_last_probe_timestamp_seconds         gauge      unix time the last probe started
prefilltui_last_success_timestamp_seconds       gauge      unix time the last ok probe started
prefilltui_ttft_seconds                         histogram  TTFT, by requested ``prompt_tokens``
prefilltui_prefill_fixed_cost_seconds           gauge      fit intercept a (+ _lower_/_upper_ 95 %)
prefilltui_prefill_time_per_token_seconds       gauge      fit slope b
prefilltui_prefill_throughput_tokens_per_second gauge      1/b (+ _lower_/_upper_ 95 % bounds)
prefilltui_prefill_mfu_ratio                    gauge      MFU, 0..1 (+ _lower_/_upper_); needs a peak
prefilltui_fit_window_probes                    gauge      probes in the window fit
prefilltui_verdict                              stateset   analysis verdict level
prefilltui_ttft_component_seconds               gauge      window median by ``component``:
                                                           overhead, queue, prefill
==============================================  =========  ==================================

Fit series are absent until the window holds a fit (3 probes at 2+ lengths); an
unbounded upper bound (the slope's interval reaches 0) is absent rather than +Inf.
Process metrics (``process_*``, ``python_*``) come from prometheus-client's collectors.
"""

from __future__ import annotations

import platform
from typing import Iterable, Iterator, Sequence

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, InfoMetricFamily, Metric,
                                    StateSetMetricFamily)
from prometheus_client.registry import Collector

from prefilltui import __version__
from prefilltui.exporter.target import TTFT_BUCKETS_S, VERDICTS, TargetSnapshot

LABELS = ("target", "model")


def _le(b: float) -> str:
    return f"{b:g}" if b != int(b) else f"{b:.1f}"


def families(snaps: Sequence[TargetSnapshot]) -> list[Metric]:
    """The metric families of ``snaps`` (targets' series only; no build/process info)."""
    g = lambda name, doc, labels=(): GaugeMetricFamily(name, doc, labels=LABELS + labels)  # noqa: E731
    c = lambda name, doc, labels=(): CounterMetricFamily(name, doc, labels=LABELS + labels)  # noqa: E731
    info = InfoMetricFamily("prefilltui_target", "The probed server: kind (from discovery) "
                            "and API flavour", labels=LABELS)
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
    ptoks = c("prefilltui_prompt_tokens", "Prompt tokens of successful probes (server-counted)")
    last = g("prefilltui_last_probe_timestamp_seconds", "Unix time the last probe started")
    last_ok = g("prefilltui_last_success_timestamp_seconds", "Unix time the last successful "
                "probe started")
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
            "(estimate: 2*params FLOPs per token over the dense peak)")
    mfu_lo = g("prefilltui_prefill_mfu_lower_ratio", "Lower 95 % bound of the MFU")
    mfu_hi = g("prefilltui_prefill_mfu_upper_ratio", "Upper 95 % bound of the MFU")
    npts = g("prefilltui_fit_window_probes", "Probes in the window fit")
    parts = g("prefilltui_ttft_component_seconds", "Median TTFT component over the window: "
              "client/network overhead, server queue, server prefill", ("component",))
    verdict = StateSetMetricFamily("prefilltui_verdict", "Prefill verdict of the window fit "
                                   "(healthy, below, wrong, ...; see docs/exporter.md)", labels=LABELS)
    for s in snaps:
        lv = [s.target, s.model]
        info.add_metric(lv, {"server_kind": s.server_kind or "unknown", "api": s.api})
        if s.up is not None:
            up.add_metric(lv, 1.0 if s.up else 0.0)
        ready.add_metric(lv, 1.0 if s.ready else 0.0)
        interval.add_metric(lv, s.interval_s)
        for (outcome, kind), n in s.probes:
            probes.add_metric(lv + [outcome, kind], n)
        hit.add_metric(lv, s.cache_hit_probes)
        cached.add_metric(lv, s.cached_tokens)
        ptoks.add_metric(lv, s.prompt_tokens)
        if s.last_probe_ts is not None:
            last.add_metric(lv, s.last_probe_ts)
        if s.last_success_ts is not None:
            last_ok.add_metric(lv, s.last_success_ts)
        for h in s.histograms:
            buckets = [(_le(bound), h.cumulative[i]) for i, bound in enumerate(TTFT_BUCKETS_S)]
            buckets.append(("+Inf", h.count))
            ttft.add_metric(lv + [str(h.tokens)], buckets, h.sum_s)
        f = s.fit
        if f is not None:
            npts.add_metric(lv, f.n)
            a.add_metric(lv, f.intercept_s)
            b.add_metric(lv, f.slope_s_per_token)
            for fam, v in ((a_lo, f.intercept_ci[0]), (a_hi, f.intercept_ci[1]),
                           (tp, f.throughput_tok_s), (tp_lo, f.throughput_ci[0]),
                           (tp_hi, f.throughput_ci[1]), (mfu, f.mfu), (mfu_lo, f.mfu_ci[0]),
                           (mfu_hi, f.mfu_ci[1])):
                if v is not None:
                    fam.add_metric(lv, float(v))
        if s.verdict is not None:
            verdict.add_metric(lv, {v: v == s.verdict for v in VERDICTS})
        for name, v in s.parts_s:
            parts.add_metric(lv + [name], v)
    return [info, up, ready, interval, probes, hit, cached, ptoks, last, last_ok, ttft, a, a_lo, a_hi,
            b, tp, tp_lo, tp_hi, mfu, mfu_lo, mfu_hi, npts, verdict, parts]


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
