"""The capacity search's keys of [load], parsed into a SearchConfig (the search itself: loadgen.plan.search)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from loadgen.errors import ConfigError
from loadgen.keys import REQUIRED, Bounds, Choice, Key

# [load]'s capacity-search keys (docs/capacity-search.md): levels are concurrency, or rates in open loop
SEARCH_KEYS = (
    Key("search", str, None, "\"capacity\": each target's levels are chosen from its finished steps' SLO verdicts",
        Choice(("capacity",), "search"), 'use search = "capacity"'),
    Key("search_min", (int, float), 1, "the lowest level probed (a whole number in closed loop)",
        Bounds(0, above=True)),
    Key("search_max", (int, float), REQUIRED, "the highest level probed", shown="required with search"),
    Key("search_start", (int, float, str), None, "the first level probed, or \"twin\": a twin's predicted capacity",
        shown="the geometric middle of search_min..search_max"),
    Key("search_growth", float, 2.0, "probing upward multiplies the level by this", Bounds(1, 16, above=True),
        "e.g. 2: double"),
    Key("search_tolerance", float, 0.1, "open loop: bisection stops once fail / pass - 1 <= this",
        Bounds(0, 1, above=True, below=True, what="a share"),
        "e.g. 0.1: stop once the first fail is within 10% of the last pass"),
    Key("search_max_runs", int, 3, "runs of one level in all while its call is unclear", Bounds(1)),
    Key("search_twin", (str, dict), REQUIRED, "search_start = \"twin\": a run id to fit each target's twin from, "
        "or a table of target name -> twin file", shown="required with search_start = \"twin\""),
)


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
    if t.read("search") is None:
        for name in (k.name for k in SEARCH_KEYS[1:]):
            if name in t.data:
                raise ConfigError(f"load.{name}", "only applies to a capacity search", 'add search = "capacity"')
        return None
    if "concurrency" in t.data:
        raise ConfigError("load.concurrency", "a capacity search chooses its own levels",
                          "remove concurrency and bound the search with search_min / search_max")
    if "repeats" in t.data:
        raise ConfigError("load.repeats", "a capacity search runs a level again only while its call is unclear",
                          "remove repeats; search_max_runs bounds the runs of one level")
    number = float if rates else int
    low = t.read("search_min", 1.0 if rates else 1, kind=number)
    high = t.read("search_max", kind=number)
    if not high > low or not math.isfinite(high):
        raise ConfigError("load.search_max", f"must be above search_min = {low:g}, got {high!r}")
    twin = _twin_source(t, rates)
    start = None if twin is not None else t.read("search_start", kind=number)
    if start is None:   # the geometric middle: it spares the dear ends of the range (module docstring)
        start = round_level(SearchConfig(low, high, rates=rates), math.sqrt(low * high), above=low - 1)
    if not low <= start <= high:
        raise ConfigError("load.search_start", f"must be within search_min..search_max, got {start!r}")
    growth = t.read("search_growth")
    if "search_tolerance" in t.data and not rates:
        raise ConfigError("load.search_tolerance", "only applies to rates (open loop)",
                          "concurrency is bisected down to adjacent levels; remove it")
    tolerance, max_runs = t.read("search_tolerance"), t.read("search_max_runs")
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
    t.read("search_start", kind=str)
    if rates:
        raise ConfigError("load.search_start", "a twin predicts closed-loop levels only", "give a rate, or leave "
                          "search_start out")
    return t.read("search_twin")
