"""A minimal llama.cpp-flavoured OpenAI-compatible streaming server for prefill probes.

The model is a Llama (transformers ``LlamaForCausalLM``, SDPA attention) with RANDOM
weights created directly on the device: its output is meaningless, but its prefill
FLOPs and kernels are those of a real model of the same shape (default: Llama-3.1-8B,
32 layers, hidden 4096, 32 heads, 8 kv heads, head_dim 128, intermediate 14336,
vocab 128256), so TTFT vs prompt length measures the compute of such a prefill.

Tokenizer (deterministic, no vocabulary file): one token per whitespace-separated
word, id = 1 + crc32(word) mod (vocab - 2); a BOS id 128000 (or vocab - 1) is put in
front (``add_special``, default true).  /tokenize and usage.prompt_tokens use the
same mapping, so prefilltui's length calibration is exact.

Endpoints (llama.cpp style, so prefilltui discovers it as kind "llama.cpp"):
  GET  /health, /props, /v1/models (meta.n_params/n_embd/n_layer/n_ctx), /metrics
  POST /tokenize {"content": ...} -> {"tokens": [...]}
  POST /v1/completions {"prompt", "stream": true, "max_tokens": 1}
       -> one SSE chunk with the argmax token's text, a final chunk with
          finish_reason, usage and llama.cpp ``timings`` (prompt_n, prompt_ms:
          the server's own forward time, synchronised), then ``data: [DONE]``.
One request at a time (an asyncio lock); the forward runs in a worker thread so
/metrics and /tokenize stay responsive; torch.cuda.synchronize() before the
first token is emitted.  The forward computes logits for the last position
only (``logits_to_keep=1``), like serving engines do; no KV cache is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import zlib

import torch
from aiohttp import web


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}] ", *a, file=sys.stderr, flush=True)


class Engine:
    def __init__(self, args):
        from transformers import LlamaConfig, LlamaForCausalLM

        self.dev = torch.device(args.device)
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16,
                      "fp32": torch.float32}[args.dtype]
        self.vocab = args.vocab
        self.bos = 128000 if args.vocab > 128000 else args.vocab - 1
        cfg = LlamaConfig(
            vocab_size=args.vocab, hidden_size=args.hidden,
            intermediate_size=args.intermediate, num_hidden_layers=args.layers,
            num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
            head_dim=args.hidden // args.heads, max_position_embeddings=args.n_ctx,
            rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
            bos_token_id=self.bos, eos_token_id=self.bos + 1 if self.bos + 1 < args.vocab else 0,
        )
        cfg._attn_implementation = "sdpa"
        t0 = time.perf_counter()
        old = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            with torch.device(self.dev):
                model = LlamaForCausalLM(cfg)
        finally:
            torch.set_default_dtype(old)
        model = model.to(self.dtype).eval()
        self.model = model
        self._sync()
        self.n_params = sum(p.numel() for p in model.parameters())
        emb = model.model.embed_tokens.weight.numel()
        self.n_params_matmul = self.n_params - emb  # the embedding lookup does no FLOPs
        self.cfg = cfg
        self.n_ctx = args.n_ctx
        self.init_s = time.perf_counter() - t0
        log(f"model: {self.n_params:,} params ({self.n_params / 1e9:.3f} B), "
            f"{next(model.parameters()).dtype} on {self.dev}, attn "
            f"{getattr(cfg, '_attn_implementation', '?')}, built in {self.init_s:.1f} s; "
            f"{torch.cuda.get_device_name(self.dev) if self.dev.type == 'cuda' else 'cpu'}; "
            f"random weights")
        self.lock = threading.Lock()
        self.stats = {"prompt_tokens_total": 0, "prompt_seconds_total": 0.0,
                      "requests": 0, "processing": 0, "deferred": 0}

    def _sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        m = self.vocab - 2
        ids = [1 + zlib.crc32(w.encode()) % m for w in text.split()]
        return ([self.bos] if add_special else []) + ids

    def forward(self, ids: list[int]) -> tuple[int, float]:
        """One prefill over ``ids``; returns (argmax token of the last position, seconds)."""
        with self.lock, torch.inference_mode():
            t0 = time.perf_counter()
            x = torch.tensor([ids], dtype=torch.long, device=self.dev)
            out = self.model(input_ids=x, use_cache=False, logits_to_keep=1)
            tok = int(out.logits[0, -1].argmax())  # .item() synchronises
            self._sync()
            return tok, time.perf_counter() - t0

    def warmup(self, lengths):
        for n in lengths:
            n = min(n, self.n_ctx)
            tok, s = self.forward([self.bos] + list(range(1, n)))
            log(f"warm-up forward {n} tokens: {s * 1000:.1f} ms")


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def make_app(eng: Engine, model_id: str) -> web.Application:
    alock = asyncio.Lock()

    async def health(_):
        return web.json_response({"status": "ok"})

    async def props(_):
        return web.json_response({
            "default_generation_settings": {"n_ctx": eng.n_ctx},
            "total_slots": 1, "model_path": model_id,
            "build_info": "prefilltui gpu_server (torch %s)" % torch.__version__,
        })

    async def models(_):
        c = eng.cfg
        return web.json_response({"object": "list", "data": [{
            "id": model_id, "object": "model", "owned_by": "gpu_server",
            "meta": {"n_params": eng.n_params, "n_embd": c.hidden_size,
                     "n_layer": c.num_hidden_layers, "n_ctx": eng.n_ctx,
                     "n_ctx_train": eng.n_ctx, "n_vocab": c.vocab_size},
        }]})

    async def metrics(_):
        s = eng.stats
        body = (
            "# TYPE llamacpp:prompt_tokens_total counter\n"
            f"llamacpp:prompt_tokens_total {s['prompt_tokens_total']}\n"
            "# TYPE llamacpp:prompt_seconds_total counter\n"
            f"llamacpp:prompt_seconds_total {s['prompt_seconds_total']:.6f}\n"
            "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
            "llamacpp:prompt_tokens_cached_total 0\n"
            "# TYPE llamacpp:requests_processing gauge\n"
            f"llamacpp:requests_processing {s['processing']}\n"
            "# TYPE llamacpp:requests_deferred gauge\n"
            f"llamacpp:requests_deferred {s['deferred']}\n"
        )
        return web.Response(text=body, content_type="text/plain")

    async def tokenize(req):
        j = await req.json()
        text = j.get("content", j.get("prompt", ""))
        toks = eng.tokenize(text if isinstance(text, str) else "",
                            bool(j.get("add_special", True)))
        return web.json_response({"tokens": toks, "count": len(toks)})

    async def completions(req):
        j = await req.json()
        prompt = j.get("prompt")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        if not isinstance(prompt, str) or not prompt:
            return web.json_response({"error": {"message": "prompt must be a string",
                                                "type": "invalid_request_error"}}, status=400)
        ids = eng.tokenize(prompt)
        if len(ids) > eng.n_ctx:
            return web.json_response({"error": {
                "code": 400, "type": "exceed_context_size_error",
                "message": f"the request exceeds the available context size "
                           f"({len(ids)} > {eng.n_ctx} tokens)",
                "n_prompt_tokens": len(ids), "n_ctx": eng.n_ctx}}, status=400)
        stream = bool(j.get("stream", False))
        created = int(time.time())
        cid = f"cmpl-{eng.stats['requests']}"
        eng.stats["deferred"] += 1
        async with alock:
            eng.stats["deferred"] -= 1
            eng.stats["processing"] += 1
            try:
                tok, secs = await asyncio.to_thread(eng.forward, ids)
            finally:
                eng.stats["processing"] -= 1
        eng.stats["requests"] += 1
        eng.stats["prompt_tokens_total"] += len(ids)
        eng.stats["prompt_seconds_total"] += secs
        text = f" w{tok}"
        usage = {"prompt_tokens": len(ids), "completion_tokens": 1,
                 "total_tokens": len(ids) + 1}
        timings = {"prompt_n": len(ids), "prompt_ms": secs * 1000.0, "cache_n": 0,
                   "predicted_n": 1, "predicted_ms": 0.0}
        base = {"id": cid, "object": "text_completion", "created": created, "model": model_id}
        if not stream:
            return web.json_response({**base, "choices": [{"text": text, "index": 0,
                                      "finish_reason": "length"}],
                                      "usage": usage, "timings": timings})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(req)
        await resp.write(sse({**base, "choices": [{"text": text, "index": 0,
                                                   "finish_reason": None}]}))
        await resp.write(sse({**base, "choices": [{"text": "", "index": 0,
                                                   "finish_reason": "length"}],
                              "timings": timings}))
        await resp.write(sse({**base, "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", health)
    app.router.add_get("/props", props)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/completions", completions)
    return app


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--n-ctx", type=int, default=16384)
    p.add_argument("--model-id", default="llama-3.1-8b-shape-random-bf16")
    p.add_argument("--warmup", default="128,2048,8192",
                   help="comma-separated forward lengths run at start-up")
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = True
    eng = Engine(args)
    t0 = time.perf_counter()
    eng.warmup([int(x) for x in args.warmup.split(",") if x])
    log(f"warm-up done in {time.perf_counter() - t0:.1f} s; serving on "
        f"http://{args.host}:{args.port}")
    web.run_app(make_app(eng, args.model_id), host=args.host, port=args.port,
                print=None, access_log=None)


if __name__ == "__main__":
    main()
