"""prefilltui: a terminal monitor for the prefill phase of LLM inference."""

__version__ = "0.1.0"
