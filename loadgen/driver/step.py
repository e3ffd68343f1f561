"""One step of a run: its planned instants, starting every worker at one shared instant, waiting out the
warm-up, window and drain, cutting the rest, then its reasons, rows, outcome line, and what a stalled or
dead server means for the rest of the run."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import ray
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from loadgen.client.messages import StepSpec
from loadgen.clock import now_ns
from loadgen.config import LoadConfig
from loadgen.driver import serverdeath, shapes, stop, telemetry
from loadgen.driver.bringup import Target
from loadgen.driver.context import RunContext, StepAborted
from loadgen.driver.livemetrics import StepLive
from loadgen.driver.progress import StepProgress, step_label
from loadgen.driver.rows import step_row, write_run, write_server_info_samples
from loadgen.driver.window import (
    Drain,
    SequentialWindow,
    close_windows,
    poll,
    stop_workers,
    wait_for_drain,
    write_lost_rows,
)
from loadgen.errors import TargetError, user_message
from loadgen.plan.steps import PlannedStep, split_concurrency
from loadgen.results import schema

LATE_START_S = 0.1          # a worker ready later than this after the shared start sent late: the step runs again
MAX_START_DELAY_S = 4.0     # the delay doubles after each late start, up to this; a step late at it is kept
_FOREVER = 1 << 62          # a window that never closes (fixed-count steps: every request is measured)
WORKER_RESTART_S = 60.0     # how long a step waits for a worker Ray is restarting before it runs without it


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
    late: list[str] = field(default_factory=list)   # workers ready after the shared start: their sends began late


def run_step(ctx: RunContext, step: PlannedStep, all_targets: list[Target], total_steps: int | None) -> bool:
    """Run one step (each target at its own level), write its rows; False when it did not complete."""
    what = f"step {step.step_id + 1}"
    stop.during(f"the start of {what}")
    stop.check()
    by_name = {t.config.name: t for t in all_targets}
    original = step
    _await_restarts([by_name[name] for name in step.targets])
    step, targets, infos = _before_step(ctx, step, [by_name[name] for name in step.targets])
    if not targets:
        return True   # every target of the step was dropped before it (their reasons are in ctx.dropped)
    t_before = now_ns()
    for t, info in zip(targets, infos):
        t.info = info
        write_server_info_samples(ctx.sink, ctx.run_id, step.step_id, t, info, t_before, "before")
    gpus = [(t.config, t.gpu) for t in targets]
    telemetry.mark(gpus, ctx.sink, ctx.run_id, step.step_id, "step_start")
    sink_incarnation = ray.get(ctx.sink.incarnation.remote())
    orders = _orders(ctx, step, targets)   # all the work of planning the workers' shares, before the instant is set
    times = _plan_times(ctx.exp.load, step, ctx.start_delay_s)
    # from here the clock says which part of the step runs; a closed-loop (adaptive) window's end is decided later
    stop.during(f"the warm-up of {what}", [(times.measure_start, f"the window of {what}")] + (
        [] if times.adaptive else [(times.measure_end, f"the drain of {what}")]))
    started = _start_workers(ctx, targets, orders, times)
    progress = _step_progress(ctx, step, targets, times, total_steps)
    interrupted: stop.Stopped | None = None
    ends = [times.measure_end] * len(targets)    # each target's window end
    rerun = bool(started.late) and ctx.start_delay_s < MAX_START_DELAY_S
    try:
        if rerun:   # its sends began late: cut at once, kept in the files but left out of every view
            drain = Drain(False, {})
        else:
            drain, ends = _wait_out(ctx, step, targets, started, times, what, progress)
    except stop.Stopped as exc:   # Ctrl-C or SIGTERM: cut and write what the workers hold, then stop the run
        interrupted, drain = exc, Drain(False, {})
    stop.during(f"the end of {what}")
    cut = ("cut: the run was stopped" if interrupted else "cut: the step started late" if rerun
           else "cut at the end of the step (drain)")
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
    progress.final(poll(started.active))
    progress.end(_outcome(counts, lost, interrupted, reason, (t_end - times.start) / 1e9))
    load = ctx.exp.load
    if interrupted:
        raise interrupted
    if rerun:
        return _run_again(ctx, original, all_targets, total_steps)
    if drain.budget or ((drain.dead or started.unavailable) and load.on_worker_death == "stop"):
        raise StepAborted(f"step {step.step_id}: {reason}")
    if deaths and load.on_server_death == "stop":
        raise StepAborted(f"step {step.step_id}: " + "; ".join(d.describe for d in deaths))
    return not reasons


def _run_again(ctx: RunContext, step: PlannedStep, all_targets: list[Target], total_steps: int | None) -> bool:
    """A step whose sends began late runs again under the next step ids, with twice the start delay; the late
    one's ids go to runs.superseded_steps at once, so the judge and every view leave its rows out."""
    ctx.superseded.extend(range(step.step_id, step.step_id + step.width))
    ctx.start_delay_s = min(2 * ctx.start_delay_s, MAX_START_DELAY_S)
    write_run(ctx, ctx.started_at_ns, None, "running", "")   # read by the judge's next flush
    again = replace(step, step_id=ctx.steps_run)
    ctx.steps_run += step.width
    ctx.log(f"step {step.step_id + 1} started late (its sends would have been late): running it again as step "
            f"{again.step_id + 1}, with a {ctx.start_delay_s:g} s start delay")
    return run_step(ctx, again, all_targets, None if total_steps is None else total_steps + step.width)


def _plan_times(load: LoadConfig, step: PlannedStep, delay_s: float) -> _Times:
    """The step starts `delay_s` from now, so that every worker has its orders before the shared start."""
    t_start = now_ns() + int(delay_s * 1e9)
    counted = load.requests is not None
    t_ms = t_start if counted else t_start + int(load.warmup_s * 1e9)
    measure_s = step.measure_s or load.measure_s
    t_me = _FOREVER if counted else t_ms + int(measure_s * 1e9)
    if (shaped := shapes.window_s(load, step)) is not None:   # a trace's or a ramp's own window
        t_ms, t_me, measure_s = t_start + int(shaped[0] * 1e9), t_start + int(shaped[1] * 1e9), shaped[1] - shaped[0]
    adaptive = not counted and load.open_loop is None and shaped is None
    return _Times(t_start, t_ms, t_me, measure_s, counted, adaptive)


@dataclass(frozen=True)
class _Order:
    """One worker's orders for a step but its instants (set once every worker's orders are built)."""

    target: int                       # the target's index in the step
    index: int                        # the worker's index among its target's workers
    worker: Any                       # the actor (a Ray handle)
    share: int                        # its streams (closed loop) or its part of the arrivals (open loop)
    spec: StepSpec


def _orders(ctx: RunContext, step: PlannedStep, targets: list[Target]) -> list[_Order]:
    """Every worker's share of each target's level (streams, or arrivals in open loop) and quota."""
    load = ctx.exp.load
    orders = []
    for k, (t, level) in enumerate(zip(targets, step.loads)):
        shares = split_concurrency(level.concurrency, len(t.workers))
        quotas = (split_concurrency(load.requests, len(t.workers)) if load.requests is not None   # counted
                  else [None] * len(shares))
        warmups = shapes.warmup_quotas(load, len(t.workers))
        for i, (worker, share, quota, warmup) in enumerate(zip(t.workers, shares, quotas, warmups)):
            if not share or quota == 0 and not warmup:
                continue
            arrival = shapes.arrival(load, level, i, len(t.workers), share)
            spec = StepSpec(ctx.run_id, step.step_id, share if arrival is None else None, 0, 0, 0,
                            load.stall_timeout_s, load.request_timeout_s, sample_server=worker is t.workers[0],
                            max_requests=None if quota is None else quota + warmup, arrivals=arrival,
                            stagger=i / len(t.workers), realtime_priority=load.realtime_priority,
                            users=shapes.users(load, level, i, len(t.workers)), warmup_requests=warmup,
                            slo=ctx.exp.slo, prompts=t.prompts[i])
            orders.append(_Order(k, i, worker, share, spec))
    return orders


def _start_workers(ctx: RunContext, targets: list[Target], orders: list[_Order], times: _Times) -> _Started:
    """Send every worker its orders with the step's instants, all at once: the shared start is one round trip
    away whatever the number of workers (one after another, a loaded machine had them start seconds late)."""
    window_starts = shapes.window_starts(ctx.exp.load, times.start)

    def timed(spec: StepSpec) -> StepSpec:
        return replace(spec, t_start_ns=times.start, t_measure_start_ns=times.measure_start,
                       t_measure_end_ns=_FOREVER if times.adaptive else times.measure_end,
                       t_measure_min_end_ns=times.measure_end if times.adaptive else None,
                       window_starts=window_starts)
    calls = [(order, order.worker.start_step.remote(timed(order.spec))) for order in orders]
    started = _Started([], [[] for _ in targets], [])
    for order, call in calls:
        try:
            late_s = ray.get(call) / 1e9
            started.active.append(order.worker)
            started.by_target[order.target].append(order.worker)
            if late_s > LATE_START_S:
                started.late.append(f"worker {targets[order.target].config.name}.w{order.index} was ready "
                                    f"{late_s:.2f} s after the step's shared start: its sends began late")
        except ray.exceptions.RayActorError as exc:   # died in an earlier step, restarts used up
            started.unavailable.append(
                f"worker {targets[order.target].config.name}.w{order.index} unavailable "
                f"({exc.__class__.__name__}): its {order.share} streams were not run")
    return started


def _step_progress(ctx: RunContext, step: PlannedStep, targets: list[Target], times: _Times,
                   total_steps: int | None) -> StepProgress:
    """The step's voice (loadgen.driver.progress), begun with its first line."""
    load = ctx.exp.load
    name = f"[step {step.step_id + 1}" + (f"/{total_steps}]" if total_steps is not None else "]")
    window = f"{load.requests} requests per target" if times.counted else (
        f"warm-up {(times.measure_start - times.start) / 1e9:g} s, measure {times.measure_s:g} s")
    window += f" after {load.warmup_requests} warm-up requests" if load.warmup_requests and times.counted else ""
    window += f" ({load.ramp.describe()})" if load.ramp else ""
    repeat = None if step.loads[0].probe else step.repeat   # a search's probe says which run it is
    live = StepLive(ctx.run_id, step.step_id, {t.config.name: load.describe() for t, load in zip(targets, step.loads)},
                    [(t.config.name, t.gpu.actor) for t in targets if t.gpu is not None and t.gpu.actor is not None])
    progress = StepProgress(ctx.console, name, step_label(name, step.loads, repeat),
                            [t.config.name for t in targets], times.start, metrics=live)
    progress.begin(window)
    return progress


def _wait_out(ctx: RunContext, step: PlannedStep, targets: list[Target], started: _Started, times: _Times,
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
        slo = ctx.exp.slo
        rules = [SequentialWindow(slo.attainment, slo.false_verdict, slo.miss_correlation)
                 if slo is not None and slo.false_verdict is not None else None for _ in step.loads]
        ends = close_windows(started.by_target, [t.config.name for t in targets], times.measure_end,
                             times.measure_s, max_s, needs, progress, rules)
        stop.during(f"the drain of {what}")
    t_me = max(ends)
    return wait_for_drain(started.active, t_me, t_me + int(load.drain_timeout_s * 1e9), load, progress=progress), ends


def _step_reasons(ctx: RunContext, started: _Started, drain: Drain, lost: list[int],
                  interrupted: stop.Stopped | None, sink_incarnation: int) -> list[str]:
    """Why the step is incomplete (nothing when it ran in full)."""
    reasons = started.unavailable + started.late + [
        f"worker {p.worker if p else '?'} died ({why}): {n} requests recorded as lost"
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


def _write_step_rows(ctx: RunContext, step: PlannedStep, targets: list[Target], checks: list, counts: list[dict],
                     reasons: list[str], when: tuple[_Times, list[int], list[int], int]) -> None:
    """One `steps` row per target (a ramp: per target and window; its status, why, the server's state after the
    step), flushed to disk."""
    times, starts, ends, t_end = when
    notes = _stall_notes(ctx, step.step_id, targets, [d for _, d in checks], counts)
    rows = []
    for t, level, (info_after, death), t_window_start, t_window_end in zip(targets, step.loads, checks, starts, ends):
        write_server_info_samples(ctx.sink, ctx.run_id, shapes.last_step_id(step), t, info_after or t.info, t_end,
                                   "after")
        mine = _reasons_for(reasons, t.config.name)
        own = (death.describe,) if death else ()   # the target's server died: its level failed (an SLO fail)
        row_status = "failed" if death else "incomplete" if mine else "complete"
        note = notes.get(t.config.name)   # slow, not hung: said, but not a reason the step is incomplete
        rows.append(step_row(ctx, step, level, t, (times.start, t_window_start, t_window_end, t_end),
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


def _await_restarts(targets: list[Target]) -> None:
    """Before the step's clock starts, wait for each worker that Ray is still restarting after a crash: a call to it
    meanwhile fails (ActorUnavailableError), and the step would run without its streams (or, for a target's first
    worker, without its server's snapshot). A worker whose restarts are used up is left to _start_workers to name.
    Every worker is asked at once; only those still restarting are asked again."""
    pending = [w for t in targets for w in t.workers]

    def still_restarting() -> list:
        nonlocal pending
        calls = [(worker, worker.node_id.remote()) for worker in pending]
        pending = [worker for worker, ref in calls if _unavailable(ref)]
        return pending

    Retrying(retry=retry_if_result(bool), stop=stop_after_delay(WORKER_RESTART_S), wait=wait_fixed(0.2),
             sleep=stop.sleep, retry_error_callback=lambda state: None)(still_restarting)


def _unavailable(ref: Any) -> bool:
    """Whether the call's actor is restarting (an actor that is gone for good is not waited for)."""
    try:
        stop.get(ref)
    except ray.exceptions.ActorUnavailableError:
        return True
    except ray.exceptions.RayActorError:
        pass
    return False


def _before_step(ctx: RunContext, step: PlannedStep, targets: list[Target]
                 ) -> tuple[PlannedStep, list[Target], list[dict]]:
    """Flush and snapshot every target before the step. A server that stopped answering since the last step is
    brought back (on_server_death = "restart") or dropped, and the step runs without it; "stop" ends the run."""
    def snapshot(t: Target) -> dict:
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
            ctx.log(f"  server {name} does not answer before step {step.step_id} ({user_message(exc)})")
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


def _stall_notes(ctx: RunContext, step_id: int, targets: list[Target], deaths: list, counts: list[dict]
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


def _after_server_deaths(ctx: RunContext, step_id: int, targets: list[Target], deaths: list, t_ns: int) -> list:
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
