"""The engine in virtual time: a closed-loop level computed in milliseconds instead of minutes.

It drives the very same Engine (plan_step / complete_step) that the server runs, without HTTP and without
sleeping, so profile numbers can be fitted and what-if questions answered quickly. The HTTP calibration
benchmark then checks that the live server reproduces these numbers. `run_closed` follows a measured step's
protocol (slot starts spread over the warm-up, a window held open until enough requests were sent in it, a drain
until they are done) and returns every request with its frames; loadgen's twin (loadgen/twin/) writes those as
a predicted run, and `closed_loop` sums them into one cell for the calibration.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from loadgen.emulator import profiles
from loadgen.emulator.costmodel import CostModel, Forward
from loadgen.emulator.engine import Engine, resolve_min_free_slots
from loadgen.emulator.promptinfo import estimate_tokens, infer_kind
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.spec import SpecConfig


@dataclass(frozen=True, slots=True)
class CellResult:
    """Steady-state numbers of one closed-loop concurrency level."""

    concurrency: int
    tok_s: float            # output tokens committed inside the window / window
    accept_length: float    # sum(completion_tokens) / sum(spec_verify_ct) of requests finished in the window
    ttft_ms: float          # median, requests sent inside the window
    itl_ms: float           # mean per-token gap (a step's gap split evenly over its tokens), inside the window
    per_request_tok_s: float


@dataclass(frozen=True, slots=True)
class SimPrompt:
    """What the engine needs of a prompt: the kind its acceptance follows, its length in tokens, and how many of
    its leading tokens the server already held (a measured request's cached_tokens: not prefilled)."""

    kind: str
    prompt_tokens: int
    cached_tokens: int = 0


@dataclass(slots=True)
class SimRequest:
    """One request of a virtual-time level, in seconds from the level's start."""

    index: int                       # the n-th request sent (its prompt is prompts[index % len(prompts)])
    slot: int
    kind: str
    prompt_tokens: int
    sent: float
    first: float | None = None
    last: float | None = None
    done: float | None = None        # None: still running when the level ended (cut)
    completion_tokens: int = 0
    spec_verify_ct: int = 0
    frames: list[tuple[float, int]] = field(default_factory=list)   # (time, tokens) of each step with output


@dataclass(frozen=True, slots=True)
class Window:
    """A measured step's protocol: slot k starts at k / C of the warm-up; the window [measure_start, end) closes
    at min_end or later, once min_measured requests were sent in it (at the latest at max_end); the load then
    stays at C until every request sent inside it finished, at most drain_s after the window."""

    measure_start: float
    min_end: float
    max_end: float
    min_measured: int = 0
    drain_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LevelRun:
    requests: list[SimRequest]
    measure_end: float
    end: float
    forwards: list[tuple[float, Forward]] = field(default_factory=list)   # each forward's start, in order


def build_engine(spec: SpecConfig, hardware: str = "gb10", model: str = "qwen3.8-27b-nvfp4", *, seed: int = 0,
                 max_running: int = 64, max_prefill_tokens: int = 16384,
                 hw_overrides: dict | None = None, model_overrides: dict | None = None,
                 prefix_cache: bool = True) -> Engine:
    """An engine on the named profiles; overrides replace profile fields (used when fitting)."""
    hw = profiles.load("hardware", hardware)
    mp = profiles.load("models", model)
    hw = dataclasses.replace(hw, **(hw_overrides or {}))
    mp = dataclasses.replace(mp, **(model_overrides or {}))
    return Engine(CostModel(hw, mp, spec), spec, mp, max_running=max_running, max_queued=None, seed=seed,
                  decode_log_interval=40, max_prefill_tokens=max_prefill_tokens,
                  min_free_slots=resolve_min_free_slots(None, max_running, spec.algorithm == "DFLASH"),
                  prefix_cache=prefix_cache)


def run_closed(engine: Engine, concurrency: int, prompts: Sequence[SimPrompt], max_new_tokens: int,
               window: Window, *, stagger: bool = True) -> LevelRun:
    """Keep `concurrency` requests in flight (a new one as each finishes) under `window`'s protocol. A client's
    next request lands just after the next forward started, as over HTTP. stagger=False starts every slot at 0."""
    engine.text = False   # no output text: nothing reads it here
    t = 0.0
    ramp = window.measure_start / concurrency if stagger else 0.0
    starts = [k * ramp for k in range(concurrency)]     # slots not yet started, in order
    out: list[SimRequest] = []
    live: dict[str, tuple[SimRequest, EmuRequest]] = {}
    measure_end: float | None = None
    in_window = 0
    forwards: list[tuple[float, Forward]] = []

    def send(slot: int) -> None:
        nonlocal in_window
        n = len(out)
        p = prompts[n % len(prompts)]
        req = EmuRequest(id=str(n), rid=None, kind=p.kind, route="sim", prompt_tokens=p.prompt_tokens,
                         max_new_tokens=max_new_tokens, ignore_eos=True, stream_interval=1,
                         cached_tokens=min(p.cached_tokens, p.prompt_tokens - 1))
        rec = SimRequest(n, slot, p.kind, p.prompt_tokens, t)
        out.append(rec)
        live[req.id] = (rec, req)
        if window.measure_start <= t and measure_end is None:
            in_window += 1
        engine.submit(req)

    def window_closes() -> bool:
        return t >= window.max_end or (t >= window.min_end and in_window >= window.min_measured)

    def drained() -> bool:
        assert measure_end is not None
        if t >= measure_end + window.drain_s:
            return True
        return all(rec.done is not None for rec in out if window.measure_start <= rec.sent < measure_end)

    next_slot = 0
    free: list[int] = []
    while True:
        while next_slot < concurrency and starts[next_slot] <= t:
            send(next_slot)
            next_slot += 1
        step = engine.plan_step()
        for slot in free:            # the replacements of the requests that finished in the last forward
            send(slot)
        if step is None and free:
            step = engine.plan_step()   # the engine was idle: the new requests start at once
        free = []
        if step is None:
            if next_slot >= concurrency:
                raise RuntimeError("closed loop stalled: nothing runnable")
            t = starts[next_slot]      # idle until the next slot starts
            continue
        kind, batch, seconds = step
        forwards.append((t, engine.last_forward))
        before = [len(r.output_ids) for r in batch]
        t += seconds
        engine.complete_step(kind, batch)
        for req, b in zip(batch, before):
            n = len(req.output_ids) - b
            if n <= 0:
                continue
            rec, _ = live[req.id]
            if rec.first is None:
                rec.first = t
            rec.last = t
            rec.frames.append((t, n))
            if req.done:
                rec.done, rec.completion_tokens, rec.spec_verify_ct = t, req.completion_tokens, req.spec_verify_ct
                del live[req.id]
                free.append(rec.slot)
        engine.ledger.clear()
        if measure_end is None and window_closes():
            measure_end = t
        if measure_end is not None and drained():
            break
    for rec, req in live.values():   # cut at the level's end: what it had so far
        rec.completion_tokens, rec.spec_verify_ct = req.completion_tokens, req.spec_verify_ct
    assert measure_end is not None
    return LevelRun(out, measure_end, t, forwards)


def closed_loop(engine: Engine, concurrency: int, prompts: Sequence[str], max_new_tokens: int, *,
                warmup_s: float = 60.0, measure_s: float = 240.0) -> CellResult:
    """Keep exactly `concurrency` requests in flight (a new one as each finishes), in virtual time: the
    calibration's steady-state cell over a fixed window (every slot starts at once)."""
    sim = [SimPrompt(infer_kind(text), estimate_tokens(text)) for text in prompts]
    t0, t1 = warmup_s, warmup_s + measure_s
    run = run_closed(engine, concurrency, sim, max_new_tokens, Window(t0, t1, t1), stagger=False)
    tokens, gaps = 0, []
    for rec in run.requests:
        prev = None
        for t, n in rec.frames:
            if t0 <= t < t1:
                tokens += n
                if prev is not None:
                    gaps.extend([(t - prev) / n] * n)
            prev = t
    finished = [r for r in run.requests if r.done is not None and t0 <= r.done < t1]
    ttft = [r.first - r.sent for r in run.requests if t0 <= r.sent < t1 and r.first is not None]
    verify = sum(r.spec_verify_ct for r in finished)
    accept = sum(r.completion_tokens for r in finished) / verify if verify else 1.0
    return CellResult(concurrency, tokens / measure_s, accept,
                      1e3 * statistics.median(ttft) if ttft else float("nan"),
                      1e3 * statistics.fmean(gaps) if gaps else float("nan"),
                      statistics.fmean(r.completion_tokens / (r.done - r.sent) for r in finished  # type: ignore[operator]
                                       ) if finished else 0.0)
