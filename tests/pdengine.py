"""A fake disaggregated pair on real loopback sockets: a router in front of a prefill
worker and a decode worker, each a ``FakeServer`` (tests/fakeserver.py), for the fast
tests of a target that is a path.  A stand-in for a real pair, shaped on named sources;
nothing here is a measured figure of any real server.

The flow is vLLM's disaggregated serving with its proxy (vLLM
``examples/online_serving/disaggregated_serving`` proxies; the real pair prefilltui
runs is docs/disaggregated.md): the router sends the request to the prefill worker with
``max_tokens`` 1, takes the ``kv_transfer_params`` it answers with, and sends the
request with them to the decode worker, whose stream it passes back.  The decode worker
pulls the KV (as vLLM's NIXL connector does on the consumer side), is deferred while
it waits, then runs its first step.

Metric names are the engines' own (``prefilltui.model.path.names`` cites each): on
both workers ``vllm:time_to_first_token_seconds`` (from the request's arrival at that
worker), ``vllm:prompt_tokens_total``; on the decode worker ``vllm:nixl_xfer_time_seconds``,
``vllm:nixl_post_time_seconds``, ``vllm:nixl_bytes_transferred``,
``vllm:nixl_num_failed_transfers_total``, ``vllm:num_requests_waiting_by_reason`` and
``vllm:num_requests_kv_fetch_by_stage`` (a consumer's), and
``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``.

Knobs (``PdKnobs``, changed live): the prefill line (``prefill_a_s`` + ``prefill_b_s``
per token), the transfer (``bytes_per_token`` x ``bytes_factor`` over ``link_gb_s``,
plus ``transfer_delay_s``), ``failed_transfers`` (the next N transfers fail and the
decode worker recomputes the prompt, vLLM's ``kv_load_failure_policy="recompute"``),
``decode_defer_s``, ``decode_step_s``, ``router_delay_s``.  Every figure it publishes
is a measured ``perf_counter`` interval of its own sleeps, not the knob: a busy machine
lengthens both the client's TTFT and the hops alike.

Each worker serves one request at a time (a handler sleeps in its own server's loop),
which is what one probe in flight needs; it is not a model of batching.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass

import httpx

from tests.fakeserver import FakeServer, Reply, Request, sse_data

#: A catalog model (prefilltui's shapes): Llama 3.1 8B, 32 layers x 8 KV heads x 128
#: head dim x 2 x 2 bytes (bf16) = 131072 bytes of KV per token.
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2
_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class PdKnobs:
    prefill_a_s: float = 0.020
    prefill_b_s: float = 0.0002
    bytes_per_token: int = KV_BYTES_PER_TOKEN
    bytes_factor: float = 1.0
    link_gb_s: float = 20.0
    transfer_delay_s: float = 0.0
    failed_transfers: int = 0
    decode_defer_s: float = 0.0
    decode_step_s: float = 0.008
    router_delay_s: float = 0.002
    garbage_metrics: bool = False  # the decode worker's /metrics is an HTML page
    no_transfer_metrics: bool = False  # the decode worker publishes no nixl series


class Histogram:
    def __init__(self) -> None:
        self.sum = 0.0
        self.count = 0
        self.buckets = [0] * len(_BUCKETS)

    def observe(self, v: float) -> None:
        self.sum += v
        self.count += 1
        for i, b in enumerate(_BUCKETS):
            if v <= b:
                self.buckets[i] += 1

    def text(self, name: str, labels: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        for b, c in zip(_BUCKETS, self.buckets):
            out.append(f'{name}_bucket{{{labels},le="{b}"}} {c}')
        out += [f'{name}_bucket{{{labels},le="+Inf"}} {self.count}',
                f"{name}_sum{{{labels}}} {self.sum!r}", f"{name}_count{{{labels}}} {self.count}"]
        return out


def _prompt_tokens(body: dict) -> int:
    return max(1, len(str(body.get("prompt", "")).split()))


#: The gap between the token and the end of a stream (s): a stream whose end comes
#: with its token reads as a buffering gateway to prefilltui's probe.
END_GAP_S = 0.01


def _stream(rid: str, n: int) -> list[tuple[float, bytes]]:
    return [(0.0, sse_data({"id": rid, "choices": [{"index": 0, "text": " w",
                                                    "finish_reason": "length"}]})),
            (END_GAP_S, sse_data({"id": rid, "choices": [], "usage": {
                "prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}})
             + b"data: [DONE]\n\n")]


class Worker(FakeServer):
    """One worker (``role`` "prefill" or "decode") on a loopback port."""

    def __init__(self, role: str, knobs: PdKnobs, kv: dict, lock: threading.Lock) -> None:
        super().__init__({})
        self.role, self.knobs, self.kv, self.lock = role, knobs, kv, lock
        self.ttft = Histogram()
        self.xfer, self.post, self.nbytes = Histogram(), Histogram(), Histogram()
        self.prompt_tokens = 0
        self.external_tokens = 0
        self.failed = 0
        self.deferred = 0
        self._ids = itertools.count(1)
        entry = {"id": MODEL, "object": "model", "owned_by": "vllm", "max_model_len": 8192}
        self.script.update({
            "GET /v1/models": Reply.json({"object": "list", "data": [entry]}),
            "GET /version": Reply.json({"version": "0.32.0"}),
            "GET /metrics": self._metrics,
            "POST /tokenize": lambda req: Reply.json(
                {"count": _prompt_tokens(req.json or {}), "tokens": [], "max_model_len": 8192}),
            "POST /v1/completions": self._completion,
        })

    def _metrics(self, req: Request) -> Reply:
        k = self.knobs
        if self.role == "decode" and k.garbage_metrics:
            return Reply.text("<html><body>502 Bad Gateway</body></html>", ctype="text/html")
        lab = f'model_name="{MODEL}",engine="0"'
        out = self.ttft.text("vllm:time_to_first_token_seconds", lab)
        out += ["# TYPE vllm:prompt_tokens_total counter",
                f"vllm:prompt_tokens_total{{{lab}}} {self.prompt_tokens}"]
        if self.role == "decode":
            out += ["# TYPE vllm:prompt_tokens_by_source_total counter",
                    f'vllm:prompt_tokens_by_source_total{{{lab},source="external_kv_transfer"}} '
                    f"{self.external_tokens}",
                    "# TYPE vllm:num_requests_waiting_by_reason gauge",
                    f'vllm:num_requests_waiting_by_reason{{{lab},reason="capacity"}} 0',
                    f'vllm:num_requests_waiting_by_reason{{{lab},reason="deferred"}} {self.deferred}',
                    "# TYPE vllm:num_requests_kv_fetch_by_stage gauge",
                    f'vllm:num_requests_kv_fetch_by_stage{{{lab},stage="in_progress"}} 0']
            if not k.no_transfer_metrics:
                out += self.xfer.text("vllm:nixl_xfer_time_seconds", lab)
                out += self.post.text("vllm:nixl_post_time_seconds", lab)
                out += self.nbytes.text("vllm:nixl_bytes_transferred", lab)
                out += ["# TYPE vllm:nixl_num_failed_transfers counter",
                        f"vllm:nixl_num_failed_transfers_total{{{lab}}} {self.failed}"]
        return Reply.text("\n".join(out) + "\n")

    def _completion(self, req: Request) -> Reply:
        k, body = self.knobs, req.json or {}
        n = _prompt_tokens(body)
        rid = f"{self.role}-{next(self._ids)}"
        t0 = req.t_received
        if self.role == "prefill":
            time.sleep(k.prefill_a_s + k.prefill_b_s * n)
            with self.lock:
                self.kv[rid] = n
            params = {"remote_request_id": rid, "do_remote_decode": True}
        else:
            params = body.get("kv_transfer_params") or {}
            with self.lock:
                have = self.kv.pop(params.get("remote_request_id"), None)
            if have is not None:  # pull the KV
                x0 = time.perf_counter()
                moved = int(have * k.bytes_per_token * k.bytes_factor)
                time.sleep(k.transfer_delay_s + moved / (k.link_gb_s * 1e9))
                xt = time.perf_counter() - x0
                if k.failed_transfers > 0:
                    k.failed_transfers -= 1
                    self.failed += 1
                    time.sleep(k.prefill_a_s + k.prefill_b_s * n)  # recompute the prompt here
                else:
                    self.xfer.observe(xt)
                    self.post.observe(0.0)
                    self.nbytes.observe(moved)
                    self.external_tokens += have
            if k.decode_defer_s > 0:
                self.deferred += 1
                time.sleep(k.decode_defer_s)
                self.deferred -= 1
            time.sleep(k.decode_step_s)
        self.ttft.observe(time.perf_counter() - t0)
        self.prompt_tokens += n
        if body.get("stream"):
            return Reply.sse(_stream(rid, n))
        return Reply.json({"id": rid, "choices": [{"index": 0, "text": " w",
                           "finish_reason": "length"}], "kv_transfer_params": params,
                           "usage": {"prompt_tokens": n, "completion_tokens": 1,
                                     "total_tokens": n + 1}})


class Router(FakeServer):
    """The proxy in front: prefill (max_tokens 1), then decode with its KV params."""

    def __init__(self, knobs: PdKnobs, prefill: Worker, decode: Worker) -> None:
        super().__init__({})
        self.knobs, self.p, self.d = knobs, prefill, decode
        self._http = httpx.Client(timeout=30.0, trust_env=False)
        entry = {"id": MODEL, "object": "model", "owned_by": "vllm", "max_model_len": 8192}
        self.script.update({
            "GET /v1/models": Reply.json({"object": "list", "data": [entry]}),
            "POST /tokenize": lambda req: Reply.json(
                {"count": _prompt_tokens(req.json or {}), "tokens": [], "max_model_len": 8192}),
            "POST /v1/completions": self._completion,
        })

    def _completion(self, req: Request) -> Reply:
        body = req.json or {}
        time.sleep(self.knobs.router_delay_s)
        try:
            pr = self._http.post(self.p.base_url + "/v1/completions",
                                 json={**body, "max_tokens": 1, "stream": False})
            params = pr.json().get("kv_transfer_params")
            chunks: list[tuple[float, bytes]] = []
            with self._http.stream("POST", self.d.base_url + "/v1/completions",
                                   json={**body, "kv_transfer_params": params}) as dr:
                status = dr.status_code
                for raw in dr.iter_raw():
                    chunks.append((time.perf_counter(), raw))
        except (httpx.HTTPError, ValueError) as e:
            return Reply.json({"error": {"message": f"router: {type(e).__name__}"}}, status=502)
        data = b"".join(c for _, c in chunks)
        if status != 200 or not body.get("stream"):
            return Reply(status, {"Content-Type": "application/json"}, data)
        # the decode worker's stream as it came (this handler blocks until its end, so
        # the chunks are replayed at their offsets from the first: the token first)
        first = chunks[0][0] if chunks else 0.0
        return Reply.sse([(t - first, c) for t, c in chunks])


class PdPair:
    """Context manager: the three servers started, ``router`` / ``prefill`` / ``decode``
    URLs, ``knobs`` shared (change them live)."""

    def __init__(self, knobs: PdKnobs | None = None) -> None:
        self.knobs = knobs or PdKnobs()
        kv: dict = {}
        lock = threading.Lock()
        self.prefill_server = Worker("prefill", self.knobs, kv, lock)
        self.decode_server = Worker("decode", self.knobs, kv, lock)
        self.router_server = Router(self.knobs, self.prefill_server, self.decode_server)

    def __enter__(self) -> "PdPair":
        self.prefill_server.__enter__()
        self.decode_server.__enter__()
        self.router_server.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for s in (self.router_server, self.decode_server, self.prefill_server):
            s.__exit__(*exc)
        self.router_server._http.close()

    @property
    def router(self) -> str:
        return self.router_server.base_url

    @property
    def prefill(self) -> str:
        return self.prefill_server.base_url

    @property
    def decode(self) -> str:
        return self.decode_server.base_url


if __name__ == "__main__":  # a quick look: python -m tests.pdengine
    with PdPair() as pair:
        r = httpx.post(pair.router + "/v1/completions",
                       json={"prompt": "w " * 256, "max_tokens": 1, "stream": True})
        print(r.status_code, r.text[:120])
        print(json.dumps({"router": pair.router, "prefill": pair.prefill,
                          "decode": pair.decode}))
        print(httpx.get(pair.decode + "/metrics").text[-400:])
