"""The load worker: a Ray async actor holding many concurrent streams against one target.

Closed loop: the worker keeps exactly `concurrency` requests in flight from the step's start until the driver
says stop, so the load stays at C through the drain while the measured requests finish. Rows go to the sink
as Arrow batches about once a second; a watchdog cuts stalled streams; a sampler records the worker's own
event-loop lag, CPU and in-flight count (`client_samples`), the proof that the client kept up.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
from dataclasses import dataclass

import aiohttp
import psutil
import ray

from loadgen import probe, schema
from loadgen.clock import now_ns
from loadgen.errors import LoadgenError
from loadgen.http_stream import Endpoint, _StreamProtocol, stream_request
from loadgen.prompts import Prompt
from loadgen.protocol import adapter_for
from loadgen.protocol.base import FrameBuffer, SamplingSpec, StreamState

SAMPLE_PERIOD_S = 0.5
WATCHDOG_PERIOD_S = 0.1
FLUSH_PERIOD_S = 0.1   # small batches: building one blocks the event loop ~0.16 us per frame row


@dataclass(frozen=True)
class TargetSpec:
    """What a worker needs to know about its target (the API key is read from the env on the worker)."""

    name: str
    url: str
    flavor: str
    node: str
    api_key_env: str | None = None


@dataclass(frozen=True)
class StepSpec:
    run_id: str
    step_id: int
    concurrency: int                 # this worker's share
    t_start_ns: int
    t_measure_start_ns: int
    t_measure_end_ns: int
    stall_timeout_s: float
    request_timeout_s: float
    sample_server: bool              # this worker also samples the server (one per target)
    max_requests: int | None = None  # fixed-count step: this worker's quota, all in phase 'measure'


@ray.remote(num_cpus=0, max_concurrency=1000)
class LoadWorker:
    def __init__(self, name: str, target: TargetSpec, prompts: list[Prompt], sampling: SamplingSpec,
                 sink: ray.actor.ActorHandle) -> None:
        self.name = name
        self.target = target
        self.prompts = prompts
        self.sampling = sampling
        self.sink = sink
        self.api_key = os.environ.get(target.api_key_env) if target.api_key_env else None
        self.adapter = adapter_for(target.flavor)
        self.endpoint = Endpoint(target.url, self.api_key)
        self.frames = FrameBuffer()
        self.finished: list[StreamState] = []
        self.streams: dict[str, _StreamProtocol] = {}
        self.process = psutil.Process()
        gc.freeze()  # the prompt pool and Ray's state never become garbage: keep them out of every GC pass
        self.pending_writes: list[ray.ObjectRef] = []
        self.step: StepSpec | None = None
        self.issuing = False
        self.run_task: asyncio.Task | None = None
        self.slot_tasks: list[asyncio.Task] = []
        self.background: list[asyncio.Task] = []
        self.measure_open = 0
        self.sent = 0
        self.outcomes: dict[str, int] = {}
        self.session: aiohttp.ClientSession | None = None

    # control calls (run where the server is reachable)
    async def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        return self.session

    async def server_info(self) -> dict:
        return await probe.server_info(await self._session(), self.target.url, self.api_key)

    async def flush_cache(self) -> None:
        await probe.flush_cache(await self._session(), self.target.url, self.api_key)

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
        self.step = step
        self.issuing = True
        self.measure_open = 0
        self.sent = 0
        self.outcomes = {}
        self.run_task = asyncio.create_task(self._run(step))

    async def _run(self, step: StepSpec) -> None:
        delay = (step.t_start_ns - now_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        cursor = iter(range(1 << 62))
        self.slot_tasks = [asyncio.create_task(self._slot(step, cursor)) for _ in range(step.concurrency)]
        self.background = [asyncio.create_task(self._watchdog(step)), asyncio.create_task(self._flusher(step)),
                           asyncio.create_task(self._sampler(step))]

    async def _slot(self, step: StepSpec, cursor) -> None:
        """One unit of concurrency: send, wait for the end, send the next, until told to stop."""
        while self.issuing and (step.max_requests is None or self.sent < step.max_requests):
            n = next(cursor)
            prompt = self.prompts[n % len(self.prompts)]
            t = now_ns()
            phase = "warmup" if t < step.t_measure_start_ns else "measure" if t < step.t_measure_end_ns else "drain"
            state = StreamState(f"{step.run_id[-6:]}-s{step.step_id}-{self.name}-{n}", prompt, phase, t,
                                self.frames)
            body = self.adapter.body(state.request_id, prompt, self.sampling)
            self.sent += 1
            if phase == "measure":
                self.measure_open += 1
            try:
                await stream_request(self.endpoint, self.adapter, state, body, self.streams)
            except Exception as exc:  # a loadgen bug must not lose the request's row
                state.fail("client_error", f"{exc.__class__.__name__}: {exc}")
                state.close(now_ns())
            finally:
                if phase == "measure":
                    self.measure_open -= 1
                self.outcomes[state.status] = self.outcomes.get(state.status, 0) + 1
                self.finished.append(state)

    async def progress(self) -> dict:
        """What the driver needs to decide when the drain is over."""
        step = self.step
        quota_done = step is not None and step.max_requests is not None and self.sent >= step.max_requests
        return {"in_flight": len(self.streams), "measure_open": self.measure_open, "sent": self.sent,
                "quota_done": quota_done}

    async def stop_step(self, reason: str = "step ended") -> dict:
        """Stop issuing, cut what is still running (status cancelled), write every row, return counts."""
        step = self.step
        assert step is not None, "stop_step without start_step"
        self.issuing = False
        if self.run_task is not None and not self.run_task.done():
            self.run_task.cancel()  # stopped before it started
        for protocol in list(self.streams.values()):
            protocol.cut("cancelled", reason)
        await asyncio.gather(*self.slot_tasks, return_exceptions=True)
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        self.slot_tasks, self.background, self.run_task = [], [], None
        self._flush(step)
        await asyncio.gather(*self.pending_writes)
        self.pending_writes.clear()
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

    async def _flusher(self, step: StepSpec) -> None:
        while True:
            await asyncio.sleep(FLUSH_PERIOD_S)
            self._flush(step)

    async def _sampler(self, step: StepSpec) -> None:
        rows: dict[str, list] = {k: [] for k in ("t_ns", "loop_lag_ms", "cpu_percent", "in_flight")}
        self.process.cpu_percent(None)
        session = await self._session() if step.sample_server else None
        server_rows: list[dict] = []
        tick = 0
        while True:
            t0 = now_ns()
            await asyncio.sleep(SAMPLE_PERIOD_S)
            t1 = now_ns()
            rows["t_ns"].append(t1)
            rows["loop_lag_ms"].append(max((t1 - t0) / 1e6 - SAMPLE_PERIOD_S * 1e3, 0.0))
            rows["cpu_percent"].append(self.process.cpu_percent(None))
            rows["in_flight"].append(len(self.streams))
            tick += 1
            if session is not None and tick % 2 == 0:
                server_rows += await self._server_rows(session, step)
            if tick % 4 == 0:
                self._write_client_samples(step, rows)
                self._write_server_samples(step, server_rows)
                rows = {k: [] for k in rows}
                server_rows = []

    async def _server_rows(self, session: aiohttp.ClientSession, step: StepSpec) -> list[dict]:
        t = now_ns()
        samples = await probe.metrics_samples(session, self.target.url, self.api_key)
        try:  # the server's own running figures (acceptance, throughput) next to /metrics
            info = await probe.server_info(session, self.target.url, self.api_key, within_s=1.0)
            samples += [(n, v, dict(labels, when="during")) for n, v, labels in probe.server_info_samples(info)]
        except LoadgenError:
            pass  # a busy server that misses one sample is not a failure of the step
        return [{"run_id": step.run_id, "step_id": step.step_id, "target": self.target.name,
                 "node": self.target.node, "t_ns": t, "name": name, "value": value,
                 "labels": json.dumps(labels, sort_keys=True)} for name, value, labels in samples]

    # writing
    def _write_client_samples(self, step: StepSpec, rows: dict[str, list]) -> None:
        if rows["t_ns"]:
            constants = {"run_id": step.run_id, "step_id": step.step_id, "worker": self.name,
                         "node": self.target.node, "target_in_flight": step.concurrency}
            self._send("client_samples", schema.batch_from_columns("client_samples", rows, constants))

    def _write_server_samples(self, step: StepSpec, rows: list[dict]) -> None:
        if rows:
            self._send("server_samples", schema.batch_from_rows("server_samples", rows))

    def _flush(self, step: StepSpec) -> None:
        """Ship buffered frames and finished requests to the sink (fire and forget, awaited at step end)."""
        n = len(self.frames)
        if n:
            columns = self.frames.columns()
            self.frames.clear()
            constants = {"run_id": step.run_id, "step_id": step.step_id}
            self._send("frames", schema.batch_from_columns("frames", columns, constants))
        if self.finished:
            done, self.finished = self.finished, []
            self._send("requests", schema.batch_from_rows("requests", [self._row(step, s) for s in done]))

    def _send(self, table: str, batch) -> None:
        self.pending_writes.append(self.sink.write.remote(table, batch))

    def _row(self, step: StepSpec, s: StreamState) -> dict:
        return {
            "run_id": step.run_id, "step_id": step.step_id, "request_id": s.request_id,
            "server_request_id": s.server_request_id, "target": self.target.name, "node": self.target.node,
            "worker": self.name, "phase": s.phase, "prompt_id": s.prompt.prompt_id,
            "prompt_kind": s.prompt.kind, "template": s.prompt.template, "prompt_tokens": s.prompt_tokens,
            "completion_tokens": s.completion_tokens, "cached_tokens": s.cached_tokens,
            "spec_verify_ct": s.spec_verify_ct, "spec_accept_length": s.spec_accept_length,
            "finish_reason": s.finish_reason, "t_scheduled_ns": s.t_scheduled_ns, "t_sent_ns": s.t_sent_ns,
            "t_headers_ns": s.t_headers_ns, "t_first_token_ns": s.t_first_token_ns,
            "t_last_token_ns": s.t_last_token_ns, "t_done_ns": s.t_done_ns, "server_e2e_s": s.server_e2e_s,
            "num_frames": s.num_frames, "status": s.status, "http_status": s.http_status, "error": s.error,
        }
