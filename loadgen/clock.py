"""One clock for every timestamp: monotonic nanoseconds shifted onto the wall clock by one offset per machine boot.

`time.perf_counter_ns()` (CLOCK_MONOTONIC on Linux, one counter for every process of a boot) never jumps, so gaps
are exact; adding an offset taken once pairs it with `time.time_ns()`, so rows from different nodes can be lined
up (to NTP accuracy) while intervals stay monotonic.

The offset is shared, not taken per process: the first loadgen process takes it and leaves it in
`$LOADGEN_CLOCK_ANCHOR` (boot id, wall and monotonic reading), and every process started from it on the same boot
(the local Ray and its workers, emulators, a job's actors through its runtime env) uses the same one. A window's
end stamped by the driver is then compared with a worker's send times on one clock: with an offset of its own,
a worker that started after the wall clock was stepped (NTP, a VM paused and resumed) disagrees with the driver by
the step (a test suite saw 150 ms), and requests fall on the wrong side of a window. The anchor is recorded with
every run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ANCHOR_ENV = "LOADGEN_CLOCK_ANCHOR"


def _boot_id() -> str:
    """This boot's id (Linux); elsewhere none, and no anchor is shared."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _take_anchor() -> tuple[int, int, bool]:
    """The inherited anchor when it was taken on this boot; else a new one, left for the processes started from
    this one."""
    boot = _boot_id()
    inherited = os.environ.get(ANCHOR_ENV, "").split(":")
    if boot and len(inherited) == 3 and inherited[0] == boot:
        try:
            return int(inherited[1]), int(inherited[2]), True
        except ValueError:
            pass   # not ours: a new one replaces it
    wall, mono = time.time_ns(), time.perf_counter_ns()
    if boot:
        os.environ[ANCHOR_ENV] = f"{boot}:{wall}:{mono}"
    return wall, mono, False


_ANCHOR_WALL_NS, _ANCHOR_MONO_NS, _INHERITED = _take_anchor()
_OFFSET_NS = _ANCHOR_WALL_NS - _ANCHOR_MONO_NS
_perf_counter_ns = time.perf_counter_ns


def now_ns() -> int:
    """Wall-aligned monotonic time in ns (the only clock loadgen writes)."""
    return _perf_counter_ns() + _OFFSET_NS


def anchor() -> dict[str, int]:
    """The pair of readings this process maps its monotonic clock with."""
    return {"wall_ns": _ANCHOR_WALL_NS, "monotonic_ns": _ANCHOR_MONO_NS}


def shared_env() -> dict[str, str]:
    """The variable that gives processes started elsewhere (the workers of a job that joins a running cluster)
    this process's anchor; one on another boot takes its own. Empty when this process inherited it: then its
    workers inherit it the same way (and naming it again in a job's runtime env would conflict with the job's)."""
    value = os.environ.get(ANCHOR_ENV)
    return {ANCHOR_ENV: value} if value and not _INHERITED else {}
