"""Server discovery: what kind of OpenAI-compatible server is this, which model,
what context limit and model shape, and where it counts tokens.

Kind detection, from the endpoints each server exposes (first match wins):
  llama.cpp  ``GET /props`` answers with ``default_generation_settings`` / ``build_info``,
             or /metrics names start with ``llamacpp:``
  vLLM       ``GET /version`` answers and /metrics names start with ``vllm:``
  SGLang     ``GET /model_info`` or its deprecated alias ``/get_model_info`` answers
             (``model_path``), or ``sglang:``/``sglang_`` metrics
  TGI        ``GET /info`` answers with ``model_id`` / ``max_input_tokens``
  Ollama     ``GET /api/version`` answers with ``version``
  otherwise  "openai" (generic)

Token counting is found by trying, on every server whatever its kind, the
tokenize endpoints in ``TOKENIZE_ENDPOINTS`` (a generic OpenAI-compatible server
may be vLLM behind a gateway); the first that counts a short probe text wins.
Context limit: ``max_model_len`` (vLLM), ``context_length``, ``max_input_tokens``
(a LiteLLM proxy's ``/v1/models`` entry, TGI ``/info``), llama.cpp ``n_ctx``.
Which listed model is probed (one that can generate text) is ``server_models``.
Metric names count in either spelling (``vllm:``/``vllm_``).  The engine's own setup
(SGLang ``/server_info``, TGI ``/info``) is read by ``server_facts``.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import httpx

from prefilltui.measure import bounded
from prefilltui.measure.server_facts import SGLANG_SERVER_INFO, sglang_facts, tgi_facts
from prefilltui.measure.server_models import pick_model
from prefilltui.model.redact import display_url, hide_userinfo
from prefilltui.model.types import JsonObject, ServerInfo


#: Bytes of ``/metrics`` discovery reads to recognise the server by its metric names
#: (the names come first in every exposition; the scrapes read up to
#: ``metrics_hook.MAX_METRICS_BYTES``).
METRICS_SNIFF_BYTES = 256 * 1024


class ServerUnreachable(Exception):
    """The server did not answer at all (connection refused, DNS, TLS, timeout)."""


def split_base_url(url: str) -> tuple[str, str]:
    """``(root, v1)`` for a base URL given with or without a trailing ``/v1``.

    >>> split_base_url("http://h:8080/v1/")
    ('http://h:8080', 'http://h:8080/v1')
    """
    u = url.strip().rstrip("/")
    if "://" not in u:
        u = "http://" + u
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    return u, u + "/v1"


async def _get(client: httpx.AsyncClient, url: str, timeout: float,
               max_bytes: int = bounded.MAX_META_BYTES) -> bounded.Body | None:
    """GET ``url``: at most ``max_bytes`` decoded bytes, the whole exchange within
    ``timeout`` seconds (``bounded.fetch``); None when it fails or times out."""
    try:
        return await bounded.fetch(client, "GET", url, max_bytes=max_bytes, deadline_s=timeout)
    except (httpx.HTTPError, TimeoutError):
        return None


def _json(r: bounded.Body | None) -> Any:
    """The JSON of a whole 200 answer, else None (a body over its cap is not parsed)."""
    return r.json() if r is not None else None


def _int(v: Any) -> int | None:
    """A positive int from a metadata value, else None (never raises: strings,
    infinities, NaN and bools from a misbehaving server all give None)."""
    if isinstance(v, bool):
        return None
    try:
        return int(v) if v is not None and int(v) > 0 else None
    except (TypeError, ValueError, OverflowError):
        return None


#: Longest model id used (characters): Hugging Face ids are < 100, llama.cpp's GGUF
#: paths a few hundred.  A longer one (a hostile or broken server: a 3 MB "id") would
#: be copied into every request, run-file line, screen and exporter series.
MAX_MODEL_ID_CHARS = 1024


def _str(v: Any) -> str | None:
    """A model id: a non-empty string of at most ``MAX_MODEL_ID_CHARS`` (or an integer
    id as text), else None."""
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return v if isinstance(v, str) and 0 < len(v) <= MAX_MODEL_ID_CHARS else None


async def discover(client: httpx.AsyncClient, base_url: str, *, model: str | None = None,
                   timeout: float = 10.0) -> ServerInfo:
    """Probe the server's metadata endpoints concurrently and fill a ServerInfo.

    Raises:
        ServerUnreachable: when ``/v1/models`` (and the root) cannot be reached at all.
    """
    root, v1 = split_base_url(base_url)
    info = ServerInfo(base_url=root, model=model)
    stamps: dict[str, float] = {}  # connected ("ready") or sent on a pooled connection

    models_r: bounded.Body | None
    try:
        models_r = await bounded.fetch(client, "GET", v1 + "/models",
                                       max_bytes=bounded.MAX_MODELS_BYTES, deadline_s=timeout,
                                       extensions={"trace": bounded.tracer(stamps)})
    except httpx.HTTPError as e:
        raise ServerUnreachable(f"cannot reach {display_url(root)}: {describe_exc(e)}"
                                ) from None
    except TimeoutError:
        # a server too busy to list its models (the moment someone asks why TTFT is
        # high) took the connection: with --model the probes go on without the list
        connected = "ready" in stamps or "send" in stamps
        if not (connected and model):
            raise ServerUnreachable(
                f"cannot reach {display_url(root)}: no complete answer from /v1/models "
                f"within {timeout:g} s" + ("; the server took the connection: pass --model "
                                          "NAME to probe it without its model list"
                                          if connected else "")) from None
        models_r = None
        info.notes.append(f"/v1/models gave no complete answer within {timeout:g} s (a busy "
                          "server?): probing --model's model without the server's list")
    names = ("/props", "/version", "/metrics", "/info", "/api/version", "/model_info",
             "/get_model_info")
    rs = await asyncio.gather(*(_get(client, root + n, timeout,
                                     METRICS_SNIFF_BYTES if n == "/metrics" else
                                     bounded.MAX_META_BYTES) for n in names))
    props, version, metrics, tgi, ollama, sgl_new, sgl_old = rs
    sgl = sgl_new if isinstance(_json(sgl_new), dict) else sgl_old

    models = _json(models_r)
    entry: dict = {}
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        ids = [m for m in models["data"] if isinstance(m, dict)]
        long = [m for m in ids if isinstance(m.get("id"), str)
                and len(m["id"]) > MAX_MODEL_ID_CHARS]
        if long:
            ids = [m for m in ids if m not in long]
            info.notes.append(f"{len(long)} model id(s) in /v1/models over "
                              f"{MAX_MODEL_ID_CHARS:,} characters skipped (not a model id): "
                              "pass --model NAME to name the model")
        info.models = [i for i in (_str(m.get("id")) for m in ids) if i]
        if model:
            entry = next((m for m in ids if m.get("id") == model), {})
        elif ids:
            entry = pick_model(ids, info)
            info.model = _str(entry.get("id"))
    elif models_r is None:
        pass  # said above
    elif models_r.truncated:
        info.notes.append(f"/v1/models answered over {bounded.MAX_MODELS_BYTES // 2**20} MiB: "
                          "not read (give --model to name the model)")
    elif models_r.status != 200:
        info.notes.append(f"/v1/models answered HTTP {models_r.status}")

    metric_text = metrics.text() if metrics is not None and metrics.status == 200 else ""
    if metric_text:
        info.metrics_url = root + "/metrics"
    pj, tj, oj, sj = _json(props), _json(tgi), _json(ollama), _json(sgl)
    if isinstance(pj, dict) and ("default_generation_settings" in pj or "build_info" in pj
                                 or "total_slots" in pj) or _publishes(metric_text, "llamacpp"):
        info.kind = "llama.cpp"
    elif _publishes(metric_text, "vllm") or (_json(version) is not None
                                             and "max_model_len" in entry):
        info.kind = "vllm"
    elif isinstance(sj, dict) and "model_path" in sj or _publishes(metric_text, "sglang"):
        info.kind = "sglang"
    elif isinstance(tj, dict) and ("model_id" in tj or "max_input_tokens" in tj):
        info.kind = "tgi"
    elif isinstance(oj, dict) and "version" in oj:
        info.kind = "ollama"

    # context limit and model shape
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    ctx = (_int(entry.get("max_model_len")) or _int(entry.get("context_length"))
           or _int(entry.get("max_input_tokens")))
    if info.kind == "llama.cpp" and isinstance(pj, dict):
        dgs = pj.get("default_generation_settings")
        dgs = dgs if isinstance(dgs, dict) else {}
        ctx = _int(dgs.get("n_ctx")) or _int(pj.get("n_ctx")) or ctx
        info.n_batch = _int(pj.get("n_batch")) or _int(dgs.get("n_batch"))
        info.n_ubatch = _int(pj.get("n_ubatch")) or _int(dgs.get("n_ubatch"))
    if info.kind == "tgi" and isinstance(tj, dict):
        ctx = _int(tj.get("max_input_tokens")) or _int(tj.get("max_input_length")) or ctx
        info.model = info.model or _str(tj.get("model_id"))
        info.facts = tgi_facts(tj)
    if info.kind == "sglang" and isinstance(sj, dict):
        info.model = info.model or _str(sj.get("model_path"))
    if ctx is None and meta:
        ctx = _int(meta.get("n_ctx"))
    if ctx is None and meta:
        ctx = _int(meta.get("n_ctx_train"))
        if ctx:
            info.notes.append("context limit from n_ctx_train (server's own n_ctx unknown)")
    info.context_tokens = ctx
    if meta:
        try:
            n_params = float(meta["n_params"]) if meta.get("n_params") else None
            info.params = n_params if n_params is not None and math.isfinite(n_params) \
                and n_params > 0 else None
        except (TypeError, ValueError, OverflowError):
            pass
        info.hidden = _int(meta.get("n_embd"))
        info.layers = _int(meta.get("n_layer"))
    if info.model is None and model is None:
        info.notes.append("no model id from /v1/models; requests send no model")
    info.config_path = local_config(entry.get("root"))
    if info.kind == "vllm":
        info.max_num_batched_tokens = vllm_batch_budget(
            _json(await _get(client, root + VLLM_SERVER_INFO, timeout)))
    if info.kind == "sglang":
        for path in SGLANG_SERVER_INFO:  # the deprecated alias only when the new one fails
            j = _json(await _get(client, root + path, timeout))
            if isinstance(j, dict):
                info.chunked_prefill_size, info.facts = sglang_facts(j)
                break
    await find_tokenize(client, info, timeout)
    return info


def _publishes(metric_text: str, engine: str) -> bool:
    """Whether an exposition has a series (or its HELP/TYPE line) named
    ``ENGINE:...`` or ``ENGINE_...`` (both spellings, ``model.metrics.names``)."""
    return bool(metric_text) and re.search(
        rf"^(?:# (?:HELP|TYPE) )?{re.escape(engine)}[:_]", metric_text, re.M) is not None


#: vLLM's configuration as JSON; served only with VLLM_SERVER_DEV_MODE=1 (404 otherwise).
VLLM_SERVER_INFO = "/server_info?config_format=json"


def vllm_batch_budget(j: Any) -> int | None:
    """``vllm_config.scheduler_config.max_num_batched_tokens`` from vLLM's
    ``/server_info?config_format=json`` (the token budget of one engine step: the
    prefill chunk), else None."""
    if not isinstance(j, dict):
        return None
    vc = j.get("vllm_config")
    sc = vc.get("scheduler_config") if isinstance(vc, dict) else None
    return _int(sc.get("max_num_batched_tokens")) if isinstance(sc, dict) else None


def local_config(root: Any) -> str | None:
    """The ``config.json`` under a ``/v1/models`` entry's ``root`` when that names a
    directory on this machine (vLLM sets ``root`` to the model path it loaded), else
    None.  Never raises."""
    import os

    if not isinstance(root, str) or not root.startswith("/") or len(root) > 4096:
        return None
    path = os.path.join(root, "config.json")
    try:
        return path if os.path.isfile(path) else None
    except (OSError, ValueError):
        return None


#: Tokenize endpoints: (path under the root, request style).  Styles: "llama.cpp"
#: ``{"content", "add_special"}`` -> ``{"tokens": [...]}``; "openai" (vLLM, SGLang)
#: ``{"model", "prompt"}`` -> ``{"count", "tokens", "max_model_len"}``; "tgi"
#: ``{"inputs"}`` -> ``[{"id", "text", ...}, ...]``.  The discovered kind's own
#: endpoint is tried first.
TOKENIZE_ENDPOINTS = (("/tokenize", "llama.cpp"), ("/tokenize", "openai"),
                      ("/v1/tokenize", "openai"), ("/tokenize", "tgi"))
_KIND_STYLE = {"llama.cpp": "llama.cpp", "vllm": "openai", "sglang": "openai", "tgi": "tgi"}
#: The text tokenize endpoints are tried with, and the counts accepted for it
#: (9 common words, 43 characters: a BPE tokenizer gives 9-12 tokens, a byte-level
#: one up to ~45, plus a few special tokens; anything else is not a token count).
_TOKENIZE_TEST = "The quick brown fox jumps over the lazy dog"
_TOKENIZE_PLAUSIBLE = range(5, 64)


async def find_tokenize(client: httpx.AsyncClient, info: ServerInfo, timeout: float = 10.0) -> None:
    """Set ``info.tokenize_url``/``tokenize_style``/``has_tokenize`` to the first
    endpoint of ``TOKENIZE_ENDPOINTS`` that counts a test text plausibly (all are
    tried at once, on any kind of server); a vLLM-style answer's ``max_model_len``
    fills an unknown context limit.  Leaves them unset when none answers; never
    raises."""
    first = _KIND_STYLE.get(info.kind)
    order = sorted(TOKENIZE_ENDPOINTS, key=lambda e: e[1] != first)

    async def attempt(path: str, style: str) -> Any:
        try:
            r = await bounded.fetch(client, "POST", info.base_url + path, deadline_s=timeout,
                                    max_bytes=bounded.MAX_TOKENIZE_TEST_BYTES,
                                    json=_tokenize_body(style, info.model, _TOKENIZE_TEST))
        except (httpx.HTTPError, TimeoutError):
            return None
        return r.json()

    answers = await asyncio.gather(*(attempt(path, style) for path, style in order))
    for (path, style), j in zip(order, answers):
        n = _tokenize_count(j)
        if n is not None and n in _TOKENIZE_PLAUSIBLE:
            info.tokenize_url, info.tokenize_style = info.base_url + path, style
            info.has_tokenize = True
            if info.context_tokens is None and isinstance(j, dict):
                info.context_tokens = _int(j.get("max_model_len"))
            return


def _tokenize_body(style: str, model: str | None, text: str) -> JsonObject:
    if style == "llama.cpp":
        return {"content": text, "add_special": True}
    if style == "tgi":
        return {"inputs": text}
    body: JsonObject = {"prompt": text}
    if model:
        body["model"] = model
    return body


def _tokenize_count(j: Any) -> int | None:
    """The token count in a tokenize answer of any style, else None."""
    if isinstance(j, list):
        return len(j) if all(isinstance(t, (dict, int)) for t in j) else None
    if not isinstance(j, dict):
        return None
    if "count" in j:
        return _int(j.get("count"))
    toks = j.get("tokens")
    return len(toks) if isinstance(toks, list) else None


async def count_tokens(client: httpx.AsyncClient, info: ServerInfo, text: str,
                       timeout: float = 30.0) -> int | None:
    """Tokens the server counts for ``text`` as a completions prompt, via the
    tokenize endpoint discovery found (``find_tokenize``); None when there is
    none, it fails, or its answer is not a plausible count (more tokens than
    bytes plus ``_MAX_SPECIAL_TOKENS``)."""
    if not info.has_tokenize:
        return None
    style = info.tokenize_style or _KIND_STYLE.get(info.kind, "openai")
    url = info.tokenize_url or info.base_url + "/tokenize"
    try:
        r = await bounded.fetch(client, "POST", url, json=_tokenize_body(style, info.model, text),
                                max_bytes=bounded.MAX_TOKENIZE_BYTES, deadline_s=timeout)
    except (httpx.HTTPError, TimeoutError):
        return None
    n = _tokenize_count(r.json())
    # a token covers at least one byte (plus a few special tokens): more is not a count
    return n if n is not None and n <= len(text.encode()) + _MAX_SPECIAL_TOKENS else None


#: Special tokens a tokenize endpoint may add to a text (BOS, EOS, template markers).
_MAX_SPECIAL_TOKENS = 16


def describe_exc(e: BaseException) -> str:
    """A short one-line description of a network exception (never includes headers)."""
    name = type(e).__name__
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{name}: {msg}" if msg else name


def url_problem(url: object) -> str | None:
    """Why ``url`` cannot be a server base URL (one line), or None when it can:
    http or https, a host, a port (if given) from 1 to 65535, no spaces or control
    characters.  Used to refuse a bad URL up front, as a usage error."""
    import urllib.parse

    if not isinstance(url, str) or not url.strip():
        return "an empty URL"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "spaces or control characters in the URL"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # ValueError: not a number, or out of 0-65535
    except ValueError as e:  # urllib quotes the netloc: never its user:password
        return f"not a valid URL ({hide_userinfo(str(e))})"
    if parts.scheme not in ("http", "https"):
        return "it must start with http:// or https://"
    if not parts.hostname:
        return "no host in the URL"
    if port is not None and not 1 <= port <= 65535:
        return f"port {port} is out of range (1-65535)"
    return None
