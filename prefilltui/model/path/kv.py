"""The KV cache's size per token, and whether a transfer moved that much.  Pure.

Bytes per token = layers x KV heads x head dim x 2 (K and V) x bytes per element, the
standard KV-cache size of a decoder with grouped-query attention (e.g. vLLM's
``AttentionSpec.page_size_bytes`` per token: 2 x block_size x num_kv_heads x head_size
x dtype size, per layer).  MLA models cache a compressed latent instead; a shape
whose attention is not GQA's q/k/v/o (``attn_proj_params`` set) gives None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prefilltui.model.roofline import ModelShape

#: Bytes per element of the KV cache by dtype (bf16/fp16: 2, fp8: 1).
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
#: A transfer moving more than this ratio of the KV the prompt needs moves "more":
#: padding to whole blocks is under one block (16 tokens) per request, a few % at the
#: lengths probed; 1.25 is well past that and short of a second copy (2.0).
MORE = 1.25
#: Under this ratio it moved "fewer" bytes than the KV needs (part of the prompt's KV
#: not sent: a prefix cache hit on the decode side, or a truncated transfer).
FEWER = 0.8

KvCheck = Literal["ok", "more", "fewer", "unknown"]


def kv_bytes_per_token(shape: ModelShape | None, dtype: str = "bf16") -> int | None:
    """Bytes of KV cache one token takes (see the module docstring); None when the
    shape lacks layers, heads or head dim, or is not GQA (MLA)."""
    if shape is None or shape.attn_proj_params is not None:
        return None
    kv = shape.kv_heads or shape.heads
    hd = shape.head_dim or (shape.hidden // shape.heads if shape.hidden and shape.heads else None)
    nbytes = DTYPE_BYTES.get(dtype)
    if not (shape.layers and kv and hd and nbytes):
        return None
    return int(shape.layers * kv * hd * 2 * nbytes)


@dataclass(frozen=True, slots=True)
class KvFigures:
    """The transfers of a window of probes: bytes per token measured and expected, their
    ratio and its check, the rate (bytes/s) and the failures.  None: not known."""

    bytes_per_token: float | None
    expected_bytes_per_token: int | None
    ratio: float | None
    check: KvCheck
    bytes_per_s: float | None
    failed_transfers: int

    @property
    def words(self) -> str:
        """The check in words ("" when ok or unknown)."""
        if self.check == "more" and self.ratio is not None:
            return (f"the transfer moves {self.ratio:.2f}x the KV the prompt needs "
                    f"({self.bytes_per_token:,.0f} vs {self.expected_bytes_per_token:,} B/token)")
        if self.check == "fewer" and self.ratio is not None:
            return (f"the transfer moves {self.ratio:.2f}x the KV the prompt needs "
                    f"({self.bytes_per_token:,.0f} vs {self.expected_bytes_per_token:,} B/token): "
                    "part of the prompt's KV is not sent")
        return ""

    def to_json(self) -> dict:
        return {"bytes_per_token": self.bytes_per_token,
                "expected_bytes_per_token": self.expected_bytes_per_token, "ratio": self.ratio,
                "gb_per_s": self.bytes_per_s / 1e9 if self.bytes_per_s is not None else None,
                "failed_transfers": self.failed_transfers, "check": self.check}


def kv_figures(moved: list[tuple[int, float, float | None]], failed: int,
               expected: int | None) -> KvFigures:
    """From (tokens, bytes, seconds) per probe with a counted transfer: bytes per
    token (their sums' ratio), against ``expected`` (``kv_bytes_per_token``)."""
    rows = [(n, b, t) for n, b, t in moved if n > 0 and b >= 0]
    per = sum(b for _, b, _ in rows) / sum(n for n, _, _ in rows) if rows else None
    timed = [(b, t) for _, b, t in rows if t is not None and t > 0]
    rate = sum(b for b, _ in timed) / sum(t for _, t in timed) if timed else None
    ratio = per / expected if per is not None and expected else None
    check: KvCheck = ("unknown" if ratio is None else "more" if ratio > MORE
                      else "fewer" if ratio < FEWER else "ok")
    return KvFigures(per, expected, ratio, check, rate, failed)
