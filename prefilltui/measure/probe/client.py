"""One-token streaming probes: exact, cache-proof TTFT.

A probe is one ``stream: true`` request with ``max_tokens: 1`` to
``/v1/completions`` (or ``/v1/chat/completions``).  Clock: ``time.perf_counter``
from just before the request is handed to httpx to the moment the read that
completes the first SSE event carrying a generated token returns (see
``prefilltui.measure.sse``).  If a new TCP/TLS connection had to be opened for the
request, its set-up time is recorded as ``connect_s`` and taken out of TTFB/TTFT
(the clock starts when the connection is ready).  ``probe()`` never raises for
server or network failures: it returns ``ok=False`` with an ``error_kind``.

A probe's data is complete at ``data: [DONE]``, once the token and its
``finish_reason`` have come, at a second token (the server ignored ``max_tokens: 1``:
closed at once), or ``TOKEN_TAIL_S`` after the token; what the server does after that
(keep-alive comments, a close without the chunked terminator) is read for at most
``POST_COMPLETION_GRACE_S``, never fails the probe, and is noted in ``notes``.  What
gateways and proxies do (another content type, 307/308 redirects, compression,
buffering, hidden tokens, HTML sign-in pages, the Responses API, proxies) is
recognised here with ``gateway.py``, ``proxy.py`` and ``kinds.py``
(docs/measurement.md, "Gateways, proxies and unusual servers").

``ProbeClient`` is composed of parts it builds in its constructor, each an object
with its own state (httpx's ``Client`` and its transport and auth are the model):

  part              class (module)                 holds
  ``urls``          ``ServerUrls`` (urls)          where requests go, the key's header
  ``sender``        ``Sender`` (sending)           the httpx pool, credentials, request ids
  ``body``          ``RequestBody`` (body)         the model, the user's fields, rejected ones
  ``reader``        ``StreamReader`` (stream)      (none) the read loop and its timing rules
  ``errors``        ``ErrorReader`` (errors)       the last error body
  ``side``          ``SideRequests`` (side)        the discovered server, prompt lengths
  ``buffering``     ``BufferCheck`` (kinds)        whether the path buffers
  ``responses``     ``ResponsesCheck`` (kinds)     whether the server has /v1/responses
  ``models``        ``ModelChoice`` (kinds)        the models tried
  ``notices``       a dict shared by all           what the session says once

``probe()`` is the life of one probe through them, top to bottom.  Server counts
and times are vetted in ``values``; SSE framing (``sse.py``), prompts
(``model/prompts.py``) and discovery (``server.py``) are apart.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import httpx

from prefilltui.model import defaults
from prefilltui.measure import server as _server
from prefilltui.measure.probe.body import API_PATHS, Rejections, RequestBody
from prefilltui.measure.probe.errors import ErrorReader
from prefilltui.measure.probe.kinds import (BufferCheck, ModelChoice, ResponsesCheck,
                                            model_hint, note)
from prefilltui.measure.probe.sending import Sender
from prefilltui.measure.probe.side import SideRequests
from prefilltui.measure.probe.stream import StreamReader
from prefilltui.measure.probe.urls import server_urls
from prefilltui.measure.probe.values import token_ceiling, vet
from prefilltui.measure.proxy import ProxyChoice, choose_proxy
from prefilltui.model.prompts import LengthModel, PromptBuilder
from prefilltui.model.redact import split_credentials
from prefilltui.model.probe_notes import RejectedField, Resend
from prefilltui.model.types import JsonObject, ProbeResult, ServerInfo


class ProbeClient:
    """An async client that discovers a server and fires one-token probes.

    ``async with ProbeClient(url) as c: info = await c.discover(); r = await c.probe(512)``.
    The API key is sent as ``Authorization: Bearer`` (to an Azure OpenAI URL as the
    ``api-key`` header, ``urls``); it is never put in results, error messages, logs or
    ``repr``.

    Raises (constructor): ValueError for an unknown ``api``, a URL that does not parse
    or an API key that cannot be sent; ``proxy.ProxyError`` (a ValueError) for an
    unusable ``--proxy`` or proxy variable.
    """

    def __init__(self, base_url: str, *, api: str = "completions", model: str | None = None,
                 api_key: str | None = None, timeout: float = defaults.TIMEOUT_S,
                 verify: bool = True,
                 extra_body: dict | None = None, seed: int | None = None,
                 proxy: str | None = None, max_connections: int = 4,
                 rejections: Rejections | None = None) -> None:
        if api not in API_PATHS:
            raise ValueError(f"api must be one of {', '.join(API_PATHS)}, not {api!r}")
        #: Things about this session a reader must know, once each, in order:
        #: short label (status line) -> sentence (summary).  E.g. a field the
        #: server rejected, prompt lengths that are estimates.  Every part writes here.
        self.notices: dict[str, str] = {}
        # Credentials leave the URL here, once: every URL derived from it (root, v1,
        # ServerInfo.base_url, tokenize, /metrics) holds none; the sender sends them.
        url = base_url.strip()
        creds = split_credentials(url if "://" in url else "http://" + url)
        #: where requests go (``urls.server_urls``: an Azure deployment's API is the
        #: deployment itself, its key an api-key header, its model the deployment)
        self.urls = server_urls(creds.url, creds.params, model)
        self.root, self.v1 = self.urls.root, self.urls.v1
        if self.urls.deployment is not None:
            api = "chat" if api == "completions" else api  # a deployment serves chat
            model = model or self.urls.deployment
        self.notices.update(self.urls.notices)
        #: the proxy requests go through (``measure.proxy``); ProxyError (a
        #: ValueError) for an unusable --proxy or proxy variable
        self.proxy: ProxyChoice = choose_proxy(self.root, proxy)
        self.timeout = float(timeout)
        self.sender = Sender(self.root, creds, (api_key or "").strip() or None,
                             proxy=self.proxy, verify=verify, timeout=self.timeout,
                             max_connections=max_connections, notices=self.notices,
                             params=self.urls.params, key_header=self.urls.key_header)
        self.secrets = self.sender.secrets
        #: ``rejections``: the fields the server rejected, shared by the session's
        #: clients (``body.Rejections``; None: this client's own)
        self.body = RequestBody(api, model, dict(extra_body or {}), self.notices, rejections)
        #: the URL probes are POSTed to (``API_PATHS`` of the API flavour)
        self.endpoint = self.v1 + API_PATHS[api]
        self.responses = ResponsesCheck(self.sender.http, self.v1 + "/responses", api,
                                        self.timeout, self.notices)
        self.errors = ErrorReader(api, self.secrets, self.responses)
        self.reader = StreamReader(api, self.sender, self.errors, self.secrets)
        self.side = SideRequests(self.sender.http, self.urls, api=api,
                                 timeout=self.timeout, proxy=self.proxy,
                                 secrets=self.secrets, notices=self.notices, seed=seed,
                                 probe=self.probe)
        self.buffering = BufferCheck(self.sender, self.body, self.endpoint, self.timeout)
        self.models = ModelChoice(self.body, self.notices)

    # -- what callers read and set (each held by the part that owns it) --

    @property
    def api(self) -> str:
        """The API flavour probed: "completions", "chat" or "responses"."""
        return self.body.api

    @property
    def model(self) -> str | None:
        """The model requested (``--model``, discovery's pick, or a swap)."""
        return self.body.model

    @model.setter
    def model(self, value: str | None) -> None:
        self.body.model = value

    @property
    def extra_body(self) -> dict:
        """The user's own body fields, sent as given (``--extra-body``)."""
        return self.body.extra_body

    @extra_body.setter
    def extra_body(self, value: dict) -> None:
        self.body.extra_body = value

    @property
    def token_cap(self) -> int | None:
        """The output-token cap the probes send (``RequestBody.token_cap``)."""
        return self.body.token_cap

    @property
    def info(self) -> ServerInfo | None:
        """The server as discovered (None before ``discover``)."""
        return self.side.info

    @property
    def builder(self) -> PromptBuilder:
        return self.side.builder

    @property
    def lengths(self) -> LengthModel:
        return self.side.lengths

    @property
    def streaming(self) -> str | None:
        """"streams" | "buffers" | "unknown" once a token-with-the-end probe asked
        (``kinds.BufferCheck``); None before."""
        return self.buffering.verdict

    @property
    def http(self) -> httpx.AsyncClient:
        """The client's httpx pool (auth header, TLS settings, keep-alive), for
        side requests to the same server such as ``/metrics`` scrapes."""
        return self.sender.http

    def scrub(self, text: str | None) -> str | None:
        """``text`` with every secret this client sends replaced by ``***``
        (``sending.Secrets``); call it before cutting a text."""
        return self.secrets.scrub(text)

    def __repr__(self) -> str:
        return f"ProbeClient({self.root!r}, api={self.api!r}, model={self.model!r})"

    async def __aenter__(self) -> "ProbeClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.sender.aclose()

    # -- the side requests --

    async def discover(self) -> ServerInfo:
        """Ask the server what it is (``SideRequests.discover``); the model becomes
        discovery's pick unless one was given.  Raises ``ServerUnreachable``."""
        info = await self.side.discover(self.body.model)
        if self.body.model is None:
            self.body.model = info.model
        self.body.server_kind = info.kind
        return info

    async def calibrate(self, on_step: Callable[[str], None] | None = None
                        ) -> list[ProbeResult]:
        """Learn the server's prompt length before the first measured probe
        (``SideRequests.calibrate``: warm-up probes, marked ``notes.calibration``)."""
        return await self.side.calibrate(on_step)

    async def warm(self) -> float | None:
        """Open (or re-use) a keep-alive connection; its connect time in seconds when
        a new one was opened, else None (``SideRequests.warm``)."""
        return await self.side.warm()

    async def count_tokens(self, text: str) -> int | None:
        """``text``'s tokens by the server's tokenize endpoint, or None."""
        return await self.side.count(text)

    # -- one probe --

    async def probe(self, requested_tokens: int, *, warmup: bool = False, burst: bool = False,
                    prompt: str | None = None) -> ProbeResult:
        """Fire one probe of ``requested_tokens`` server-counted prompt tokens.

        A probe the server rejects for an optional field we add is resent at once
        without it (``notes.rejected_field`` keeps the rejection), and the
        field is left out of every later probe of this client."""
        r = ProbeResult(requested_tokens=int(requested_tokens), warmup=warmup, burst=burst,
                        api=self.api, model=self.model)
        # 1. the prompt, built to its length on the server's own count
        words = None
        tok_count = None
        if prompt is None:
            try:
                prompt, words, tok_count = await self.side.prompt(requested_tokens)
            except Exception as e:  # never raise from a probe
                return self.errors.fail(r, "protocol", f"prompt construction failed: {e}")
        # 2. sent and read; resent without an optional field the server rejects
        body = self.body.build(prompt)
        await self._attempt(r, body)
        while (field := self.body.rejected_field(r, body, self.errors.last_body)) is not None:
            label, replaced = self.body.reject(field, self.secrets.scrub(r.error_message) or "")
            first = r
            r = ProbeResult(requested_tokens=first.requested_tokens, warmup=warmup, burst=burst,
                            api=self.api, model=self.model)
            r.notes.rejected_field = RejectedField(
                field=field, http_status=first.http_status,
                message=(self.secrets.scrub(first.error_message) or "")[:300],
                replaced_by=replaced)
            r.notes.resends = [*first.notes.resends, Resend(
                reason=f"HTTP {first.http_status} rejected the optional field {field}; "
                       "resent without it", request_id=first.notes.request_id)]
            body = self.body.build(prompt)
            await self._attempt(r, body)
            if r.http_status == first.http_status and r.error_message == first.error_message:
                # the same answer without the field: it was quoted, not the cause; the
                # answer may still name the one that is (the next candidate)
                self.body.keep(field, label, replaced)
                r.notes.rejected_field = None
                body = self.body.build(prompt)
        # 3. discovery's model refused: another listed model
        if self.models.may_try_others(r, self.info):
            assert self.info is not None
            r = await self.models.try_others(r, prompt, self.info, self._attempt)
        # 4. the token came with the end: does the path buffer?
        if r.notes.token_with_end and r.ok:
            await self.buffering.settle(r)
        self.models.saw(r)
        # 5. what the session says once, and the server values that cannot be true
        note(self.notices, r)
        model_hint(r, self.info, self.model)
        vet(r)
        if r.notes.ignored:
            self.notices.setdefault(
                "server values ignored",
                "the server sent counts or times that cannot be true ("
                + "; ".join(r.notes.ignored)[:300]
                + "): they are ignored, never fitted (each probe's extra.ignored says which)")
        # 6. the prompt's length, and what the length model learns from it
        self.side.learn_length(r, words, tok_count)
        r.error_message = self.secrets.scrub(r.error_message)
        r.notes.after_complete = [self.secrets.scrub(m) for m in r.notes.after_complete]
        return r

    async def _attempt(self, r: ProbeResult, body: JsonObject) -> None:
        """Send ``body`` once and fill ``r`` (never raises for server or network faults)."""
        url = self.endpoint
        self.errors.last_body = ""
        info = self.side.info
        fail = self.errors.fail
        try:
            # asyncio.timeout runs the stream in this task (wait_for would add a task
            # and its scheduling to every probe).
            async with asyncio.timeout(self.timeout):
                await self.reader.read(url, body, r, self.body.token_cap, token_ceiling(
                    info.context_tokens if info else None))
        except (asyncio.TimeoutError, httpx.TimeoutException):
            what = "first token" if r.ttft_s is None else "end of stream"
            fail(r, "timeout", f"no {what} within {self.timeout:g} s")
        except httpx.ConnectError as e:
            fail(r, "connect", _server.describe_exc(e))
        except httpx.RemoteProtocolError as e:
            fail(r, "protocol", "stream cut off: " + _server.describe_exc(e))
        except (httpx.ReadError, httpx.WriteError, httpx.NetworkError) as e:
            fail(r, "connect", "connection lost: " + _server.describe_exc(e))
        except httpx.HTTPError as e:
            fail(r, "protocol", _server.describe_exc(e))
        if r.t_end is None:
            r.t_end = time.perf_counter()
            if r.t_send is not None:
                r.total_s = r.t_end - r.t_send
