"""The capacity search: which load level to probe next, from the verdicts of the levels probed so far.

From a start level, up geometrically while levels pass (or down while they fail) until the verdict flips, then
bisect between the last pass and the first fail down to adjacent levels (closed loop: concurrency, whole
numbers) or to a relative tolerance (open loop: rates). The start defaults to the geometric middle of
[search_min, search_max], because the ends are the dear levels: a low level takes many serial requests to judge,
a level far past the capacity a long drain of queued requests. A level whose call is too close to the threshold
(its attainment interval straddles it) is run again, up to `max_runs` runs in all, before the search moves on;
after that its point estimate decides.

A twin-seeded search (search_start = "twin", docs/twin.md) starts at the twin's predicted capacity K and confirms
it with the fewest probes: K passes and K + 1 fails (or K fails and K - 1 passes) is an answer in two steps. When
the twin is wrong, the second probe agrees with the first, and the search goes on as any search from there.

`next_probe` is a pure function of the verdicts: the same verdicts always give the same path, so the search
needs no state of its own, and replaying it over a run's results continues it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.config.search import SearchConfig, round_level
from loadgen.results.slo import Verdict


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
    if cfg.seeds:
        reason = f"start at the twin's prediction {cfg.seeds[0].describe()}"
    walked = 0
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
        step = None
        if cfg.seeds and walked < 2 and (passed is None or failed is None):
            step = (_confirm if walked == 0 else _interval_edge)(cfg, level, verdict.passed)
        step = step or _next_level(cfg, passed, failed)
        if step is None:
            return None
        level, reason = step
        walked += 1


def _confirm(cfg: SearchConfig, level: float, passed: bool) -> tuple[float, str] | None:
    """The seeded search's second probe: the level next door, on the side the first verdict says the capacity's
    edge is (None at the range's end: the search goes on as usual)."""
    if passed:
        up = min(round_level(cfg, level * (1 + cfg.tolerance), above=level) if cfg.rates else level + 1, cfg.high)
        return (up, f"confirm the twin's prediction: {_fmt(level)} passed, the next level up") if up > level else None
    down = max(round_level(cfg, level / (1 + cfg.tolerance), above=cfg.low - 1) if cfg.rates else level - 1, cfg.low)
    return (down, f"confirm the twin's prediction: {_fmt(level)} failed, the next level down") if down < level else None


def _interval_edge(cfg: SearchConfig, level: float, passed: bool) -> tuple[float, str] | None:
    """The seeded search's third probe, when the second agreed with the first (the twin was off): just past the
    far end of the prediction's interval, or past the second probe where that already lay beyond it, where the
    capacity should be at the latest; the usual search after."""
    seed = cfg.seeds[0]
    if passed:
        edge = max(seed.high, level)
        up = min(round_level(cfg, edge * (1 + cfg.tolerance), above=edge) if cfg.rates else edge + 1, cfg.high)
        return (up, f"the twin was low: past {_fmt(edge)}, its interval's upper end or the last pass") \
            if up > level else None
    edge = min(seed.low, level)
    down = max(round_level(cfg, edge / (1 + cfg.tolerance), above=cfg.low - 1) if cfg.rates else edge - 1, cfg.low)
    return (down, f"the twin was high: past {_fmt(edge)}, its interval's lower end or the last fail") \
        if down < level else None


def _next_level(cfg: SearchConfig, passed: float | None, failed: float | None) -> tuple[float, str] | None:
    if failed is None:   # every level so far passed: go up
        assert passed is not None
        if passed >= cfg.high:
            return None
        up = min(round_level(cfg, passed * cfg.growth, above=passed), cfg.high)
        return up, f"up from a pass at {_fmt(passed)}"
    if passed is None:   # every level so far failed: go down
        if failed <= cfg.low:
            return None      # the capacity is below search_min
        down = max(round_level(cfg, failed / cfg.growth, above=cfg.low - 1), cfg.low)
        return min(down, failed - 1) if not cfg.rates else down, f"down from a fail at {_fmt(failed)}"
    if cfg.rates and failed / passed - 1 <= cfg.tolerance or not cfg.rates and failed - passed <= 1:
        return None
    middle = math.sqrt(passed * failed) if cfg.rates else (passed + failed) // 2
    reason = f"bisect between a pass at {_fmt(passed)} and a fail at {_fmt(failed)}"
    return round_level(cfg, middle, above=passed), reason


def _fmt(level: float) -> str:
    return f"{level:g}"
