"""The driver's side of a step's measurement window: when each target's window closes, when the drain is
over, whether the error budget is spent, and the `lost` rows of workers that died.

The worker's side is `LoadWorker.close_window`, `measure_sent_count` and `progress` (a `WorkerProgress`).
Both waits end with stop.Stopped within a poll of a stop signal (loadgen.driver.stop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray

from loadgen.client.messages import NOT_FAILED, SloOutcomes, WorkerProgress
from loadgen.clock import now_ns
from loadgen.config import LoadConfig
from loadgen.driver import stop
from loadgen.driver.progress import Extension, StepProgress
from loadgen.results import schema, sequential

POLL_S = 0.2


@dataclass
class Drain:
    """How waiting out a step ended."""

    drained: bool
    dead: dict[int, tuple[WorkerProgress | None, str]]   # index in `active` -> (last progress, why it is dead)
    budget: str | None = None           # set when the error budget was exceeded
    last: dict[int, WorkerProgress] = field(default_factory=dict)   # index in `active` -> its last progress


@dataclass
class SequentialWindow:
    """One target's sequential window (loadgen/results/sequential.py): it ends once the SLO call on the measured
    requests finished so far, in schedule order, is clear."""

    attainment: float
    false_verdict: float
    miss_correlation: float | None   # the misses' lag-1 correlation the rate holds to (None: the rule's default)
    seen: dict[int, list[tuple[int, str, bool]]] = field(default_factory=dict)   # worker -> its outcomes so far

    def call(self, workers: list) -> sequential.Call | None:
        """The call on every request scheduled before the earliest one still open (or a worker's answer)."""
        answers: list[SloOutcomes] = []
        for i, w in enumerate(workers):
            try:
                answers.append(ray.get(w.slo_outcomes.remote(len(self.seen.setdefault(i, [])))))
            except ray.exceptions.RayActorError:
                return None   # a dead worker's requests are unknown: the window runs to its longest
            self.seen[i] += answers[-1].finished
        cutoff = judged_before(answers)
        known = sorted(o for outcomes in self.seen.values() for o in outcomes if o[0] < cutoff)
        return sequential.decide([met for _, _, met in known], self.attainment, self.false_verdict,
                                 self.miss_correlation)


def judged_before(answers: list[SloOutcomes]) -> int:
    """Every request scheduled before this moment has finished: the earliest answer, or the earliest request still
    in flight (none may be, when every stream is between two requests)."""
    return min([a.t_ns for a in answers] + [a.t_open_ns for a in answers if a.t_open_ns is not None])


def close_windows(groups: list[list], names: list[str], t_min_end: int, measure_s: float, max_measure_s: float,
                   needs: list[int], progress: StepProgress | None = None,
                   rules: list[SequentialWindow | None] | None = None) -> list[int]:
    """End each target's closed-loop window once it is `measure_s` long and `needs[g]` requests (default: C;
    a search asks for enough for a clear call) were sent inside it, or, with a sequential rule, once its SLO
    call is clear; at the latest at `max_measure_s`: with requests longer than the window, a fixed window could
    hold no measured request at all. Returns each target's window end; `progress` is shown meanwhile and told of
    each window held open past `measure_s`."""
    rules = rules or [None] * len(groups)
    t_ms = t_min_end - int(measure_s * 1e9)
    t_max_end = t_ms + int(max_measure_s * 1e9)
    ends: list[int | None] = [None] * len(groups)
    every = [w for workers in groups for w in workers]
    while now_ns() < t_min_end:
        stop.sleep(min(POLL_S, max((t_min_end - now_ns()) / 1e9, 0.0)))
        _show(progress, every)
    while None in ends:
        _show(progress, every)
        for g, workers in enumerate(groups):
            if ends[g] is not None:
                continue
            rule = rules[g]
            if rule is None:
                enough = sum(_measure_sent(w) for w in workers) >= needs[g]
                held = needs[g]
            else:
                call = rule.call(workers)
                enough, held = call is not None, call.n if call else 0
            t = now_ns()  # after the counts: a request sent while they were read is counted and stays measured
            if enough or t >= t_max_end:
                ends[g] = t
                for w in workers:
                    w.close_window.remote(t)
                if t > t_min_end + POLL_S * 2e9 and progress is not None:
                    progress.extended(Extension(names[g], (t - t_ms) / 1e9, held, t >= t_max_end))
        if None in ends:
            stop.sleep(POLL_S)
    return ends  # type: ignore[return-value]


def _show(progress: StepProgress | None, workers: list) -> None:
    """Poll the workers' progress for the display, only when it is due (a redraw, or a line in a log)."""
    if progress is not None and progress.due():
        progress.show(poll(workers))


def poll(workers: list) -> list[WorkerProgress]:
    """The progress of every worker that answers."""
    return [p for p in (_progress(w) for w in workers) if p is not None]


def _progress(worker: Any) -> WorkerProgress | None:
    try:
        return ray.get(worker.progress.remote())
    except ray.exceptions.RayActorError:
        return None   # dead: the drain wait deals with it


def _measure_sent(worker: Any) -> int:
    """Requests a worker sent inside the open window (0 for a dead worker: the drain wait deals with it)."""
    try:
        return ray.get(worker.measure_sent_count.remote(now_ns()))  # the window reaches at least this far
    except ray.exceptions.RayActorError:
        return 0


def wait_for_drain(workers: list, t_measure_end: int, t_deadline: int, load: LoadConfig, counted: bool = False,
                   progress: StepProgress | None = None) -> Drain:
    """Sleep through the window, then poll until no measured request is open (drained) or the deadline.
    A fixed-count step is over when every worker has sent its quota and nothing is in flight. Every poll
    keeps each worker's last progress (its unsettled requests, should it die), checks the error budget and
    hands the progress to `progress`; a worker that stops answering is dead for the rest of the step
    (on_worker_death = "stop" ends it)."""
    last: dict[int, WorkerProgress] = {}
    dead: dict[int, tuple[WorkerProgress | None, str]] = {}
    while True:
        if now_ns() < t_measure_end:
            stop.sleep(min(POLL_S, max((t_measure_end - now_ns()) / 1e9, 0.0)))
        for i, ref in [(i, w.progress.remote()) for i, w in enumerate(workers) if i not in dead]:
            try:
                last[i] = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                dead[i] = (last.get(i), exc.__class__.__name__)
        live = [last[i] for i in last if i not in dead]
        if progress is not None:
            progress.show(live)
        budget = _over_budget(load.error_budget, [*live, *(p for p, _ in dead.values() if p)])
        if budget or (dead and load.on_worker_death == "stop") or not live:
            return Drain(False, dead, budget, last)
        if now_ns() >= t_measure_end and all(
                p.measure_open == 0 and (not counted or p.quota_done) for p in live):
            return Drain(not dead, dead, last=last)
        if now_ns() >= t_deadline:
            return Drain(False, dead, last=last)
        if now_ns() >= t_measure_end:
            stop.sleep(POLL_S)


def _over_budget(budget: float | None, progress: list[WorkerProgress]) -> str | None:
    """The reason to stop when a step's failed requests exceed the budget (a count, or a share judged once
    20 requests have finished); None otherwise."""
    failed = sum(p.failed for p in progress)
    finished = sum(p.finished for p in progress)
    if budget is None or (0 < budget < 1 and finished < 20):
        return None
    limit = budget * finished if 0 < budget < 1 else budget
    if failed <= limit:
        return None
    classes: dict[str, int] = {}
    for p in progress:
        for k, v in p.outcomes.items():
            if k not in NOT_FAILED:
                classes[k] = classes.get(k, 0) + v
    what = ", ".join(f"{v} {k}" for k, v in sorted(classes.items()))
    allowed = f"{budget:.0%} of {finished}" if 0 < budget < 1 else f"{budget:g}"
    return f"error budget exceeded: {failed} failed requests ({what}) > {allowed}"


def stop_workers(workers: list, drain: Drain, reason: str) -> list[dict]:
    """stop_step on every live worker; one that died meanwhile joins `drain.dead` with its last progress."""
    refs = {i: w.stop_step.remote(reason) for i, w in enumerate(workers) if i not in drain.dead}
    counts = []
    for i, ref in refs.items():
        try:
            counts.append(ray.get(ref))
        except ray.exceptions.RayActorError as exc:
            drain.dead[i] = (None, exc.__class__.__name__)
    return counts


def write_lost_rows(sink: Any, run_id: str, step_id: int, dead: dict[int, tuple[WorkerProgress | None, str]]
                     ) -> list[int]:
    """A `lost` row for each request a dead worker held whose row never reached the sink; counts per worker."""
    counts = []
    for progress, why in dead.values():
        rows = progress.unsettled if progress else []
        name = progress.worker if progress else "?"
        written = ray.get(sink.request_ids.remote(step_id, name)) if rows else set()
        lost = [dict(r, status="lost", error=f"worker {name} died ({why}); last known status: "
                     f"{r['status'] or 'in flight'}") for r in rows if r["request_id"] not in written]
        if lost:
            sink.write.remote({"requests": schema.batch_from_rows("requests", lost)})
        counts.append(len(lost))
    return counts


