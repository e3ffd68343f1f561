"""Executes a validated experiment on Ray: servers, workers, steps, progress, and the run's bookkeeping.

Order of a run: launch the servers it owns, create the sink and the workers, preflight every target (server
info; a target that is unreachable or not SGLang stops the run before any load), then for each step: flush
the cache, snapshot the server, start every worker at one shared instant, wait out warm-up and the window,
keep the load through the drain until every measured request is done (or the drain times out), cut the rest,
snapshot again, write the step rows. Whatever fails, the run row is finished and every batch is flushed.

This module holds the run and its stages; the parts live beside it: a stage's bring-up and tear-down
(driver/bringup.py), one step (driver/step.py), the rows the driver writes itself (driver/rows.py), what they
share (driver/context.py: RunContext).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from loadgen.clock import now_ns
from loadgen.config import Experiment, TargetConfig
from loadgen.driver import stop, twinseed, twinwatch
from loadgen.driver.bringup import Target, bring_up, tear_down
from loadgen.driver.context import START_DELAY_S, RunContext, StepAborted, actor
from loadgen.driver.placement import LocalPlacement, placement_for
from loadgen.driver.progress import Console
from loadgen.driver.resume import ResumeState
from loadgen.driver.rows import write_run
from loadgen.driver.step import run_step
from loadgen.errors import ConfigError
from loadgen.plan.steps import make_plan
from loadgen.results.sink import ResultsSink, check_writable, flush
from loadgen.values import counted

__all__ = ["START_DELAY_S", "RunResult", "run_experiment"]


@dataclass
class RunResult:
    run_id: str
    results_dir: str
    status: str
    reason: str


@stop.handling()   # SIGINT/SIGTERM stop the run cleanly (loadgen.driver.stop), also when called as a library
def run_experiment(exp: Experiment, results_dir: str, log: Callable[[str], None] = print,
                   resume: ResumeState | None = None, report: Callable[[RunResult], None] | None = None,
                   terminal: TextIO | None = None) -> RunResult:
    """Run every step of `exp`, writing results under `results_dir`; returns how the run ended. `resume`
    (loadgen.driver.resume.load_resume): append to that run, keeping its finished steps and running the rest.
    `report`: what the caller prints and writes once the steps are done (the answer, the summary); part of the
    run, so the run row is written after it, and a stop signal during it leaves the run incomplete. A stop
    signal raises stop.Stopped once the run is recorded as stopped. `terminal`: the terminal `log` prints to,
    where each step gets a live line (None: `log` writes a log)."""
    stop.during("start-up")   # until the servers come up: the run's row, its sink
    if any(t.twin is not None for t in exp.targets):   # twins run in virtual time: loadgen.twin.predict
        raise ConfigError("targets", "a twin is predicted, not run on servers", "use `loadgen twin predict`")
    run_id = resume.run_id if resume else f"{exp.name}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    results = Path(results_dir).resolve()
    check_writable(results)   # a full or read-only folder is refused before any load
    exp = twinseed.seeded(exp, results, log)   # search_start = "twin": each target's predicted start
    twinwatch.watched(exp)   # watch_twin: a file that is not a twin stops the run before any load
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    # the sink runs on the driver's node: results are written where the job was started
    sink_name = f"loadgen-sink-{run_id}-{uuid.uuid4().hex[:6]}"
    sink = actor(ResultsSink).options(name=sink_name, scheduling_strategy=here).remote(str(results), run_id)
    console = Console(log, terminal)
    ctx = RunContext(exp, run_id, results, sink, console, resume.next_step_id if resume else 0, sink_name, resume)
    log = console.line
    started = ctx.started_at_ns = resume.started_at_ns if resume else now_ns()
    write_run(ctx, started, None, "running", "")
    flush(sink)   # on disk before any load: a driver killed in its first step leaves a run that can be resumed
    placement = placement_for(exp.fleet)
    stages = [s.targets for s in exp.fleet.stages] if exp.fleet else [exp.targets]
    status, reason = "failed", "unexpected error"
    try:
        stop.check()   # a stop signal during the start-up (Ray's): the run exists (the row above), nothing ran
        try:
            status, reason = _run_stages(ctx, placement, stages)
        except StepAborted as exc:
            status, reason = "incomplete", f"stopped: {exc}"
            log(f"run {run_id} {reason}")
        stop.during("the twin check")
        twinwatch.record(exp, run_id, results, sink, log)   # watch_twin: each level against the target's twin
        if report is not None:
            stop.check()  # a stop signal during the last tear-down: no answer to print
            flush(sink)   # every row on disk for the answer's queries
            stop.during("the answer")
            report(RunResult(run_id, str(results), status, reason))
            stop.check()   # a stop signal during the answer's SQL let it finish; the run did not
    except stop.Stopped as exc:
        status, reason, exc.run_id = "incomplete", f"stopped: {exc}", run_id
        raise
    except Exception as exc:
        status, reason = "failed", f"{exc.__class__.__name__}: {exc}"
        raise
    finally:
        console.close()
        write_run(ctx, started, now_ns(), status, reason)
        flush(sink)   # a results folder that filled up or became unwritable ends the run here, in one line
    return RunResult(run_id, str(results), status, reason)


def _run_stages(ctx: RunContext, placement: LocalPlacement, stages: list[tuple[TargetConfig, ...]]
                ) -> tuple[str, str]:
    """Every stage's plan, a step at a time, its servers up for its steps only; the run's status and reason."""
    exp, log, resume = ctx.exp, ctx.log, ctx.resume
    stop.during("bring-up")
    placement.prepare(stages, log)
    done = resume.done if resume else frozenset()
    plans = [(stage_targets, make_plan(exp, stage_targets, done)) for stage_targets in stages]
    sizes = [plan.total for _, plan in plans]
    total = None if None in sizes else sum(s for s in sizes if s is not None)
    what = counted(total, "step") if total is not None else (
        "a capacity search" if exp.load.search else "steps until the SLO stops each target")
    log(f"run {ctx.run_id}: {what} over {counted(len(exp.targets), 'target')} in "
        f"{counted(len(stages), 'configuration')} -> {ctx.results}")
    if resume:   # new step ids follow the old ones: no "step N/total" counter
        total = None
        log(f"resuming run {ctx.run_id}: {len(done)} finished steps kept, {len(resume.superseded)} left out "
            f"(steps {', '.join(map(str, resume.superseded)) or 'none'}), new steps from {resume.next_step_id}")
    incomplete = 0
    for stage_targets, plan in plans:   # one server configuration each; servers restart between them
        stop.check()
        judge = ctx.judge(stage_targets)
        if (step := plan.next_step(ctx.steps_run, judge)) is None:
            continue   # a resumed run's stage that had finished: its servers are not started again
        servers: list = []
        targets: list[Target] = []
        try:
            targets += bring_up(ctx, stage_targets, placement, servers)
            while step is not None:
                ctx.steps_run += step.width   # a ramp writes a steps row per window
                if not run_step(ctx, step, targets, total):
                    incomplete += 1
                for name in ctx.dropped:   # its server is gone: the other targets go on
                    plan.drop(name)
                step = plan.next_step(ctx.steps_run, judge)
        finally:
            stop.during("tear-down")
            tear_down(targets, servers, ctx.log_dir)
    status = "complete" if not incomplete and not ctx.dropped else "incomplete"
    reason = "; ".join([f"{incomplete} steps incomplete (see steps.status_reason)"] * bool(incomplete)
                       + list(ctx.dropped.values()))
    return status, reason
