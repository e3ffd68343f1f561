"""The capacity search's keys of [load], parsed into a SearchConfig (the search itself: loadgen.plan.search)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from loadgen.errors import ConfigError

SEARCH_KEYS = ("search", "search_min", "search_max", "search_start", "search_growth", "search_tolerance",
               "search_max_runs", "search_twin")


@dataclass(frozen=True)
class TwinStart:
    """Where a twin-seeded search starts one target: the twin's predicted capacity, with its interval from the
    fit's residuals (loadgen/twin/seed.py)."""

    target: str
    level: float
    low: float
    high: float
    note: str = ""            # how it was predicted, for the log and steps.probe

    def describe(self) -> str:
        span = "" if self.low == self.level == self.high else f" ({self.low:g}-{self.high:g})"
        return f"{self.level:g}{span}"


@dataclass(frozen=True)
class SearchConfig:
    low: float                # search_min: the first level probed
    high: float               # search_max: the highest level probed
    growth: float = 2.0       # probing upward multiplies the level by this
    tolerance: float = 0.1    # open loop: bisection stops once fail / pass - 1 <= tolerance
    max_runs: int = 3         # runs of one level in all while its call is unclear
    rates: bool = False       # open loop: levels are request rates, else concurrency
    start: float | None = None  # the first level probed (None: search_min)
    twin: Any = None          # search_start = "twin": search_twin as written (a run id, or target -> twin file)
    seeds: tuple[TwinStart, ...] = ()   # the twin's predicted start of each target, set before the run

    @property
    def seeded(self) -> bool:
        return self.twin is not None

    def for_target(self, target: str) -> SearchConfig:
        """This target's search: a seeded one starts at its predicted capacity and confirms it next door."""
        seed = next((s for s in self.seeds if s.target == target), None)
        return self if seed is None else dataclasses.replace(self, start=seed.level, seeds=(seed,))


def round_level(cfg: SearchConfig, level: float, above: float) -> float:
    """Concurrency is a whole number above the last pass; a rate keeps 4 significant digits."""
    if cfg.rates:
        return float(f"{level:.4g}")
    return float(max(int(level), int(above) + 1))


def parse_search(t: Any, rates: bool) -> SearchConfig | None:
    """The search keys of [load] (`t` is config's table reader); None when the load is a grid."""
    kind = t.get("search", str, None)
    if kind is None:
        for name in SEARCH_KEYS[1:]:
            if name in t.data:
                raise ConfigError(f"load.{name}", "only applies to a capacity search", 'add search = "capacity"')
        return None
    if kind != "capacity":
        raise ConfigError("load.search", f"unknown search {kind!r}", 'use search = "capacity"')
    if "concurrency" in t.data:
        raise ConfigError("load.concurrency", "a capacity search chooses its own levels",
                          "remove concurrency and bound the search with search_min / search_max")
    if "repeats" in t.data:
        raise ConfigError("load.repeats", "a capacity search runs a level again only while its call is unclear",
                          "remove repeats; search_max_runs bounds the runs of one level")
    number = float if rates else int
    low = t.get("search_min", number, 1.0 if rates else 1)
    high = t.get("search_max", number)
    if not low > 0 or not math.isfinite(low):
        raise ConfigError("load.search_min", f"must be > 0, got {low!r}")
    if not high > low or not math.isfinite(high):
        raise ConfigError("load.search_max", f"must be above search_min = {low:g}, got {high!r}")
    twin = _twin_source(t, rates)
    start = None if twin is not None else t.get("search_start", number, None)
    if start is None:   # the geometric middle: it spares the dear ends of the range (module docstring)
        start = round_level(SearchConfig(low, high, rates=rates), math.sqrt(low * high), above=low - 1)
    if not low <= start <= high:
        raise ConfigError("load.search_start", f"must be within search_min..search_max, got {start!r}")
    growth = t.get("search_growth", float, 2.0)
    if not 1 < growth <= 16:
        raise ConfigError("load.search_growth", f"must be above 1 (at most 16), got {growth:g}", "e.g. 2: double")
    if "search_tolerance" in t.data and not rates:
        raise ConfigError("load.search_tolerance", "only applies to rates (open loop)",
                          "concurrency is bisected down to adjacent levels; remove it")
    tolerance = t.get("search_tolerance", float, 0.1)
    if not 0 < tolerance < 1:
        raise ConfigError("load.search_tolerance", f"must be a share between 0 and 1, got {tolerance:g}",
                          "e.g. 0.1: stop once the first fail is within 10% of the last pass")
    max_runs = t.get("search_max_runs", int, 3)
    if max_runs < 1:
        raise ConfigError("load.search_max_runs", f"must be >= 1, got {max_runs}")
    return SearchConfig(float(low), float(high), growth, tolerance, max_runs, rates, float(start), twin)


def _twin_source(t: Any, rates: bool) -> Any:
    """search_start = "twin": the search starts at a twin's predicted capacity (docs/twin.md); search_twin says
    which twin: a run id of the results folder (each target fitted from its namesake there) or a table of target
    -> twin file (or a [targets.twin]-like table). Checked against the targets by the experiment's parser."""
    if t.data.get("search_start") != "twin":
        if "search_twin" in t.data:
            raise ConfigError("load.search_twin", "only applies to search_start = \"twin\"",
                              'add search_start = "twin", or remove search_twin')
        return None
    t.get("search_start", str)
    if rates:
        raise ConfigError("load.search_start", "a twin predicts closed-loop levels only", "give a rate, or leave "
                          "search_start out")
    return t.get("search_twin", (str, dict))
