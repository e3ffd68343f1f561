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
