"""Defaults shared by the commands, the TUI and the analysis (one place for each).

Every value here is also the documented default of a command-line flag.
"""

from __future__ import annotations

from prefilltui.model.types import Dtype, FitMethod

#: Shortest prompt of the default sweep (tokens), ``--min-tokens``.  TTFT(0), the
#: fixed cost, is an extrapolation; prompts of a few tokens put points next to it, so
#: the intercept rests on measurements instead of on the slope of long probes (one
#: noisy long probe moved it by hundreds of ms on a busy CPU).  4 = BOS plus a few words.
MIN_TOKENS = 4
#: Longest prompt of the default sweep (tokens), ``--max-tokens``.
MAX_TOKENS = 4096
#: Log-spaced lengths of the default sweep, ``--points``: short probes are cheap (they
#: cost about the fixed cost), so the anchors add little time.
POINTS = 10
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
#: Probes per length, ``--repeats``.
REPEATS = 1
#: Warm-up probes (recorded, kept out of the fit), ``--warmup``: the first request
#: of a session pays for lazy initialisation on many servers.
WARMUP = 1
#: The datatype whose catalog peak the roofline uses, ``--dtype``.
DTYPE: Dtype = "bf16"
