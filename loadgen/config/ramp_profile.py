"""Load that changes during a step: a level (requests/s open loop, users closed loop) as a function of time
(config builds it; the worker follows it: loadgen.client.ramps).

A profile is contiguous pieces from the step's start: a hold at the first level through the warm-up, then the
windows (holds and ramps between levels, each ramp linear or exponential in time), then a hold at the last level
for ever (the drain). Open loop: arrival n of a unit-rate schedule (loadgen.client.arrivals.unit_gaps) is sent at
the time the integral of the rate reaches its unit time, the time change that turns a unit-rate Poisson process
into one of the profile's rate, and constant gaps into exact ones. Closed loop: user g (from 0) runs while the
level is at least g + 1, so the users in flight follow the level's whole part.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SHAPES = ("linear", "exponential")


@dataclass(frozen=True)
class Piece:
    """The level from `a` to `b` over `duration` seconds (`shape` hold: a == b; the last piece lasts for ever)."""

    duration: float
    a: float
    b: float
    shape: str = "hold"       # hold | linear | exponential
    window: bool = False      # a measurement window of its own (a steps row); warm-up and drain are not

    def _rate(self) -> float:
        """linear: level change per second; exponential: growth constant (1/s)."""
        if self.shape == "linear":
            return (self.b - self.a) / self.duration
        return math.log(self.b / self.a) / self.duration

    def level(self, tau: float) -> float:
        if self.shape == "hold" or self.a == self.b:
            return self.a
        if self.shape == "linear":
            return self.a + self._rate() * tau
        return self.a * math.exp(self._rate() * tau)

    def area(self, tau: float) -> float:
        """The level's integral over the piece's first `tau` seconds."""
        if self.shape == "hold" or self.a == self.b:
            return self.a * tau
        k = self._rate()
        if self.shape == "linear":
            return self.a * tau + k * tau * tau / 2
        return self.a * math.expm1(k * tau) / k

    def time_for(self, u: float) -> float:
        """The tau at which area(tau) = u (inside the piece)."""
        if self.shape == "hold" or self.a == self.b:
            return u / self.a
        k = self._rate()
        if self.shape == "linear":   # the root of k/2 tau^2 + a tau - u, in the form stable for any sign of k
            return 2 * u / (self.a + math.sqrt(max(self.a * self.a + 2 * k * u, 0.0)))
        return math.log1p(k * u / self.a) / k

    def crossing(self, h: float) -> float:
        """The tau at which a ramp's level equals h (between a and b)."""
        if self.shape == "linear":
            return (h - self.a) / self._rate()
        return math.log(h / self.a) / self._rate()


@dataclass(frozen=True)
class Profile:
    pieces: tuple[Piece, ...]

    def starts(self) -> list[float]:
        """Each piece's start, in seconds after the step's start."""
        out, t = [], 0.0
        for p in self.pieces:
            out.append(t)
            t += p.duration
        return out

    def windows(self) -> list[tuple[float, float, Piece]]:
        """(start, end, piece) of every window, in order."""
        return [(t, t + p.duration, p) for t, p in zip(self.starts(), self.pieces) if p.window]

    def level_at(self, t: float) -> float:
        for start, p in zip(self.starts(), self.pieces):
            if t < start + p.duration:
                return p.level(t - start)
        return self.pieces[-1].b

    def mean(self, t0: float, t1: float) -> float:
        """The level's mean over [t0, t1)."""
        return (self._area_to(t1) - self._area_to(t0)) / (t1 - t0)

    def mean_users(self, t0: float, t1: float) -> float:
        """The mean of the level's whole part over [t0, t1): users in a closed-loop ramp (user g runs while the
        level is at least g + 1)."""
        top = int(max(max(p.a, p.b) for p in self.pieces))
        inside = sum(max(min(end, t1) - max(start, t0), 0.0)
                     for h in range(1, top + 1) for start, end in self.active(h))
        return inside / (t1 - t0)

    def _area_to(self, t: float) -> float:
        total = 0.0
        for start, p in zip(self.starts(), self.pieces):
            total += p.area(min(max(t - start, 0.0), p.duration))
        return total

    def time_at(self, u: float) -> float:
        """The time at which the level's integral from the start reaches u: where the u-th unit-rate arrival
        falls."""
        for start, p in zip(self.starts(), self.pieces):
            whole = p.area(p.duration) if math.isfinite(p.duration) else math.inf
            if u <= whole:
                return start + min(p.time_for(u), p.duration)
            u -= whole
        raise AssertionError("the last piece lasts for ever")

    def active(self, h: float) -> list[tuple[float, float]]:
        """The intervals (start, end; end may be inf) in which the level is at least h."""
        out: list[tuple[float, float]] = []
        for start, p in zip(self.starts(), self.pieces):
            end = start + p.duration
            lo, hi = min(p.a, p.b), max(p.a, p.b)
            if lo >= h:
                span = (start, end)
            elif hi < h:
                continue
            else:   # a ramp that crosses h
                at = start + p.crossing(h)
                span = (at, end) if p.b > p.a else (start, at)
            if out and math.isclose(out[-1][1], span[0], abs_tol=1e-12):
                out[-1] = (out[-1][0], span[1])
            elif span[1] > span[0]:
                out.append(span)
        return out


def build(levels: Sequence[float], shape: str, ramp_s: float, hold_s: float, warmup_s: float) -> Profile:
    """Warm-up at the first level, then per level a hold of hold_s (a window, when > 0) and a ramp of ramp_s to
    the next (a window), then the drain at the last level."""
    pieces = [Piece(warmup_s, levels[0], levels[0])] if warmup_s > 0 else []
    for i, level in enumerate(levels):
        if hold_s > 0:
            pieces.append(Piece(hold_s, level, level, window=True))
        if i + 1 < len(levels):
            pieces.append(Piece(ramp_s, level, levels[i + 1], shape, window=True))
    pieces.append(Piece(math.inf, levels[-1], levels[-1]))
    return Profile(tuple(pieces))
