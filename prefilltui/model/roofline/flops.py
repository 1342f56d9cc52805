"""Prefill FLOPs from the model's shape, term by term (pure arithmetic, no I/O).

One prefill request of ``n`` new prompt tokens after ``D`` tokens already in the KV
cache (a prefix-cache hit, or ``--depth``) does, in matmuls (2 FLOPs per
multiply-add; ``d`` = hidden, ``h``/``kv`` = query/KV heads, ``hd`` = head_dim,
``L`` = layers, ``d_ff`` = MLP width, ``V`` = vocabulary):

  per token, per layer
    projections   2·d·hd·(h + 2·kv) + 2·h·hd·d       q, k, v (GQA-sized K/V), o
    MLP           2·m·d·d_ff                          m = 3 with a gate (SwiGLU/GeGLU),
                                                      2 without (GPT-2/NeoX style)
    MoE           2·m·d·d_moe·(active + shared) + 2·d·E   active experts only, router
  per (query, key) pair, per layer
    scores        2·h·hd      Q·Kᵀ
    weighted sum  2·h·hd      softmax(·)·V
  once per request
    LM head       2·d·V       only the last position's logits are used
    embeddings    0           a table lookup, not a matmul

Pairs per layer (the attention convention):
  "causal"  n·D + n(n+1)/2   each new token attends to the cache and to itself and
                              the tokens before it: the work a causal kernel that
                              skips masked blocks (FlashAttention, FlashInfer, vLLM's
                              and llama.cpp's flash-attention paths) does;
  "full"    n·(D + n)         the whole n x (D + n) score matrix, masked entries
                              included: what eager and SDPA-math kernels compute and
                              what ``torch.utils.flop_counter`` and vLLM's
                              ``vllm:estimated_flops_per_gpu_total`` count.

MFU uses **"causal"** (``MFU_ATTENTION``): Model FLOPs Utilisation counts the work
the model requires, independent of the kernel (PaLM, appendix B); the masked half of
the square is not required work, and crediting it would let a kernel that wastes it
look as efficient as one that skips it.  The full square is kept for comparing with
counters that use it (the unit tests hold "full" to PyTorch's counter within 1 %).

Left out, as PyTorch's counter also leaves them out: norms, activations, softmax,
rotary embeddings, residual adds and biases (each O(n·d), under 1 % of the matmuls
for the catalog's models).  Not modelled: sliding-window layers (Gemma-2, Mistral's
4k window: the count is the full-context one, exact up to the window), MLA's
absorbed-matrix form (DeepSeek: the catalog's per-layer projection count stands in).

When the shape is incomplete (a server that only reports params, hidden and layers)
the linear part falls back to 2·(P - embeddings - LM head) per token, or to the
seed's 2·P when the vocabulary is unknown; ``FlopCount.basis`` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

Attention = Literal["causal", "full"]
Basis = Literal["shape", "params", "quick"]

#: The attention convention MFU, the roofline lines and the verdict use (see above).
MFU_ATTENTION: Attention = "causal"

#: Shape-derived parameters may differ from the stated count by this fraction before
#: the count stops trusting the shape (a --params override, a server that reports a
#: different model): norms and biases are not in the shape formula (~0.01 %).
SHAPE_TOLERANCE = 0.03


class Shape(Protocol):
    """The fields of ``catalog.ModelShape`` this module reads (None = unknown)."""

    params: float | None
    layers: int | None
    hidden: int | None
    heads: int | None
    kv_heads: int | None
    head_dim: int | None
    vocab: int | None
    intermediate: int | None
    mlp_matrices: int
    tied_embeddings: bool | None
    experts: int | None
    experts_active: int | None
    shared_experts: int
    moe_intermediate: int | None
    dense_layers: int
    attn_proj_params: int | None

    @property
    def d_attn(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class FlopCount:
    """FLOPs of one prefill request of ``tokens`` new tokens at ``depth`` cached
    tokens, by term (FLOPs, whole model).  ``basis``: "shape" (every term from the
    shape), "params" (linear part from the parameter count less embeddings and LM
    head: the shape is incomplete) or "quick" (2·P per token: vocabulary unknown).
    With "params"/"quick" ``projections`` holds the whole linear part and ``mlp`` 0."""

    tokens: int
    depth: int
    attention_convention: Attention
    basis: Basis
    projections: float
    mlp: float
    scores: float
    weighted_sum: float
    lm_head: float
    embedding: float = 0.0

    @property
    def linear(self) -> float:
        """The per-token matmuls (projections + MLP), all n tokens."""
        return self.projections + self.mlp

    @property
    def attention(self) -> float:
        """Scores + weighted sum (the n² and n·D terms)."""
        return self.scores + self.weighted_sum

    @property
    def total(self) -> float:
        return self.linear + self.attention + self.lm_head + self.embedding

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "depth": self.depth,
                "attention_convention": self.attention_convention, "basis": self.basis,
                "projections": self.projections, "mlp": self.mlp, "scores": self.scores,
                "weighted_sum": self.weighted_sum, "lm_head": self.lm_head,
                "embedding": self.embedding, "linear": self.linear,
                "attention": self.attention, "total": self.total}


def attention_pairs(tokens: float, depth: float = 0, attention: Attention = MFU_ATTENTION) -> float:
    """(query, key) pairs per layer and head group: n·D + n(n+1)/2 ("causal") or
    n·(D + n) ("full").  Raises ValueError for another convention."""
    n, d = float(tokens), float(depth)
    if attention == "causal":
        return n * d + n * (n + 1.0) / 2.0
    if attention == "full":
        return n * (d + n)
    raise ValueError(f"attention must be 'causal' or 'full', got {attention!r}")


def embedding_params(m: Shape) -> float | None:
    """Embedding table plus an untied LM head (V·d, twice when untied); None when the
    vocabulary or hidden size is unknown.  Tied = one table used for both."""
    if not m.vocab or not m.hidden:
        return None
    return float(m.vocab * m.hidden * (1 if m.tied_embeddings else 2))


def _projection_params(m: Shape) -> float | None:
    if m.attn_proj_params:
        return float(m.attn_proj_params)
    if not (m.hidden and m.heads and m.head_dim):
        return None
    kv = m.kv_heads or m.heads
    return float(m.hidden * m.head_dim * (2 * m.heads + 2 * kv))


def _mlp_params(m: Shape) -> float | None:
    """Active MLP weights per token, summed over the layers (router included)."""
    if not m.layers or not m.hidden:
        return None
    dense = m.mlp_matrices * m.hidden * (m.intermediate or 0)
    if m.experts and m.experts_active:
        moe_w = m.moe_intermediate or m.intermediate
        if not moe_w:
            return None
        moe = m.mlp_matrices * m.hidden * moe_w * (m.experts_active + m.shared_experts)
        moe += m.hidden * m.experts  # the router: d x E
        if m.dense_layers and not m.intermediate:
            return None
        return float(m.dense_layers * dense + (m.layers - m.dense_layers) * moe)
    if not m.intermediate:
        return None
    return float(m.layers * dense)


def shape_params(m: Shape) -> float | None:
    """Active parameters implied by the shape: layers x (projections + MLP) plus the
    embeddings (and untied LM head); None when a field is missing.  Holds the catalog's
    stated counts within 1 % (tests/unit/test_flops.py)."""
    proj, mlp, emb = _projection_params(m), _mlp_params(m), embedding_params(m)
    if proj is None or mlp is None or emb is None or not m.layers:
        return None
    return m.layers * proj + mlp + emb


def linear_flops_per_token(m: Shape) -> tuple[float, float, Basis]:
    """(projection FLOPs, MLP FLOPs, basis) per prompt token, all layers, without
    embeddings and LM head.  Raises ValueError when not even ``params`` is known."""
    sp = shape_params(m)
    if sp is not None and (not m.params or abs(sp / m.params - 1.0) <= SHAPE_TOLERANCE):
        return 2.0 * m.layers * _projection_params(m), 2.0 * _mlp_params(m), "shape"
    if not m.params:
        raise ValueError("the FLOP count needs the parameter count or the full shape")
    emb = embedding_params(m)
    if emb is not None and emb < m.params:
        return 2.0 * (m.params - emb), 0.0, "params"
    return 2.0 * m.params, 0.0, "quick"


def count(m: Shape, tokens: float, depth: float = 0,
          attention: Attention = MFU_ATTENTION) -> FlopCount:
    """FLOPs of one prefill request (see the module docstring).  ``tokens`` = new
    prompt tokens (>= 0), ``depth`` = tokens already cached.  Raises ValueError when
    the shape lacks layers / attention width / params, or for negative inputs."""
    if tokens < 0 or depth < 0:
        raise ValueError("tokens and depth must be >= 0")
    if not m.layers or not m.d_attn:
        raise ValueError("the FLOP count needs the layer count and the attention width")
    proj, mlp, basis = linear_flops_per_token(m)
    n = float(tokens)
    pairs = attention_pairs(n, depth, attention)
    per_pair = 2.0 * m.layers * m.d_attn
    head_w = m.vocab * m.hidden if (m.vocab and m.hidden and basis != "quick") else 0.0
    return FlopCount(tokens=int(tokens), depth=int(depth), attention_convention=attention,
                     basis=basis, projections=proj * n, mlp=mlp * n,
                     scores=per_pair * pairs, weighted_sum=per_pair * pairs,
                     lm_head=2.0 * head_w if n > 0 else 0.0)


def polynomial(m: Shape, depth: float = 0, attention: Attention = MFU_ATTENTION
               ) -> tuple[float, float, float]:
    """(f0, f1, f2) with F(n) = f0 + f1·n + f2·n² for n >= 1 new tokens at ``depth``:
    f0 the LM head (once per request), f1 = ``linear_coefficient``, f2 =
    ``quadratic_coefficient``.  For ndarray evaluation (the TUI's roofline lines).
    Raises ValueError as ``count``."""
    c = count(m, 1, depth, attention)
    return c.lm_head, linear_coefficient(m, depth, attention), quadratic_coefficient(m, attention)


def total(m: Shape, tokens: float, depth: float = 0, attention: Attention = MFU_ATTENTION) -> float:
    """``count(...).total``: FLOPs of one request."""
    return count(m, tokens, depth, attention).total


def marginal_flops(m: Shape, lo: float, hi: float, depth: float = 0,
                   attention: Attention = MFU_ATTENTION) -> float:
    """FLOPs one more prompt token costs across [lo, hi]: (F(hi) - F(lo)) / (hi - lo)
    = f1 + f2·(lo + hi), the secant of the request count (the LM head, paid once,
    cancels).  This is the FLOP counterpart of a straight-line fit's slope over prompts
    from ``lo`` to ``hi`` tokens: exact for lengths spread evenly over the range (the
    least-squares slope of n² over them is lo + hi).  With lo == hi, the derivative."""
    lo, hi = float(min(lo, hi)), float(max(lo, hi))
    return linear_coefficient(m, depth, attention) + quadratic_coefficient(m, attention) * (lo + hi)


def linear_coefficient(m: Shape, depth: float = 0, attention: Attention = MFU_ATTENTION) -> float:
    """The n¹ coefficient of F(n) = f0 + f1·n + f2·n² (FLOPs per token): what a
    quadratic fit's linear term measures.  Linear matmuls plus attention's n·D term
    (and, causal, the n/2 of the diagonal).  Raises ValueError as ``count``."""
    if not m.layers or not m.d_attn:
        raise ValueError("the FLOP count needs the layer count and the attention width")
    proj, mlp, _ = linear_flops_per_token(m)
    per_pair = 4.0 * m.layers * m.d_attn
    diag = 0.5 if attention == "causal" else 0.0
    return proj + mlp + per_pair * (float(depth) + diag)


def quadratic_coefficient(m: Shape, attention: Attention = MFU_ATTENTION) -> float:
    """The n² coefficient of F(n) (FLOPs per token²): 2·L·d_attn causal, 4·L·d_attn
    full.  Raises ValueError without layers or attention width."""
    if not m.layers or not m.d_attn:
        raise ValueError("the FLOP count needs the layer count and the attention width")
    return 4.0 * m.layers * m.d_attn * (0.5 if attention == "causal" else 1.0)


def quick_flops(params: float, layers: int, d_attn: int, tokens: float) -> float:
    """The seed's back-of-envelope 2·P·n + 2·L·d_attn·n² (P includes the embeddings
    and the LM head, paid for every token): what ``estimate`` shows as the quick figure."""
    n = float(tokens)
    return 2.0 * params * n + 2.0 * layers * d_attn * n * n


def vllm_expected_flops(m: Shape, tokens: int, depth: int = 0, chunk: int | None = None,
                        decode_tokens: int = 0) -> float:
    """What vLLM's ``vllm:estimated_flops_per_gpu_total`` adds for one request on one
    GPU without tensor/pipeline parallelism (vllm/v1/metrics/perf.py, v0.32): per
    scheduled step of c tokens at context C (cached + computed + c): linear 2·c·(...)
    as here but without the MoE router; attention 4·L·h·hd·c·C -- the full square,
    since C counts the step's own tokens; the LM head once per prefill step (once per
    chunk under chunked prefill) and once per decode token.  ``chunk``: the step size
    when the prompt is split (None: one step); ``decode_tokens``: steps after the
    first token (0 for a ``max_tokens: 1`` probe)."""
    proj, mlp, basis = linear_flops_per_token(m)
    if basis == "shape" and m.experts and m.experts_active:
        mlp -= 2.0 * (m.layers - m.dense_layers) * m.hidden * m.experts  # vLLM bills no router
    head = 2.0 * (m.vocab or 0) * (m.hidden or 0)
    per_pair = 4.0 * m.layers * m.d_attn
    step = chunk if chunk and chunk > 0 else max(tokens, 1)
    out, done = 0.0, 0
    while done < tokens:
        c = min(step, tokens - done)
        out += (proj + mlp) * c + per_pair * c * (depth + done + c) + head
        done += c
    for i in range(decode_tokens):
        out += proj + mlp + per_pair * (depth + tokens + i + 1) + head
    return out


def vllm_ratio(m: Shape, tokens: int, counter_delta: float, depth: int = 0,
               attention: Attention = MFU_ATTENTION) -> float | None:
    """prefilltui's count / vLLM's counter increase for one probe (None when the
    counter did not move).  Expected: 1.000 with ``attention="full"`` for a dense
    model prefilled in one step; below 1 with "causal" by the masked half
    (F_causal / F_full: 0.965 for Llama-3-8B at 2,000 tokens, 0.724 at 32k);
    see ``vllm_expected_flops`` for chunked prefill and decode steps."""
    if not counter_delta or counter_delta <= 0:
        return None
    return total(m, tokens, depth, attention) / counter_delta
