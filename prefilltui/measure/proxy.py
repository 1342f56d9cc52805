"""Which proxy a server's requests go through: ``choose_proxy(url, flag)``.

httpx reads the proxy variables only when it builds its own transport; prefilltui
passes its own (``probe.sending.ResendOnStaleConnection``), so it resolves them here, once
per client, for the server's host (discovery, probes, ``/metrics`` and tokenize
all go to that host through the one client):

1. ``--proxy URL`` overrides the environment for every host; ``--proxy none`` (or
   ``direct``) sends every request direct.
2. Otherwise a loopback host (``localhost``, ``*.localhost``, 127.0.0.0/8, ``::1``)
   always goes direct.
3. ``NO_PROXY``/``no_proxy``: ``*``, host names (``example.com`` also matches its
   subdomains, a leading dot is allowed), IP addresses and CIDR blocks, each with an
   optional ``:port``, comma- or space-separated (curl's reading).
4. ``HTTPS_PROXY`` for an https server, ``HTTP_PROXY`` for an http one, then
   ``ALL_PROXY``; the lower-case name first.  A value without a scheme is http.

Schemes: http, https, socks5, socks5h (SOCKS needs the ``socksio`` package).
"""

from __future__ import annotations

import ipaddress
import socket
import os
import urllib.parse
from dataclasses import dataclass
from typing import Mapping

from prefilltui.model.redact import display_url

PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
DIRECT_WORDS = ("none", "direct", "off")


@dataclass(frozen=True, slots=True)
class ProxyChoice:
    """url: the proxy to use, or None (direct).  source: why ("--proxy",
    "HTTPS_PROXY", ...; for direct: "loopback", "NO_PROXY", "--proxy none" or "")."""

    url: str | None
    source: str = ""

    @property
    def shown(self) -> str | None:
        """The proxy URL as it may be shown (a password as ``***``)."""
        return display_url(self.url)

    def sentence(self) -> str:
        """'requests go through the proxy http://p:3128 (from HTTPS_PROXY)...'."""
        return (f"requests go through the proxy {self.shown} (from {self.source}); "
                "TTFT includes the proxy's hop")


class ProxyError(ValueError):
    """A proxy setting that cannot be used (bad URL, unsupported scheme)."""


def _is_loopback(host: str) -> bool:
    """This machine: localhost, a loopback address in any spelling (``127.1``,
    ``::ffff:127.0.0.1``), or the unspecified address a server prints when it listens on
    every interface (``0.0.0.0``, ``::``; a connection to it reaches this machine)."""
    h = host.strip("[]").lower().rstrip(".")
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        try:  # IPv4 shorthand (127.1, 2130706433) as the resolver reads it
            ip = ipaddress.ip_address(socket.inet_aton(h)) if h[:1].isdigit() else None
        except OSError:
            return False
        if ip is None:
            return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    h = host.strip("[]").lower().rstrip(".")
    for entry in no_proxy.replace(" ", ",").split(","):
        e = entry.strip().lower()
        if not e:
            continue
        if e == "*":
            return True
        e_port = None
        if e.count(":") == 1 and not e.startswith("["):
            e, _, p = e.partition(":")
            e_port = int(p) if p.isdigit() else None
        e = e.strip("[]").lstrip("*").lstrip(".").rstrip(".")
        if e_port is not None and port is not None and e_port != port:
            continue
        if "/" in e:
            try:
                if ipaddress.ip_address(h) in ipaddress.ip_network(e, strict=False):
                    return True
            except ValueError:
                pass
            continue
        if h == e or h.endswith("." + e):
            return True
    return False


def _checked(value: str, source: str) -> str:
    url = value.strip()
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise ProxyError(f"{source}: not a proxy URL ({e})") from None
    if parts.scheme.lower() not in PROXY_SCHEMES or not parts.hostname:
        raise ProxyError(f"{source}: {display_url(value)!r} is not a proxy URL "
                         f"(scheme one of {', '.join(PROXY_SCHEMES)}, and a host)")
    if parts.scheme.lower().startswith("socks"):
        try:
            import socksio  # noqa: F401
        except ImportError:
            raise ProxyError(f"{source}: a SOCKS proxy needs the socksio package "
                             "(pip install socksio)") from None
    return url


def choose_proxy(server_url: str, flag: str | None = None,
                 environ: Mapping[str, str] | None = None) -> ProxyChoice:
    """The proxy for requests to ``server_url`` (rules in the module docstring).

    Raises:
        ProxyError: ``flag`` or the variable that applies is not a usable proxy URL.
    """
    if flag is not None and flag.strip():
        if flag.strip().lower() in DIRECT_WORDS:
            return ProxyChoice(None, "--proxy none")
        return ProxyChoice(_checked(flag, "--proxy"), "--proxy")
    env = os.environ if environ is None else environ
    parts = urllib.parse.urlsplit(server_url if "://" in server_url else "http://" + server_url)
    host = parts.hostname or ""
    if _is_loopback(host):
        return ProxyChoice(None, "loopback")
    no_proxy = env.get("no_proxy") or env.get("NO_PROXY") or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    if no_proxy and _bypassed(host, port, no_proxy):
        return ProxyChoice(None, "NO_PROXY")
    scheme = "https" if parts.scheme == "https" else "http"
    for name in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY"):
        value = env.get(name)
        if value and value.strip():
            return ProxyChoice(_checked(value, name), name)
    return ProxyChoice(None, "")
