"""The pure model: types, fits, roofline, catalog, analysis, diagnosis math.

No I/O (no sockets, NVML, psutil) and no import of ``measure`` or ``render``; the
import-linter contracts in pyproject.toml keep it so.
"""
