"""One probe's hops through a disaggregated path (router ▸ prefill ▸ transfer ▸ decode):
the record a probe through the router carries (``ProbeResult.hops``) and its run-file
key ``"hops"`` (docs/disaggregated.md).

Seconds in data; a hop nobody reported is None (never 0).  ``router_s`` is the path
minus the hops (the client's TTFT minus the prefill, the transfer and the decode
worker's own time), so the four add up to the client's TTFT when every hop is known.
The figures are computed by ``model.path.split_hops``; this module only holds them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

from prefilltui.model.jsontypes import JsonObject

#: The hops in the order a request takes them (the TUI's row, the exporter's ``hop``).
HOP_NAMES = ("router", "prefill", "transfer", "decode")
#: Where the hops came from: the workers' /metrics counters around the probe.
HopsSource = Literal["metrics"]


def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) and x >= 0 else None


def _int(x: object) -> int | None:
    v = _num(x)
    return int(v) if v is not None else None


@dataclass(frozen=True, slots=True)
class Hops:
    """One probe's TTFT split by hop (s) and its KV transfer.

    router_s / prefill_s / transfer_s / decode_s: each hop's seconds (None: unknown);
    kv_bytes: bytes the KV transfer moved in the probe's window; kv_tokens: tokens
    whose KV came over the link; failed_transfers: failed transfers counted in the
    window; deferred: decode requests waiting for a transient reason (vLLM's
    ``reason="deferred"`` gauge, the larger of its reads around the probe);
    kv_estimated: ``kv_bytes`` is computed from a rate (SGLang's GB/s x latency), not
    counted; problem: why a hop is missing (one line), else None.
    """

    router_s: float | None = None
    prefill_s: float | None = None
    transfer_s: float | None = None
    decode_s: float | None = None
    kv_bytes: int | None = None
    kv_tokens: int | None = None
    failed_transfers: int | None = None
    deferred: float | None = None
    kv_estimated: bool = False
    source: HopsSource = "metrics"
    problem: str | None = None

    @property
    def complete(self) -> bool:
        """Every hop known (the four add up to the client's TTFT)."""
        return None not in (self.router_s, self.prefill_s, self.transfer_s, self.decode_s)

    def seconds(self, hop: str) -> float | None:
        """The seconds of ``hop`` (one of ``HOP_NAMES``)."""
        return getattr(self, f"{hop}_s")

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, d: object) -> "Hops | None":
        """From a run file's ``"hops"`` object; None for anything that is not one
        (a wrong-typed value is dropped, never guessed)."""
        if not isinstance(d, dict):
            return None
        problem = d.get("problem")
        return cls(router_s=_num(d.get("router_s")), prefill_s=_num(d.get("prefill_s")),
                   transfer_s=_num(d.get("transfer_s")), decode_s=_num(d.get("decode_s")),
                   kv_bytes=_int(d.get("kv_bytes")), kv_tokens=_int(d.get("kv_tokens")),
                   failed_transfers=_int(d.get("failed_transfers")),
                   deferred=_num(d.get("deferred")),
                   kv_estimated=d.get("kv_estimated") is True,
                   problem=problem[:300] if isinstance(problem, str) else None)
