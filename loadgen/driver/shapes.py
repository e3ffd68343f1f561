"""A step's load when it is not one flat level for a timed window: what the runner asks of it.

- A trace replay (load.trace): each worker's own send times (its rows at the step's speedup), and the window from
  the warm-up's end (warmup_s, or the first warmup_requests rows) to the last row.
- A ramp (load.ramp): the profile the workers follow (arrivals open loop, users closed loop), the window from the
  first ramp or hold to the last, and one steps row per window, each under a step id of its own from the step's
  first on; the workers file each request, frame and sample under the window its time falls in
  (messages.StepSpec.window_starts).
- A counted step with warm-up (warmup_requests with requests = N): each target's window opens when its workers
  sent their first measured request (the latest of them: from then on every worker is past its warm-up).
"""

from __future__ import annotations

from loadgen.client.arrivals import ArrivalSpec
from loadgen.client.messages import WorkerProgress
from loadgen.client.ramps import UserRamp
from loadgen.config import LoadConfig
from loadgen.plan.steps import PlannedStep, TargetLoad, split_concurrency


def window_s(load: LoadConfig, step: PlannedStep) -> tuple[float, float] | None:
    """(window start, window end) in seconds after the step's start for a trace or a ramp; None for the others.
    A trace's window ends a microsecond after its last row, so that row is measured."""
    if load.trace is not None:
        speedup = step.loads[0].speedup
        assert speedup is not None   # every load of a trace step has the step's speedup (plan._grid_levels)
        offsets = load.trace.offsets(speedup)
        start = offsets[load.warmup_requests] if load.warmup_requests else load.warmup_s
        return start, offsets[-1] + 1e-6
    if load.ramp is not None:
        windows = load.ramp.profile(load.warmup_s).windows()
        return windows[0][0], windows[-1][1]
    return None


def arrival(load: LoadConfig, level: TargetLoad, index: int, workers: int, cap: int) -> ArrivalSpec | None:
    """Worker `index`'s arrivals in open loop (a trace's rows index, index + workers, ...; a ramp's profile), or
    None in closed loop. `cap`: its share of the in-flight cap."""
    if level.speedup is not None and load.trace is not None:
        offsets = tuple(load.trace.offsets(level.speedup)[index::workers])
        return ArrivalSpec("trace", level.rate or 0.0, 1.0, 0, index, workers, cap, offsets=offsets)
    open_loop = load.open_loop
    if level.rate is None or open_loop is None:
        return None
    profile = load.ramp.profile(load.warmup_s) if load.ramp else None
    return ArrivalSpec(open_loop.arrival, level.rate, open_loop.burstiness, open_loop.seed, index, workers,
                       max_in_flight=cap, profile=profile)


def users(load: LoadConfig, level: TargetLoad, index: int, workers: int) -> UserRamp | None:
    """Worker `index`'s users of a closed-loop ramp (None otherwise)."""
    if load.ramp is None or level.rate is not None:
        return None
    return UserRamp(load.ramp.profile(load.warmup_s), index, workers)


def window_starts(load: LoadConfig, t_start: int) -> tuple[int, ...]:
    """A ramp's second and later windows' starts (ns): the worker files what happens from each on under the next
    step id. Empty for every other step."""
    if load.ramp is None:
        return ()
    return tuple(t_start + round(start * 1e9) for start, _, _ in load.ramp.profile(load.warmup_s).windows()[1:])


def warmup_quotas(load: LoadConfig, workers: int) -> list[int]:
    """Each worker's share of warmup_requests (a trace's are its first rows, by time: none)."""
    if not load.warmup_requests or load.trace is not None:
        return [0] * workers
    return split_concurrency(load.warmup_requests, workers)


def window_opened(load: LoadConfig, progress: list[WorkerProgress | None], planned: int) -> int:
    """A counted step's window start for one target: when the last of its workers sent its first measured
    request (warmup_requests), else as planned."""
    if load.requests is None or not load.warmup_requests:
        return planned
    firsts = [p.t_first_measured_ns for p in progress if p is not None and p.t_first_measured_ns is not None]
    return max(firsts, default=planned)


def step_rows(load: LoadConfig, step: PlannedStep, rows: list[dict]) -> list[dict]:
    """The steps rows of a step: a trace's with its speedup; a ramp's one per window (each its step id, window,
    shape, levels at its ends, and its mean level as rate or concurrency); the others as they are."""
    if load.trace is not None:
        return [dict(row, speedup=load_.speedup) for row, load_ in zip(rows, step.loads)]
    if load.ramp is None:
        return rows
    profile = load.ramp.profile(load.warmup_s)
    windows = profile.windows()
    out = []
    for row in rows:
        t0 = row["t_start_ns"]
        for j, (start, end, piece) in enumerate(windows):
            closed = row["rate"] is None
            mean = round(profile.mean_users(start, end)) if closed else profile.mean(start, end)
            out.append(dict(row, step_id=step.step_id + j, ramp=piece.shape, level_start=piece.a, level_end=piece.b,
                            concurrency=mean if closed else None, rate=None if closed else mean,
                            t_start_ns=t0 if j == 0 else t0 + round(start * 1e9),
                            t_measure_start_ns=t0 + round(start * 1e9), t_measure_end_ns=t0 + round(end * 1e9),
                            t_end_ns=row["t_end_ns"] if j == len(windows) - 1 else t0 + round(end * 1e9)))
    return out


def last_step_id(step: PlannedStep) -> int:
    """The step id of the step's last window (its own id but for a ramp)."""
    return step.step_id + step.width - 1
