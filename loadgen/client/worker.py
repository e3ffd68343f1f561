"""The load worker: a Ray async actor holding many concurrent streams against one target.

Closed loop: the worker keeps exactly `concurrency` requests in flight from the step's start until the driver
says stop, so the load stays at C through the drain while the measured requests finish. Open loop
(`StepSpec.arrivals`): each request is sent at its planned arrival time whatever is in flight, up to an in-flight
cap, through the drain too; the measured requests are those planned inside the window. Rows go to the sink
as Arrow batches ten times a second (loadgen.client.shipping); a watchdog cuts stalled streams; a sampler records the
worker's own event-loop lag, CPU and in-flight count (`client_samples`), the proof that the client kept up.

The worker holds two helpers: its server's control (preflight, calibration, the cache flush, the server's
figures: client/preflight.py, whose calls the actor passes on) and a step's background tasks (watchdog, sampler:
client/watch.py); here is the step itself: its slots or arrivals, each request, the window's end, progress, the
stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Iterator
from functools import partial
from typing import cast

import ray

from loadgen.client import arrivals, ramps, sessions
from loadgen.client.http_stream import ReadLoop, StreamExchange, stream_request
from loadgen.client.livestats import LiveStats
from loadgen.client.messages import SloOutcomes, StepSpec, WorkerProgress
from loadgen.client.preflight import ServerControl
from loadgen.client.protocol.base import Adapter, SamplingSpec, StreamState
from loadgen.client.protocol.openai import OpenAIOptions
from loadgen.client.shipping import RowShipper, move_to_drain
from loadgen.client.watch import StepWatch
from loadgen.clock import now_ns
from loadgen.config import TargetConfig
from loadgen.prompts import Prompt

WORKER_NICE = -10          # the worker's threads Ray starts at nice 15 (see _raise_priority)
LOOP_RT_PRIORITY = 1       # SCHED_FIFO priority of the event-loop thread: the lowest, below every kernel thread
CONNECT_BACKOFF_S = 0.1     # a slot's pause after a request that could not even connect


@ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=3)  # a crashed worker comes back for the next step
class LoadWorker:
    def __init__(self, name: str, target: TargetConfig, url: str, sampling: SamplingSpec, sink: str) -> None:
        """`url`: the target's server (its own, or the one loadgen launched for it). `sink` is the results
        sink's actor name, not its handle: Ray keeps a handle (or a large argument) in the object store, and logs
        an error for a restartable actor with such arguments; the prompts come by `fetch_prompts`.
        The worker prints nothing: the driver shows its `progress` (loadgen.driver.progress)."""
        self.name = name
        self.prompts: list[Prompt] = []
        self.sampling = sampling
        self.early_stop: str | None = None  # a server that ignores ignore_eos: its first such request, in words
        self.reads = ReadLoop()
        self.control = ServerControl(target, url, sampling, self.reads)
        self.endpoint = self.control.endpoint
        self.shipper = RowShipper(ray.get_actor(sink).write.remote, name, target.name, target.node)
        self.streams: dict[str, StreamExchange] = {}
        self.watch = StepWatch(self.control, self.streams, self.reads, self.shipper)
        gc.freeze()  # the prompt pool and Ray's state never become garbage: keep them out of every GC pass
        self.step: StepSpec | None = None
        self.issuing = False
        self.stopping = asyncio.Event()   # set by stop_step: ends the start delay of a slot that has not begun
        self.run_task: asyncio.Task | None = None
        self.slot_tasks: list[asyncio.Task] = []
        self.open_requests: set[asyncio.Task] = set()
        self.background: list[asyncio.Task] = []
        self.measure_open = 0
        self.measure_sent = 0
        self.measured_open: dict[str, int] = {}   # request_id -> t_scheduled_ns of measured requests in flight
        self.t_first_measured_ns: int | None = None   # warm-up by count: when the window opened for this worker
        self.window_end_ns = 0
        self.sent = 0
        self.outcomes: dict[str, int] = {}
        self.tokens = 0
        self.live = LiveStats()   # the live metrics' latency figures, worked out when the driver polls

    # the server's control calls (client/preflight.py), as the driver calls them on the actor
    async def preflight(self) -> tuple[dict, OpenAIOptions | None]:
        return await self.control.preflight()

    async def server_info(self, within_s: float = 10.0) -> dict:
        return await self.control.server_info(within_s)

    def configure(self, options: OpenAIOptions | None) -> None:
        self.control.configure(options)

    async def calibrate(self, prompts: list[Prompt], timeout_s: float) -> list[tuple[int | None, str | None]]:
        return await self.control.calibrate(prompts, timeout_s)

    async def flush_cache(self) -> None:
        await self.control.flush_cache()

    async def close(self) -> None:
        await self.control.close()

    async def fetch_prompts(self, shard: tuple) -> None:
        """Fetch this worker's prompt shard, `(ObjectRef,)`. Done before the first step: fetched at a step's
        start, a shard took up to 2 s on a loaded machine, and the step's first arrivals were sent that late."""
        self.prompts = await shard[0]

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    # the step
    async def start_step(self, step: StepSpec) -> int:
        """Begin a step at `step.t_start_ns`; returns at once (the driver polls `progress`) with how late it was
        ready, in ns after the shared start (negative: in time)."""
        _raise_priority(step.realtime_priority)  # an async method runs on the event-loop thread, the one to raise
        if not self.control.configured:
            await self.control.preflight()  # a restarted actor lost the driver's configure()
        if not self.prompts:   # a restarted actor's: the driver had them fetched before the first step
            await self.fetch_prompts(step.prompts)
        self.step = step
        self.issuing = True
        self.stopping.clear()
        self.measure_open = 0
        self.measure_sent = 0
        self.measured_open = {}
        self.t_first_measured_ns = None
        self.window_end_ns = step.t_measure_end_ns
        self.shipper.begin(step)
        self.shipper.holds_level = not sessions.users_think(self.prompts)   # users who think hold no request
        self.sent = 0
        self.outcomes = {}
        self.tokens = 0
        self.live.begin(step.slo)
        self.run_task = asyncio.create_task(self._run(step))
        return now_ns() - step.t_start_ns

    async def _run(self, step: StepSpec) -> None:
        await _sleep_until(step.t_start_ns)
        if step.arrivals is not None:
            self.slot_tasks = [asyncio.create_task(self._open_loop(step, step.arrivals))]
        else:
            assert step.concurrency is not None   # closed loop: the runner gives every worker its share
            cursor = iter(range(1 << 62))
            warmup_ns = step.t_measure_start_ns - step.t_start_ns
            if step.users is not None:   # a user ramp: each user runs while the level reaches it
                self.slot_tasks = [asyncio.create_task(ramps.follow(
                    partial(self._slot, step, cursor), spans, step.t_start_ns, delay, lambda: self.issuing))
                    for spans, delay in step.users.plan(step.concurrency, warmup_ns, step.stagger)]
            else:
                self.slot_tasks = [asyncio.create_task(self._slot(step, cursor, (k + step.stagger) * warmup_ns /
                                                                  step.concurrency)) for k in range(step.concurrency)]
        self.background = [asyncio.create_task(self.watch.watchdog(step)),
                           asyncio.create_task(self.shipper.keep_flushing()),
                           asyncio.create_task(self.watch.sampler(step))]

    async def _slot(self, step: StepSpec, cursor: Iterator[int], start_delay_ns: float,
                    until_ns: int | None = None) -> None:
        """One unit of concurrency: send, wait for the end, send the next, until told to stop (or `until_ns`: a
        user ramp's user leaves). Slots start spread over the warm-up, so equal-length requests do not run in
        lockstep (all prefilling at once, all finishing at once) through the window."""
        with contextlib.suppress(TimeoutError):   # a stop during a long warm-up must not wait out the delay
            await asyncio.wait_for(self.stopping.wait(), start_delay_ns / 1e9)
        while self._may_send(step) and (until_ns is None or now_ns() < until_ns):
            if await self._prompt(step, next(cursor), now_ns()) == "client_error":
                await asyncio.sleep(CONNECT_BACKOFF_S)  # a dead server must not turn a slot into a busy loop

    def _may_send(self, step: StepSpec) -> bool:
        return self.issuing and (step.max_requests is None or self.sent < step.max_requests)

    async def _prompt(self, step: StepSpec, n: int, t_scheduled: int) -> str:
        """Prompt n: one request, or the session it opens (loadgen.client.sessions). Returns the last status."""
        prompt = self.prompts[n % len(self.prompts)]
        if prompt.conversation is None and prompt.agent is None:
            return await self._request(step, n, t_scheduled)
        assert self.control.adapter is not None   # chosen at start, or by preflight/configure before any load
        run = sessions.run_session if prompt.agent is None else sessions.run_agent_session
        return await run(
            prompt, f"{step.run_id[-6:]}-s{step.step_id}-{self.name}-{n}", t_scheduled, self.control.adapter,
            lambda turn, adapter, t, suffix: self._request(step, n, t, turn, adapter, suffix),
            lambda: self._may_send(step))

    async def _open_loop(self, step: StepSpec, spec: arrivals.ArrivalSpec) -> None:
        """Send each arrival at its planned time, whatever is in flight. At the in-flight cap an arrival waits
        for a free slot and is sent late (t_sent_ns - t_scheduled_ns shows by how much); later arrivals queue
        behind it in order, so the client stays bounded however slow the server is. Until the schedule passes
        the window's end, `measure_open` holds one extra count: planned measured arrivals are still to come."""
        slots = asyncio.Semaphore(spec.max_in_flight)
        self.measure_open += 1
        window_open = True
        try:
            for k, (_, offset_s) in enumerate(arrivals.arrival_times(spec)):
                if step.max_requests is not None and k >= step.max_requests:
                    break
                t_scheduled = step.t_start_ns + round(offset_s * 1e9)
                if window_open and t_scheduled >= step.t_measure_end_ns:
                    window_open = False
                    self.measure_open -= 1
                await _sleep_until(t_scheduled)
                await slots.acquire()
                task = asyncio.create_task(self._prompt(step, k, t_scheduled))
                task.add_done_callback(lambda _: slots.release())
                task.add_done_callback(self.open_requests.discard)
                self.open_requests.add(task)
        finally:  # the end of the schedule (fixed count) or stop_step's cancel
            if window_open:
                self.measure_open -= 1

    async def _request(self, step: StepSpec, n: int, t_scheduled: int, prompt: Prompt | None = None,
                       adapter: Adapter | None = None, suffix: str = "") -> str:
        """One request (prompt n, or a session's turn: its prompt, adapter and id suffix), its phase by its planned
        time, to its end; always leaves exactly one row. Returns its status."""
        prompt = prompt or self.prompts[n % len(self.prompts)]
        phase = ("warmup" if t_scheduled < step.t_measure_start_ns or self.sent < step.warmup_requests else
                 "measure" if t_scheduled < self.window_end_ns else "drain")
        state = StreamState(f"{step.run_id[-6:]}-s{step.step_id}-{self.name}-{n}{suffix}", prompt, phase, t_scheduled,
                            self.shipper.frames)
        adapter = adapter or self.control.adapter
        assert adapter is not None   # chosen at start, or by preflight/configure before any load
        body = adapter.body(state.request_id, prompt, self.sampling.for_prompt(prompt))
        self.sent += 1
        if phase == "measure":
            self.measure_open += 1
            self.measure_sent += 1
            self.measured_open[state.request_id] = t_scheduled
            if self.t_first_measured_ns is None:
                self.t_first_measured_ns = t_scheduled
        try:
            if self.issuing:
                await stream_request(self.endpoint, adapter, state, body, self.streams, self.reads)
            else:  # an open-loop arrival whose task first ran after stop_step
                state.fail("cancelled", "step ended before it was sent")
                state.close(now_ns())
        except Exception as exc:  # a loadgen bug must not lose the request's row
            state.fail("client_error", f"{exc.__class__.__name__}: {exc}")
            state.close(now_ns())
        finally:
            self.measured_open.pop(state.request_id, None)
            if state.phase == "measure":  # close_window may have moved it to the drain meanwhile
                self.measure_open -= 1
            status = cast(str, state.status)   # set: every path above closes the state
            self.outcomes[status] = self.outcomes.get(status, 0) + 1
            self.tokens += state.completion_tokens or 0
            self.shipper.add(state)
            self.live.add(state)
            if state.finish_reason == "stop" and self.sampling.ignore_eos and not self.early_stop:
                self._warn_early_stop(state)
        return status

    def _warn_early_stop(self, state: StreamState) -> None:
        """ignore_eos was sent, yet the server stopped: the workload is not the one asked for (shorter outputs).
        Kept for `progress`, so that the driver says it once; queries/workload_check.sql counts every such
        request."""
        asked = self.sampling.for_prompt(state.prompt).max_new_tokens
        if state.completion_tokens is not None and state.completion_tokens >= asked:
            return
        server = (self.control.identity or {}).get("server") or "the server"
        self.early_stop = (f"{server} ended request {state.request_id} with 'stop' after {state.completion_tokens} "
                           f"of {asked} tokens")

    async def close_window(self, t_end_ns: int) -> None:
        """The driver ends a closed-loop window (it lasts until enough requests were sent in it): requests
        sent at or after `t_end_ns` belong to the drain, also those this worker sent before hearing it."""
        self.window_end_ns = t_end_ns
        running = move_to_drain([p.state for p in self.streams.values()], t_end_ns)
        held = self.shipper.close_window(t_end_ns)  # very short requests, rows not yet shipped
        self.measure_sent -= running + held
        self.measure_open -= running

    @ray.method(enable_task_events=False)   # polled 5 times a second: see ResultsSink.write
    async def measure_sent_count(self, t_open_ns: int) -> int:
        """Requests sent inside the open window: the driver's poll while it decides the window's end (cheaper
        than `progress`, which also builds every unsettled row). The driver stamps `t_open_ns` before it asks
        and the end after it has the counts, so the window reaches at least `t_open_ns`."""
        self.shipper.window_reaches(t_open_ns)
        return self.measure_sent

    @ray.method(enable_task_events=False)   # polled 5 times a second: see ResultsSink.write
    async def slo_outcomes(self, since: int) -> SloOutcomes:
        """The measured requests finished so far (from the `since`-th on) with their SLO call, and the earliest
        scheduled one still in flight: a sequential window's poll (loadgen.driver.window)."""
        self.live.fold()
        t_open = min(self.measured_open.values(), default=None)
        return SloOutcomes(now_ns(), self.live.outcomes[since:], t_open)

    @ray.method(enable_task_events=False)   # polled 5 times a second: see ResultsSink.write
    async def progress(self) -> WorkerProgress:
        """What the driver needs to decide when the drain is over."""
        step = self.step
        quota_done = step is not None and step.max_requests is not None and self.sent >= step.max_requests
        unsettled = self.shipper.unsettled(p.state for p in self.streams.values())
        tokens = self.tokens + sum(p.state.cum_tokens for p in self.streams.values())
        live = self.live
        live.fold()
        return WorkerProgress(self.name, len(self.streams), self.measure_open, self.sent, quota_done,
                              dict(self.outcomes), unsettled, self.t_first_measured_ns, tokens, self.early_stop,
                              tuple(live.ttft_ms), tuple(live.itl_ms), live.judged, live.met)

    async def stop_step(self, reason: str = "step ended") -> dict:
        """Stop issuing, cut what is still running (status cancelled), write every row, return counts."""
        step = self.step
        assert step is not None, "stop_step without start_step"
        self.issuing = False
        self.stopping.set()
        if self.run_task is not None and not self.run_task.done():
            self.run_task.cancel()  # stopped before it started
        for protocol in list(self.streams.values()):
            protocol.cut("cancelled", reason)
        if step.arrivals is not None:
            for task in self.slot_tasks:
                task.cancel()  # the open loop only sleeps or waits for a slot: nothing is lost
        await asyncio.gather(*self.slot_tasks, return_exceptions=True)
        await asyncio.gather(*self.open_requests, return_exceptions=True)
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        self.slot_tasks, self.background, self.run_task = [], [], None
        self.endpoint.close_idle()
        await self.watch.last_sample(step)
        await self.shipper.end_step()
        self.step = None
        return dict(self.outcomes)


async def _sleep_until(t_ns: int) -> None:
    """Return at `t_ns` or later, never before: uvloop timers count whole milliseconds and can fire up to ~1 ms
    early, and a request sent before the step's start would count as warm-up (a fixed-count step then had
    no measured request open and was cut at once, its requests 'cancelled')."""
    while (delay := (t_ns - now_ns()) / 1e9) > 0:
        await asyncio.sleep(delay)


def _raise_priority(realtime: bool) -> None:
    """Reads are dated by the kernel, but a socket read over 5 ms late holds two frames of a stream, which then
    share one stamp. On a core shared with Ray's own processes (raylet, GCS, dashboard agent, sink) the event-loop
    thread (called from it: Linux priority is per thread) was preempted in 1-7 ms slices even at nice -10, and
    waited up to 11 ms for the GIL held by threads Ray starts at nice 15, which every process at nice 0 preempts
    (perf sched). So the loop thread becomes SCHED_FIFO at the lowest real-time priority (threads it creates revert
    to normal), and the worker's nice-15 threads get WORKER_NICE: fewer frames are read together (the measurements:
    docs/instrument.md). The kernel's real-time throttling still leaves 5% of each second to
    other tasks. Needs root or CAP_SYS_NICE; without it every thread keeps Ray's priority and client_samples (loop
    lag, read delay) show the cost.

    `realtime=False` (load.realtime_priority) leaves the loop thread at WORKER_NICE, for a worker that shares
    cores with a CPU-bound server it must never preempt."""
    if not (realtime and _set_fifo()):
        _set_nice(0)
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return
    for tid in threads:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) > 0 and os.sched_getscheduler(tid) == os.SCHED_OTHER:
                _set_nice(tid)  # one Ray started at nice 15 (its task-receiving thread holds the GIL at times)
        except OSError:
            pass  # the thread has exited


def _set_fifo() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(LOOP_RT_PRIORITY))
    except (AttributeError, OSError):  # not Linux, or not allowed
        return False
    return True


def _set_nice(tid: int) -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, tid, WORKER_NICE)
    except OSError:
        pass
