"""A probe client's side requests: discovery, calibration, the warm-up GET, and the
tokenize counts that build each prompt to its length.

``SideRequests`` asks the server about itself before (and between) probes; none of these requests is timed as a probe, except the
calibration probes, which are ordinary warm-up probes (``ProbeClient.probe``).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import httpx

from prefilltui.measure import bounded
from prefilltui.measure import server as _server
from prefilltui.measure.probe.sending import Secrets
from prefilltui.measure.probe.urls import ServerUrls
from prefilltui.measure.proxy import ProxyChoice
from prefilltui.model.prompts import LengthModel, PromptBuilder, build_prompt
from prefilltui.model.redact import display_url
from prefilltui.model.types import ProbeResult, ServerInfo

#: Word prompts sent during calibration (no tokenize endpoint: two lengths give the
#: server's tokens-per-word line before the first measured probe).
CALIBRATION_WORDS = (48, 240)


class SideRequests:
    """What a client asks the server about itself, and the prompt lengths it learns.

    State: ``info`` (the server as discovered; None before), the prompt builder
    (``builder``: seeded words) and the length model (``lengths``: tokens per word,
    learnt from the server's counts).  Given: the httpx pool, the server's URLs
    (``urls.ServerUrls``), the API flavour, the client's timeout (seconds), its proxy,
    ``Secrets`` and session ``notices``, and ``probe`` (the client's own, for the
    calibration probes)."""

    def __init__(self, http: httpx.AsyncClient, urls: ServerUrls, *, api: str,
                 timeout: float, proxy: ProxyChoice, secrets: Secrets,
                 notices: dict[str, str], seed: int | None,
                 probe: Callable[..., Awaitable[ProbeResult]]) -> None:
        self.info: ServerInfo | None = None
        self.builder = PromptBuilder(seed)
        self.lengths = LengthModel()
        self._http = http
        self.urls = urls
        self.api = api
        self.timeout = timeout
        self.proxy = proxy
        self._secrets = secrets
        self.notices = notices
        self._probe = probe

    async def discover(self, model: str | None) -> ServerInfo:
        """Fill and return ``self.info`` (``model``: the one asked for, or None for
        discovery's pick).  Raises ``ServerUnreachable``."""
        try:
            if self.urls.deployment is not None:
                info = await self._deployment(model)
            else:
                info = await _server.discover(self._http, self.urls.root, model=model,
                                              timeout=min(10.0, self.timeout))
        except _server.ServerUnreachable as e:
            raise _server.ServerUnreachable(self._secrets.scrub(str(e))) from None
        for n in info.notes:
            if "pass --model" in n:  # several models listed, or none that generates
                self.notices.setdefault(f"model {info.model}", n)
        if self.proxy.url is not None:
            info.proxy = display_url(self.proxy.url)
            self.notices.setdefault("via proxy", self.proxy.sentence())
        self.info = info
        return info

    async def _deployment(self, model: str | None) -> ServerInfo:
        """An Azure OpenAI deployment, which lists no models and has no tokenize
        endpoint or /metrics: one GET of the resource's model list (``models_url``,
        its answer unused) tells the server can be reached.  Raises
        ``ServerUnreachable``."""
        root, timeout = self.urls.root, min(10.0, self.timeout)
        try:
            await bounded.fetch(self._http, "GET", self.urls.models_url,
                                max_bytes=bounded.MAX_MODELS_BYTES, deadline_s=timeout)
        except httpx.HTTPError as e:
            raise _server.ServerUnreachable(
                f"cannot reach {display_url(root)}: {_server.describe_exc(e)}") from None
        except TimeoutError:
            raise _server.ServerUnreachable(
                f"cannot reach {display_url(root)}: no complete answer within "
                f"{timeout:g} s") from None
        return ServerInfo(base_url=root, kind="openai", model=model or self.urls.deployment)

    async def calibrate(self, on_step: Callable[[str], None] | None = None
                        ) -> list[ProbeResult]:
        """Learn the server's prompt length before the first measured probe.

        With a tokenize endpoint and the completions API the tokenize count is the
        server's count: nothing to learn.  With chat, one request learns the chat
        template's tokens (server count - tokenize count).  Without tokenize, one
        request at each of ``CALIBRATION_WORDS`` fits tokens = offset + ratio *
        words from the server's ``usage``/``timings``.  The requests are ordinary
        probes (a rejected optional field is dropped here already), returned as
        warm-ups marked ``notes.calibration`` so the run file holds every request
        the server saw; they never enter a fit.  A server that reports no count
        teaches nothing; its probes' lengths are then estimates.

        ``on_step(text)`` is told, before each request, what it waits for and for how
        long at most (the request's timeout).  A request that fails ends calibration
        and is said once (``notices["calibration failed"]``).
        """
        out: list[ProbeResult] = []
        if self.info is None:
            return out
        if self.info.has_tokenize:
            if self.api == "chat":
                n = int(CALIBRATION_WORDS[0] * self.lengths.ratio)
                out.append(await self._calibration_probe(n, "1 of 1",
                                                         "the chat template's tokens", on_step))
        else:
            ctx = self.info.context_tokens
            for i, words in enumerate(CALIBRATION_WORDS, 1):
                n = round(self.lengths.predict(words))
                out.append(r := await self._calibration_probe(
                    min(n, ctx // 2) if ctx else n, f"{i} of {len(CALIBRATION_WORDS)}",
                    "the server's token count", on_step))
                if r.prompt_tokens_source not in ("usage", "timings"):
                    break  # no count from this server (or the request failed)
        for r in out:
            r.notes.calibration = True
        return out

    async def _calibration_probe(self, tokens: int, which: str, learns: str,
                                 on_step: Callable[[str], None] | None) -> ProbeResult:
        """One calibration request (a failure is noted once)."""
        if on_step is not None:
            on_step(f"calibrating prompt lengths (request {which}, ~{tokens} tokens, up to "
                    f"{self.timeout:g} s): learning {learns}")
        r = await self._probe(tokens, warmup=True)
        if not r.ok:
            self.notices.setdefault(
                "calibration failed",
                f"the calibration request ({tokens} tokens, before the first probe) failed "
                f"after {(r.total_s or 0):.1f} s ({r.error_kind}: {r.error_message}); prompt "
                "lengths start from the built-in estimate until a probe is counted")
        return r

    async def warm(self) -> float | None:
        """Open (or re-use) a keep-alive connection with a cheap GET; returns its
        connect time in seconds when a new connection was opened, else None."""
        stamps: dict[str, float] = {}
        try:
            await bounded.fetch(self._http, "GET", self.urls.models_url,
                                max_bytes=bounded.MAX_MODELS_BYTES,
                                deadline_s=min(10.0, self.timeout),
                                extensions={"trace": bounded.tracer(stamps)})
        except (httpx.HTTPError, TimeoutError):
            return None
        return bounded.connect_time(stamps)

    async def count(self, text: str) -> int | None:
        """``text``'s tokens as the server's tokenize endpoint counts them, or None
        (no endpoint, or it did not answer)."""
        if self.info is None or not self.info.has_tokenize:
            return None
        return await _server.count_tokens(self._http, self.info, text,
                                          timeout=min(30.0, self.timeout))

    async def prompt(self, tokens: int) -> tuple[str, int | None, int | None]:
        """A prompt of ``tokens`` server-counted tokens (``build_prompt``), its counting
        on the tokenize endpoint bounded by the probe's timeout in all: an endpoint too
        slow for that (a trickling answer) is given up for the session, said once, and
        the length model places the prompt, so no probe waits on it again."""
        counter = self.count if self.info and self.info.has_tokenize else None
        if counter is None:
            return await build_prompt(tokens, self.builder, self.lengths, None)
        try:
            async with asyncio.timeout(self.timeout):
                return await build_prompt(tokens, self.builder, self.lengths, counter)
        except TimeoutError:
            assert self.info is not None
            self.info.has_tokenize = False
            self.notices.setdefault(
                "tokenize too slow",
                f"the tokenize endpoint ({display_url(self.info.tokenize_url)}) took longer "
                f"than the {self.timeout:g} s timeout to count a prompt: it is not used "
                "again; prompt lengths come from the server's usage counts")
            return await build_prompt(tokens, self.builder, self.lengths, None)

    def learn_length(self, r: ProbeResult, words: int | None, tok_count: int | None) -> None:
        """Record ``r``'s prompt length (server count > tokenize count > estimate) and
        feed the length model from a server count (``words``: the prompt's words when
        built from words; ``tok_count``: the tokenize count when counted)."""
        if r.prompt_tokens is None and tok_count is not None and r.ok:
            r.prompt_tokens, r.prompt_tokens_source = tok_count + round(self.lengths.offset), "tokenize"
        if r.prompt_tokens is None and r.ok:
            # No count from the server at all: the length the model predicts (the
            # requested one when nothing was learned) still places the probe.
            r.prompt_tokens = max(1, round(self.lengths.predict(words))) if words \
                else r.requested_tokens
            r.prompt_tokens_source = "estimate"
            self.notices.setdefault(
                "lengths estimated",
                "the server reports no prompt token count (no usage, timings or tokenize "
                "endpoint): prompt lengths are estimates, and so is the fit's x axis")
            return
        if r.prompt_tokens is None or r.prompt_tokens_source == "tokenize":
            return
        if tok_count is not None:
            self.lengths.update_offset(tok_count, r.prompt_tokens)
        elif words:
            self.lengths.update(words, r.prompt_tokens)
