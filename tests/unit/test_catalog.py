"""Catalog lookups and the resolution of overrides."""

from __future__ import annotations

import json

import pytest

from prefilltui.model.roofline.model_catalog import MODELS
from prefilltui.model.roofline import lookup_model, model_from_config
from prefilltui.model.roofline.gpu_catalog import GPUS
from prefilltui.model.roofline import lookup_gpu
from prefilltui.model.spec import RooflineSpec, resolve_gpu, resolve_model
from prefilltui.model.types import ServerInfo


def test_every_reference_gpu_is_listed_with_a_source():
    keys = {g.key for g in GPUS}
    for k in ("h100-sxm", "h100-pcie", "h100-nvl", "h200", "h200-nvl", "gh200", "b200",
              "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-40gb", "a100-pcie-80gb", "a10", "a10g",
              "l4", "l40s", "l40", "t4", "v100-sxm2", "rtx-4090", "rtx-3090", "rtx-6000-ada", "mi300x"):
        assert k in keys
    assert all(g.source and g.bf16_tflops and g.bandwidth_tbs for g in GPUS)
    assert "bf16_tflops" in lookup_gpu("a10g").uncertain  # (?) in the reference


@pytest.mark.parametrize("name,key,exact", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm", True), ("NVIDIA H100 PCIe", "h100-pcie", True),
    ("NVIDIA H100 NVL", "h100-nvl", True), ("NVIDIA H200", "h200", True),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb", True), ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb", True),
    ("Tesla T4", "t4", True), ("Tesla V100-SXM2-32GB", "v100-sxm2", True),
    ("NVIDIA GeForce RTX 4090", "rtx-4090", True), ("AMD Instinct MI300X", "mi300x", True),
    ("NVIDIA L40S", "l40s", True), ("NVIDIA L40", "l40", True), ("NVIDIA A10G", "a10g", True),
    ("NVIDIA A10", "a10", True), ("h100-sxm", "h100-sxm", True),
    ("NVIDIA H100", "h100-sxm", False), ("NVIDIA GH200 144G HBM3e", "gh200", False),
])
def test_lookup_gpu_by_nvml_name(name, key, exact):
    g = lookup_gpu(name)
    assert g is not None and g.key == key
    assert g.matched_by.endswith("(?)") == (not exact)


def test_unknown_gpu():
    assert lookup_gpu("Intel(R) Xeon(R) CPU") is None
    assert lookup_gpu("") is None and lookup_gpu(None) is None


@pytest.mark.parametrize("name,key", [
    ("SmolLM2-135M-Instruct", "smollm2-135m"), ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m"),
    ("/home/u/.cache/prefilltui/models/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"), ("llama-3.1-8b", "llama-3-8b"),
    ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "llama-3.2-1b"), ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("qwen2.5:7b", "qwen2.5-7b"), ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"), ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
    ("microsoft/Phi-3-mini-4k-instruct", "phi-3-mini"), ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "smollm2-1.7b"),
])
def test_lookup_model(name, key):
    m = lookup_model(name)
    assert m is not None and m.key == key


def test_model_shapes():
    assert lookup_model("gemma-2-9b").d_attn == 4096  # wider than hidden 3584
    assert lookup_model("llama-3-8b").d_attn == 4096
    mix = lookup_model("mixtral-8x7b")
    assert mix.params == pytest.approx(12.9e9) and mix.total_params == pytest.approx(46.7e9)
    assert lookup_model("gpt-nonexistent-7q") is None
    assert all(m.source for m in MODELS)


LLAMA3_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
    "max_position_embeddings": 8192,
}


def test_model_from_config_llama3(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(LLAMA3_CONFIG))
    m = model_from_config(p)
    assert m.params == pytest.approx(8.03e9, rel=0.005)
    assert (m.layers, m.hidden, m.d_attn) == (32, 4096, 4096)


def test_model_from_config_smollm2_and_mixtral(tmp_path):
    smol = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
            "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
            "vocab_size": 49152, "tie_word_embeddings": True}
    (tmp_path / "s.json").write_text(json.dumps(smol))
    assert model_from_config(tmp_path / "s.json").params == pytest.approx(135e6, rel=0.01)
    mix = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}
    (tmp_path / "m.json").write_text(json.dumps(mix))
    m = model_from_config(tmp_path / "m.json")
    assert m.params == pytest.approx(12.9e9, rel=0.02)
    assert m.total_params == pytest.approx(46.7e9, rel=0.01)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError):
        model_from_config(tmp_path / "bad.json")


def ns(**kw):
    return RooflineSpec(**kw)


def test_resolve_model_precedence():
    m, _ = resolve_model(ns(model="llama-3-8b"), None)
    assert m.key == "llama-3-8b"
    si = ServerInfo(model="SmolLM2-135M-Instruct.Q4_1.gguf", params=134515008, hidden=576, layers=30)
    m, notes = resolve_model(ns(), si)
    assert m.key == "smollm2-135m" and m.params == 134515008 and m.d_attn == 576
    assert any("server" in n for n in notes)
    m, _ = resolve_model(ns(params=1e9, layers=10), si)
    assert m.params == 1e9 and m.layers == 10 and m.hidden == 576
    unknown = ServerInfo(model="mystery", params=2e9, hidden=2048, layers=20)
    m, _ = resolve_model(None, unknown)
    assert m.params == 2e9 and m.d_attn == 2048 and "attn_width" in m.uncertain
    assert resolve_model(ns(), None)[0] is None


def test_resolve_gpu():
    hw, _ = resolve_gpu(ns(), ["NVIDIA H100 80GB HBM3"])
    assert hw.peak_tflops == 989.4
    hw, _ = resolve_gpu(ns(gpu="h100-sxm", dtype="fp8"), None)
    assert hw.peak_tflops == 1978.9
    hw, notes = resolve_gpu(ns(gpu="a100-sxm-80gb", dtype="fp8"), None)
    assert hw.peak_tflops is None and notes
    hw, _ = resolve_gpu(ns(peak_tflops=2.0), None)  # a CPU with a given peak
    assert hw.peak_flops == 2e12 and hw.ridge_point is None
    hw, _ = resolve_gpu(ns(gpu="h100-sxm", peak_tflops=800, bandwidth_tbs=3.0), None)
    assert hw.ridge_point == pytest.approx(800 / 3.0)
    hw, notes = resolve_gpu(ns(), ["Some Future GPU"])
    assert hw is None and any("--peak-tflops" in n for n in notes)
    assert resolve_gpu(None, None) == (None, [])
