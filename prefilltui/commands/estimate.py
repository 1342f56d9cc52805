"""`prefilltui estimate` (placeholder until its issue lands)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("estimate", help="(not built yet)")
    p.set_defaults(func=lambda args: (print("prefilltui estimate: not built yet"), 1)[1])
