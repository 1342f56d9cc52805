"""The users' requests from the server's OpenTelemetry traces (docs/users.md).

- ``OtlpReceiver`` (``receiver``): OTLP/HTTP ``POST /v1/traces`` on ``--otlp-listen``;
- ``UsersTrace`` (``users``): one target's users' requests and its probes' own spans:
  ``.window(now) -> UsersWindow``, ``.before()``, ``.recent()``, ``.stats()``;
- ``TraceRouter``: each span to its target; ``SpanHook``: registers each probe;
- ``codec`` / ``spans``: the bodies and the span attributes (no socket).
"""

from prefilltui.measure.otlp.receiver import OtlpReceiver, parse_listen
from prefilltui.measure.otlp.users import SpanHook, TraceRouter, UsersTrace, target_names
from prefilltui.model.users import TraceStats

__all__ = ["OtlpReceiver", "parse_listen", "SpanHook", "TraceRouter", "TraceStats",
           "UsersTrace", "target_names"]
