"""Experiment -> steps, one at a time: a plan sees the verdicts of finished steps before it names the next.

A grid walks its levels (repeat x level x target group) and may drop a target that failed the SLO at
`stop_after_slo_failures` levels in a row; a capacity search (loadgen.plan.search) chooses each target's next level
from its own verdicts. Either way a step is an ordinary step: every query and the report read it the same.
Verdicts come from SQL over the results written so far (runner: `level_slo`), never from the plan's memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from loadgen.config import Experiment, LoadConfig, TargetConfig
from loadgen.plan.search import next_probe
from loadgen.results.slo import Verdict

# target -> load level (concurrency, or rate in open loop) -> that level's SLO verdict, pooled over its runs
Verdicts = Mapping[str, Mapping[float, Verdict]]
Judge = Callable[[], Verdicts]
SEARCH_WINDOW_GROWTH = 50


@dataclass(frozen=True)
class TargetLoad:
    """What one target runs in a step."""

    target: str
    concurrency: int             # closed loop: streams (a user ramp: its most users); open loop: the in-flight cap
    rate: float | None = None    # open loop: requests/s (a trace: the replay's mean rate at its speedup)
    probe: str | None = None     # capacity search: why this level (steps.probe)
    repeat: int | None = None    # capacity search: earlier runs of this level (else the step's repeat)
    speedup: float | None = None  # trace replay: the trace's times are divided by this
    first_window: float | None = None  # a ramp: the level its first window records (how a resume knows it)

    @property
    def level(self) -> float:
        if self.first_window is not None:
            return self.first_window
        return self.rate if self.rate is not None else float(self.concurrency)

    def describe(self) -> str:
        if self.speedup is not None:
            return f"trace x{self.speedup:g} ({self.rate:.3g}/s)"
        if self.first_window is not None:
            return "ramp"
        return f"C={self.concurrency}" if self.rate is None else f"rate={self.rate:g}/s"


@dataclass(frozen=True)
class PlannedStep:
    step_id: int
    repeat: int                  # grid: the repeat (a search: 0, each load has its own)
    loads: tuple[TargetLoad, ...]  # the targets driven at the same time, each at its own level
    min_measured: int | None = None  # closed loop: requests the window must hold (search: a clear call)
    measure_s: float | None = None   # open loop: the window's length (search: long enough for a clear call)
    max_measure_s: float | None = None  # closed loop: the longest the window may be extended to hold them
    width: int = 1                   # step ids it uses: a ramp writes one steps row per window, from step_id on

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(load.target for load in self.loads)


class Plan(Protocol):
    total: int | None            # steps the plan will run, when known up front (a grid)

    def next_step(self, step_id: int, judge: Judge) -> PlannedStep | None:
        """The step to run as `step_id`, or None when the plan is done."""

    def drop(self, target: str) -> None:
        """Leave `target` out of every step from now on (its server is gone: runner, on_server_death)."""


def make_plan(exp: Experiment, targets: tuple[TargetConfig, ...], done: frozenset = frozenset()) -> Plan:
    """The plan for one server configuration's targets (a fleet runs one per configuration). `done`: a resumed
    run's finished grid steps (loadgen.driver.resume); a search needs nothing, it resumes from its verdicts."""
    return SearchPlan(exp, targets) if exp.load.search else GridPlan(exp, targets, done)


def grid_steps(exp: Experiment, targets: tuple[TargetConfig, ...]) -> list[PlannedStep]:
    """Every step of a grid. Repeats are the outer loop, so a drifting server shows up as a difference between
    repeats."""
    names = tuple(t.name for t in targets)
    groups = [names] if exp.load.schedule == "together" else [(n,) for n in names]
    levels = _grid_levels(exp.load)
    steps: list[PlannedStep] = []
    width = exp.load.ramp.windows if exp.load.ramp else 1
    for repeat in range(exp.load.repeats):
        for level in levels:
            for group in groups:
                loads = tuple(replace(level, target=n) for n in group)
                steps.append(PlannedStep(len(steps), repeat, loads, width=width))
    return steps


def _grid_levels(load: LoadConfig) -> list[TargetLoad]:
    """A grid's levels, each a TargetLoad without its target: concurrency levels, rates, a trace's speedups, or
    the one ramp (its most users closed loop, the in-flight cap open loop)."""
    open_loop, trace, ramp = load.open_loop, load.trace, load.ramp
    if trace is not None:
        return [TargetLoad("", trace.max_in_flight, trace.rate(s), speedup=s) for s in trace.speedups]
    if ramp is not None:
        profile = ramp.profile(load.warmup_s)
        start, end, _ = profile.windows()[0]   # its level as the first window's steps row records it (shapes)
        if open_loop is not None:
            first = profile.mean(start, end)
            return [TargetLoad("", open_loop.max_in_flight, first, first_window=first)]
        return [TargetLoad("", int(max(ramp.levels)), None, first_window=float(round(profile.mean_users(start, end))))]
    if open_loop is not None:
        return [TargetLoad("", open_loop.max_in_flight, r) for r in open_loop.rates]
    return [TargetLoad("", c) for c in load.concurrency]


class GridPlan:
    """The grid's steps in order; with stop_after_slo_failures, a target that failed that many levels in a row
    (by level, over the repeats so far) is left out of the steps that remain. A resumed run skips the steps
    whose (repeat, targets and levels) finished before (`done`)."""

    def __init__(self, exp: Experiment, targets: tuple[TargetConfig, ...], done: frozenset = frozenset()) -> None:
        self.steps = grid_steps(exp, targets)
        self.done = done
        self.dropped: set[str] = set()
        self.stop_after = exp.load.stop_after_slo_failures
        self.total: int | None = None if self.stop_after else len(self.steps)
        self.position = 0

    def next_step(self, step_id: int, judge: Judge) -> PlannedStep | None:
        while self.position < len(self.steps):
            step = self.steps[self.position]
            self.position += 1
            stopped = _stopped_targets(judge(), self.stop_after) if self.stop_after else set()
            loads = tuple(load for load in step.loads if load.target not in stopped | self.dropped)
            if loads and grid_key(step.repeat, loads) not in self.done:
                return PlannedStep(step_id, step.repeat, loads, width=step.width)
        return None

    def drop(self, target: str) -> None:
        self.dropped.add(target)


def grid_key(repeat: int, loads: tuple[TargetLoad, ...]) -> tuple[int, frozenset]:
    """A grid step as a resume recognises it: its repeat and each target's level (loadgen.driver.resume.GridKey)."""
    return repeat, frozenset((load.target, load.level) for load in loads)


def _stopped_targets(verdicts: Verdicts, in_a_row: int) -> set[str]:
    """Targets whose verdicts, by ascending level, hold `in_a_row` consecutive fails."""
    stopped = set()
    for target, levels in verdicts.items():
        run = 0
        for level in sorted(levels):
            run = run + 1 if not levels[level].passed else 0
            if run >= in_a_row:
                stopped.add(target)
    return stopped


class SearchPlan:
    """Each target searched on its own verdicts; together, a step drives every target still searching, each at
    its own next level; one at a time, a target's search runs to its end before the next starts."""

    total: int | None = None   # a search's length is known only at its end

    def __init__(self, exp: Experiment, targets: tuple[TargetConfig, ...]) -> None:
        assert exp.load.search is not None and exp.slo is not None
        self.search = exp.load.search
        self.names = tuple(t.name for t in targets)
        self.together = exp.load.schedule == "together"
        self.open_loop = exp.load.open_loop
        self.min_measured = exp.load.min_measured or exp.slo.requests_for_clear_pass()
        self.measure_s = exp.load.measure_s
        # One longer window costs less than running a level again (warm-up and drain each time), so unless the
        # user bounded it, a search window may grow to SEARCH_WINDOW_GROWTH x measure_s for a clear call.
        self.max_measure_s = exp.load.max_measure_s or SEARCH_WINDOW_GROWTH * exp.load.measure_s

    def next_step(self, step_id: int, judge: Judge) -> PlannedStep | None:
        verdicts = judge()
        loads: list[TargetLoad] = []
        for name in self.names:
            mine = verdicts.get(name, {})
            probe = next_probe(self.search.for_target(name), dict(mine))
            if probe is None:
                continue
            earlier = mine.get(probe.level)
            loads.append(self._load(name, probe.level, probe.reason, earlier.runs if earlier else 0))
            if not self.together:
                break
        if not loads:
            return None
        return PlannedStep(step_id, 0, tuple(loads), None if self.open_loop else self.min_measured,
                           self._window_s(loads), self.max_measure_s)

    def drop(self, target: str) -> None:
        self.names = tuple(n for n in self.names if n != target)

    def _load(self, name: str, level: float, reason: str, runs: int) -> TargetLoad:
        if self.open_loop is None:
            return TargetLoad(name, int(level), None, reason, runs)
        return TargetLoad(name, self.open_loop.max_in_flight, level, reason, runs)

    def _window_s(self, loads: list[TargetLoad]) -> float | None:
        """Open loop: a window long enough that the slowest target's arrivals give a clear call."""
        if self.open_loop is None:
            return None
        return max(self.measure_s, *(self.min_measured / (load.rate or 1.0) for load in loads))


def split_concurrency(total: int, workers: int) -> list[int]:
    """C requests over W workers as evenly as possible (shares differ by at most one)."""
    base, extra = divmod(total, workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]
