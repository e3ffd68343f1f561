"""Reading numbers out of JSON the servers send (server info, usage, timings)."""

from __future__ import annotations


def as_int(value: object) -> int | None:
    """`value` when it is a whole number, else None: a missing, textual or boolean field is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
