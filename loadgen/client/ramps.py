"""A ramp on the worker: each closed-loop user runs while the profile's level (loadgen.config.ramp_profile) is at
least its user number + 1."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from loadgen.clock import now_ns
from loadgen.config.ramp_profile import Profile

_POLL_S = 0.1             # a user waiting for its next interval checks this often whether the step ended


@dataclass(frozen=True)
class UserRamp:
    """One worker's users of a closed-loop ramp: users index, index + stride, ... of the target's."""

    profile: Profile
    index: int
    stride: int

    def intervals(self, slot: int) -> list[tuple[float, float]]:
        """When this worker's `slot`-th user runs: while the level is at least its user number + 1."""
        return self.profile.active(slot * self.stride + self.index + 1)

    def running(self, t: float) -> int:
        """This worker's users that run `t` seconds after the step's start."""
        return len(range(self.index, math.floor(self.profile.level_at(t) + 1e-9), self.stride))

    def plan(self, slots: int, warmup_ns: float, stagger: float) -> list[tuple[list[tuple[float, float]], float]]:
        """(intervals, first delay in ns) of each of this worker's users: those running from the start begin
        spread over the warm-up, as a fixed level's slots do."""
        spans = [self.intervals(k) for k in range(slots)]
        first = sum(1 for s in spans if s and s[0][0] == 0) or 1
        return [(s, (k + stagger) * warmup_ns / first) for k, s in enumerate(spans)]


async def follow(slot: Callable[[float, int | None], Awaitable[None]], intervals: list[tuple[float, float]],
                 t_start_ns: int, first_delay_ns: float, issuing: Callable[[], bool]) -> None:
    """Run one closed-loop user through its intervals: `slot(delay_ns, until_ns)` sends requests one after
    another from `delay_ns` from now until `until_ns` (None: until the step ends). A user active from the start
    starts `first_delay_ns` late (starts spread over the warm-up, as a fixed level's are)."""
    for on, off in intervals:
        t_on = t_start_ns + round(on * 1e9) + (first_delay_ns if on == 0 else 0)
        while issuing() and now_ns() < t_on - _POLL_S * 1e9:
            await asyncio.sleep(_POLL_S)   # in short naps: a step that ends meanwhile is not held up
        if not issuing():
            return
        await slot(max(t_on - now_ns(), 0), None if math.isinf(off) else t_start_ns + round(off * 1e9))
