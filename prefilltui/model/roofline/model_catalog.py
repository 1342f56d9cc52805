"""Model catalog for the roofline and the FLOP count: ``ModelShape``, ``lookup_model``, ``model_from_config``.

Model shapes come from each model's config.json on the HF hub (docs/reference,
shared/reference/hardware-and-models.md in the project notes); ``model_from_config``
reads a user's own config.json.  Fields named in ``uncertain`` are marked (? why) on
screen.  The GPU table is ``gpu_catalog``; ``known_names`` lists the keys of both.

Resolution (flags > --model-config > server metadata > catalog) is ``model.spec``.

Most of it is data: the model table, each row with its source.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefilltui.model.roofline.gpu_catalog import GPUS
from prefilltui.model.jsontypes import loads as json_loads
from prefilltui.model.localfile import read_text
from prefilltui.model.types import JsonObject

MODEL_SOURCE = "the model's config.json (HF hub)"


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Model shape for the FLOP count (``prefilltui.model.roofline.flops``).

    ``params`` = parameters per token as the model card states them (active params for
    MoE), embeddings included: the seed's quick 2·P figure.  The term-by-term count
    reads the rest: ``attn_width`` = heads x head_dim (d_attn; GQA does not shrink
    it), ``intermediate`` = MLP width d_ff, ``mlp_matrices`` = 3 with a gate (SwiGLU/
    GeGLU) or 2, ``vocab`` and ``tied_embeddings`` (one table for the input embedding
    and the LM head), MoE ``experts`` (routed, in total) / ``experts_active`` (per
    token) / ``shared_experts`` / ``moe_intermediate`` / ``dense_layers`` (leading
    layers with a dense MLP), ``attn_proj_params`` (per-layer attention weights when
    they are not GQA's q/k/v/o, e.g. MLA).  Source: the model's config.json, checked by
    the parameter count they imply (within 1 % of ``params``, tests/unit/test_flops.py)."""

    key: str
    name: str
    params: float | None
    layers: int | None
    hidden: int | None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    attn_width: int | None = None
    vocab: int | None = None
    max_pos: int | None = None
    total_params: float | None = None
    intermediate: int | None = None
    mlp_matrices: int = 3
    tied_embeddings: bool | None = None
    experts: int | None = None
    experts_active: int | None = None
    shared_experts: int = 0
    moe_intermediate: int | None = None
    dense_layers: int = 0
    attn_proj_params: int | None = None
    aliases: tuple[str, ...] = ()
    uncertain: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()
    source: str = MODEL_SOURCE

    @property
    def doubt(self) -> str:
        """Why the shape is marked "(?)", in words ('' when it is not): the fields its
        source leaves uncertain ("uncertain: attention width")."""
        if not self.uncertain:
            return ""
        return "uncertain: " + ", ".join(_FIELD_WORDS.get(f, f.replace("_", " "))
                                         for f in sorted(self.uncertain))

    @property
    def d_attn(self) -> int | None:
        if self.attn_width:
            return self.attn_width
        if self.heads and self.head_dim:
            return self.heads * self.head_dim
        return self.hidden

    def to_json(self) -> JsonObject:
        return {
            "key": self.key, "name": self.name, "params": self.params, "layers": self.layers,
            "hidden": self.hidden, "heads": self.heads, "kv_heads": self.kv_heads,
            "head_dim": self.head_dim, "attn_width": self.d_attn, "vocab": self.vocab,
            "max_pos": self.max_pos, "total_params": self.total_params,
            "intermediate": self.intermediate, "mlp_matrices": self.mlp_matrices,
            "tied_embeddings": self.tied_embeddings, "experts": self.experts,
            "experts_active": self.experts_active, "shared_experts": self.shared_experts,
            "moe_intermediate": self.moe_intermediate, "dense_layers": self.dense_layers,
            "attn_proj_params": self.attn_proj_params,
            "uncertain": sorted(self.uncertain), "notes": list(self.notes), "source": self.source,
        }


#: Words for the fields a shape may mark uncertain.
_FIELD_WORDS = {"attn_width": "attention width", "params": "parameters",
                "head_dim": "head size", "hidden": "hidden size"}


_HF_REPO = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B, Llama-3.1-8B", "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B", "llama-3.2-1b": "meta-llama/Llama-3.2-1B",
    "llama-3.2-3b": "meta-llama/Llama-3.2-3B", "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1", "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B", "qwen2.5-72b": "Qwen/Qwen2.5-72B", "qwen3-8b": "Qwen/Qwen3-8B",
    "gemma-2-9b": "google/gemma-2-9b", "phi-3-mini": "microsoft/Phi-3-mini-4k-instruct",
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M", "smollm2-360m": "HuggingFaceTB/SmolLM2-360M",
    "smollm2-1.7b": "HuggingFaceTB/SmolLM2-1.7B", "deepseek-v3": "deepseek-ai/DeepSeek-V3",
}


def _m(key, name, params, L, d, h, kv, hd, vocab, maxpos, ff, tied, aliases=(), **kw):
    """One catalog row: config.json's num_hidden_layers, hidden_size,
    num_attention_heads, num_key_value_heads, head_dim, vocab_size,
    max_position_embeddings, intermediate_size, tie_word_embeddings."""
    return ModelShape(key=key, name=name, params=params, layers=L, hidden=d, heads=h,
                      kv_heads=kv, head_dim=hd, vocab=vocab, max_pos=maxpos, intermediate=ff,
                      tied_embeddings=tied, aliases=tuple(aliases),
                      source=f"{_HF_REPO[key]} config.json (HF hub)", **kw)


MODELS: tuple[ModelShape, ...] = (
    _m("llama-3-8b", "Llama-3-8B / 3.1-8B", 8.03e9, 32, 4096, 32, 8, 128, 128256, 131072, 14336, False,
       ["llama-3-8b", "llama-3.1-8b", "llama3-8b", "llama3.1-8b"]),
    _m("llama-3-70b", "Llama-3(.1)-70B", 70.55e9, 80, 8192, 64, 8, 128, 128256, 131072, 28672, False,
       ["llama-3-70b", "llama-3.1-70b", "llama-3.3-70b"]),
    _m("llama-3.1-405b", "Llama-3.1-405B", 405.85e9, 126, 16384, 128, 8, 128, 128256, 131072, 53248,
       False, ["llama-3.1-405b"]),
    _m("llama-3.2-1b", "Llama-3.2-1B", 1.24e9, 16, 2048, 32, 8, 64, 128256, 131072, 8192, True,
       ["llama-3.2-1b"]),
    _m("llama-3.2-3b", "Llama-3.2-3B", 3.21e9, 28, 3072, 24, 8, 128, 128256, 131072, 8192, True,
       ["llama-3.2-3b"]),
    _m("mistral-7b", "Mistral-7B-v0.1", 7.24e9, 32, 4096, 32, 8, 128, 32000, 32768, 14336, False,
       ["mistral-7b"], notes=("4,096-token sliding window: FLOPs above 4k tokens are overstated",)),
    _m("mixtral-8x7b", "Mixtral-8x7B (active)", 12.9e9, 32, 4096, 32, 8, 128, 32000, 32768, 14336, False,
       ["mixtral-8x7b"], total_params=46.7e9, experts=8, experts_active=2,
       notes=("MoE: 12.9e9 active of 46.7e9 (2 of 8 experts per token)",)),
    _m("qwen2.5-0.5b", "Qwen2.5-0.5B", 0.49e9, 24, 896, 14, 2, 64, 151936, 32768, 4864, True,
       ["qwen2.5-0.5b"]),
    _m("qwen2.5-7b", "Qwen2.5-7B", 7.62e9, 28, 3584, 28, 4, 128, 152064, 131072, 18944, False,
       ["qwen2.5-7b"]),
    _m("qwen2.5-72b", "Qwen2.5-72B", 72.7e9, 80, 8192, 64, 8, 128, 152064, 131072, 29568, False,
       ["qwen2.5-72b"]),
    _m("qwen3-8b", "Qwen3-8B", 8.19e9, 36, 4096, 32, 8, 128, 151936, 40960, 12288, False, ["qwen3-8b"]),
    _m("gemma-2-9b", "Gemma-2-9B", 9.24e9, 42, 3584, 16, 8, 256, 256000, 8192, 14336, True,
       ["gemma-2-9b"], attn_width=4096,
       notes=("attention width 16 x 256 = 4096, wider than hidden 3584",
              "every other layer has a 4,096-token sliding window: FLOPs above 4k tokens "
              "are overstated")),
    _m("phi-3-mini", "Phi-3-mini-4k", 3.82e9, 32, 3072, 32, 32, 96, 32064, 4096, 8192, False,
       ["phi-3-mini-4k", "phi-3-mini"]),
    _m("smollm2-135m", "SmolLM2-135M", 135e6, 30, 576, 9, 3, 64, 49152, 8192, 1536, True,
       ["smollm2-135m"]),
    _m("smollm2-360m", "SmolLM2-360M", 362e6, 32, 960, 15, 5, 64, 49152, 8192, 2560, True,
       ["smollm2-360m"]),
    _m("smollm2-1.7b", "SmolLM2-1.7B", 1.71e9, 24, 2048, 32, 32, 64, 49152, 8192, 8192, True,
       ["smollm2-1.7b"]),
    # MLA: per layer q_a 7168x1536 + q_b 1536x(128x192) + kv_a 7168x576 + kv_b 512x(128x256)
    # + o (128x128)x7168 = 187,105,280 weights (config.json q_lora_rank, kv_lora_rank,
    # qk_nope/rope_head_dim, v_head_dim); first_k_dense_replace 3; 8 of 256 routed experts
    # + 1 shared of width 2048 (moe_intermediate_size).
    _m("deepseek-v3", "DeepSeek-V3 (active)", 37e9, 61, 7168, 128, 128, 192, 129280, 163840, 18432,
       False, ["deepseek-v3"], total_params=671e9, attn_width=20480,
       uncertain=frozenset({"attn_width"}), experts=256, experts_active=8, shared_experts=1,
       moe_intermediate=2048, dense_layers=3, attn_proj_params=187_105_280,
       notes=("MoE: 37e9 active of 671e9 (8 of 256 routed experts + 1 shared)",
              "MLA: q/k head_dim 192, v 128; d_attn taken as 128 x (192 + 128) / 2 = 20480 (?)")),
)

_QUANT = re.compile(r"[.\-_](i?q\d(?:_[a-z0-9]+)*|f16|f32|bf16|fp16|fp8|int4|int8|awq|gptq|gguf|mlx)$")
_MODEL_NOISE = {"meta", "instruct", "chat", "it", "hf", "base", "gguf", "awq", "gptq", "fp8",
                "bf16", "fp16", "f16", "hub", "latest", "model", "models"}


def _model_tokens(name: str) -> list[str]:
    s = name.strip().lower().rstrip("/")
    s = s.split("/")[-1].split(":")[0] if "/" in s else s.split(":")[0]
    s = re.sub(r"\.gguf$", "", s)
    while (m := _QUANT.search(s)) is not None:
        s = s[: m.start()]
    s = re.sub(r"(?<=[a-z])(?=\d)", "-", s)  # llama3 -> llama-3, qwen2.5 -> qwen-2.5
    return [t for t in re.split(r"[\s\-_]+", s) if t and t not in _MODEL_NOISE]


def lookup_model(name: str | None) -> ModelShape | None:
    """Catalog entry for a common model name, else None.

    Accepts HF ids ("meta-llama/Meta-Llama-3-8B-Instruct"), GGUF file names and paths
    ("SmolLM2-135M-Instruct.Q4_1.gguf"), Ollama tags ("qwen2.5:7b" matches only when
    the size is in the name), catalog keys.  Quantisation and chat/instruct suffixes
    are ignored; the longest alias whose tokens all appear in the name wins."""
    if not name or not name.strip():
        return None
    toks = _model_tokens(name)
    if ":" in name and "/" not in name:  # ollama "qwen2.5:7b"
        base, _, tag = name.partition(":")
        toks = _model_tokens(base) + _model_tokens(tag)
    if not toks:
        return None
    tokset = set(toks)
    best, best_len = None, 0
    for m in MODELS:
        for alias in (m.key, *m.aliases):
            at = _model_tokens(alias)
            if at == toks:
                return m
            if set(at) <= tokset and len(at) > best_len:
                best, best_len = m, len(at)
    return best if best_len >= 2 else None


def model_from_config(path: str | Path) -> ModelShape:
    """Model shape from a Hugging Face config.json, params computed from the shapes.

    Per layer: attention q,o = hidden x heads*head_dim, k,v = hidden x kv*head_dim;
    MLP 3 x hidden x intermediate (gated; 2 for GPT-2/NeoX-style), MoE: experts per
    token x that (+ shared experts); plus embeddings (x2 when untied).  Raises OSError
    when unreadable, ValueError when the JSON lacks hidden size or layer count."""
    raw = json_loads(read_text(path))  # bounded: the path may name /dev/zero
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not a JSON object")
    c = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    raw_get = lambda *ks, d=None: next((c[k] for k in ks if c.get(k) is not None), d)  # noqa: E731

    def get(*ks: str, d: Any = None) -> Any:
        """A shape field as a non-negative int (the default when absent).
        Raises ValueError naming the field when it is not one (a string, inf, -3)."""
        v = raw_get(*ks, d=d)
        if v is None or v is d:
            return v
        ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
              and v >= 0 and float(v).is_integer())
        if not ok:
            key = next((k for k in ks if c.get(k) is not None), ks[0])
            raise ValueError(f"{path}: {key} is {str(v)[:40]!r}, not a whole number >= 0")
        return int(v)
    hidden, layers = get("hidden_size", "n_embd", "d_model"), get("num_hidden_layers", "n_layer", "num_layers")
    if not hidden or not layers:
        raise ValueError(f"{path}: no hidden_size/num_hidden_layers")
    heads = get("num_attention_heads", "n_head", d=max(1, hidden // 64)) or max(1, hidden // 64)
    kv = get("num_key_value_heads", "num_kv_heads", d=heads)
    hd = get("head_dim", d=hidden // heads)
    inter = get("intermediate_size", "n_inner", "ffn_dim", d=4 * hidden)
    vocab = get("vocab_size", d=0)
    mtype = str(raw.get("model_type", c.get("model_type", "")))
    hd = hd or hidden // heads
    mats = 2 if mtype in {"gpt2", "gpt_neox", "opt", "bloom", "falcon", "gpt_bigcode", "phi",
                          "starcoder2", "gptj"} else 3
    experts_tok = get("num_experts_per_tok", "moe_topk")
    moe_inter = get("moe_intermediate_size", d=inter)
    shared = get("n_shared_experts", "num_shared_experts", d=0) or 0
    n_experts = get("num_local_experts", "num_experts", "n_routed_experts")
    attn = 2 * hidden * heads * hd + 2 * hidden * kv * hd
    tied = bool(raw.get("tie_word_embeddings", c.get("tie_word_embeddings", False)))
    if experts_tok and n_experts:
        mlp = mats * hidden * moe_inter * (experts_tok + shared) + hidden * n_experts
        total_mlp = mats * hidden * moe_inter * (n_experts + shared) + hidden * n_experts
    else:
        mlp = total_mlp = mats * hidden * inter
    emb = vocab * hidden * (1 if tied else 2)
    params = layers * (attn + mlp) + emb
    name = str(raw.get("_name_or_path") or Path(path).parent.name or "config.json")
    moe = experts_tok and n_experts
    return ModelShape(key="config", name=name, params=float(params), layers=int(layers),
                      hidden=int(hidden), heads=int(heads), kv_heads=int(kv), head_dim=int(hd),
                      attn_width=int(heads * hd), vocab=int(vocab) or None,
                      max_pos=get("max_position_embeddings") or None,
                      total_params=float(layers * (attn + total_mlp) + emb),
                      intermediate=int(inter), mlp_matrices=mats, tied_embeddings=tied,
                      experts=int(n_experts) if moe else None,
                      experts_active=int(experts_tok) if moe else None,
                      shared_experts=int(shared) if moe else 0,
                      moe_intermediate=int(moe_inter) if moe else None,
                      source=f"computed from {path}", notes=("params computed from config.json",))


def known_names() -> dict[str, list[str]]:
    """Catalog keys, for error messages and --help."""
    return {"gpus": [g.key for g in GPUS], "models": [m.key for m in MODELS]}
