"""Open-loop arrivals: when each request of a step is planned to be sent (constant, Poisson or gamma).

A target's schedule is one renewal process: inter-arrival gaps with mean 1/rate, drawn from a seeded generator;
constant gaps are exactly 1/rate, Poisson's exponential (CV 1), gamma's of shape `burstiness` (CV
1/sqrt(burstiness); 1 = Poisson, < 1 burstier, > 1 smoother; vLLM's `--burstiness`). The gaps are drawn with
mean 1 and divided by the rate, so every rate of a sweep replays the same pattern, only faster, and every step
the same sequence (as the prompt mix does). A target's W workers each take every W-th arrival of the one
schedule, so the target sees exactly the configured process, not a superposition of W thinner ones. A rate ramp
(load.ramp) maps the same unit-rate schedule through its profile (loadgen.config.ramp_profile); a trace replay gives
each worker its own arrival times instead.

Overload: `load.max_in_flight` caps requests in flight per target (split over its workers). An arrival that
finds the cap reached waits for a free slot and is sent late, later arrivals queue behind it in order, and
each row keeps its planned `t_scheduled_ns` next to its real `t_sent_ns`, so lateness is visible in SQL
(queries/arrival_lateness.sql) and no arrival is dropped; the client's memory stays bounded by the cap.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from loadgen.config.ramp_profile import Profile


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
    profile: Profile | None = None   # a rate ramp (load.ramp): the rate over time instead of `rate`
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
