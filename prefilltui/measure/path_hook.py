"""A disaggregated path, the I/O part: around every probe through the router, scrape
the prefill and the decode worker's ``/metrics`` and split the probe's TTFT into its hops
(``model.path.split_hops``, set on ``ProbeResult.hops``); after it, probe the prefill
worker directly at the same length (its own line: ``PathHook.prefill_probes``, each a
``prefill_probe`` line of the run file, never in the router's fit).

The workers' kinds come from their pages (which engine's series they carry); their
roles from what they state (``model.path.roles``: SGLang's ``/server_info``
``disaggregation_mode``, vLLM's ``kv_role``, Dynamo's ``worker_type``), checked against
the flag each was given as (a contradiction is a notice, never a silent swap).
``PathHook`` is a sweep ``ProbeHook``: it never raises into the sweep.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any, Callable

import httpx

from prefilltui.measure import bounded
from prefilltui.model.metrics import Exposition
from prefilltui.model.path import (
    PATH_NAMES, PrefillProbe, WorkerReading, read_worker, role_from_labels,
    role_from_server_info, role_notice, split_hops,
)
from prefilltui.model.redact import display_url
from prefilltui.model.types import ProbeResult

#: The run file's record of a direct probe of the prefill worker.
PREFILL_PROBE_RECORD = "prefill_probe"
#: Largest worker /metrics or /server_info page read (bytes; as ``MetricsHook``'s).
MAX_PAGE_BYTES = 4 * 2**20
#: One scrape's deadline (s), connect to last byte.
SCRAPE_DEADLINE_S = 5.0
#: Re-scrapes after a probe while the decode worker's TTFT histogram has not counted it
#: (vLLM records it in its output loop, a moment after the stream ends).
RESCRAPE_TRIES = 3
RESCRAPE_DELAY_S = 0.05
#: Direct probes of the prefill worker kept for its line (the router's window is 40).
KEEP_PREFILL = 200


class Worker:
    """One worker of the path: its URL, role flag, kind (from its page) and last
    problem; ``scrape()`` -> ``WorkerReading`` or None (``problem`` says why)."""

    def __init__(self, url: str, role: str, client: httpx.AsyncClient) -> None:
        self.url, self.role, self.client = url, role, client
        self.shown = display_url(url)
        self.kind: str | None = None
        self.problem: str | None = None
        self.stated: tuple[str, str] | None = None  # (role, source) the engine states
        self._asked_info = False

    async def _get(self, path: str) -> bytes | None:
        root = self.url.rstrip("/").removesuffix("/v1")
        try:
            r = await bounded.fetch(self.client, "GET", root + path,
                                    max_bytes=MAX_PAGE_BYTES, deadline_s=SCRAPE_DEADLINE_S)
        except (TimeoutError, httpx.HTTPError) as e:
            self.problem = f"{self.shown}{path}: {type(e).__name__ or 'timed out'}"
            return None
        if r.status != 200 or r.truncated:
            self.problem = (f"{self.shown}{path} answered HTTP {r.status}" if r.status != 200
                            else f"{self.shown}{path} is over {MAX_PAGE_BYTES // 2**20} MiB")
            return None
        return r.content

    async def server_info(self) -> None:
        """Read the role the engine states in ``/server_info`` once (SGLang, vLLM dev
        mode); a missing endpoint is no role, not an error."""
        if self._asked_info:
            return
        self._asked_info = True
        body = await self._get("/server_info")
        if body is None:
            self.problem = None
            return
        try:
            info = json.loads(body)
        except ValueError:
            return
        self.stated = role_from_server_info(info) or self.stated

    async def scrape(self) -> WorkerReading | None:
        body = await self._get("/metrics")
        if body is None:
            return None
        try:
            exp = Exposition(body.decode("utf-8", "replace"))
            kind = self.kind or next((k for k, n in PATH_NAMES.items()
                                      if exp.count_prefixed((f"{k}:", f"{k}_"))), None)
            if kind is None:
                self.problem = (f"{self.shown}/metrics publishes neither vLLM's nor SGLang's "
                                "series: its hop is not read")
                return None
            self.kind = kind
            reading = read_worker(exp, kind)
            if self.stated is None:
                labels = [lab for name in ("vllm:cache_config_info", "dynamo_component_requests_total")
                          for lab, _ in (exp.rows(name) or [])]
                self.stated = role_from_labels(labels, consumer=reading.consumer)
        except ValueError as e:
            self.problem = f"{self.shown}/metrics is not Prometheus text ({e})"
            return None
        self.problem = None
        return reading


class PathHook:
    """ProbeHook for a path (see the module docstring).

    prefill_url / decode_url: the workers' base URLs; new_prefill_client: makes the probe
    client of the prefill worker (``session.client_factory`` of its URL); runfile: gets
    one ``prefill_probe`` line per direct probe (None: none written).  ``problem``: the
    last reason a hop was not read; ``notices``: role contradictions, once each.
    """

    def __init__(self, prefill_url: str, decode_url: str, *,
                 new_prefill_client: Callable[..., Any] | None = None, runfile: Any = None,
                 direct: bool = True) -> None:
        self.prefill = Worker(prefill_url, "prefill", None)
        self.decode = Worker(decode_url, "decode", None)
        self._loop: Any = None
        self.new_prefill_client = new_prefill_client
        self.runfile = runfile
        self.direct = direct and new_prefill_client is not None
        self.prefill_probes: deque[PrefillProbe] = deque(maxlen=KEEP_PREFILL)
        self.notices: list[str] = []
        self._client: Any = None
        self._before: tuple[WorkerReading | None, WorkerReading | None] = (None, None)
        self.last_problem: str | None = None
        #: failed KV transfers counted around the probes so far (the exporter's counter)
        self.failed_total = 0

    @property
    def roles(self) -> dict[str, str]:
        """role -> where it came from (the engine's statement when it agrees, else the flag)."""
        out = {}
        for w in (self.prefill, self.decode):
            out[w.role] = w.stated[1] if w.stated and w.stated[0] == w.role else "flag"
        return out

    @property
    def problem(self) -> str | None:
        return self.prefill.problem or self.decode.problem or self.last_problem

    def _ensure_loop(self) -> None:
        """Clients of the running loop: a new runner (the next load level) runs its own
        loop, and an httpx pool is bound to the loop it was used in."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        self._loop = loop
        http = httpx.AsyncClient(timeout=SCRAPE_DEADLINE_S, trust_env=False,
                                 headers={"Accept-Encoding": bounded.ACCEPT_ENCODING})
        self.prefill.client = self.decode.client = http
        self._client = None

    async def _scrape_both(self) -> tuple[WorkerReading | None, WorkerReading | None]:
        self._ensure_loop()
        p, d = await asyncio.gather(self.prefill.scrape(), self.decode.scrape())
        return p, d

    async def before_probe(self, client: Any = None) -> None:
        try:
            self._ensure_loop()
            for w in (self.prefill, self.decode):
                await w.server_info()
            self._before = await self._scrape_both()
            for w in (self.prefill, self.decode):
                n = role_notice(w.role, w.stated, w.shown)  # type: ignore[arg-type]
                if n and n not in self.notices:
                    self.notices.append(n)
        except Exception as e:  # noqa: BLE001 - never into the sweep
            self._before = (None, None)
            self.last_problem = f"path: {e}"

    async def after_probe(self, result: ProbeResult) -> None:
        try:
            pb, db = self._before
            pa, da = await self._scrape_both()
            tries = 0
            while (result.ok and tries < RESCRAPE_TRIES and db is not None and da is not None
                   and db.ttft_count is not None and da.ttft_count == db.ttft_count):
                tries += 1
                await asyncio.sleep(RESCRAPE_DELAY_S)
                pa, da = await self._scrape_both()
            if result.ok:
                result.hops = split_hops(result.ttft_s, (pb, pa), (db, da))
                self.failed_total += result.hops.failed_transfers or 0
                self.last_problem = result.hops.problem
                if self.prefill.problem or self.decode.problem:
                    self.last_problem = self.prefill.problem or self.decode.problem
            if self.direct and result.ok and not result.warmup and result.requested_tokens:
                await self._probe_prefill(result.requested_tokens)
        except Exception as e:  # noqa: BLE001 - never into the sweep
            self.last_problem = f"path: {e}"
        finally:
            self._before = (None, None)

    async def _probe_prefill(self, n: int) -> None:
        """One probe of ``n`` tokens to the prefill worker itself (its own line)."""
        if self._client is None:
            self._client = self.new_prefill_client(seed_offset=7919)
            await self._client.discover()
        r = await self._client.probe(n)
        p = PrefillProbe(tokens=r.tokens, ttft_s=r.ttft_s if r.ok else None, ok=r.ok,
                         t=time.time(), error=None if r.ok else (r.error_message or r.error_kind))
        self.prefill_probes.append(p)
        if self.runfile is not None:
            try:
                self.runfile.append_record(PREFILL_PROBE_RECORD, p.to_json())
            except (OSError, ValueError):
                pass

    async def aclose(self) -> None:
        if self.prefill.client is not None:
            await self.prefill.client.aclose()
        if self._client is not None:
            try:
                await self._client.aclose()
            except Exception:  # noqa: BLE001 - closing
                pass
