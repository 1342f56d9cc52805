"""Defaults shared by the commands, the TUI and the analysis (one place for each).

Every value here is also the documented default of a command-line flag.
"""

from __future__ import annotations

from prefilltui.core.types import FitMethod

#: Per-probe time cap (s), ``--timeout``: long prompts on a CPU take tens of seconds.
TIMEOUT_S = 120.0
#: Sliding-window fit size (probes), ``--window``.
WINDOW = 50
#: Fraction of peak FLOP/s for the expected-time roofline line, ``--efficiency``.
EFFICIENCY = 0.5
#: Telemetry sampling rate (Hz), ``--sample-hz``.
SAMPLE_HZ = 10.0
#: The fit shown, ``--fit``.
FIT_METHOD: FitMethod = "robust"
#: Prompt length of the prefix-cache check (tokens), ``cache-check --tokens``.
CACHE_CHECK_TOKENS = 512
