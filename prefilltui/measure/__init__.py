"""Measuring: the I/O side. Probes (probe, sse), discovery and tokenize (server),
``/metrics`` scraping (metrics_hook), the sweep runner thread (sweep), the prefix-cache
and depth requests, the JSONL run file, and GPU/CPU telemetry. Imports the model,
never the renderers or the UI.
"""
