"""Experiment -> ordered steps: (repeat x concurrency | rate) x targets, together or one target at a time."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.config import Experiment


@dataclass(frozen=True)
class PlannedStep:
    step_id: int
    repeat: int
    concurrency: int
    targets: tuple[str, ...]   # target names driven at the same time in this step
    rate: float | None = None  # open loop: requests/s per target (concurrency is then the in-flight cap)


def plan_steps(exp: Experiment) -> list[PlannedStep]:
    """Repeats are the outer loop, so a drifting server shows up as a difference between repeats."""
    names = tuple(t.name for t in exp.targets)
    groups = [names] if exp.load.schedule == "together" else [(n,) for n in names]
    open_loop = exp.load.open_loop
    levels: list[tuple[int, float | None]] = (
        [(c, None) for c in exp.load.concurrency] if open_loop is None
        else [(open_loop.max_in_flight, r) for r in open_loop.rates])
    steps: list[PlannedStep] = []
    for repeat in range(exp.load.repeats):
        for c, rate in levels:
            for group in groups:
                steps.append(PlannedStep(len(steps), repeat, c, group, rate))
    return steps


def split_concurrency(total: int, workers: int) -> list[int]:
    """C requests over W workers as evenly as possible (shares differ by at most one)."""
    base, extra = divmod(total, workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]
