"""One clock for every timestamp: monotonic nanoseconds shifted onto the wall clock once per process.

`time.perf_counter_ns()` never jumps, so gaps are exact; adding one offset taken at import pairs it with
`time.time_ns()`, so rows from different processes and nodes can be lined up (to NTP accuracy) while intervals
inside a process stay monotonic. The anchor is recorded with every run and worker.
"""

from __future__ import annotations

import time

_ANCHOR_WALL_NS = time.time_ns()
_ANCHOR_MONO_NS = time.perf_counter_ns()
_OFFSET_NS = _ANCHOR_WALL_NS - _ANCHOR_MONO_NS
_perf_counter_ns = time.perf_counter_ns


def now_ns() -> int:
    """Wall-aligned monotonic time in ns (the only clock loadgen writes)."""
    return _perf_counter_ns() + _OFFSET_NS


def anchor() -> dict[str, int]:
    """The pair of readings this process maps its monotonic clock with."""
    return {"wall_ns": _ANCHOR_WALL_NS, "monotonic_ns": _ANCHOR_MONO_NS}
