"""What of a server URL may be shown: ``display_url`` replaces a password with ``***``.

Pure (no I/O); every screen, log line, label and file name that shows a URL calls it.
"""

from __future__ import annotations

import urllib.parse


def display_url(url: str | None) -> str | None:
    """``url`` as it may be shown or written: a password in it (``user:pw@host``)
    replaced by ``***``.  The probes still use the URL as given."""
    if not url or "@" not in url:
        return url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
