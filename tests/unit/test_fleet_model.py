"""The fleet's pure parts: rows, order, load (model/fleet/rows.py), cells and columns
(render/fleet.py), the advisor (model/fleet/advisor.py)."""

from __future__ import annotations

import math

import pytest

from prefilltui.model.fleet.advisor import AdvisorInputs, StallReading
from prefilltui.model.fleet import CacheFinding, advise
from prefilltui.model.summary import analyze
from prefilltui.model.fleet import RecentProbes, fleet_interval, fleet_load, fleet_row, sort_rows
from prefilltui.model.fleet.rows import stagger
from prefilltui.model.spec import AnalysisOptions, RooflineSpec
from prefilltui.model.types import ProbeResult, ServerInfo
from prefilltui.render.fleet import COLUMNS, cell, figures, layout, sparkline, table

INFO = ServerInfo(base_url="http://x", kind="vllm", model="meta-llama/Llama-3.1-8B-Instruct",
                  context_tokens=131072)
LENGTHS = (64, 256, 1024, 2048)


def probes(b: float, *, a: float = 0.02, n: int = 12, fail: int = 0, start: int = 0
           ) -> list[ProbeResult]:
    out = []
    for i in range(n):
        tok = LENGTHS[i % len(LENGTHS)]
        ok = i >= fail
        out.append(ProbeResult(seq=start + i, requested_tokens=tok, prompt_tokens=tok,
                               ttft_s=(a + b * tok) * (1 + 0.01 * (-1) ** (i // 4)) if ok else None,
                               ok=ok, error_kind=None if ok else "connect",
                               error_message=None if ok else "refused"))
    return out


def row(name: str, results: list[ProbeResult], *, state: str = "probing", gpu="H100 SXM",
        **kw):
    opts = AnalysisOptions(roofline=RooflineSpec(gpu=gpu))
    s = analyze(results, INFO if results else None, opts)
    recent = RecentProbes()
    for i, r in enumerate(results):  # one probe every 20 s, the last one now
        recent.add(r, 1000.0 - 20.0 * (len(results) - 1 - i))
    return fleet_row(kw.pop("index", 0), name, state, s, recent, now=1000.0,
                     last_probe_at=1000.0 if results else None, results=results, **kw)


def test_row_figures_and_health():
    r = row("gpu-01", probes(4e-5))  # Llama-3.1-8B at 25k tok/s on an H100: MFU ~40 %
    assert r.tok_s == pytest.approx(2.5e4, rel=0.05) and r.health.word == "ok"
    assert r.ttft_ref_s == pytest.approx(0.02 + 4e-5 * 1024, rel=0.05)
    assert r.mfu == pytest.approx(0.4, abs=0.05) and r.verdict in ("healthy", "below")
    assert r.probes == 12 and r.failed == 0 and r.age_s == 0
    down = row("gpu-02", [], state="retrying", detail="server unreachable: refused")
    assert down.health.word == "down" and "refused" in down.health.findings[0].text
    # down and back: the last 3 probes decide
    gone = row("gpu-03", probes(4e-5) + probes(4e-5, n=4, fail=4, start=12))
    assert gone.health.word == "down"
    back = row("gpu-03", probes(4e-5) + probes(4e-5, n=4, fail=4, start=12)
               + probes(4e-5, n=1, start=16))
    assert back.health.word != "down"


def test_worst_first_and_sort_keys():
    rows = [row("a-fast", probes(4e-5), index=0),
            row("b-slow", probes(1.6e-4), index=1),
            row("c-down", [], state="retrying", index=2),
            row("d-flaky", probes(4e-5, n=10) + probes(4e-5, n=5, fail=4, start=10) + probes(
                2e-6, n=1, start=15), index=3)]
    worst = [r.label for r in sort_rows(rows)]
    assert worst[0] == "c-down" and worst[1] == "d-flaky"  # down, then probe errors
    assert worst.index("b-slow") < worst.index("a-fast")  # lower MFU first
    assert [r.label for r in sort_rows(rows, "name")] == ["a-fast", "b-slow", "c-down", "d-flaky"]
    by_tp = sort_rows(rows, "prefill")
    assert by_tp[0].label == "b-slow" and by_tp[-1].label == "c-down"  # unknown last
    assert sort_rows(rows, "prefill", reverse=True)[-1].label == "c-down"
    with pytest.raises(ValueError):
        sort_rows(rows, "colour")


def test_explicit_and_learned_baselines():
    slow = row("x", probes(1.6e-4), baseline_tok_s=2.5e4, baseline_source="--baseline run")
    assert slow.health.findings[0].rule == "PrefillThroughputBelowBaseline"
    assert "--baseline run 25,000 tok/s" in slow.health.findings[0].text
    learned = row("x", probes(1.6e-4), spark=[2.5e4] * 12)
    assert learned.health.findings[0].rule == "PrefillThroughputBelowBaseline"
    assert "session median" in learned.health.findings[0].text
    assert not row("x", probes(1.6e-4), spark=[2.5e4] * 5).health.findings  # too few readings


def test_stagger_interval_and_load():
    assert stagger(4, 4.0) == (0.0, 1.0, 2.0, 3.0)
    assert fleet_interval(8, 4.0, 2.0) == 4.0 and fleet_interval(100, 4.0, 2.0) == 50.0
    load = fleet_load([LENGTHS] * 100, [50.0] * 100, 0.2)
    assert load.probes_per_s == pytest.approx(2.0)
    assert load.tokens_per_s == pytest.approx(2.0 * sum(LENGTHS) / 4)
    assert load.short() == "≤ 2 probes/s ~1.7k tok/s"
    assert "100 targets, each ≥ 50 s apart, 1 in flight" in load.line()


def test_columns_fit_80_and_160():
    cols80 = layout(80)
    keys = [c.key for c, _ in cols80]
    assert keys == ["target", "status", "prefill", "fixed", "mfu", "verdict", "ttft",
                    "probes", "age"]
    assert sum(w for _, w in cols80) + len(cols80) - 1 <= 80
    keys160 = [c.key for c, _ in layout(160)]
    assert keys160 == [c.key for c in COLUMNS]
    lines = table([row("gpu-01", probes(4e-5))], width=80)
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].split() == ["target", "status", "prefill", "tok/s", "fixed", "MFU",
                                "verdict", "TTFT@1k", "probes"]


def test_cells():
    r = row("gpu-01", probes(4e-5))
    text, style = cell(r, "prefill")
    assert text.startswith(("24.", "25.", "26.")) and "k ±" in text and style == "bold"
    assert cell(r, "status") == ("● ok", "ok")
    assert cell(row("d", [], state="retrying"), "status") == ("✖ down", "bad")
    assert cell(r, "cache")[0] == "0 ?"  # the server counted no cached tokens: unproven
    assert sparkline([1, 2, 3, 4], 4) == "▁▃▆█" and sparkline([5, 5], 4) == "▄▄"
    assert sparkline([], 4) == "" and sparkline([1, math.nan, 2], 4) == "▁█"


def test_figures_in_words_for_the_status_text():
    """`prefilltui status` printed "310 ±∞", "probes 7/0" and "cache 0 ✓" with nothing
    saying what they were: each target's block spells them out."""
    from dataclasses import replace

    r = replace(row("gpu-01", probes(4e-5)), tok_s=310.0, tok_s_ci=(120.0, None), probes=7,
                failed=0, ok_probes=7, cache_counted=7)
    assert cell(r, "prefill")[0] == "310 ±∞" and cell(r, "probes")[0] == "7/0"
    assert cell(r, "cache")[0] == "0 ✓"
    assert figures(r) == ("prefill 310 tok/s (interval not bounded yet) · probes 7 ok / 0 "
                          "failed · cache hits 0 (the server counted every miss)")
    r = replace(r, tok_s_ci=(279.0, 341.0), probes=9, failed=2, cache_counted=0)
    assert figures(r) == ("prefill 310 tok/s ± 10 % (95 % interval) · probes 7 ok / 2 failed"
                          " · cache hits 0 (not proven: the server reports no cached-token "
                          "count)")
    assert figures(replace(r, cache_counted=3)).endswith(
        "cache hits 0 (counted by the server on 3 of 7 probes)")
    assert figures(replace(r, cache_hits=2)).endswith(
        "cache hits 2 (prefix-cache hits among the probes)")
    assert figures(row("d", [], state="retrying")) == "probes 0 ok / 0 failed"


def test_advisor_lines_quote_their_numbers_and_stay_silent_when_healthy():
    s = analyze(probes(4e-5), INFO, AnalysisOptions(roofline=RooflineSpec(gpu="H100 SXM")))
    quiet = advise(AdvisorInputs(summary=s, kind="vllm", context_tokens=8192,
                                 longest_prompt_tokens=5000))
    assert all(a.knob != "context" for a in quiet)
    out = {a.knob: a.text for a in advise(AdvisorInputs(
        summary=s, kind="vllm", context_tokens=131072, longest_prompt_tokens=5000,
        longest_prompt_source="vllm:request_prompt_tokens",
        cache=CacheFinding("off", "cache off: repeat of 512 tokens 40 ms → 41 ms (0 cached)"),
        stall=StallReading(stall_s=0.180, probes=9, budget_tokens=8192), itl_goal_s=0.05))}
    assert "--enable-prefix-caching" in out["prefix_cache"] and "40 ms → 41 ms" in out["prefix_cache"]
    assert "180 ms" in out["chunk_budget"] and "50 ms" in out["chunk_budget"]
    assert "--max-num-batched-tokens" in out["chunk_budget"] and "~2,275 tokens" in out["chunk_budget"]
    assert "131,072" in out["context"] and "26x" in out["context"] and "--max-model-len" in out["context"]
    if s.verdict.level in ("below", "wrong"):
        assert f"{s.roofline.mfu:.1%}" in out["mfu"]
    llama = advise(AdvisorInputs(kind="llama.cpp", stall=StallReading(0.3, 4, None)))
    assert "-b / -ub" in llama[0].text
    assert advise(AdvisorInputs()) == ()
    assert advise(AdvisorInputs(cache=CacheFinding("on", "cache on"))) == ()
