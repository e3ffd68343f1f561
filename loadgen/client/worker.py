"""The load worker: a Ray async actor holding many concurrent streams against one target.

Closed loop: the worker keeps exactly `concurrency` requests in flight from the step's start until the driver
says stop, so the load stays at C through the drain while the measured requests finish. Open loop
(`StepSpec.arrivals`): each request is sent at its planned arrival time whatever is in flight, up to an in-flight
cap, through the drain too; the measured requests are those planned inside the window. Rows go to the sink
as Arrow batches ten times a second (loadgen.client.shipping); a watchdog cuts stalled streams; a sampler records the
worker's own event-loop lag, CPU and in-flight count (`client_samples`), the proof that the client kept up.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
from collections.abc import Iterator
from functools import partial
from typing import cast

import aiohttp
import psutil
import ray

from loadgen.client import arrivals, calibrate, drafting, ramps, sessions
from loadgen.client.http_stream import Endpoint, ReadLoop, StreamExchange, stream_request
from loadgen.client.messages import StepSpec, WorkerProgress
from loadgen.client.protocol import adapter_for
from loadgen.client.protocol.base import Adapter, SamplingSpec, StreamState
from loadgen.client.protocol.openai import OpenAIOptions
from loadgen.client.shipping import RowShipper, move_to_drain
from loadgen.clock import now_ns
from loadgen.config import TargetConfig
from loadgen.errors import LoadgenError, TargetError
from loadgen.prompts import Prompt
from loadgen.servers import probe, serverid

SAMPLE_PERIOD_S = 0.5
WATCHDOG_PERIOD_S = 0.1
WORKER_NICE = -10          # the worker's threads Ray starts at nice 15 (see _raise_priority)
LOOP_RT_PRIORITY = 1       # SCHED_FIFO priority of the event-loop thread: the lowest, below every kernel thread
CONNECT_BACKOFF_S = 0.1     # a slot's pause after a request that could not even connect
DRAFT_PROBE_TIMEOUT_S = 60.0  # llama.cpp's drafting probe before any load (client/drafting.py)


@ray.remote(num_cpus=0)
class PromptPool:
    """A run's prompt shards, one per load worker: each fetches its own when its first step starts, and again
    after a restart."""

    def __init__(self, shards: list[list[Prompt]]) -> None:
        self.shards = shards

    def shard(self, i: int) -> list[Prompt]:
        return self.shards[i]


@ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=3)  # a crashed worker comes back for the next step
class LoadWorker:
    def __init__(self, name: str, target: TargetConfig, url: str, prompts: tuple[str, int], sampling: SamplingSpec,
                 sink: str) -> None:
        """`url`: the target's server (its own, or the one loadgen launched for it).
        `prompts` names a PromptPool actor and this worker's shard in it, fetched when a step starts; `sink`
        is the results sink's actor name. Names, not the prompts or handles: Ray keeps a large argument or a
        handle in the object store, and logs an error for a restartable actor with such arguments.
        The worker prints nothing: the driver shows its `progress` (loadgen.driver.progress)."""
        self.name = name
        self.target = target
        self.url = url
        self.prompt_source = prompts
        self.prompts: list[Prompt] = []
        self.sampling = sampling
        self.api_key, self.key_problem = _read_api_key(target)
        # flavor "auto": the adapter is chosen by preflight/configure, from the server's identity
        self.flavor: str | None = None if target.flavor == "auto" else target.flavor
        self.adapter = adapter_for(target.flavor) if self.flavor else None
        self.options: OpenAIOptions | None = None  # openai-*: set by preflight/configure before any load
        self.identity: dict | None = None  # loadgen.servers.serverid's answer (first worker of a target: preflight)
        self.early_stop: str | None = None  # a server that ignores ignore_eos: its first such request, in words
        self.endpoint = Endpoint(url, self.api_key)
        self.shipper = RowShipper(ray.get_actor(sink).write.remote, name, target.name, target.node)
        self.streams: dict[str, StreamExchange] = {}
        self.reads = ReadLoop()
        self.process = psutil.Process()
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
        self.t_first_measured_ns: int | None = None   # warm-up by count: when the window opened for this worker
        self.window_end_ns = 0
        self.sent = 0
        self.outcomes: dict[str, int] = {}
        self.tokens = 0
        self.session: aiohttp.ClientSession | None = None

    # control calls (run where the server is reachable)
    async def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        return self.session

    async def server_info(self) -> dict:
        """SGLang's /get_server_info; for openai-* flavours whatever the server says (algorithm UNKNOWN when it
        is not SGLang), so steps rows carry the algorithm and draft tokens whenever they can be known."""
        session, url = await self._session(), self.url
        ident = self.identity or {}
        if self.flavor == "sglang" or ident.get("server") == serverid.SGLANG:
            return dict(await probe.server_info(session, url, self.api_key), **ident)
        if ident:  # another server: what preflight learnt (its routes are not asked again)
            return dict(ident)
        info = await probe.sglang_server_info(session, url, self.api_key)
        return info if info is not None else {"speculative_algorithm": "UNKNOWN", "version": "unknown"}

    async def _counters(self) -> dict[str, float]:
        """The server's unlabelled /metrics series now (empty where /metrics does not answer)."""
        if (self.identity or {}).get("routes", {}).get("/metrics", 200) != 200:
            return {}
        samples = await probe.metrics_samples(await self._session(), self.url, self.api_key)
        return {name: value for name, value, labels in samples if not labels}

    async def preflight(self) -> tuple[dict, OpenAIOptions | None]:
        """Before any load: the server info, and for openai-* flavours the resolved request options (GET
        /v1/models must answer an OpenAI list; the model defaults to its first id). TargetError otherwise,
        with the control session closed (the run ends there, and an open one is reported as leaked)."""
        try:
            return await self._preflight()
        except TargetError:
            await self.close()
            raise

    async def _preflight(self) -> tuple[dict, OpenAIOptions | None]:
        if self.key_problem:
            raise TargetError(f"target {self.target.name}: {self.key_problem}")
        t = self.target
        ident = await serverid.identify(await self._session(), self.url, self.api_key)
        self.flavor = t.flavor if t.flavor != "auto" else ident.flavor
        self.identity = identity_info(ident, self.flavor)
        if self.flavor == "sglang":
            self.adapter = adapter_for("sglang")
            return await self.server_info(), None
        models = await probe.openai_models(await self._session(), self.url, self.api_key)
        if t.model is not None and t.model not in models:
            raise TargetError(f"target {t.name}: model {t.model!r} is not served by {self.url} (it serves "
                              f"{', '.join(models)}); fix the target's `model` or leave it out")
        info = await self.server_info()
        sglang = ident.name == serverid.SGLANG
        spec = t.spec_details if t.spec_details is not None else sglang and _version(info["version"]) >= (0, 5, 23)
        options = OpenAIOptions(t.model or models[0], t.continuous_usage, bool(spec), sglang=sglang,
                                server=ident.name, flavor=self.flavor,
                                cache_prompt=ident.name != serverid.LLAMACPP,  # no prefix reuse (docs/real-servers.md)
                                cache_salt=ident.name == serverid.VLLM)
        self.configure(options)
        if ident.name == serverid.LLAMACPP and self.adapter is not None:   # what it does over what it says
            observed = await drafting.observe(self.endpoint, self.adapter, self.reads, DRAFT_PROBE_TIMEOUT_S,
                                              self._counters)
            info = self.identity = drafting.with_observed(info, observed)
        return info, options

    def configure(self, options: OpenAIOptions | None) -> None:
        """Use the preflight's request options (every worker of a target gets the first one's)."""
        if options is not None:
            self.options = options
            self.flavor = options.flavor or self.target.flavor
            self.adapter = adapter_for(self.flavor, options)
        elif self.flavor is None:  # `auto` that preflight resolved to SGLang's native API
            self.flavor = "sglang"
            self.adapter = adapter_for("sglang")

    async def calibrate(self, prompts: list[Prompt], timeout_s: float) -> list[tuple[int | None, str | None]]:
        """The server's own prompt token count for each prompt (one-token requests, after preflight): the data of
        the target's input-length fit (loadgen.client.calibrate)."""
        assert self.adapter is not None   # chosen by preflight
        return await calibrate.server_counts(self.endpoint, self.adapter, self.reads, prompts, timeout_s)

    async def fetch_prompts(self) -> None:
        """Fetch this worker's prompt shard. Done before the first step: fetched at a step's start, a shard took
        up to 2 s on a loaded machine, and the step's first arrivals (a trace's first rows) were sent that late."""
        pool, shard = self.prompt_source
        self.prompts = await ray.get_actor(pool).shard.remote(shard)

    async def flush_cache(self) -> None:
        if self.options is not None and not self.options.sglang:
            return  # an OpenAI server other than SGLang has no /flush_cache
        await probe.flush_cache(await self._session(), self.url, self.api_key)

    async def close(self) -> None:
        """Release the control-call connection pool (end of run)."""
        if self.session is not None:
            await self.session.close()
            self.session = None

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    # the step
    async def start_step(self, step: StepSpec) -> None:
        """Begin a step at `step.t_start_ns`; returns at once (the driver polls `progress`)."""
        _raise_priority(step.realtime_priority)  # an async method runs on the event-loop thread, the one to raise
        if self.flavor is None or (self.options is None and self.flavor != "sglang"):
            await self.preflight()  # a restarted actor lost the driver's configure()
        if not self.prompts:   # a restarted actor's: the driver had them fetched before the first step
            await self.fetch_prompts()
        self.step = step
        self.issuing = True
        self.stopping.clear()
        self.measure_open = 0
        self.measure_sent = 0
        self.t_first_measured_ns = None
        self.window_end_ns = step.t_measure_end_ns
        self.shipper.begin(step)
        self.shipper.holds_level = not sessions.users_think(self.prompts)   # users who think hold no request
        self.sent = 0
        self.outcomes = {}
        self.tokens = 0
        self.run_task = asyncio.create_task(self._run(step))

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
        self.background = [asyncio.create_task(self._watchdog(step)),
                           asyncio.create_task(self.shipper.keep_flushing()),
                           asyncio.create_task(self._sampler(step))]

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
        if prompt.conversation is None:
            return await self._request(step, n, t_scheduled)
        assert self.adapter is not None   # chosen at start, or by preflight/configure before any load
        return await sessions.run_session(
            prompt, f"{step.run_id[-6:]}-s{step.step_id}-{self.name}-{n}", t_scheduled, self.adapter,
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
        adapter = adapter or self.adapter
        assert adapter is not None   # chosen at start, or by preflight/configure before any load
        body = adapter.body(state.request_id, prompt, self.sampling.for_prompt(prompt))
        self.sent += 1
        if phase == "measure":
            self.measure_open += 1
            self.measure_sent += 1
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
            if state.phase == "measure":  # close_window may have moved it to the drain meanwhile
                self.measure_open -= 1
            status = cast(str, state.status)   # set: every path above closes the state
            self.outcomes[status] = self.outcomes.get(status, 0) + 1
            self.tokens += state.completion_tokens or 0
            self.shipper.add(state)
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
        server = (self.identity or {}).get("server") or "the server"
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

    async def measure_sent_count(self, t_open_ns: int) -> int:
        """Requests sent inside the open window: the driver's poll while it decides the window's end (cheaper
        than `progress`, which also builds every unsettled row). The driver stamps `t_open_ns` before it asks
        and the end after it has the counts, so the window reaches at least `t_open_ns`."""
        self.shipper.window_reaches(t_open_ns)
        return self.measure_sent

    async def progress(self) -> WorkerProgress:
        """What the driver needs to decide when the drain is over."""
        step = self.step
        quota_done = step is not None and step.max_requests is not None and self.sent >= step.max_requests
        unsettled = self.shipper.unsettled(p.state for p in self.streams.values())
        tokens = self.tokens + sum(p.state.cum_tokens for p in self.streams.values())
        return WorkerProgress(self.name, len(self.streams), self.measure_open, self.sent, quota_done,
                              dict(self.outcomes), unsettled, self.t_first_measured_ns, tokens, self.early_stop)

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
        if step.sample_server and self.session is not None:  # a last server sample, after the last request
            try:
                self.shipper.write_samples({"t_ns": []}, await self._server_rows(self.session, step))
            except (aiohttp.ClientError, TimeoutError, LoadgenError):
                pass
        await self.shipper.end_step()
        self.step = None
        return dict(self.outcomes)

    # background tasks of a step
    async def _watchdog(self, step: StepSpec) -> None:
        stall_ns, total_ns = int(step.stall_timeout_s * 1e9), int(step.request_timeout_s * 1e9)
        while True:
            await asyncio.sleep(WATCHDOG_PERIOD_S)
            t = now_ns()
            for protocol in list(self.streams.values()):
                if t - protocol.t_last_read > stall_ns:
                    protocol.cut("timeout", f"no data for {step.stall_timeout_s:g} s (stall timeout)")
                elif t - protocol.state.t_scheduled_ns > total_ns:
                    protocol.cut("timeout", f"request took over {step.request_timeout_s:g} s (request timeout)")

    async def _sampler(self, step: StepSpec) -> None:
        rows: dict[str, list] = {k: [] for k in ("t_ns", "loop_lag_ms", "read_delay_max_ms", "cpu_percent",
                                                        "in_flight")}
        self.process.cpu_percent(None)
        session = await self._session() if step.sample_server else None
        server_rows: list[dict] = await self._server_rows(session, step) if session is not None else []  # at start
        tick = 0
        while True:
            t0 = now_ns()
            await asyncio.sleep(SAMPLE_PERIOD_S)
            t1 = now_ns()
            rows["t_ns"].append(t1)
            rows["loop_lag_ms"].append(max((t1 - t0) / 1e6 - SAMPLE_PERIOD_S * 1e3, 0.0))
            rows["read_delay_max_ms"].append(self.reads.take())
            rows["cpu_percent"].append(self.process.cpu_percent(None))
            rows["in_flight"].append(len(self.streams))
            tick += 1
            if session is not None and tick % 2 == 0:
                server_rows += await self._server_rows(session, step)
            if tick % 4 == 0:
                self.shipper.write_samples(rows, server_rows)
                rows = {k: [] for k in rows}
                server_rows = []

    async def _server_rows(self, session: aiohttp.ClientSession, step: StepSpec) -> list[dict]:
        t = now_ns()
        ident = self.identity or {}
        routes = ident.get("routes") or {}
        # Routes that preflight found missing are not polled (a 404 every second fills the server's log).
        samples = (await probe.metrics_samples(session, self.url, self.api_key)
                   if routes.get("/metrics", 200) == 200 else [])
        if not ident or ident.get("server") == serverid.SGLANG:
            try:  # the server's own running figures (acceptance, throughput) next to /metrics
                info = await probe.server_info(session, self.url, self.api_key, within_s=1.0)
                samples += [(n, v, dict(labels, when="during")) for n, v, labels in probe.server_info_samples(info)]
            except LoadgenError:
                pass  # a busy server that misses one sample is not a failure of the step
        return [{"run_id": step.run_id, "step_id": step.step_of(t), "target": self.target.name,
                 "node": self.target.node, "t_ns": t, "name": name, "value": value,
                 "labels": json.dumps(labels, sort_keys=True)} for name, value, labels in samples]


def identity_info(ident: serverid.ServerId, flavor: str) -> dict:
    """The server's identity as steps.server_info keys: `server`, `server_version`, `model`, the resolved
    `flavor`, what it says of its drafting, the routes probed; for a server other than SGLang also `version`
    and `speculative_algorithm` (UNKNOWN unless it says)."""
    info = {"server": ident.name, "server_version": ident.version, "model": ident.model, "flavor": flavor,
            "server_speculative": ident.speculative, "routes": ident.routes}
    if ident.name != serverid.SGLANG:
        info.update(ident.limits)
        types = ident.speculative.get("speculative.types")
        info["version"] = ident.version or "unknown"
        info["speculative_algorithm"] = (str(types).upper() if isinstance(types, str) and types
                                         else "UNKNOWN")
    return info


def _read_api_key(target: TargetConfig) -> tuple[str | None, str | None]:
    """(key, problem): from the environment or a file on this node; the problem is raised at preflight."""
    if target.api_key_env:
        key = os.environ.get(target.api_key_env)
        return (key, None) if key else (None, f"api_key_env {target.api_key_env} is not set on this node")
    if target.api_key_file:
        try:
            key = open(target.api_key_file, encoding="utf-8").read().strip()
        except OSError as exc:
            return None, f"api_key_file {target.api_key_file} cannot be read here ({exc.strerror})"
        return (key, None) if key else (None, f"api_key_file {target.api_key_file} is empty")
    return None, None


def _version(text: str) -> tuple[int, ...]:
    """'0.5.23' -> (0, 5, 23); unparsable parts count as 0 (a dev build compares as its release)."""
    return tuple(_leading_int(p) for p in str(text).split(".")[:3])


def _leading_int(part: str) -> int:
    """The number a version part starts with; 0 when it starts with no digit."""
    digits = re.match(r"\d*", part)   # always matches, maybe the empty string
    return int(digits.group()) if digits and digits.group() else 0


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
