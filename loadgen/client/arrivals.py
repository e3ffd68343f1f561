"""Open-loop arrivals: when each request of a step is planned to be sent (constant, Poisson or gamma).

A target's schedule is one renewal process: inter-arrival gaps with mean 1/rate, drawn from a seeded generator;
constant gaps are exactly 1/rate, Poisson's exponential (CV 1), gamma's of shape `burstiness` (CV
1/sqrt(burstiness); 1 = Poisson, < 1 burstier, > 1 smoother; vLLM's `--burstiness`). The gaps are drawn with
mean 1 and divided by the rate, so every rate of a sweep replays the same pattern, only faster, and every step
the same sequence (as the prompt mix does). A target's W workers each take every W-th arrival of the one
schedule, so the target sees exactly the configured process, not a superposition of W thinner ones. A rate ramp
(load.ramp) maps the same unit-rate schedule through its profile (loadgen.client.ramps); a trace replay gives
each worker its own arrival times instead.

Overload: `load.max_in_flight` caps requests in flight per target (split over its workers). An arrival that
finds the cap reached waits for a free slot and is sent late, later arrivals queue behind it in order, and
each row keeps its planned `t_scheduled_ns` next to its real `t_sent_ns`, so lateness is visible in SQL
(queries/arrival_lateness.sql) and no arrival is dropped; the client's memory stays bounded by the cap.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from loadgen.client import ramps
from loadgen.errors import ConfigError

ARRIVALS = ("constant", "poisson", "gamma")
_OPEN_KEYS = ("rates", "arrival", "burstiness", "seed", "max_in_flight")


@dataclass(frozen=True)
class OpenLoopConfig:
    """`load.mode = "open"`: the rates to sweep (requests/s per target) and the arrival process."""

    rates: tuple[float, ...]
    arrival: str            # constant | poisson | gamma
    burstiness: float       # gamma shape
    seed: int
    max_in_flight: int      # per target: arrivals beyond it wait for a free slot and are sent late


@dataclass(frozen=True)
class ArrivalSpec:
    """One worker's part of one step's schedule: arrivals index, index + stride, ... of the target's."""

    arrival: str
    rate: float             # the target's total rate, requests/s (with a profile: its mean over the windows)
    burstiness: float
    seed: int
    index: int = 0
    stride: int = 1
    max_in_flight: int = 1 << 30  # this worker's share of load.max_in_flight
    profile: ramps.Profile | None = None   # a rate ramp (load.ramp): the rate over time instead of `rate`
    offsets: tuple[float, ...] | None = None  # trace replay: this worker's own arrivals, seconds after the start


def unit_gaps(arrival: str, burstiness: float, seed: int) -> Iterator[float]:
    """Inter-arrival gaps with mean 1, forever."""
    if arrival == "constant":
        while True:
            yield 1.0
    rng = random.Random(f"arrivals:{seed}")
    if arrival == "poisson":
        while True:
            yield rng.expovariate(1.0)
    shape = burstiness
    while True:
        yield rng.gammavariate(shape, 1.0 / shape)


def arrival_times(spec: ArrivalSpec) -> Iterator[tuple[int, float]]:
    """(arrival number, seconds after the step's start) of this worker's arrivals, in order: forever, or a
    trace's to its end."""
    if spec.offsets is not None:   # already this worker's share (loadgen.driver.shapes)
        yield from enumerate(spec.offsets)
        return
    u = 0.0   # the schedule's unit time: arrivals of a unit-rate process
    for n, gap in enumerate(unit_gaps(spec.arrival, spec.burstiness, spec.seed)):
        u += gap
        if n % spec.stride == spec.index:
            yield n, u / spec.rate if spec.profile is None else spec.profile.time_at(u)


def parse_open_loop(t: Any, mode: str, searching: bool = False) -> OpenLoopConfig | None:
    """The open-loop keys of [load] (`t` is config's table reader); None in closed mode, where they are errors.
    A capacity search chooses its own rates, so `rates` is then left out."""
    if mode != "open":
        for name in _OPEN_KEYS:
            if name in t.data and not (mode == "trace" and name == "max_in_flight"):
                raise ConfigError(f"load.{name}", "only applies to open-loop load",
                                  'set load.mode = "open" (and rates), or remove it')
        return None
    if "concurrency" in t.data:
        raise ConfigError("load.concurrency", "open-loop load has rates, not concurrency levels",
                          "remove concurrency and list load.rates (requests/s per target), or use mode = \"closed\"")
    if searching and "rates" in t.data:
        raise ConfigError("load.rates", "a capacity search chooses its own rates",
                          "remove rates and bound the search with search_min / search_max")
    rates = t.get("rates", list, [] if searching else ...)
    if not rates and not searching:
        raise ConfigError("load.rates", "is empty", "list the rates to sweep in requests/s, e.g. [0.5, 1, 2]")
    for i, r in enumerate(rates):
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise ConfigError(f"load.rates[{i}]", f"must be a number of requests/s > 0, got {r!r}",
                              "e.g. rates = [0.5, 1, 2]")
    if len(set(rates)) != len(rates) and "ramp" not in t.data:   # a ramp may come back down
        raise ConfigError("load.rates", "has a rate twice", "use `repeats` to run a rate again")
    arrival = t.get("arrival", str, "poisson")
    if arrival not in ARRIVALS:
        raise ConfigError("load.arrival", f"unknown arrival process {arrival!r}", f"use one of {', '.join(ARRIVALS)}")
    if "burstiness" in t.data and arrival != "gamma":
        raise ConfigError("load.burstiness", f"only applies to arrival = \"gamma\" (arrival is {arrival!r})",
                          'set arrival = "gamma" or remove burstiness')
    burstiness = t.get("burstiness", float, 1.0)
    if not math.isfinite(burstiness) or burstiness <= 0:
        raise ConfigError("load.burstiness", f"must be a gamma shape > 0, got {burstiness!r}",
                          "1 = Poisson, below 1 burstier, above 1 smoother")
    seed = t.get("seed", int, 0)
    cap = t.get("max_in_flight", int, 1024)
    if cap < 1:
        raise ConfigError("load.max_in_flight", f"must be >= 1, got {cap}",
                          "the most requests in flight per target; arrivals beyond it are sent late")
    return OpenLoopConfig(tuple(float(r) for r in rates), arrival, burstiness, seed, cap)
