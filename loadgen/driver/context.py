"""What every part of a run's driver shares: the run's context (RunContext), the stop of a step that broke a
stop rule (StepAborted), and how actors are created (`actor`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from loadgen.config import Experiment, TargetConfig
from loadgen.driver import stop
from loadgen.driver.progress import Console
from loadgen.driver.resume import ResumeState
from loadgen.plan.steps import Judge, Verdicts
from loadgen.results import analysis

START_DELAY_S = 0.5         # time for every worker to receive `start_step` before the shared start instant


def actor(cls: type) -> Any:
    """An @ray.remote class as Ray made it (an ActorClass with .options and .remote). mypy applies no class
    decorator and sees the plain class, so the actors are created through this: their handles are Any."""
    return cls


class StepAborted(Exception):
    """A step broke a stop rule (error budget, a dead worker under on_worker_death = "stop"): the run ends
    after the step's rows are written; the message says why."""


@dataclass
class RunContext:
    """What every part of a run's driver needs: the experiment, where its rows go, how it reports, and how many
    steps it has run (the next step's id)."""

    exp: Experiment
    run_id: str
    results: Path
    sink: Any                         # the ResultsSink actor
    console: Console                  # the run's output: lines, and a step's live line on a terminal
    steps_run: int = 0
    sink_name: str = ""               # workers find the sink by this name (one per driver: a resume makes its own)
    resume: ResumeState | None = None  # what an earlier driver of this run left (--resume)
    dropped: dict[str, str] = field(default_factory=dict)   # target -> why its server is gone for the rest
    deaths: dict[str, int] = field(default_factory=dict)    # target -> times its server died in this run
    started_at_ns: int = 0            # the run's start (its row says it)
    start_delay_s: float = START_DELAY_S   # from a step's orders to its shared start (doubles after a late start)
    superseded: list[int] = field(default_factory=list)     # this driver's step ids run again (a late start)

    @property
    def log(self) -> Callable[[str], None]:
        return self.console.line

    @property
    def log_dir(self) -> Path:
        return self.results / "logs" / f"run_id={self.run_id}"

    def judge(self, targets: tuple[TargetConfig, ...]) -> Judge:
        """Verdicts of the run's finished steps for these targets, read back with the SQL that reports them
        (after a flush, so that the files hold every row sent so far)."""
        names = [t.name for t in targets]

        def judge() -> Verdicts:
            stop.during("the judge")
            ray.get(self.sink.flush.remote())
            verdicts = analysis.level_verdicts(self.results, self.run_id, names)
            stop.check()   # a stop signal during the SQL let it finish: acted on here
            return verdicts
        return judge
