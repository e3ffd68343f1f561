"""The emulated scheduler: one continuous-batching loop per process, as SGLang's scheduler runs it.

Each iteration either prefills newly admitted requests (their first token) or runs one decode step over
the whole running batch; a step's duration comes from the cost model, and each running request accepts a
random number of tokens per verify step (a truncated geometric draw: each drafted token is accepted with
the request's probability, until the first rejection; plus the bonus token). Admission is bounded by
--max-running-requests and a KV-token budget (prompt + max_new_tokens reserved per request), and, as SGLang
0.5.23 does for DFLASH by default, held back while fewer than min_free_slots batch slots are free.
With a prefix cache (SGLang's radix cache, prefixcache.py) a request's cached leading tokens are matched when it is
admitted, reported as cached_tokens and left out of its prefill's compute; its prompt is cached once prefilled, its
prompt + output once finished.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from loadgen.emulator.costmodel import IDLE, CostModel, Forward
from loadgen.emulator.prefixcache import PrefixCache, cache_tokens
from loadgen.emulator.profiles import AlgorithmProfile, ModelProfile
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.spec import SpecConfig

MAX_LAG_S = 0.25


def resolve_min_free_slots(user_value: int | None, max_running: int, is_dflash: bool) -> int | None:
    """SGLang 0.5.23's threshold (managers/min_free_slots_delayer.py): an explicit value wins (capped by
    max_running, <= 1 disables); unset, DFLASH gets min(4, max(2, (max_running + 5) // 6)) when max_running >= 8,
    because each DFlash admission pays a separate draft prefill; other algorithms: disabled (None)."""
    if user_value is not None:
        threshold = min(user_value, max_running)
        return threshold if threshold > 1 else None
    if is_dflash and max_running >= 8:
        return min(4, max(2, (max_running + 5) // 6))
    return None


class QueueFull(Exception):
    """--max-queued-requests reached: the request is aborted with status 503, as SGLang does."""


@dataclass(slots=True)
class Counters:
    """Server-lifetime counters: what /get_server_info and /metrics report."""

    verify_steps: int = 0           # since start or the last /flush_cache
    verify_tokens: int = 0
    decode_steps: int = 0
    avg_spec_accept_length: float = 0.0
    last_gen_throughput: float = 0.0
    log_tokens: int = 0
    log_t: float = field(default_factory=time.perf_counter)
    num_requests_total: int = 0
    prompt_tokens_total: int = 0
    cached_tokens_total: int = 0    # prompt tokens served from the prefix cache (matched at admission)
    admitted_prompt_tokens: int = 0   # prompt tokens of the requests admitted: the hit rate's denominator
    generation_tokens_total: int = 0
    spec_verify_calls_total: int = 0


class Observer(Protocol):
    """What the engine tells an observer (metrics.Metrics): every token commit and every abort."""

    def on_tokens(self, req: EmuRequest, n: int) -> None: ...

    def on_abort(self, req: EmuRequest) -> None: ...


class GpuObserver(Protocol):
    """What the engine tells the GPU model (gpu.GpuModel): each forward as it starts."""

    def on_forward(self, forward: Forward) -> None: ...


class Engine:
    """Waiting queue + running batch + the stepping loop. All methods run on the event loop thread."""

    def __init__(self, cost: CostModel, spec: SpecConfig, model: ModelProfile, *, max_running: int,
                 max_queued: int | None, seed: int, decode_log_interval: int,
                 max_prefill_tokens: int = 16384, min_free_slots: int | None = None,
                 prefix_cache: bool = True) -> None:
        """`prefix_cache`: SGLang's radix cache (off: --disable-radix-cache), as large as the KV pool."""
        self.cost, self.spec, self.model = cost, spec, model
        self.max_prefill_tokens = max_prefill_tokens
        self.min_free_slots = min_free_slots
        self.max_running, self.max_queued = max_running, max_queued
        self.kv_budget = int(model.kv_pool_tokens * spec.profile.kv_pool_fraction)
        self.prefix_cache = PrefixCache(self.kv_budget) if prefix_cache else None
        self.decode_log_interval = max(1, decode_log_interval)
        self.rng = random.Random(seed)
        self.waiting: deque[EmuRequest] = deque()
        self.running: list[EmuRequest] = []
        self.ledger: list[EmuRequest] = []
        self.counters = Counters()
        self._kv_used = 0
        self._wake = asyncio.Event()
        self._deadline = 0.0
        self._task: asyncio.Task | None = None
        self.observer: Observer | None = None   # metrics.Metrics when --enable-metrics: sees every token commit
        self.gpu: GpuObserver | None = None      # gpu.GpuModel: sees every forward (power, clock, energy)
        self.last_forward: Forward = IDLE        # the forward plan_step chose last, with its roofline split
        self.text = True                         # make output text; a virtual-time run (simulate.py) needs none

    # ---- lifecycle
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="emulator-engine")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- requests
    def submit(self, req: EmuRequest) -> None:
        """Queue a request; raises QueueFull when --max-queued-requests is reached."""
        self.ledger.append(req)
        c = self.counters
        c.num_requests_total += 1
        c.prompt_tokens_total += req.prompt_tokens
        if self.max_queued is not None and len(self.waiting) >= self.max_queued:
            raise QueueFull()
        self._plan(req)
        self.waiting.append(req)
        self._wake.set()

    def _plan(self, req: EmuRequest) -> None:
        """Draw the request's output length (natural stop unless ignore_eos) and acceptance probabilities."""
        req.target_len = req.max_new_tokens
        if req.script:   # a tool call ends after its text and the end-of-turn token, ignore_eos or not
            req.target_len, req.natural_stop = min(len(req.script) + 1, req.max_new_tokens), True
        elif not req.ignore_eos:
            u = self.rng.random()
            natural = 1 + int(-self.model.natural_output_mean * math.log(1.0 - u))
            natural = max(natural, req.min_new_tokens)
            if natural < req.max_new_tokens:
                req.target_len, req.natural_stop = natural, True
        req.p_accept = draw_p(self.rng, self.spec.profile, req.kind)
        if req.think_len:
            req.p_think = draw_p(self.rng, self.spec.profile, "reasoning")   # the profile's figure, else prose's

    def abort(self, req: EmuRequest, status: str, message: str = "", status_code: int = 400) -> None:
        """Take a request out at once (frees its batch slot and KV reservation) and end its stream."""
        if req.done:
            if status == "client_disconnected" and not req.t_done_ns:
                req.status = status
            return
        if req.status == "queued":
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        elif req.status == "running":
            self._release(req)
        req.status = status
        req.finish_reason = {"type": "abort", "message": message or status, "status_code": status_code,
                             "err_type": None}
        req.emit_upto = len(req.output_ids)
        req.t_done_ns = req.t_done_ns or time.time_ns()
        req.event.set()
        self._wake.set()
        if self.observer is not None:
            self.observer.on_abort(req)

    def reset_ledger(self) -> list[EmuRequest]:
        """Forget the finished requests; returns them."""
        done = [r for r in self.ledger if r.done]
        self.ledger = [r for r in self.ledger if not r.done]
        return done

    def flush(self) -> None:
        """/flush_cache: empty the prefix cache and reset the speculative counters (lifetime averages start again)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        c = self.counters
        c.verify_steps = c.verify_tokens = 0
        c.avg_spec_accept_length = 0.0

    # ---- scheduling
    def _reserve(self, req: EmuRequest) -> int:
        return req.prompt_tokens + req.max_new_tokens + self.spec.verify_tokens

    def _release(self, req: EmuRequest) -> None:
        self.running.remove(req)
        self._kv_used -= self._reserve(req)

    def _delay_admission(self) -> bool:
        """SGLang's MinFreeSlotsDelayer.should_delay: while requests run, wait until min_free_slots slots are free
        and admit them in one prefill instead of one at a time."""
        free = self.max_running - len(self.running)
        return self.min_free_slots is not None and bool(self.running) and free < self.min_free_slots

    def _admit(self) -> list[EmuRequest]:
        admitted: list[EmuRequest] = []
        if self._delay_admission():
            return admitted
        prefill_tokens = 0
        while self.waiting and len(self.running) < self.max_running:
            req = self.waiting[0]
            need = self._reserve(req)
            if self._kv_used + need > self.kv_budget and self.running:
                break
            if admitted and prefill_tokens + req.prompt_tokens > self.max_prefill_tokens:
                break
            prefill_tokens += req.prompt_tokens
            self.waiting.popleft()
            self._kv_used += need
            req.status = "running"
            req.t_admitted_ns = time.time_ns()
            if self.prefix_cache is not None and req.prompt is not None:   # at most all but the last token
                req.cached_tokens = min(self.prefix_cache.match(cache_tokens(req.prompt)), req.prompt_tokens - 1)
            self.counters.cached_tokens_total += req.cached_tokens
            self.counters.admitted_prompt_tokens += req.prompt_tokens
            self.running.append(req)
            admitted.append(req)
        return admitted

    async def _sleep(self, dur: float) -> None:
        """Advance the engine's own timeline by dur and sleep until it: the Python work between steps
        (HTTP writes, bookkeeping) is absorbed instead of being added to every step, as long as the box keeps up
        (a backlog over MAX_LAG_S is dropped rather than replayed as a burst)."""
        if dur <= 0.0:
            await asyncio.sleep(0)
            return
        now = asyncio.get_running_loop().time()
        if now - self._deadline > MAX_LAG_S:
            self._deadline = now
        self._deadline += dur
        await asyncio.sleep(max(0.0, self._deadline - now))

    def plan_step(self) -> tuple[str, list[EmuRequest], float] | None:
        """Admit what fits, then choose the next forward: ("prefill" | "decode", batch, seconds).
        None: nothing can run until a request arrives or leaves."""
        admitted = self._admit()
        if admitted:
            self.last_forward = self.cost.prefill([r.prompt_tokens - r.cached_tokens for r in admitted])
            return "prefill", admitted, self.last_forward.seconds
        if not self.running:
            return None
        batch = list(self.running)
        self.last_forward = self.cost.decode([r.prompt_tokens + len(r.output_ids) for r in batch])
        return "decode", batch, self.last_forward.seconds

    def complete_step(self, kind: str, batch: list[EmuRequest]) -> None:
        """Apply a planned forward once its time has passed (requests aborted meanwhile are skipped)."""
        if kind == "prefill":
            for req in batch:
                if req.status == "running":
                    self._cache(req, finished=False)
                    self._append(req, 1, verify=False)
        else:
            self._decode(batch)

    async def _run(self) -> None:
        while True:
            step = self.plan_step() if self.busy else None
            if step is None:
                self._wake.clear()
                await self._wake.wait()
                self._deadline = asyncio.get_running_loop().time()   # idle time is not owed to anyone
                continue
            kind, batch, seconds = step
            if self.gpu is not None:
                self.gpu.on_forward(self.last_forward)
            await self._sleep(seconds)
            self.complete_step(kind, batch)

    def _cache(self, req: EmuRequest, finished: bool) -> None:
        """Hold a prefilled prompt, or a finished request's prompt + output, in the prefix cache."""
        prompt = req.prompt
        if self.prefix_cache is None or prompt is None:
            return
        if finished:
            prompt = prompt + req.text if isinstance(prompt, str) else prompt + req.output_ids
        self.prefix_cache.insert(cache_tokens(prompt))

    def _decode(self, batch: list[EmuRequest]) -> None:
        c, spec = self.counters, self.spec
        for req in batch:
            if req.status != "running":
                continue
            n = draw_accept(self.rng, req.p_now, spec, len(req.output_ids)) if spec.enabled else 1
            self._append(req, n, verify=spec.enabled)
        c.decode_steps += 1
        if c.decode_steps % self.decode_log_interval == 0:
            now = time.perf_counter()
            if c.verify_steps:
                c.avg_spec_accept_length = c.verify_tokens / c.verify_steps
            c.last_gen_throughput = c.log_tokens / max(1e-9, now - c.log_t)
            c.log_tokens, c.log_t = 0, now

    def _append(self, req: EmuRequest, n: int, *, verify: bool) -> None:
        """Commit up to n tokens to a request (fewer if it reaches its end), then apply the stream rule."""
        n = max(0, min(n, req.target_len - len(req.output_ids)))
        c = self.counters
        if verify:
            req.verified(n)
            c.verify_steps += 1
            c.verify_tokens += n
            c.spec_verify_calls_total += 1
        req.append_tokens(n, self.rng if self.text else None, self.model.eos_token_id)
        c.log_tokens += n
        c.generation_tokens_total += n
        total = len(req.output_ids)
        if total >= req.target_len:
            self._cache(req, finished=True)
            self._release(req)
            req.status = "finished"
            req.finish_reason = ({"type": "stop", "matched": self.model.eos_token_id} if req.natural_stop
                                 else {"type": "length", "length": req.max_new_tokens})
            req.emit_upto = total
            req.event.set()
            self._wake.set()
        elif req.emit_upto == 0 or total - req.emit_upto >= req.stream_interval:
            req.emit_upto = total
            req.event.set()
        if self.observer is not None:
            self.observer.on_tokens(req, n)


def draw_p(rng: random.Random, prof: AlgorithmProfile, kind: str) -> float:
    """One request's acceptance probability for a kind of text: the profile's, spread by its accept_sigma."""
    p = prof.p_for(kind) + rng.gauss(0.0, prof.accept_sigma) if prof.accept_sigma else prof.p_for(kind)
    return min(0.99, max(0.0, p))


def draw_accept(rng: random.Random, p: float, spec: SpecConfig, produced: int) -> int:
    """Tokens one verify step commits: leading accepted drafts (each accepted with p, p decaying along the draft
    by the profile's accept_decay, until the first rejection) + the bonus token. A profile's accept_output_slope
    (a twin's fit) drifts p along the output: `produced` tokens so far."""
    if slope := spec.profile.accept_output_slope:
        p = min(0.99, max(0.0, p * (1.0 + slope * produced / 1000.0)))
    n = 1
    for _ in range(spec.verify_tokens - 1):
        if rng.random() >= p:
            break
        n += 1
        p *= spec.profile.accept_decay
    return n
