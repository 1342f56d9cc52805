"""A probe's request body, and what to leave out of it when a server rejects a field.

``RequestBody`` builds the JSON body of each ``--api`` flavour (``API_PATHS``), and
reads a 400/422 answer (or an error event before any token) for the optional field
it names (``OPTIONAL_FIELDS``) or a token cap to replace (``CAP_REPLACEMENTS``);
``ProbeClient.probe`` resends without it.  What a server rejected is a ``Rejections``
record that every client of one session shares (the probes' runners and the background
load: ``session.client_factory``), so a field one of them learned is never sent by
the others.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from prefilltui.model.types import JsonObject, ProbeResult

#: Fields a probe adds beyond what a completion request needs.  A 400/422 answer
#: naming one of them or any of its sub-keys (``include_usage`` inside
#: ``stream_options``) drops it: the probe is resent once without it, and later
#: probes of the session never send it.  A field the user set (``extra_body``) is
#: never dropped.
OPTIONAL_FIELDS = ("stream_options", "ignore_eos", "cache_prompt", "temperature", "store")
#: The token cap's field, rejected by some servers: replaced by (field, value) and
#: resent, as an optional field is dropped.  ``max_tokens`` -> ``max_completion_tokens``
#: (OpenAI's newer models: "Unsupported parameter: 'max_tokens' ... Use
#: 'max_completion_tokens' instead"); ``max_output_tokens: 1`` -> 16 (the least the
#: OpenAI Responses API accepts).  A rejected replacement is dropped: the probe then
#: sends no cap, and the client closes the stream at the second token.
CAP_REPLACEMENTS = {"max_tokens": ("max_completion_tokens", 1),
                    "max_output_tokens": ("max_output_tokens", 16)}
CAP_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
#: The endpoint of each ``--api`` under ``/v1``.
API_PATHS = {"completions": "/completions", "chat": "/chat/completions",
             "responses": "/responses"}


class Rejections:
    """The fields one server rejected, shared by the clients of a session: dropped,
    kept (named in a 400 that was not about them) or replaced (``CAP_REPLACEMENTS``),
    and the notice that says each (label -> sentence).  Any thread: the sets are
    frozen and replaced whole under a lock, so a reader never sees one change size."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.dropped: frozenset[str] = frozenset()
        self.kept: frozenset[str] = frozenset()
        self.replaced: frozenset[str] = frozenset()
        self.notices: dict[str, str] = {}

    def drop(self, field: str, label: str, notice: str) -> None:
        with self._lock:
            self.dropped = self.dropped | {field}
            self.notices = {**self.notices, label: self.notices.get(label, notice)}

    def replace(self, field: str, label: str, notice: str) -> None:
        with self._lock:
            self.replaced = self.replaced | {field}
            self.notices = {**self.notices, label: self.notices.get(label, notice)}

    def keep(self, field: str, label: str, replaced: bool) -> None:
        with self._lock:
            if replaced:
                self.replaced = self.replaced - {field}
            else:
                self.dropped = self.dropped - {field}
            self.kept = self.kept | {field}
            self.notices = {k: v for k, v in self.notices.items() if k != label}


class RequestBody:
    """The JSON body of each request (a probe, or the background load's) and the
    fields a server rejected.

    State: the API flavour (``api``, fixed), the model requested (``model``: set by
    discovery or a model swap), the user's fields (``extra_body``, sent as given and
    never dropped), the server's kind (``server_kind``, from discovery: which
    server-specific fields are added), and ``rejections`` (``Rejections``, given: the
    session's, or this body's own).  A rejection is said once in ``notices`` (the
    client's session notices, given), whichever client learned it."""

    def __init__(self, api: str, model: str | None, extra_body: dict,
                 notices: dict[str, str], rejections: Rejections | None = None) -> None:
        self.api = api
        self.model = model
        self.extra_body = extra_body
        #: ``ServerInfo.kind`` once discovered ("openai" before)
        self.server_kind = "openai"
        self.rejections = rejections if rejections is not None else Rejections()
        self._notices = notices
        self._said: dict[str, str] = {}  # the rejections' notices copied into ``notices``

    def build(self, prompt: str, cap: int = 1) -> JsonObject:
        """The body of a request for ``prompt`` with an output cap of ``cap`` tokens
        (1 for a probe; a load request's output length)."""
        rej = self.rejections
        self._say(rej.notices)
        body: JsonObject = {"stream": True, "temperature": 0}
        if self.model:
            body["model"] = self.model
        if self.api == "responses":
            body.update(max_output_tokens=cap, input=prompt, store=False)
        else:
            body.update(max_tokens=cap, stream_options={"include_usage": True})
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        elif self.api == "completions":
            body["prompt"] = prompt
        for old in rej.replaced:
            new, value = CAP_REPLACEMENTS[old]
            body.pop(old, None)
            body[new] = max(value, cap)
        kind = self.server_kind
        if kind == "llama.cpp":
            body["cache_prompt"] = False
        if kind in ("llama.cpp", "vllm", "sglang"):
            body["ignore_eos"] = True  # a first-token EOS would read as "no token"
        body.update(self.extra_body)
        for k in rej.dropped:
            body.pop(k, None)
        return body

    def _say(self, notices: dict[str, str]) -> None:
        """The session's rejection notices into this client's ``notices`` (a field
        another client learned is said here too; a kept one is unsaid)."""
        if notices is self._said:
            return
        for label in self._said.keys() - notices.keys():
            self._notices.pop(label, None)
        for label, text in notices.items():
            self._notices.setdefault(label, text)
        self._said = notices

    def rejected_field(self, r: ProbeResult, body: JsonObject, error_body: str) -> str | None:
        """The optional field a 400/422 answer names (itself or any of its sub-keys,
        in any wording: "Unknown field: stream_options", "extraneous key
        [include_usage] is not permitted", "streamOptions.includeUsage", "max tokens
        is not supported"), or None.  When it names several, the one it names first:
        "unknown field `ignore_eos`, expected one of `model`, ..., `stream_options`"
        rejects ignore_eos, not stream_options.  A gateway may answer 200 and put the
        rejection in the stream, as an error event before any token: read the same way.
        ``error_body``: the answer's body as read (``ErrorReader.last_body``)."""
        in_stream = r.error_kind == "stream_error" and r.ttft_s is None
        if not in_stream and (r.http_status not in (400, 422) or r.error_kind != "http"):
            return None
        return self.named_field(f"{r.error_message}\n{error_body}", body)

    def named_field(self, text: str, body: JsonObject) -> str | None:
        """The optional field of ``body`` that ``text`` (a 400/422 answer's words)
        names first, as ``rejected_field`` reads it, or None."""
        rej = self.rejections
        said = _first_mentions(text)
        best: tuple[int, str] | None = None
        for k in OPTIONAL_FIELDS + CAP_FIELDS:
            if k in rej.replaced and CAP_REPLACEMENTS[k][0] == k:
                continue  # already at its replacement value
            if k in body and k not in rej.dropped | rej.kept and k not in self.extra_body:
                at = min((said[n] for n in {_norm(x) for x in _names(k, body[k])} if n in said),
                         default=None)
                if at is not None and (best is None or at < best[0]):
                    best = (at, k)
        return best[1] if best else None

    def reject(self, field: str, message: str) -> tuple[str, str | None]:
        """Leave ``field`` out of later bodies (or replace it, CAP_REPLACEMENTS) and
        say so once, quoting ``message`` (the rejection, already scrubbed); returns
        (the notice's label, what replaced it or None)."""
        said = message[:200]
        rej = self.rejections
        new = CAP_REPLACEMENTS.get(field)
        if new is not None and field not in rej.replaced and new[0] not in rej.dropped:
            what = f"{new[0]}: {new[1]}" if new[0] != field else f"{field}: {new[1]}"
            label = f"{what} for {field}" if new[0] != field else f"{field} {new[1]}"
            rej.replace(field, label, f"the server rejected {field} ({said}); probes "
                                      f"send {what} instead")
            self._say(rej.notices)
            return label, what
        label = f"sent without {field}"
        tail = (" (no token cap: the client closes each stream at the second token)"
                if field in CAP_FIELDS else "")
        rej.drop(field, label, f"the server rejected {field} ({said}); probes are "
                               f"sent without it{tail}")
        self._say(rej.notices)
        return label, None

    def keep(self, field: str, label: str, replaced: str | None) -> None:
        """Undo ``reject(field)``: the same answer came without it, so it was quoted,
        not the cause; it is sent again and never retried for a rejection."""
        self.rejections.keep(field, label, replaced is not None)
        self._say(self.rejections.notices)

    @property
    def token_cap(self) -> int | None:
        """The output-token cap the probes send (1, or 16 on a Responses API that
        needs it), or None when the server took none."""
        body = self.build("", 1)
        return next((body[k] for k in CAP_FIELDS if k in body), None)


def _first_mentions(text: str) -> dict[str, int]:
    """Each name ``text`` mentions (``_norm``-ed) -> the index of its first mention.  Runs
    of two and three words count as one name too ("max tokens" = max_tokens)."""
    words = [_norm(w) for w in _IDENT.findall(text)]
    out: dict[str, int] = {}
    for i in range(len(words)):
        for n in (1, 2, 3):
            if i + n <= len(words):
                out.setdefault("".join(words[i:i + n]), i)
    return out


def _norm(name: str) -> str:
    """A field name compared across spellings: include_usage = includeUsage = include-usage."""
    return name.replace("_", "").replace("-", "").lower()


def _names(field: str, value: Any) -> list[str]:
    """``field`` and every key nested in its value (the sub-keys a server may name)."""
    out = [field]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _names(str(k), v)
    return out
