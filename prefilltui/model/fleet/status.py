"""One snapshot of a fleet, for scripts: ``prefilltui status URL... --format json``.

``FleetStatus`` holds one ``TargetStatus`` per target: its overview row
(``model.fleet.rows.FleetRow``, with the health judged by the exporter's alert rules,
``model.fleet.health``), the run summary of its pass, the advisor's lines and where its GPU
readings came from.  ``to_json`` writes the versioned schema ``SCHEMA`` (docs/fleet.md);
``healthy`` is what the command's exit code says.  Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prefilltui.model.fleet.advisor import Advice
from prefilltui.model.fleet.rows import FleetLoad, FleetRow
from prefilltui.model.jsontypes import JsonObject
from prefilltui.model.summary import RunSummary

SCHEMA = "prefilltui.status/1"


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


@dataclass(frozen=True, slots=True)
class TargetStatus:
    """One target's snapshot: ``label`` and ``url`` (credentials as ***), its overview
    ``row``, the ``summary`` of the pass, ``advice`` and ``gpu_source`` (in words)."""

    label: str
    url: str
    row: FleetRow
    summary: RunSummary
    advice: tuple[Advice, ...] = ()
    gpu_source: str | None = None

    @property
    def healthy(self) -> bool:
        return not self.row.health.unhealthy

    def to_json(self) -> JsonObject:
        r = self.row
        ci = r.tok_s_ci or (None, None)
        return {
            "target": self.label, "url": self.url, "healthy": self.healthy,
            "status": r.health.word, "health": r.health.to_json(),
            "server_kind": r.kind, "model": r.model,
            "prefill_tokens_per_s": _num(r.tok_s),
            "prefill_tokens_per_s_ci": [_num(ci[0]), _num(ci[1])],
            "fixed_cost_s": _num(r.fixed_s), "fixed_cost_pinned": r.fixed_pinned,
            "mfu": _num(r.mfu), "verdict": r.verdict, "verdict_text": r.verdict_text,
            "ttft_at_ref_s": _num(r.ttft_ref_s), "ref_tokens": r.ref_tokens,
            "queue_median_s": _num(r.queue_s), "waiting": _num(r.waiting),
            "cache_hit_probes": r.cache_hits, "cache_counted_probes": r.cache_counted,
            "probes": r.probes, "failed": r.failed, "gpu": r.gpu,
            "gpu_source": self.gpu_source,
            "advice": [a.to_json() for a in self.advice],
            "summary": self.summary.to_json(),
        }


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """Every target's snapshot, and the load the pass put on the fleet."""

    targets: tuple[TargetStatus, ...]
    load: FleetLoad | None = None

    @property
    def healthy(self) -> bool:
        """No target is unhealthy by the alert rules (critical or warning findings)."""
        return all(t.healthy for t in self.targets)

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "healthy": self.healthy,
                "unhealthy": [t.label for t in self.targets if not t.healthy],
                "targets": [t.to_json() for t in self.targets]}
