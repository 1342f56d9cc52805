"""Secrets never shown: the one home of what a URL or a server's text may show.

Pure (no I/O).  Every screen, log line, label, page and file name that shows a URL
calls ``display_url``; every server text kept for a message goes through
``scrub_secrets`` *before* it is cut to length (a cut key no longer matches).

Credentials in a server URL are handled where the URL enters the probe client
(``split_credentials``): ``user:password@`` and the query string leave the URL there
(the client sends them itself: the query on every request, ``user:password`` as Basic
auth only when no API key is given), so the URL strings the client derives (its root,
``ServerInfo.base_url``, the tokenize and ``/metrics`` URLs) hold no secret at all.
"""

from __future__ import annotations

import base64
import functools
import re
import urllib.parse
from dataclasses import dataclass

#: What a redacted value is replaced by.
MASK = "***"
#: Query parameters whose value is a secret: these names exactly, after lower-casing
#: and dropping ``-`` and ``_`` (``api_key`` = ``api-key`` = ``apiKey``) ...
SECRET_PARAM_NAMES = frozenset({"key", "apikey", "token", "accesstoken", "password", "passwd",
                                "pwd", "pass", "secret", "auth", "authorization", "sig",
                                "signature", "code", "credential", "credentials", "session",
                                "sessionid", "jwt", "bearer"})
#: ... and any name containing one of these (``x-goog-api-key``, ``hf_token``,
#: ``subscription-key``, ``client_secret``, ``X-Amz-Signature``).
SECRET_PARAM_PARTS = ("key", "token", "secret", "password", "passwd", "credential",
                      "signature", "auth")


def is_secret_param(name: str) -> bool:
    """True for a query parameter name whose value must never be shown."""
    n = name.lower().replace("-", "").replace("_", "")
    return n in SECRET_PARAM_NAMES or any(p in n for p in SECRET_PARAM_PARTS)


def _redact_query(query: str) -> str:
    """``query`` with each secret parameter's value masked; parameters split at ``&``
    and at ``;`` (the older separator some gateways and frameworks still split at, as
    ``scrub_secrets`` does): ``a=1;api-key=K`` shows no K."""
    if not query:
        return query
    out = []
    for part in re.split(r"([&;])", query):
        name, eq, value = part.partition("=")
        shown_name = urllib.parse.unquote_plus(name)
        out.append(f"{name}={MASK}" if eq and value and is_secret_param(shown_name) else part)
    return "".join(out)


def display_url(url: str | None) -> str | None:
    """``url`` as it may be shown, logged, exported or written: a password in it
    (``user:pw@host``) and the value of every secret query parameter
    (``is_secret_param``: ``api_key=``, ``token=``, ``sig=``...) replaced by ``***``;
    a user name alone (``TOKEN@host``, as tokens are often given) by ``***`` too.
    A ``#fragment`` (never sent; OAuth puts ``#access_token=`` there) is dropped.
    A string that does not parse as a URL, or has no ``//host`` (a URL pasted without its
    scheme), is shown with anything before an ``@`` masked.
    """
    if not url:
        return url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return hide_userinfo(url)
    if not parts.netloc and "@" in url:
        # no ``//host``: a URL pasted without its scheme (``user:pw@gpu-01:8000``, which
        # urlsplit reads as scheme "user"): what comes before an ``@`` is credentials
        return hide_userinfo(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, has_pw, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if has_pw else f"{MASK}@{host}"
    query = _redact_query(parts.query)
    if netloc == parts.netloc and query == parts.query and not parts.fragment:
        return url
    # the fragment is never sent, and OAuth-style URLs carry tokens there
    # (``#access_token=...``): it is not shown at all
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query, fragment=""))


def hide_userinfo(text: str) -> str:
    """``text`` with whatever precedes each ``@`` (up to a ``/``, a space or a quote)
    masked: a URL that does not parse, or an error quoting its netloc
    (``'u:pw@h' does not appear to be an IPv4 or IPv6 address``)."""
    return re.sub(r"[^/@\s'\"]+@", MASK + "@", text)


@dataclass(frozen=True, slots=True)
class UrlCredentials:
    """A server URL split where it enters the probe client: ``url`` without user info
    and without query (safe to derive every other URL from and to show), the user
    name and password of ``user:password@`` (None when absent; percent-decoded), and
    the query parameters in order (sent on every request)."""

    url: str
    username: str | None = None
    password: str | None = None
    params: tuple[tuple[str, str], ...] = ()

    @property
    def has_userinfo(self) -> bool:
        return self.username is not None or self.password is not None


def split_credentials(url: str) -> UrlCredentials:
    """Split ``url`` into the parts of ``UrlCredentials`` (fragment dropped).

    Raises:
        ValueError: ``url`` does not parse (``url_problem`` says why up front).
    """
    parts = urllib.parse.urlsplit(url)
    user = pw = None
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        u, has_pw, p = userinfo.partition(":")
        user = urllib.parse.unquote(u)
        pw = urllib.parse.unquote(p) if has_pw else None
    params = tuple(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    clean = urllib.parse.urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))
    return UrlCredentials(clean, user, pw, params)


#: Keys shorter than this, or a known placeholder, are not secrets (vLLM's docs
#: suggest ``EMPTY``; ``x`` is common): they are scrubbed only where a key is sent
#: (an echoed auth header, a URL parameter), never as a word of the server's text.
MIN_SECRET_KEY_LEN = 8
PLACEHOLDER_KEYS = frozenset({"empty", "none", "null", "dummy", "token", "key", "apikey",
                              "api_key", "placeholder", "sk-no-key-required", "no-key",
                              "sk-xxx", "sk-dummy", "sk-fake", "fake", "test", "secret"})
_AUTH_ECHO = re.compile(r"(?i)(\b(?:authorization|x-api-key|api-key)\b[\"']?\s*[:=]\s*[\"']?"
                        r"(?:bearer\s+|basic\s+)?|\bbearer\s+)([^\s\"',;}\]]+)")
#: A URL parameter (query or fragment) whose name is or contains a secret's word
#: (``SECRET_PARAM_NAMES`` / ``SECRET_PARAM_PARTS``: ``api_key``, ``X-Amz-Signature``,
#: ``#access_token``), as a server may quote a URL in its text.
_URL_KEY = re.compile(r"(?i)([?&#;](?:[\w.-]*(?:key|token|secret|passw(?:or)?d|pwd|signature|"
                      r"credential|auth)[\w.-]*|sig|code|session(?:id)?|jwt|bearer|pass)=)"
                      r"([^&\s\"'#<>]+)")
_URL_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)([^/@\s\"'<>]+)@")


def scrub_secrets(text: str | None, key: str | None = None) -> str | None:
    """``text`` with every secret it may carry replaced by ``***``; call it *before*
    cutting a text to length.

    Always: a URL's ``api_key=``/``key=``/``token=``/``password=``/``sig=`` parameter
    and a URL's ``user:password@``, whatever they hold.  Where a ``key`` is sent, also
    the value after ``Authorization:``/``Bearer``/``x-api-key``/``api-key`` (an echoed
    request header), and, for a real-looking key (``MIN_SECRET_KEY_LEN`` chars or
    more, not in ``PLACEHOLDER_KEYS``), the key wherever it stands, in any letter
    case, glued to other text or not.  A short or placeholder key never rewrites the server's words
    (``x`` in "ValidationException", ``EMPTY`` in "prompt is empty").  The value after
    an echoed ``Authorization:``/``Proxy-Authorization:`` header is masked whether or
    not a key is given (a proxy's Basic credentials are sent without one).

    A real-looking key is also masked in the forms a server may echo it in
    (``secret_forms``): percent-encoded (``sk-a%2Bb``), and base64 whatever its
    alignment inside a longer base64 text (``Basic base64(user:KEY)``, a token).
    """
    if not text:
        return text
    text = _URL_KEY.sub(lambda m: m.group(1) + MASK, text)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    text = _AUTH_ECHO.sub(lambda m: m.group(1) + MASK, text)
    if not key:
        return text
    if len(key) >= MIN_SECRET_KEY_LEN and key.lower() not in PLACEHOLDER_KEYS:
        text = _forms_pattern(key).sub(MASK, text)
    return text


def secret_forms(key: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The texts ``key`` may appear as in a server's answer: (plain forms, base64 cores).

    Plain: the key itself and its percent-encodings (``quote``, ``quote_plus``).  Base64
    (standard and URL-safe alphabets), at each of the three byte alignments the key can
    have inside a longer base64 text (``Basic base64(user:KEY)``): for alignment ``o``
    the characters that encode bytes of the key only.  ``scrub_secrets`` masks a core
    with up to 3 base64 characters either side, the edge characters that carry the
    key's first and last bytes mixed with their neighbours'.  Forms shorter than
    ``MIN_SECRET_KEY_LEN`` are dropped."""
    raw = key.encode("utf-8", "surrogatepass")
    plain = {key, urllib.parse.quote(key, safe=""), urllib.parse.quote_plus(key)}
    cores = set()
    for o in range(3):
        enc = base64.b64encode(b"\0" * o + raw).decode("ascii")
        start = -(-o // 3) * 4  # the first 4-character group of key bytes only
        end = (o + len(raw)) // 3 * 4  # the end of the last such group
        cores |= {enc[start:end], enc[start:end].translate(_URLSAFE)}

    def keep(forms: set[str]) -> tuple[str, ...]:
        return tuple(sorted((f for f in forms if len(f) >= MIN_SECRET_KEY_LEN),
                            key=len, reverse=True))
    return keep(plain), keep(cores)


_URLSAFE = str.maketrans("+/", "-_")
_B64_EDGE = "[A-Za-z0-9+/_-]{0,3}"


@functools.lru_cache(maxsize=64)
def _forms_pattern(key: str) -> re.Pattern[str]:
    plain, cores = secret_forms(key)
    alts = [f"{_B64_EDGE}{re.escape(c)}{_B64_EDGE}={{0,2}}" for c in cores]
    alts += [re.escape(f) for f in plain]
    return re.compile("|".join(alts), re.IGNORECASE)
