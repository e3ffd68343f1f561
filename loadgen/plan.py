"""Experiment -> ordered steps: (repeat x concurrency) x targets, together or one target at a time."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.config import Experiment


@dataclass(frozen=True)
class PlannedStep:
    step_id: int
    repeat: int
    concurrency: int
    targets: tuple[str, ...]   # target names driven at the same time in this step


def plan_steps(exp: Experiment) -> list[PlannedStep]:
    """Repeats are the outer loop, so a drifting server shows up as a difference between repeats."""
    names = tuple(t.name for t in exp.targets)
    groups = [names] if exp.load.schedule == "together" else [(n,) for n in names]
    steps: list[PlannedStep] = []
    for repeat in range(exp.load.repeats):
        for c in exp.load.concurrency:
            for group in groups:
                steps.append(PlannedStep(len(steps), repeat, c, group))
    return steps


def split_concurrency(total: int, workers: int) -> list[int]:
    """C requests over W workers as evenly as possible (shares differ by at most one)."""
    base, extra = divmod(total, workers)
    return [base + (1 if i < extra else 0) for i in range(workers)]
