"""Numbers in and out: read from the JSON servers send (server info, usage, timings), and counted in words."""

from __future__ import annotations


def as_int(value: object) -> int | None:
    """`value` when it is a whole number, else None: a missing, textual or boolean field is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def counted(n: int, noun: str) -> str:
    """`1 step`, `2 steps`: counts in the lines a person reads."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
