"""The decode stall math (model/load/stall.py) on hand-made token arrivals: exact numbers."""

from __future__ import annotations

import pytest

from prefilltui.model.load import (
    DecodeTrace, ahead_tokens, baseline_gap, gap_series, itl_quantiles, merge_arrivals,
    probe_window, waiting_for, window_stall,
)
from prefilltui.model.load.stall import StallRow, quiet_gaps, spans, stall_sentence, stall_summary
from prefilltui.model.types import ProbeResult


def steps(start: float, gap: float, n: int) -> list[float]:
    return [round(start + i * gap, 9) for i in range(n)]


def trace(arrivals, stream=0, ended=False, t_send=None, prompt=16, kind="decode"):
    arr = tuple(arrivals)
    return DecodeTrace(stream=stream, kind=kind, level=2.0,
                       t_send=arr[0] - 0.01 if t_send is None else t_send,
                       arrivals=arr, prompt_tokens=prompt, ended=ended)


def chunked(start=0.0, gap=0.02, quiet=20, chunks=(0.1, 0.1, 0.1), tail=10):
    """Tokens every ``gap`` s, then one token per chunk (each chunk adds its seconds to
    a step), then every ``gap`` again.  Returns (arrivals, window of the prefill)."""
    a = steps(start, gap, quiet)
    t = a[-1]
    w0 = t + gap / 2  # the probe arrives mid-step
    for c in chunks:
        t = round(t + gap + c, 9)
        a.append(t)
    w1 = t  # its first token comes with the last chunk's step
    a += steps(t + gap, gap, tail)
    return a, (w0, w1)


def test_chunked_prefill_caps_the_stall_but_not_the_excess():
    a, w = chunked(chunks=(0.1, 0.1, 0.1, 0.1))
    trs = [trace(a, 0), trace([t + 0.0001 for t in a], 1)]
    gap = baseline_gap(trs, [w])
    assert gap == pytest.approx(0.02)
    s = window_stall(trs, w, gap)
    assert s.stall_s == pytest.approx(0.1, abs=1e-3)
    assert s.excess_s == pytest.approx(0.4, abs=1e-3)
    assert s.longest_s == pytest.approx(0.12, abs=1e-3)
    assert s.streams == 2
    assert s.tokens == 4  # one per chunk step, the last with the probe's first token


def test_no_chunking_stall_equals_excess():
    a, w = chunked(chunks=(0.5,))
    s = window_stall([trace(a)], w, baseline_gap([trace(a)], [w]))
    assert s.stall_s == pytest.approx(0.5, abs=1e-3)
    assert s.excess_s == pytest.approx(0.5, abs=1e-3)


def test_streams_that_start_or_end_inside_the_window_are_not_measured():
    a, w = chunked(chunks=(0.2, 0.2))
    late = trace([t for t in a if t > w[0]], 1)  # started inside the window
    early = trace([t for t in a if t < w[1] - 0.05], 2, ended=True)  # ended inside it
    assert not spans(late, w) and not spans(early, w)
    s = window_stall([trace(a, 0), late, early], w, 0.02)
    assert s.streams == 1


def test_baseline_needs_quiet_gaps_since_the_level_changed():
    a = steps(0.0, 0.02, 30)
    assert baseline_gap([trace(a)], [], since=0.48) == pytest.approx(0.02)  # 5 gaps
    assert baseline_gap([trace(a)], [], since=0.5) is None  # 4 gaps left, 5 needed
    # a gap that overlaps a probe window is not quiet
    assert len(quiet_gaps([trace(a)], [(0.101, 0.139)])) == len(a) - 1 - 2


def test_without_a_baseline_or_a_spanning_stream_there_is_no_stall():
    a, w = chunked()
    assert window_stall([trace(a)], w, None) is None
    assert window_stall([trace(a, kind="rate")], w, 0.02) is None


def test_waiting_for_the_tokens_after_the_window():
    a, w = chunked(tail=0)
    open_ = trace(a)  # its last token is the window's end
    assert waiting_for([open_], w) == 0
    assert waiting_for([open_], w, need=3) == 1
    assert waiting_for([trace(a, ended=True)], w, need=3) == 0  # ended: nothing to wait for


def test_merge_arrivals_drops_reads_of_one_packet():
    assert merge_arrivals([0.0, 0.0001, 0.02, 0.0201, 0.04]) == [0.0, 0.02, 0.04]


def test_ahead_tokens_counts_prompts_still_in_prefill():
    long_ = DecodeTrace(0, "rate", 1.0, t_send=1.0, arrivals=(3.0, 3.1), prompt_tokens=2048,
                        ended=True)
    done = DecodeTrace(1, "rate", 1.0, t_send=0.5, arrivals=(0.9,), prompt_tokens=512, ended=True)
    later = DecodeTrace(2, "rate", 1.0, t_send=2.5, arrivals=(), prompt_tokens=512)
    assert ahead_tokens([long_, done, later], 2.0) == 2048


def test_itl_quantiles_and_series():
    a, w = chunked(chunks=(0.3,))
    p50, p99, n = itl_quantiles([trace(a)])
    assert p50 == pytest.approx(0.02) and n == len(a) - 1
    assert p99 > 0.2
    assert itl_quantiles([trace(a)], between=(100.0, 200.0)) == (None, None, 0)
    series = gap_series([trace(a)], since=w[0])
    assert max(g for _, g in series) == pytest.approx(0.32, abs=1e-6)


def probe(n, ttft, stall, excess, tokens=3, t_send=10.0):
    return ProbeResult(requested_tokens=n, prompt_tokens=n, ok=True, ttft_s=ttft, t_send=t_send,
                       t_end=t_send + ttft, load_kind="decode", load_level=2.0,
                       decode_stall_s=stall, decode_excess_s=excess, decode_gap_s=0.05,
                       decode_tokens=tokens, decode_streams=2)


def test_the_sentence_for_chunked_and_unchunked_servers():
    chunked_rs = [probe(512, 0.7, 0.42, 0.62), probe(2048, 2.9, 0.43, 2.5, 9)]
    s = stall_summary(chunked_rs, chunk_tokens=256)
    assert s.chunked is True and s.chunk_tokens == 256 and s.chunk_source == "server"
    assert s.sentence == ("chunked prefill: decode freezes at most 0.43 s (≈ 256-token chunks, "
                          "the server says); a 2,048-token prompt still costs each decode "
                          "2.50 s in all")
    est = stall_summary(chunked_rs)
    assert est.chunk_source == "estimate" and est.chunk_tokens == 350  # 2048 x 0.43 / 2.5
    flat = stall_summary([probe(2048, 24.6, 24.5, 24.6)])
    assert flat.chunked is False
    assert flat.sentence == ("no chunking: a 2,048-token prompt freezes every decode for "
                             "24.5 s (TTFT 24.6 s)")
    assert stall_summary([ProbeResult(requested_tokens=8, ok=True, ttft_s=0.1)]) is None
    assert "not enough data" in stall_sentence([], None, None, None)
    assert isinstance(s.rows[0], StallRow)


def test_probe_window_is_send_to_first_token():
    r = ProbeResult(ok=True, ttft_s=0.5, t_send=1.0, t_end=1.6)
    assert probe_window(r) == (1.0, 1.5)
    assert probe_window(ProbeResult(ok=False, t_send=1.0, t_end=2.0)) == (1.0, 2.0)
    assert probe_window(ProbeResult()) is None
