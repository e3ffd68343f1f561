"""`load.ramp`: the level moves between the listed levels during one step instead of stepping from one to the next.

Open loop the rates, closed loop the users (concurrency) ramp linearly or exponentially over `ramp_s` between
consecutive levels, each level optionally held for `hold_s` around its ramps. The load runs on without a break;
each ramp and each hold is a window of its own, written as a steps row of its own (docs/workloads.md), so every
query reads the segments as it reads steps. The profile itself: loadgen.config.ramp_profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.config.ramp_profile import SHAPES, Profile, build
from loadgen.errors import ConfigError
from loadgen.keys import Bounds, Choice, Key

# [load]'s ramp keys: the level ramps between the listed levels (rates or concurrency) within one step
RAMP_KEYS = (
    Key("ramp", str, None, "the level ramps between the listed levels within one step (docs/workloads.md)",
        Choice(SHAPES, "ramp")),
    Key("ramp_s", float, None, "each ramp between two levels, seconds", Bounds(0, above=True), shown="measure_s"),
    Key("hold_s", float, 0.0, "each level held before and after its ramps, seconds (0: no hold windows)", Bounds(0)),
)

_NOT_WITH_RAMP = ("requests", "search", "stop_after_slo_failures", "min_measured_requests", "max_measure_s")


@dataclass(frozen=True)
class RampConfig:
    shape: str               # linear | exponential
    levels: tuple[float, ...]  # rates (open loop) or users (closed loop), in the order visited
    ramp_s: float            # each ramp between two levels
    hold_s: float = 0.0      # each level held before and after its ramps (0: no hold windows)

    def profile(self, warmup_s: float) -> Profile:
        return build(self.levels, self.shape, self.ramp_s, self.hold_s, warmup_s)

    def describe(self) -> str:
        """e.g. "linear ramp 1 -> 8 -> 32, 30 s each, holds of 10 s"."""
        holds = f", holds of {self.hold_s:g} s" if self.hold_s else ""
        return (f"{self.shape} ramp {' -> '.join(f'{v:g}' for v in self.levels)}, {self.ramp_s:g} s each{holds}")

    @property
    def windows(self) -> int:
        """Windows (steps rows) one ramp step writes."""
        return len(self.levels) - 1 + (len(self.levels) if self.hold_s > 0 else 0)


def ramp_given(t: Any) -> bool:
    """Whether [load] asks for a ramp (levels may then repeat: up and down again)."""
    return "ramp" in t.data


def parse_ramp(t: Any, levels: list[float], measure_s: float) -> RampConfig | None:
    """The ramp keys of [load] (`t` is config's table reader) over the levels already read; None without `ramp`."""
    shape = t.read("ramp")
    if shape is None:
        for name in ("ramp_s", "hold_s"):
            if name in t.data:
                raise ConfigError(f"load.{name}", "only applies to a ramp", 'add ramp = "linear" or "exponential"')
        return None
    for name in _NOT_WITH_RAMP:
        if name in t.data:
            raise ConfigError(f"load.{name}", "cannot be combined with a ramp",
                              "remove it (a ramp's windows are its ramps and holds)")
    if len(levels) < 2:
        raise ConfigError("load.ramp", f"needs two levels or more to ramp between, got {levels}",
                          "e.g. rates = [1, 16] (open loop) or concurrency = [1, 32]")
    if any(a == b for a, b in zip(levels, levels[1:])):
        raise ConfigError("load.ramp", f"has the same level twice in a row ({levels})",
                          "hold a level with hold_s instead")
    ramp_s, hold_s = t.read("ramp_s", measure_s), t.read("hold_s")
    return RampConfig(shape, tuple(float(v) for v in levels), ramp_s, hold_s)
