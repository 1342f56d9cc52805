"""Server metrics, the I/O part: scrape ``/metrics`` around every probe.

``MetricsReader`` scrapes one server's Prometheus endpoint into a ``MetricsSample``
(``metrics.py``); ``MetricsHook`` (a sweep ``ProbeHook``) scrapes before and after each
probe and fills the TTFT breakdown with ``metrics.apply_delta``.  Built without a
reader, the hook makes one from the probe client on the first probe, reusing its
connection pool: the same API key, TLS settings and keep-alive connection as the
probes (a server that protects ``/metrics`` with the API key still answers).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any, Callable

import httpx

from prefilltui.measure import bounded
from prefilltui.model.metrics import (
    FIELDS, NAMES, Exposition, MetricNames, MetricsDelta, MetricsSample, apply_delta, delta,
    enable_hint, metrics_url, parse_metrics,
)
from prefilltui.model.redact import display_url
from prefilltui.model.types import ProbeResult, ServerInfo


#: Largest /metrics body scraped (decoded bytes).  A busy vLLM exposition is a few
#: hundred KB; parsing much more around every probe would slow the sweep itself.
MAX_METRICS_BYTES = 4 * 2**20
#: Longest one scrape may take, connect to last byte (seconds; a loaded vLLM answers
#: in tens of ms).  One deadline for the whole scrape, not per read: a server
#: trickling its answer byte by byte is cut off here.
SCRAPE_DEADLINE_S = 5.0
#: After a scrape that ran out of time, no scrape for this long (seconds): a slow or
#: trickling ``/metrics`` costs one deadline a minute, never one per probe.
SLOW_BACKOFF_S = 60.0


def rank_group_size(info: ServerInfo | None) -> int | None:
    """Ranks per attention data-parallel group from the server's stated layout (SGLang
    ``/server_info``: ``enable_dp_attention``, ``tp_size`` // ``dp_size``), else None
    (``model.metrics.ranks``)."""
    facts = info.facts if info is not None else {}
    tp, dp = facts.get("tp_size"), facts.get("dp_size")
    if (facts.get("enable_dp_attention") is True and isinstance(tp, int) and isinstance(dp, int)
            and not isinstance(tp, bool) and not isinstance(dp, bool) and 1 < dp <= tp):
        return tp // dp
    return None


class MetricsReader:
    """Scrapes ``/metrics`` of one server.

    ``await scrape()`` returns a MetricsSample, or None when the endpoint is missing,
    refuses, or returns something that is not exposition text; then ``problem``
    holds one plain line, ending with how to enable the metrics (never raises for
    server or network failures).  A scrape reads at most ``MAX_METRICS_BYTES``
    decoded bytes within ``timeout`` seconds in all; one that runs out of time
    stops the scrapes for ``SLOW_BACKOFF_S``.
    """

    def __init__(self, base_url: str, kind: str, *, url: str | None = None,
                 timeout: float = SCRAPE_DEADLINE_S, client: httpx.AsyncClient | None = None,
                 headers: dict[str, str] | None = None, verify: bool = True,
                 group_size: int | None = None) -> None:
        self.kind = kind
        #: ranks per attention data-parallel group the server stated (``ranks``)
        self.group_size = group_size
        self.url = url or metrics_url(base_url)
        self.shown_url = display_url(self.url)  # no password in a message
        self.problem: str | None = None
        self.last: MetricsSample | None = None
        #: called with (kind, its parsed page, group_size) of every scrape that answered
        #: 200 with Prometheus text (the users' window from /metrics,
        #: ``measure.users_metrics``); must not raise
        self.on_text: Callable[[str, Exposition, int | None], None] | None = None
        #: called with (its parsed page, the sample made of it) of every such scrape
        #: (what the server says about itself, ``measure.server_watch``); must not raise
        self.on_sample: Callable[[Exposition, MetricsSample], None] | None = None
        self._own = client is None
        self._timeout = timeout
        self._client = client or httpx.AsyncClient(
            timeout=timeout, verify=verify, trust_env=False,
            headers={"Accept-Encoding": bounded.ACCEPT_ENCODING, **(headers or {})})
        self._quiet_until = 0.0  # monotonic: no scrape before (after a timed-out one)

    @property
    def names(self) -> MetricNames | None:
        return NAMES.get(self.kind)

    async def scrape(self) -> MetricsSample | None:
        if self.kind not in NAMES:
            self.problem = enable_hint(self.kind)
            return None
        if time.monotonic() < self._quiet_until:
            return None  # ``problem`` still says why
        try:
            r = await bounded.fetch(self._client, "GET", self.url, max_bytes=MAX_METRICS_BYTES,
                                    deadline_s=self._timeout)
        except TimeoutError:
            self._quiet_until = time.monotonic() + SLOW_BACKOFF_S
            self.problem = (f"{self.shown_url} gave no complete answer within "
                            f"{self._timeout:g} s; not scraped for {SLOW_BACKOFF_S:g} s")
            return None
        except httpx.HTTPError as e:
            if isinstance(e, (httpx.ConnectError, httpx.UnsupportedProtocol)):
                self.problem = f"{self.shown_url}: {type(e).__name__}; {enable_hint(self.kind)}"
            else:  # a dropped read says nothing about whether metrics are enabled
                self.problem = (f"{self.shown_url}: scrape failed ({type(e).__name__}); "
                                "retried next probe")
            return None
        if r.truncated:
            self.problem = (f"{self.shown_url} is over {MAX_METRICS_BYTES // 2**20} MiB; "
                            "not scraped (too costly to parse around every probe)")
            return None
        if r.status != 200:
            self.problem = f"{self.shown_url} answered HTTP {r.status}; {enable_hint(self.kind)}"
            return None
        text = r.content.decode("utf-8", "replace")
        try:  # parsed once, for the probes' figures and the users' window alike
            exp = Exposition(text)
            sample = parse_metrics(exp, self.kind, group_size=self.group_size)
        except ValueError as e:
            self.problem = f"{self.shown_url} is not Prometheus text ({e}); {enable_hint(self.kind)}"
            return None
        for call, args in ((self.on_text, (self.kind, exp, self.group_size)),
                           (self.on_sample, (exp, sample))):
            if call is not None:
                try:
                    call(*args)
                except Exception:  # noqa: BLE001 - a consumer's bug never costs the scrape
                    pass
        if not sample.hist and not sample.values:
            if sample.engine_series:  # metrics are on, under names prefilltui does not read
                self.problem = (f"{self.shown_url} publishes {sample.engine_series} "
                                f"{self.kind} series, none under the names prefilltui reads "
                                "(docs/on-call.md): queue time and load not shown")
            else:
                self.problem = (f"{self.shown_url} publishes none of the known {self.kind} "
                                f"metrics; {enable_hint(self.kind)}")
        else:
            self.problem = None
        self.last = sample
        return sample

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def __aenter__(self) -> "MetricsReader":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


#: Re-scrapes after a probe while the server's request histograms have not counted it.
RESCRAPE_TRIES = 3
RESCRAPE_DELAY_S = 0.05


class MetricsHook:
    """ProbeHook: scrape before and after each probe and fill the TTFT breakdown.

    ``before_probe(client)`` scrapes; ``after_probe(result)`` scrapes again and calls
    ``apply_delta``.  It never raises into the sweep; the last problem is in
    ``problem`` (with the flag that enables metrics), and ``last_sample`` holds the
    latest scrape (before or after a probe) for load display and the verdict's
    waiting gauge "now".  Keeps the median client overhead of probes on an
    idle server (``quiet_overhead_s``) to estimate queue time where the server
    publishes none.
    """

    def __init__(self, reader: MetricsReader | None = None, *, base_url: str | None = None,
                 kind: str | None = None) -> None:
        if reader is None and base_url is not None and kind is not None:
            reader = MetricsReader(base_url, kind)
        #: None until the first probe when built without a reader: then it is made
        #: from the probe client (``client.root`` and ``client.info.kind``).
        self.reader = reader
        self._problem: str | None = None
        self._before: MetricsSample | None = None
        self._quiet: list[float] = []
        self.last_sample: MetricsSample | None = None
        self.last_delta: MetricsDelta | None = None
        #: handed to every reader this hook uses (``MetricsReader.on_text``, ``on_sample``)
        self.on_text: Callable[[str, Exposition, int | None], None] | None = None
        self.on_sample: Callable[[Exposition, MetricsSample], None] | None = None

    @property
    def problem(self) -> str | None:
        return (self.reader.problem if self.reader is not None else None) or self._problem

    def _ensure(self, client: Any) -> MetricsReader | None:
        if self.reader is None:
            info = getattr(client, "info", None)
            root = getattr(client, "root", None)
            if info is None or root is None:
                self._problem = "metrics: server not discovered yet"
                return None
            # Reuse the probe client's connection pool: same auth header, TLS
            # settings and keep-alive connection as the probes.
            probe_timeout = getattr(client, "timeout", SCRAPE_DEADLINE_S)
            self.reader = MetricsReader(root, info.kind, url=info.metrics_url,
                                        client=getattr(client, "http", None),
                                        timeout=min(SCRAPE_DEADLINE_S, probe_timeout),
                                        group_size=rank_group_size(info))
        self.reader.on_text = self.on_text
        self.reader.on_sample = self.on_sample
        return self.reader

    def rebind(self) -> None:
        """Forget a reader made from a probe client (the next runner brings a new
        client, whose pool the next reader must use); a reader given at construction
        stays."""
        if self.reader is not None and not self.reader._own:
            self.reader = None

    @property
    def quiet_overhead_s(self) -> float | None:
        return statistics.median(self._quiet) if self._quiet else None

    async def before_probe(self, client: Any = None) -> None:
        self._before = None
        self._problem = None
        try:
            if self._ensure(client) is not None:
                self._before = await self.reader.scrape()
                # the newest reading: the verdict reads the waiting gauge "now" from it
                # while this probe is in flight (in a queue probes rarely complete)
                self.last_sample = self._before or self.last_sample
        except Exception as e:  # never into the sweep
            self._problem = f"metrics scrape failed: {e}"

    async def after_probe(self, result: ProbeResult) -> None:
        try:
            after = await self.reader.scrape() if self.reader is not None else None
            d = delta(self._before, after) if (self._before and after) else None
            # request histograms may be recorded a moment after the stream ends
            # (vLLM records them in its output loop): re-scrape briefly, at most
            # RESCRAPE_TRIES times, while none has counted this probe yet
            tries = 0
            while (d is not None and result.ok and tries < RESCRAPE_TRIES
                   and any(r in self._before.hist for r in FIELDS)
                   and all(d.hist.get(r, (0, 0))[1] < 1 for r in FIELDS)):
                tries += 1
                await asyncio.sleep(RESCRAPE_DELAY_S)
                again = await self.reader.scrape()
                if again is None:
                    break
                after, d = again, delta(self._before, again)
            self.last_sample = after or self.last_sample
            self.last_delta = d
            apply_delta(result, d, quiet_overhead_s=self.quiet_overhead_s)
            if (result.queue_source == "idle" and result.overhead_s is not None
                    and not result.warmup):
                self._quiet.append(result.overhead_s)
                del self._quiet[:-50]
        except Exception as e:
            self._problem = f"metrics: {e}"
        finally:
            self._before = None

    async def aclose(self) -> None:
        if self.reader is not None:
            await self.reader.aclose()
