"""A probe's request body, and what to leave out of it when a server rejects a field.

``RequestBody`` builds the JSON body of each ``--api`` flavour (``API_PATHS``), and
reads a 400/422 answer (or an error event before any token) for the optional field
it names (``OPTIONAL_FIELDS``) or a token cap to replace (``CAP_REPLACEMENTS``);
``ProbeClient.probe`` resends without it.
"""

from __future__ import annotations

import re
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


class RequestBody:
    """The JSON body of each probe and the fields a server rejected.

    State: the API flavour (``api``, fixed), the model requested (``model``: set by
    discovery or a model swap), the user's fields (``extra_body``, sent as given and
    never dropped), the server's kind (``server_kind``, from discovery: which
    server-specific fields are added), and the fields dropped, kept (named in a 400
    that was not about them) or replaced (``CAP_REPLACEMENTS``).  A rejection is said
    once in ``notices`` (the client's session notices, given)."""

    def __init__(self, api: str, model: str | None, extra_body: dict,
                 notices: dict[str, str]) -> None:
        self.api = api
        self.model = model
        self.extra_body = extra_body
        #: ``ServerInfo.kind`` once discovered ("openai" before)
        self.server_kind = "openai"
        self._notices = notices
        self._dropped: set[str] = set()
        self._kept: set[str] = set()  # named in a 400 that was not about them
        self._replaced: set[str] = set()  # cap fields replaced (CAP_REPLACEMENTS)

    def build(self, prompt: str, cap: int = 1) -> JsonObject:
        """The body of a request for ``prompt`` with an output cap of ``cap`` tokens."""
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
        for old in self._replaced:
            new, value = CAP_REPLACEMENTS[old]
            body.pop(old, None)
            body[new] = max(value, cap)
        kind = self.server_kind
        if kind == "llama.cpp":
            body["cache_prompt"] = False
        if kind in ("llama.cpp", "vllm", "sglang"):
            body["ignore_eos"] = True  # a first-token EOS would read as "no token"
        body.update(self.extra_body)
        for k in self._dropped:
            body.pop(k, None)
        return body

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
        said = _first_mentions(f"{r.error_message}\n{error_body}")
        best: tuple[int, str] | None = None
        for k in OPTIONAL_FIELDS + CAP_FIELDS:
            if k in self._replaced and CAP_REPLACEMENTS[k][0] == k:
                continue  # already at its replacement value
            if k in body and k not in self._dropped | self._kept and k not in self.extra_body:
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
        new = CAP_REPLACEMENTS.get(field)
        if new is not None and field not in self._replaced and new[0] not in self._dropped:
            self._replaced.add(field)
            what = f"{new[0]}: {new[1]}" if new[0] != field else f"{field}: {new[1]}"
            label = f"{what} for {field}" if new[0] != field else f"{field} {new[1]}"
            self._notices.setdefault(label, f"the server rejected {field} ({said}); probes "
                                            f"send {what} instead")
            return label, what
        self._dropped.add(field)
        label = f"sent without {field}"
        tail = (" (no token cap: the client closes each stream at the second token)"
                if field in CAP_FIELDS else "")
        self._notices.setdefault(label, f"the server rejected {field} ({said}); probes are "
                                        f"sent without it{tail}")
        return label, None

    def keep(self, field: str, label: str, replaced: str | None) -> None:
        """Undo ``reject(field)``: the same answer came without it, so it was quoted,
        not the cause; it is sent again and never retried for a rejection."""
        (self._replaced if replaced else self._dropped).discard(field)
        self._kept.add(field)
        self._notices.pop(label, None)

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
