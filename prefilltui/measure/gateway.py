"""What gateways and proxies do to a probe's answer, recognised from its bytes.

Pure helpers of ``probe.py`` (no sockets): a valid event stream under another
content type (``looks_like_sse``), an HTML page where an API answer belongs
(``html_summary``: a sign-in portal, SSO or captive page), a redirect of the POST
(``redirect_target``), and the plain words for each (``html_message``,
``redirect_message``).  Every text taken from a server here is raw; screens clean
it (``model.sanitize``).
"""

from __future__ import annotations

import html.parser
import re

import httpx

from prefilltui.model.redact import display_url

#: Redirects of a probe's POST followed at most (307/308 only: they keep the method
#: and body, RFC 9110 section 15.4.8/15.4.9); more is a loop or a misconfiguration.
MAX_REDIRECTS = 5
#: Redirect statuses that keep the POST (followed) and that turn it into a GET (not
#: followed: the probe would become a different request).
KEEP_METHOD = (307, 308)
CHANGE_METHOD = (301, 302, 303)

_SSE_START = re.compile(rb"^(?:\xef\xbb\xbf)?\s*(?:data|event|id|retry)\s*:|^(?:\xef\xbb\xbf)?:",
                        re.I)


def looks_like_sse(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a body) starts like an event stream: a
    ``data:``/``event:``/``id:``/``retry:`` field or a ``:`` comment (a gateway that
    labels a valid SSE stream ``application/json``, ``text/plain``, or nothing)."""
    return bool(_SSE_START.match(head[:256]))


_HTML_PREAMBLE = re.compile(r"(?:\s+|\ufeff|<\?xml[^>]*>|<!--.*?-->)*", re.S)
_HTML_START = re.compile(r"<(?:!doctype\s+html|html|head|body|title|meta|link|script|style|"
                         r"noscript|form|div|h1|p)\b", re.I)


def not_a_stream(ctype: str, head: bytes) -> bool:
    """For a body labelled ``text/event-stream``: True when its first bytes are no event
    stream but an HTML page or a JSON document (a proxy's error page, a JSON error), so
    it is read as an answer, with its words; a partial first line (``da``) is not."""
    text = head[:4096].decode("utf-8", "replace")
    return looks_like_html("", text) or text.lstrip("\ufeff \t\r\n")[:1] in ("{", "[")


def looks_like_html(ctype: str, head: str) -> bool:
    """True for an HTML page: a ``text/html``/``xhtml`` content type, or a body that
    starts (after a byte-order mark, whitespace, an XML declaration and comments) with
    a doctype or an element of a page's head or body (``<html``, ``<head``,
    ``<title``, ...) whatever content type it is labelled with."""
    if "html" in ctype.lower():
        return True
    text = head[:4096]
    m = _HTML_PREAMBLE.match(text)
    return bool(_HTML_START.match(text, m.end() if m else 0))


class _PageText(html.parser.HTMLParser):
    """The title and the first visible text of an HTML page (script/style skipped)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.text: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in ("script", "style", "title", "noscript", "template"):
            self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        words = " ".join(data.split())
        if not words:
            return
        if self._in and self._in[-1] == "title":
            self.title = (self.title + " " + words).strip()
        elif not self._in and sum(len(t) for t in self.text) < 400:
            self.text.append(words)


def html_summary(page: str) -> str:
    """``“Title”: first visible words`` of an HTML page (at most ~200 characters)."""
    p = _PageText()
    try:
        p.feed(page[:65536].replace("\ufeff", ""))
        p.close()
    except Exception:  # noqa: BLE001 - a broken page still gets a message
        pass
    text = " ".join(p.text)
    if p.title and text.startswith(p.title):
        text = text[len(p.title):].strip()
    out = f"“{p.title[:100]}”" if p.title else ""
    if text:
        out += (": " if out else "") + text[:200] + ("…" if len(text) > 200 else "")
    return out or "an empty page"


def html_message(status: int, page: str, location: str | None = None) -> str:
    """The failure message for an HTML page answering a probe: the page's own words,
    the kind, and what the user can do."""
    where = f" (redirecting to {display_url(location)})" if location else ""
    auth = status in (401, 403, 407) or bool(location) or re.search(
        r"sign[ -]?in|log[ -]?in|password|sso|single sign|authenticat|user ?name|"
        r"captive portal|access portal", page[:65536], re.I)
    what = ("a sign-in page (a login portal, SSO or gateway is in front of the API)" if auth
            else "an HTML page, not an API answer (a web UI, portal or proxy error page)")
    todo = ("sign in where the page says or pass the gateway's API key (--api-key-env), "
            "or point prefilltui at the API's own URL" if auth else
            "point prefilltui at the API's base URL (the one whose /v1/models lists models)")
    return f"HTTP {status}{where}: {what}: {html_summary(page)}; {todo}"


def redirect_target(request: httpx.Request, response: httpx.Response) -> httpx.URL | None:
    """Where a 3xx answer sends the request (absolute), or None without a usable
    ``Location`` (missing, unparsable, or not http/https)."""
    loc = response.headers.get("location")
    if not loc:
        return None
    try:
        url = request.url.join(loc)
    except (httpx.InvalidURL, ValueError):
        return None
    return url if url.scheme in ("http", "https") and url.host else None


def same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    """Scheme, host and port equal (RFC 6454 origin); the API key is sent only then,
    or on an upgrade of the same host from http to https."""
    if a.host != b.host:
        return False
    if a.scheme == b.scheme:
        return a.port == b.port
    return a.scheme == "http" and b.scheme == "https" and b.port in (None, 443)


def redirect_message(status: int, target: httpx.URL | None, hops: int) -> str:
    """The failure message for a redirect the probe does not follow."""
    to = display_url(str(target)) if target is not None else None
    if target is None:
        return (f"HTTP {status}: a redirect without a usable Location; point prefilltui at "
                "the API's own URL")
    if status in CHANGE_METHOD:
        return (f"HTTP {status}: the server redirects the POST to {to}, and a {status} turns "
                f"it into a GET; use that URL (its base, without /v1/...) as the server URL")
    return (f"HTTP {status}: more than {MAX_REDIRECTS} redirects (last to {to}; "
            f"{hops} followed): a redirect loop; use the final URL directly")
