"""The users' requests from the server's OpenTelemetry traces (docs/users.md).

- ``OtlpReceiver`` (``receiver``): OTLP/HTTP ``POST /v1/traces`` on ``--otlp-listen``;
- ``UsersTrace`` (``users``): one target's users' requests and its probes' own spans:
  ``.window(now) -> UsersWindow``, ``.before()``, ``.recent()``, ``.stats()``;
- ``TraceRouter``: each span to its target; ``SpanHook``: registers each probe;
- ``acquire_receiver`` / ``release_receiver`` (``shared``): one receiver per listen
  address per process, refcounted;
- ``codec`` / ``spans``: the bodies and the span attributes (no socket).

The rest of prefilltui imports this package, never its modules (an import-linter
contract).
"""

from prefilltui.measure.httpserver import parse_listen
from prefilltui.measure.otlp.receiver import OtlpReceiver
from prefilltui.measure.otlp.shared import acquire as acquire_receiver
from prefilltui.measure.otlp.shared import release as release_receiver
from prefilltui.measure.otlp.users import SpanHook, TraceRouter, UsersTrace, target_names
from prefilltui.model.users import TraceStats

__all__ = ["OtlpReceiver", "acquire_receiver", "parse_listen", "release_receiver", "SpanHook",
           "TraceRouter", "TraceStats", "UsersTrace", "target_names"]
