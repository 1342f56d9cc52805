"""A llama.cpp-like fake target for the fleet tests: TTFT = a + b x prompt words,
reported as llama-server reports it (usage, timings), switchable down and back."""

from __future__ import annotations

from tests.fakeserver import Reply, llama_routes, sse_data, sse_done


class LinearLlama:
    """A /v1/completions handler: sleeps ``a + b * words`` before the token; ``down``
    drops every request (a server that went away mid-flight)."""

    def __init__(self, a: float = 0.005, b: float = 2e-5) -> None:
        self.a, self.b = a, b
        self.down = False
        self.calls = 0

    def __call__(self, req) -> Reply:
        self.calls += 1
        if self.down:
            return Reply(drop=True)
        words = len(str(req.json.get("prompt", "")).split())
        t = self.a + self.b * words
        timings = {"cache_n": 0, "prompt_n": words, "prompt_ms": (t - 0.001) * 1e3}
        return Reply.sse([(t, sse_data({"choices": [{"index": 0, "text": "x",
                                                     "finish_reason": None}]})),
                          (t, sse_data({"choices": [], "timings": timings,
                                        "usage": {"prompt_tokens": words,
                                                  "completion_tokens": 1}})),
                          (t, sse_done())])


def linear_target(fake_server, a: float = 0.005, b: float = 2e-5):
    """(server, handler) of a LinearLlama on a real loopback socket."""
    h = LinearLlama(a, b)
    return fake_server({**llama_routes(n_ctx=8192), "POST /v1/completions": h}), h
