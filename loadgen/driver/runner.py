"""Executes a validated experiment on Ray: servers, workers, steps, progress, and the run's bookkeeping.

Order of a run: launch the servers it owns, create the sink and the workers, preflight every target (server
info; a target that is unreachable or not SGLang stops the run before any load), then for each step: flush
the cache, snapshot the server, start every worker at one shared instant, wait out warm-up and the window,
keep the load through the drain until every measured request is done (or the drain times out), cut the rest,
snapshot again, write the step rows. Whatever fails, the run row is finished and every batch is flushed.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from loadgen import __version__
from loadgen.client import drafting
from loadgen.client.calibrate import calibration_prompts, describe, length_model, prompts_for
from loadgen.client.messages import StepSpec
from loadgen.client.protocol.base import SamplingSpec
from loadgen.client.worker import LoadWorker, PromptPool
from loadgen.clock import anchor, now_ns
from loadgen.config import Experiment, LoadConfig, TargetConfig
from loadgen.driver import serverdeath, shapes, stop, telemetry, twinseed
from loadgen.driver.placement import LocalPlacement, placement_for
from loadgen.driver.plan import (
    Judge,
    PlannedStep,
    TargetLoad,
    Verdicts,
    make_plan,
    split_concurrency,
)
from loadgen.driver.progress import Console, StepProgress, grouped, step_label
from loadgen.driver.resume import ResumeState, config_hash
from loadgen.driver.window import Drain, close_windows, stop_workers, wait_for_drain, write_lost_rows
from loadgen.errors import ConfigError, TargetError
from loadgen.prompts.length import LengthModel
from loadgen.prompts.replay import replay_prompts
from loadgen.results import analysis, schema
from loadgen.results.sink import ResultsSink, check_writable, flush
from loadgen.servers.probe import server_info_samples
from loadgen.servers.process import ServerProcess
from loadgen.servers.secrets import masked
from loadgen.values import as_int, counted

PROMPT_POOL = 4096          # prompts per run; every step walks the same seeded sequence from its start
START_DELAY_S = 0.5         # time for every worker to receive `start_step` before the shared start instant
_FOREVER = 1 << 62          # a window that never closes (fixed-count steps: every request is measured)


def _actor(cls: type) -> Any:
    """An @ray.remote class as Ray made it (an ActorClass with .options and .remote). mypy applies no class
    decorator and sees the plain class, so the actors are created through this: their handles are Any."""
    return cls


class StepAborted(Exception):
    """A step broke a stop rule (error budget, a dead worker under on_worker_death = "stop"): the run ends
    after the step's rows are written; the message says why."""


@dataclass
class RunResult:
    run_id: str
    results_dir: str
    status: str
    reason: str


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


@dataclass
class _Target:
    config: TargetConfig
    index: int
    url: str
    workers: list
    info: dict
    pinned: list = field(default_factory=list)   # the PromptPool its workers read from: alive while referenced
    server: Any = None                           # its ServerProcess actor, when loadgen launched it
    input_fit: dict | None = None                # prompts.input_tokens: its chars-to-tokens fit (steps.server_info)
    gpu: telemetry.Sampler | None = None         # its GPU sampler (gpu_samples) and steps.hardware


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
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    # the sink runs on the driver's node: results are written where the job was started
    sink_name = f"loadgen-sink-{run_id}-{uuid.uuid4().hex[:6]}"
    sink = _actor(ResultsSink).options(name=sink_name, scheduling_strategy=here).remote(str(results), run_id)
    console = Console(log, terminal)
    ctx = RunContext(exp, run_id, results, sink, console, resume.next_step_id if resume else 0, sink_name, resume)
    log = console.line
    started = resume.started_at_ns if resume else now_ns()
    _write_run(ctx, started, None, "running", "")
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
        _write_run(ctx, started, now_ns(), status, reason)
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
        targets: list[_Target] = []
        try:
            targets += _bring_up(ctx, stage_targets, placement, servers)
            while step is not None:
                ctx.steps_run += step.width   # a ramp writes a steps row per window
                if not _run_step(ctx, step, targets, total):
                    incomplete += 1
                for name in ctx.dropped:   # its server is gone: the other targets go on
                    plan.drop(name)
                step = plan.next_step(ctx.steps_run, judge)
        finally:
            stop.during("tear-down")
            _tear_down(targets, servers, ctx.log_dir)
    status = "complete" if not incomplete and not ctx.dropped else "incomplete"
    reason = "; ".join([f"{incomplete} steps incomplete (see steps.status_reason)"] * bool(incomplete)
                       + list(ctx.dropped.values()))
    return status, reason


def _bring_up(ctx: RunContext, stage_targets: tuple[TargetConfig, ...], placement: LocalPlacement, servers: list
              ) -> list[_Target]:
    """Launch the stage's servers on their nodes, create workers where the placement says, and preflight
    every target before any load. `servers` gets each server actor with its launch, as soon as it is made."""
    exp, log, log_dir = ctx.exp, ctx.log, ctx.log_dir
    stop.during("bring-up")
    urls: dict[str, str] = {}
    launched = {}
    for t in stage_targets:
        if t.url is None:
            server = _actor(ServerProcess).options(**placement.server_options(t)).remote(t.name, str(log_dir))
            launched[t.name] = server
            servers.append((server, placement.launch(server, t)))
        else:
            urls[t.name] = t.url
    for name, (_, ref) in zip(launched, servers):
        try:
            urls[name] = stop.get(ref, timeout_s=placement.health_timeout_s + 60)
        except ray.exceptions.GetTimeoutError:
            raise TargetError(f"server {name} was not up within {placement.health_timeout_s:g} s + 60 s "
                              "(its actor could not be placed, or the launch hung)") from None
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
    n = exp.load.workers_per_target
    # One per stage, shard k * n + i for worker i of target k; made after preflight (prompts.input_tokens: each
    # target's prompts are built with its own fit)
    pool_name = f"loadgen-prompts-{ctx.run_id}-{uuid.uuid4().hex[:6]}"
    sampling = SamplingSpec(exp.prompts.max_new_tokens, exp.prompts.ignore_eos, exp.prompts.temperature)
    targets = []
    for k, t in enumerate(stage_targets):
        # The prompts (a PromptPool) and the sink go by name: a worker can restart, and Ray logs an error for a
        # restartable actor with constructor arguments in the object store (a large value, a ray.put ref, a handle).
        workers = [_actor(LoadWorker).options(**placement.worker_options(t, i)).remote(
                       f"{t.name}.w{i}", t, urls[t.name], (pool_name, k * n + i), sampling, ctx.sink_name)
                   for i in range(n)]
        targets.append(_Target(t, exp.targets.index(t), urls[t.name], workers, {}, [],
                               launched.get(t.name)))
    placement.verify([(t.config, t.workers) for t in targets], launched, log)
    preflights = stop.get([t.workers[0].preflight.remote() for t in targets])
    for target, (info, options) in zip(targets, preflights):
        ray.get([w.configure.remote(options) for w in target.workers[1:]])
        target.info = info
    for line in grouped("target", [(f"{t.config.name} ({t.url})", _describe(t.info)) for t in targets]):
        log(line)
    samplers = telemetry.start_samplers([(t.config, t.url, t.info, t.server) for t in targets], placement, log)
    for target, sampler in zip(targets, samplers):
        target.gpu = sampler
    stop.during("calibration")
    samples = calibration_prompts(exp.prompts)   # none without prompts.input_tokens
    if samples:
        log(f"calibrating input tokens: {counted(len(samples), 'prompt')} per target")
    counts = (stop.get([t.workers[0].calibrate.remote(samples, exp.load.request_timeout_s) for t in targets])
              if samples else [])
    stop.during("bring-up")
    models: list[LengthModel | None] = [length_model(t.config.name, samples, c) for t, c in zip(targets, counts)]
    fits = models or [None] * len(targets)
    built = (replay_prompts(exp.prompts, fits, exp.load.trace.trace) if exp.load.trace else
             prompts_for(exp.prompts, fits, PROMPT_POOL))
    pool = _actor(PromptPool).options(name=pool_name).remote([p[i::n] for p in built for i in range(n)])
    for target in targets:
        target.pinned.append(pool)
    ray.get([w.fetch_prompts.remote() for t in targets for w in t.workers])
    for target, model in zip(targets, models):
        if model is not None:
            target.input_fit = model.to_json()
    for line in grouped("target", [(t.config.name, f"input tokens by {describe(m)}")
                                   for t, m in zip(targets, models) if m is not None]):
        log(line)
    stop.check()
    return targets


def _tear_down(targets: list[_Target], servers: list[tuple[Any, Any]], log_dir: Path) -> None:
    """End a stage: close and remove its workers, stop its servers and keep their logs with the results
    (a server on another node wrote its log there), then remove the server actors. `servers`: (actor, launch)."""
    workers = [w for t in targets for w in t.workers]
    # A server still starting when a stop signal came cannot be asked to stop: its actor is busy until /health
    # answers (minutes for SGLang). It is only killed, below, and dies with its actor.
    idle = [a for a, launch in servers if not stop.requested() or ray.wait([launch], timeout=0)[0]]
    logs = []
    try:
        ray.get([w.close.remote() for w in workers], timeout=30)
        ray.get([s.stop.remote() for s in idle], timeout=60)
        logs = ray.get([s.read_log.remote() for s in idle], timeout=60)
    except (ray.exceptions.RayError, TimeoutError):
        pass  # an actor that never started or already died: ray.kill below still ends its server
    finally:
        for actor in workers + [a for a, _ in servers]:
            ray.kill(actor)   # the server dies with its actor (PR_SET_PDEATHSIG)
        for t in targets:
            if t.gpu is not None:
                t.gpu.close()
    for name, data in logs:
        dest = log_dir / name
        if data and (not dest.exists() or dest.stat().st_size != len(data)):
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)


@dataclass(frozen=True)
class _Times:
    """A step's planned instants: the shared start, the measurement window's start and its planned end."""

    start: int
    measure_start: int
    measure_end: int      # _FOREVER in a counted step (every request is measured)
    measure_s: float
    counted: bool         # a fixed number of requests per target (load.requests)
    adaptive: bool        # closed loop over time: the driver closes each target's window (window.close_windows)


@dataclass
class _Started:
    """The workers a step started, per target, and the streams that could not run."""

    active: list                      # every started worker
    by_target: list[list]             # the started workers of each target of the step
    unavailable: list[str]            # why some workers' streams did not run


def _run_step(ctx: RunContext, step: PlannedStep, all_targets: list[_Target], total_steps: int | None) -> bool:
    """Run one step (each target at its own level), write its rows; False when it did not complete."""
    what = f"step {step.step_id + 1}"
    stop.during(f"the start of {what}")
    stop.check()
    by_name = {t.config.name: t for t in all_targets}
    step, targets, infos = _before_step(ctx, step, [by_name[name] for name in step.targets])
    if not targets:
        return True   # every target of the step was dropped before it (their reasons are in ctx.dropped)
    t_before = now_ns()
    for t, info in zip(targets, infos):
        t.info = info
        _write_server_info_samples(ctx.sink, ctx.run_id, step.step_id, t, info, t_before, "before")
    gpus = [(t.config, t.gpu) for t in targets]
    telemetry.mark(gpus, ctx.sink, ctx.run_id, step.step_id, "step_start")
    times = _plan_times(ctx.exp.load, step)
    # from here the clock says which part of the step runs; a closed-loop (adaptive) window's end is decided later
    stop.during(f"the warm-up of {what}", [(times.measure_start, f"the window of {what}")] + (
        [] if times.adaptive else [(times.measure_end, f"the drain of {what}")]))
    sink_incarnation = ray.get(ctx.sink.incarnation.remote())
    started = _start_workers(ctx, step, targets, times)
    progress = _step_progress(ctx, step, targets, times, total_steps)
    interrupted: stop.Stopped | None = None
    ends = [times.measure_end] * len(targets)    # each target's window end
    try:
        drain, ends = _wait_out(ctx, step, targets, started, times, what, progress)
    except stop.Stopped as exc:   # Ctrl-C or SIGTERM: cut and write what the workers hold, then stop the run
        interrupted, drain = exc, Drain(False, {})
    stop.during(f"the end of {what}")
    cut = "cut: the run was stopped" if interrupted else "cut at the end of the step (drain)"
    counts = stop_workers(started.active, drain, cut)
    t_end = now_ns()
    telemetry.mark(gpus, ctx.sink, ctx.run_id, step.step_id, "step_end")
    if times.counted or interrupted and times.adaptive:   # no window end was set: the step's end closes it
        ends = [min(e, t_end) for e in ends]
    lost = write_lost_rows(ctx.sink, ctx.run_id, step.step_id, drain.dead)
    reasons = _step_reasons(ctx, started, drain, lost, interrupted, sink_incarnation)
    checks = [serverdeath.check_server(t, ctx.exp.load) if not interrupted else (t.info, None) for t in targets]
    starts = [shapes.window_opened(ctx.exp.load, [drain.last.get(started.active.index(w)) for w in group],
                                   times.measure_start) for group in started.by_target]
    _write_step_rows(ctx, step, targets, checks, counts, reasons, (times, starts, ends, t_end))
    deaths = _after_server_deaths(ctx, step.step_id, targets, [d for _, d in checks], t_end)
    reason = "; ".join(reasons)
    if step.loads[0].probe:   # a search judges the step next: named before the line that says it is done
        stop.during("the judge")
    progress.end(_outcome(counts, lost, interrupted, reason, (t_end - times.start) / 1e9))
    load = ctx.exp.load
    if interrupted:
        raise interrupted
    if drain.budget or ((drain.dead or started.unavailable) and load.on_worker_death == "stop"):
        raise StepAborted(f"step {step.step_id}: {reason}")
    if deaths and load.on_server_death == "stop":
        raise StepAborted(f"step {step.step_id}: " + "; ".join(d.describe for d in deaths))
    return not reasons


def _plan_times(load: LoadConfig, step: PlannedStep) -> _Times:
    """The step starts START_DELAY_S from now, so that every worker has its orders before the shared start."""
    t_start = now_ns() + int(START_DELAY_S * 1e9)
    counted = load.requests is not None
    t_ms = t_start if counted else t_start + int(load.warmup_s * 1e9)
    measure_s = step.measure_s or load.measure_s
    t_me = _FOREVER if counted else t_ms + int(measure_s * 1e9)
    if (shaped := shapes.window_s(load, step)) is not None:   # a trace's or a ramp's own window
        t_ms, t_me, measure_s = t_start + int(shaped[0] * 1e9), t_start + int(shaped[1] * 1e9), shaped[1] - shaped[0]
    adaptive = not counted and load.open_loop is None and shaped is None
    return _Times(t_start, t_ms, t_me, measure_s, counted, adaptive)


def _start_workers(ctx: RunContext, step: PlannedStep, targets: list[_Target], times: _Times) -> _Started:
    """Give every worker its share of each target's level (streams, or arrivals in open loop) and quota."""
    load = ctx.exp.load
    started = _Started([], [[] for _ in targets], [])
    for group, t, level in zip(started.by_target, targets, step.loads):
        shares = split_concurrency(level.concurrency, len(t.workers))
        quotas = (split_concurrency(load.requests, len(t.workers)) if load.requests is not None   # counted
                  else [None] * len(shares))
        warmups = shapes.warmup_quotas(load, len(t.workers))
        for i, (worker, share, quota, warmup) in enumerate(zip(t.workers, shares, quotas, warmups)):
            if not share or quota == 0 and not warmup:
                continue
            arrival = shapes.arrival(load, level, i, len(t.workers), share)
            spec = StepSpec(ctx.run_id, step.step_id, share if arrival is None else None, times.start,
                            times.measure_start, _FOREVER if times.adaptive else times.measure_end,
                            load.stall_timeout_s, load.request_timeout_s, sample_server=worker is t.workers[0],
                            max_requests=None if quota is None else quota + warmup, arrivals=arrival,
                            stagger=i / len(t.workers), realtime_priority=load.realtime_priority,
                            t_measure_min_end_ns=times.measure_end if times.adaptive else None,
                            users=shapes.users(load, level, i, len(t.workers)),
                            window_starts=shapes.window_starts(load, times.start), warmup_requests=warmup)
            try:
                ray.get(worker.start_step.remote(spec))
                started.active.append(worker)
                group.append(worker)
            except ray.exceptions.RayActorError as exc:   # died in an earlier step, restarts used up
                started.unavailable.append(f"worker {t.config.name}.w{i} unavailable "
                                           f"({exc.__class__.__name__}): its {share} streams were not run")
    return started


def _step_progress(ctx: RunContext, step: PlannedStep, targets: list[_Target], times: _Times,
                   total_steps: int | None) -> StepProgress:
    """The step's voice (loadgen.driver.progress), begun with its first line."""
    load = ctx.exp.load
    name = f"[step {step.step_id + 1}" + (f"/{total_steps}]" if total_steps is not None else "]")
    window = f"{load.requests} requests per target" if times.counted else (
        f"warm-up {(times.measure_start - times.start) / 1e9:g} s, measure {times.measure_s:g} s")
    window += f" after {load.warmup_requests} warm-up requests" if load.warmup_requests and times.counted else ""
    window += f" ({load.ramp.describe()})" if load.ramp else ""
    repeat = None if step.loads[0].probe else step.repeat   # a search's probe says which run it is
    progress = StepProgress(ctx.console, name, step_label(name, step.loads, repeat),
                            [t.config.name for t in targets], times.start)
    progress.begin(window)
    return progress


def _wait_out(ctx: RunContext, step: PlannedStep, targets: list[_Target], started: _Started, times: _Times,
              what: str, progress: StepProgress) -> tuple[Drain, list[int]]:
    """Wait through the window and the drain; returns how the drain ended and each target's window end."""
    load = ctx.exp.load
    ends = [times.measure_end] * len(targets)
    if times.counted:
        # each request is bounded by its own timeouts, so the step is too: no step deadline cuts it early
        assert load.requests is not None
        bound_s = load.requests * (load.request_timeout_s + 1) + 10
        return wait_for_drain(started.active, times.start, now_ns() + int(bound_s * 1e9), load, True,
                              progress), ends
    if times.adaptive:
        needs = [load.min_measured or max(level.concurrency, step.min_measured or 0) for level in step.loads]
        max_s = step.max_measure_s or load.max_measure_s or 5 * load.measure_s
        ends = close_windows(started.by_target, [t.config.name for t in targets], times.measure_end,
                             times.measure_s, max_s, needs, progress)
        stop.during(f"the drain of {what}")
    t_me = max(ends)
    return wait_for_drain(started.active, t_me, t_me + int(load.drain_timeout_s * 1e9), load, progress=progress), ends


def _step_reasons(ctx: RunContext, started: _Started, drain: Drain, lost: list[int],
                  interrupted: stop.Stopped | None, sink_incarnation: int) -> list[str]:
    """Why the step is incomplete (nothing when it ran in full)."""
    reasons = started.unavailable + [f"worker {p.worker if p else '?'} died ({why}): {n} requests recorded as lost"
                                     for (p, why), n in zip(drain.dead.values(), lost)]
    if interrupted:
        reasons.append(f"run stopped ({interrupted}); requests in flight were cut")
    elif drain.budget:
        reasons.append(drain.budget)
    elif not drain.drained and not drain.dead:
        reasons.append(f"drain timed out after {ctx.exp.load.drain_timeout_s:g} s; measured requests were cut")
    if ray.get(ctx.sink.incarnation.remote()) != sink_incarnation:
        reasons.append("the results sink restarted during the step; rows it held in memory were lost")
    return reasons


def _write_step_rows(ctx: RunContext, step: PlannedStep, targets: list[_Target], checks: list, counts: list[dict],
                     reasons: list[str], when: tuple[_Times, list[int], list[int], int]) -> None:
    """One `steps` row per target (a ramp: per target and window; its status, why, the server's state after the
    step), flushed to disk."""
    times, starts, ends, t_end = when
    notes = _stall_notes(ctx, step.step_id, targets, [d for _, d in checks], counts)
    rows = []
    for t, level, (info_after, death), t_window_start, t_window_end in zip(targets, step.loads, checks, starts, ends):
        _write_server_info_samples(ctx.sink, ctx.run_id, shapes.last_step_id(step), t, info_after or t.info, t_end,
                                   "after")
        mine = _reasons_for(reasons, t.config.name)
        own = (death.describe,) if death else ()   # the target's server died: its level failed (an SLO fail)
        row_status = "failed" if death else "incomplete" if mine else "complete"
        note = notes.get(t.config.name)   # slow, not hung: said, but not a reason the step is incomplete
        rows.append(_step_row(ctx, step, level, t, (times.start, t_window_start, t_window_end, t_end),
                              row_status, "; ".join((*mine, *own, *([note] if note else [])))))
    rows = shapes.step_rows(ctx.exp.load, step, rows)
    ctx.sink.write.remote({"steps": schema.batch_from_rows("steps", rows)})
    ray.get(ctx.sink.flush.remote())


def _outcome(counts: list[dict], lost: list[int], interrupted: stop.Stopped | None, reason: str, seconds: float
             ) -> str:
    """`done in 18.3 s: 8 cut at step end (drain), 22 ok`, with why the step is incomplete."""
    total: dict[str, int] = {"lost": sum(lost)} if any(lost) else {}
    for c in counts:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    # `cancelled` requests are the ones cut when the step ended (the drain's by design): not failures
    words = {"cancelled": "cut at the stop" if interrupted else "cut at step end (drain)"}
    done = ", ".join(f"{v} {words.get(k, k)}" for k, v in sorted(total.items()))
    return f"done in {seconds:.1f} s: {done}" + (f" ({reason})" if reason else "")


def _reasons_for(reasons: list[str], target: str) -> list[str]:
    """The reasons that concern one target's row: a dead or unavailable worker (`worker <target>.w<i> ...`)
    concerns its own target only (the others' streams ran in full); every other reason concerns all."""
    return [r for r in reasons if not r.startswith("worker ") or r.split()[1].rsplit(".w", 1)[0] in (target, "?")]


def _before_step(ctx: RunContext, step: PlannedStep, targets: list[_Target]
                 ) -> tuple[PlannedStep, list[_Target], list[dict]]:
    """Flush and snapshot every target before the step. A server that stopped answering since the last step is
    brought back (on_server_death = "restart") or dropped, and the step runs without it; "stop" ends the run."""
    def snapshot(t: _Target) -> dict:
        if ctx.exp.load.flush_cache:
            ray.get(t.workers[0].flush_cache.remote())
        return ray.get(t.workers[0].server_info.remote())

    kept, infos = [], []
    for t in targets:
        name = t.config.name
        try:
            infos.append(snapshot(t))
            kept.append(t)
            continue
        except TargetError as exc:
            if ctx.exp.load.on_server_death == "stop":
                raise
            ctx.log(f"  server {name} does not answer before step {step.step_id} ({exc})")
        ctx.deaths[name] = ctx.deaths.get(name, 0) + 1
        why = serverdeath.recover(t, ctx.exp.load, ctx.deaths[name], ctx.log)
        if why is None:
            try:
                infos.append(snapshot(t))
                kept.append(t)
                continue
            except TargetError as exc:
                why = f"server {name} does not answer after it was brought back ({exc}): dropped from the run"
        ctx.dropped[name] = why
        ctx.log(f"  {why}")
    names = {t.config.name for t in kept}
    return replace(step, loads=tuple(load for load in step.loads if load.target in names)), kept, infos


def _stall_notes(ctx: RunContext, step_id: int, targets: list[_Target], deaths: list, counts: list[dict]
                 ) -> dict[str, str]:
    """Target -> `server X is slow, not hung: ...` for a server that answers after a step in which the stall
    timeout cut some of its requests (read back after a flush; only when the step had timeouts)."""
    if not any(c.get("timeout") for c in counts):
        return {}
    ray.get(ctx.sink.flush.remote())
    notes = {}
    for t, d in zip(targets, deaths):
        note = None if d else serverdeath.stall_note(ctx.results, ctx.run_id, step_id, t.config.name,
                                                     ctx.exp.load.stall_timeout_s)
        if note:
            notes[t.config.name] = note
            ctx.log(f"  {note}")
    return notes


def _after_server_deaths(ctx: RunContext, step_id: int, targets: list[_Target], deaths: list, t_ns: int) -> list:
    """Record each death in server_samples, and under on_server_death = "restart" bring the dead ones back (or
    drop them: ctx.dropped). Returns the deaths."""
    found = [(t, d) for t, d in zip(targets, deaths) if d is not None]
    if found:
        rows = [serverdeath.death_sample(ctx.run_id, step_id, t, d, t_ns) for t, d in found]
        ctx.sink.write.remote({"server_samples": schema.batch_from_rows("server_samples", rows)})
    for t, d in found:
        ctx.log(f"  {d.describe}")
        ctx.deaths[t.config.name] = ctx.deaths.get(t.config.name, 0) + 1
        if ctx.exp.load.on_server_death == "restart":
            why = serverdeath.recover(t, ctx.exp.load, ctx.deaths[t.config.name], ctx.log)
            if why:
                ctx.dropped[t.config.name] = why
                ctx.log(f"  {why}")
    return [d for _, d in found]


def _step_row(ctx: RunContext, step: PlannedStep, level: TargetLoad, t: _Target, times: tuple[int, int, int, int],
              status: str, reason: str) -> dict:
    exp, run_id = ctx.exp, ctx.run_id
    t_start, t_ms, t_me, t_end = times
    info = t.info if t.input_fit is None else dict(t.info, input_tokens_fit=t.input_fit)
    algorithm = info.get("speculative_algorithm") or "NONE"
    return {
        "run_id": run_id, "step_id": step.step_id, "target": t.config.name, "target_index": t.index,
        "node": t.config.node, "flavor": info.get("flavor") or t.config.flavor,  # `auto` as resolved
        "emulated": bool(info.get("emulated", False)),
        "algorithm": str(algorithm).upper(), "draft_tokens": as_int(info.get("speculative_num_draft_tokens")),
        "num_steps": as_int(info.get("speculative_num_steps")), "topk": as_int(info.get("speculative_eagle_topk")),
        "server_version": str(info.get("version")), "server_info": json.dumps(info, sort_keys=True, default=str),
        "mode": exp.load.mode, "concurrency": level.concurrency if level.rate is None else None,
        "rate": level.rate, "repeat": step.repeat if level.repeat is None else level.repeat, "probe": level.probe,
        "prompt_mix": exp.prompts.describe(), "t_start_ns": t_start, "t_measure_start_ns": t_ms,
        "t_measure_end_ns": t_me, "t_end_ns": t_end, "status": status, "status_reason": reason,
        "hardware": t.gpu.hardware if t.gpu else None,
    }


def _write_server_info_samples(sink: Any, run_id: str, step_id: int, t: _Target, info: dict, t_ns: int,
                               when: str) -> None:
    rows = [{"run_id": run_id, "step_id": step_id, "target": t.config.name, "node": t.config.node, "t_ns": t_ns,
             "name": name, "value": value, "labels": json.dumps(dict(labels, when=when), sort_keys=True)}
            for name, value, labels in server_info_samples(info)]
    if rows:
        sink.write.remote({"server_samples": schema.batch_from_rows("server_samples", rows)})


def _write_run(ctx: RunContext, started: int, finished: int | None, status: str, reason: str) -> None:
    exp, run_id = ctx.exp, ctx.run_id
    row = {
        "run_id": run_id, "name": exp.name, "started_at_ns": started, "finished_at_ns": finished,
        "status": status, "status_reason": reason, "config": json.dumps(masked(exp.raw), sort_keys=True, default=str),
        "loadgen_version": __version__, "schema_version": schema.SCHEMA_VERSION, "git_commit": _git_commit(),
        "host": json.dumps({"hostname": socket.gethostname(), "python": platform.python_version(),
                            "ray": ray.__version__, "platform": platform.platform()}),
        "clock_anchor": json.dumps(anchor()), "slo": exp.slo.to_json() if exp.slo else None,
        "config_hash": config_hash(exp), "written_at_ns": now_ns(),
        "superseded_steps": list(ctx.resume.superseded) if ctx.resume and ctx.resume.superseded else None,
    }
    ray.get(ctx.sink.write.remote({"runs": schema.batch_from_rows("runs", [row])}))


def _git_commit() -> str | None:
    """The checkout's commit; under `ray job submit` (Ray uploads the working dir without .git) the one the
    submitter passes as LOADGEN_GIT_COMMIT (docs/fleets.md)."""
    if os.environ.get("LOADGEN_GIT_COMMIT"):
        return os.environ["LOADGEN_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _describe(info: dict) -> str:
    label = " (emulated)" if info.get("emulated") else ""
    server = info.get("server") or "sglang"
    if server != "sglang":  # llama.cpp, vLLM, another OpenAI server (loadgen.servers.serverid)
        name = {"llama.cpp": "llama.cpp", "vllm": "vLLM"}.get(server, "OpenAI-compatible server")
        spec = info.get("server_speculative") or {}
        said = f"speculative {json.dumps(spec, sort_keys=True) if spec else 'not reported'}"
        if "speculative_observed" in info:   # what its requests show first (loadgen/client/drafting.py)
            said = f"{info.get('speculative_algorithm')}: {drafting.describe(spec, info['speculative_observed'])}"
        return (f"{name} {info.get('server_version') or 'version unknown'}, flavor {info.get('flavor')}, "
                f"{said}, model {info.get('model')}")
    drafts = info.get("speculative_num_draft_tokens")
    algorithm = info.get("speculative_algorithm") or "NONE"
    spec = f"algorithm {algorithm}" + (f", draft tokens {drafts}" if drafts is not None else "")
    return f"SGLang {info.get('version')}{label}, {spec}, model {info.get('model_path')}"
