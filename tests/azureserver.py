"""A fake Azure OpenAI data plane for one deployment, on a real loopback socket
(``FakeServer``'s HTTP/1.1 handling), answering as a real deployment does::

    with AzureServer(deployment="gpt-4o-mini", api_version="2024-10-21", key=KEY) as srv:
        srv.deployment_url   # http://127.0.0.1:PORT/openai/deployments/gpt-4o-mini?api-version=...

- without the right ``api-key`` header: 401 ``{"error": {"code": "401", "message":
  "Access denied due to invalid subscription key or wrong API endpoint. ..."}}``
  (an ``Authorization: Bearer`` key is not one);
- only ``POST /openai/deployments/NAME/chat/completions?api-version=V`` serves;
  any other path, method or api-version: 404 ``{"error": {"code": "404", "message":
  "Resource not found"}}``;
- a body field outside ``KNOWN_FIELDS``: 400 "Unrecognized request argument supplied: X";
- the stream: ``{"choices": [], "prompt_filter_results": [...]}`` at t = 0, then at
  ``token_at`` (0.20 s) the role chunk with "Hi", further tokens 10 ms apart up to
  ``max_tokens``, the ``finish_reason: length`` chunk, the usage chunk
  (prompt tokens = the words of the message + ``TEMPLATE_TOKENS``) and ``[DONE]``.

``srv.requests`` keeps every request (path, query, headers) for the test to read.
"""

from __future__ import annotations

from tests.fakeserver import FakeServer, Reply, Request, sse_data, sse_done

#: Chat-completions body fields the deployment accepts (api-version 2024-10-21).
KNOWN_FIELDS = frozenset({
    "messages", "model", "max_tokens", "max_completion_tokens", "stream", "stream_options",
    "temperature", "top_p", "n", "stop", "presence_penalty", "frequency_penalty",
    "logit_bias", "user", "seed", "logprobs", "top_logprobs", "response_format", "tools",
    "tool_choice", "parallel_tool_calls", "data_sources"})
#: Prompt tokens the chat template adds to the message's words.
TEMPLATE_TOKENS = 7
ACCESS_DENIED = {"error": {"code": "401", "message": (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
    "provide a valid key for an active subscription and use a correct regional API "
    "endpoint for your resource.")}}
NOT_FOUND = {"error": {"code": "404", "message": "Resource not found"}}
_SAFE = {k: {"filtered": False, "severity": "safe"}
         for k in ("hate", "self_harm", "sexual", "violence")}


def unrecognized(field: str) -> dict:
    return {"error": {"message": f"Unrecognized request argument supplied: {field}",
                      "type": "invalid_request_error", "param": None, "code": None}}


class AzureServer(FakeServer):
    """One Azure OpenAI deployment (see the module docstring)."""

    def __init__(self, deployment: str = "gpt-4o-mini", api_version: str = "2024-10-21",
                 key: str = "azure-key-0123456789abcdef", *, token_at: float = 0.20,
                 known: frozenset[str] = KNOWN_FIELDS) -> None:
        super().__init__()
        self.deployment, self.api_version, self.key = deployment, api_version, key
        self.token_at = token_at
        self.known = known

    @property
    def deployment_url(self) -> str:
        return (f"{self.base_url}/openai/deployments/{self.deployment}"
                f"?api-version={self.api_version}")

    def _pick(self, req: Request) -> Reply:
        if req.headers.get("api-key") != self.key:
            return Reply.json(ACCESS_DENIED, status=401)
        if (req.method != "POST" or req.path != f"/openai/deployments/{self.deployment}"
                "/chat/completions" or f"api-version={self.api_version}" not in
                req.query.split("&")):
            return Reply.json(NOT_FOUND, status=404)
        body = req.json
        for field in body:
            if field not in self.known:
                return Reply.json(unrecognized(field), status=400)
        words = len(" ".join(m.get("content", "") for m in body["messages"]).split())
        cap = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        return Reply.sse(self.stream(words + TEMPLATE_TOKENS, int(cap),
                                     bool((body.get("stream_options") or {}).get("include_usage"))))

    def stream(self, prompt_tokens: int, cap: int, usage: bool) -> list[tuple[float, bytes]]:
        """The chunks of one answer: (seconds after the request, bytes)."""
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1733000000,
                "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_fake"}
        filt = {"choices": [], "created": 0, "id": "", "model": "", "object": "",
                "prompt_filter_results": [{"prompt_index": 0,
                                           "content_filter_results": _SAFE}]}
        out = [(0.0, sse_data(filt))]
        t = self.token_at
        for i in range(cap):
            delta = {"role": "assistant", "content": "Hi"} if i == 0 else {"content": " hi"}
            out.append((t + 0.01 * i, sse_data({**base, "choices": [
                {"index": 0, "delta": delta, "finish_reason": None, "logprobs": None,
                 "content_filter_results": {}}]})))
        end = t + 0.01 * (cap - 1)
        out.append((end, sse_data({**base, "choices": [
            {"index": 0, "delta": {}, "finish_reason": "length", "logprobs": None,
             "content_filter_results": _SAFE}]})))
        if usage:
            out.append((end, sse_data({**base, "choices": [], "usage": {
                "prompt_tokens": prompt_tokens, "completion_tokens": cap,
                "total_tokens": prompt_tokens + cap}})))
        out.append((end, sse_done()))
        return out
