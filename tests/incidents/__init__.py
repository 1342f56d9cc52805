"""Incidents the verdict was not tuned to: an engine, other people's traffic, the
product's own observers, and a score (``python -m tests.incidents table``).

Written apart from the verdict (without reading ``prefilltui/model/diagnosis`` or its
own fake engine and incident tests), so the verdict is judged on traffic it has not
seen.  The pieces:

- ``engine``: ``SimEngine``, a vLLM-like engine on a simulated clock (continuous
  batching, FCFS queue, a token budget per step with chunked prefill on or off, a
  block-granular LRU prefix cache), publishing vLLM 0.32-named /metrics text and one
  ``llm_request`` record per finished request (made into OTLP spans);
- ``traffic``: the users (a production-like mix), the incidents' own clients, the probes'
  pacing;
- ``observers``: the exporter's ``TargetProber`` and the TUI's ``TargetFeed`` wired as
  the product wires them, fed through its own parsers (/metrics text through the
  metrics hook and the users' /metrics window; OTLP protobuf bodies through the span
  reader and ``UsersTrace``);
- ``scenarios``: the incidents with their truth, and the driver (``World``);
- ``score`` / ``matrix``: seconds to the right cause, the headline's number against
  the truth, false causes in the control; the markdown table.

Honesty: every figure this package produces is a simulation of a design chosen here
(10k prompt tokens/s, 15 ms a step, 3 % step jitter, ...), not a measurement of any
real server; the tables it prints say "fake engine".

What it cannot express (so no row here stands for it): llama.cpp's ``/slots`` and
``requests_deferred`` (no slots API, vLLM names only); a restart's downtime and the
requests it fails (the redeploy is blue/green: the old replica drains, nothing fails);
``/version``, ``/server_info``, ``max_model_len`` changes (the observers are given
their ``ServerInfo``, no discovery runs); KV-cache pressure and preemption (a request
that finds no free block waits; none is preempted or recomputed); the decodes' ITL
(no ITL histogram, no background load of prefilltui's own); the front end's
tokenisation and the network beyond a fixed 0.5 ms each way and a 1 ms client read;
a GPU whose speed drifts rather than steps (the slowdown is a step at onset).
"""
