"""The capacity search: which load level to probe next, from the verdicts of the levels probed so far.

From a start level, up geometrically while levels pass (or down while they fail) until the verdict flips, then
bisect between the last pass and the first fail down to adjacent levels (closed loop: concurrency, whole
numbers) or to a relative tolerance (open loop: rates). The start defaults to the geometric middle of
[search_min, search_max], because the ends are the dear levels: a low level takes many serial requests to judge,
a level far past the capacity a long drain of queued requests. A level whose call is too close to the threshold
(its attainment interval straddles it) is run again, up to `max_runs` runs in all, before the search moves on;
after that its point estimate decides.

`next_probe` is a pure function of the verdicts: the same verdicts always give the same path, so the search
needs no state of its own, and replaying it over a run's results continues it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from loadgen.errors import ConfigError

SEARCH_KEYS = ("search", "search_min", "search_max", "search_start", "search_growth", "search_tolerance",
               "search_max_runs")


@dataclass(frozen=True)
class SearchConfig:
    low: float                # search_min: the first level probed
    high: float               # search_max: the highest level probed
    growth: float = 2.0       # probing upward multiplies the level by this
    tolerance: float = 0.1    # open loop: bisection stops once fail / pass - 1 <= tolerance
    max_runs: int = 3         # runs of one level in all while its call is unclear
    rates: bool = False       # open loop: levels are request rates, else concurrency
    start: float | None = None  # the first level probed (None: search_min)


@dataclass(frozen=True)
class Verdict:
    """One level's SLO call, pooled over its runs (SQL: level_slo)."""

    passed: bool
    clear: bool               # the attainment interval does not straddle the threshold
    runs: int


@dataclass(frozen=True)
class Probe:
    level: float
    reason: str               # recorded in steps.probe: why the search chose this level


def next_probe(cfg: SearchConfig, verdicts: dict[float, Verdict]) -> Probe | None:
    """The next level to run, or None when the search is done."""
    passed: float | None = None
    failed: float | None = None
    level = cfg.low if cfg.start is None else cfg.start
    reason = "start at search_min" if cfg.start is None else "start"
    while True:
        verdict = verdicts.get(level)
        if verdict is None:
            return Probe(level, reason)
        if not verdict.clear and verdict.runs < cfg.max_runs:
            return Probe(level, f"run {verdict.runs + 1} at {_fmt(level)}: too close to the threshold to call")
        if verdict.passed:
            passed = level
        else:
            failed = level
        step = _next_level(cfg, passed, failed)
        if step is None:
            return None
        level, reason = step


def _next_level(cfg: SearchConfig, passed: float | None, failed: float | None) -> tuple[float, str] | None:
    if failed is None:   # every level so far passed: go up
        assert passed is not None
        if passed >= cfg.high:
            return None
        up = min(_round(cfg, passed * cfg.growth, above=passed), cfg.high)
        return up, f"up from a pass at {_fmt(passed)}"
    if passed is None:   # every level so far failed: go down
        if failed <= cfg.low:
            return None      # the capacity is below search_min
        down = max(_round(cfg, failed / cfg.growth, above=cfg.low - 1), cfg.low)
        return min(down, failed - 1) if not cfg.rates else down, f"down from a fail at {_fmt(failed)}"
    if cfg.rates and failed / passed - 1 <= cfg.tolerance or not cfg.rates and failed - passed <= 1:
        return None
    middle = math.sqrt(passed * failed) if cfg.rates else (passed + failed) // 2
    return _round(cfg, middle, above=passed), f"bisect between a pass at {_fmt(passed)} and a fail at {_fmt(failed)}"


def _round(cfg: SearchConfig, level: float, above: float) -> float:
    """Concurrency is a whole number above the last pass; a rate keeps 4 significant digits."""
    if cfg.rates:
        return float(f"{level:.4g}")
    return float(max(int(level), int(above) + 1))


def _fmt(level: float) -> str:
    return f"{level:g}"


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
    start = t.get("search_start", number, None)
    if start is None:   # the geometric middle: it spares the dear ends of the range (module docstring)
        start = _round(SearchConfig(low, high, rates=rates), math.sqrt(low * high), above=low - 1)
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
    return SearchConfig(float(low), float(high), growth, tolerance, max_runs, rates, float(start))
