"""The engine in virtual time: a closed-loop sweep computed in milliseconds instead of minutes.

It drives the very same Engine (plan_step / complete_step) that the server runs, without HTTP and without
sleeping, so profile numbers can be fitted and what-if questions answered quickly. The HTTP calibration
benchmark then checks that the live server reproduces these numbers.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.emulator import profiles
from loadgen.emulator.costmodel import CostModel
from loadgen.emulator.engine import EmuRequest, Engine, resolve_min_free_slots
from loadgen.emulator.promptinfo import estimate_tokens, infer_kind
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


def closed_loop(engine: Engine, concurrency: int, prompts: Sequence[str], max_new_tokens: int, *,
                warmup_s: float = 60.0, measure_s: float = 240.0) -> CellResult:
    """Keep exactly `concurrency` requests in flight (a new one as each finishes), in virtual time. The requests
    carry no prompt for the prefix cache: the calibration repeats two prompts as stand-ins for a mix of distinct
    ones, which a radix cache would otherwise serve almost without prefill."""
    t, n_sent = 0.0, 0
    sent_at: dict[str, float] = {}   # by request id
    first_at: dict[str, float] = {}
    last_at: dict[str, float] = {}
    t0, t1 = warmup_s, warmup_s + measure_s
    tokens_in_window, gaps = 0, []
    finished: list[EmuRequest] = []

    def send() -> None:
        nonlocal n_sent
        text = prompts[n_sent % len(prompts)]
        req = EmuRequest(id=str(n_sent), rid=None, kind=infer_kind(text), route="sim",
                         prompt_tokens=estimate_tokens(text), max_new_tokens=max_new_tokens, ignore_eos=True,
                         stream_interval=1)
        n_sent += 1
        sent_at[req.id] = t
        engine.submit(req)

    for _ in range(concurrency):
        send()
    replace = 0
    while t < t1:
        step = engine.plan_step()
        for _ in range(replace):     # a client's next request lands just after the next forward started
            send()
        if step is None and replace:
            step = engine.plan_step()   # the engine was idle: the new requests start at once
        replace = 0
        if step is None:
            raise RuntimeError("closed loop stalled: nothing runnable")
        kind, batch, seconds = step
        before = [len(r.output_ids) for r in batch]
        t += seconds
        engine.complete_step(kind, batch)
        for req, b in zip(batch, before):
            n = len(req.output_ids) - b
            if n <= 0:
                continue
            if req.id not in first_at:
                first_at[req.id] = t
            elif t0 <= t < t1:
                gaps.extend([(t - last_at[req.id]) / n] * n)
            last_at[req.id] = t
            if t0 <= t < t1:
                tokens_in_window += n
            if req.done:
                if t0 <= t < t1:
                    finished.append(req)
                replace += 1
        engine.ledger.clear()
    in_window = [k for k, s in sent_at.items() if t0 <= s < t1 and k in first_at]
    ttft = [first_at[k] - sent_at[k] for k in in_window]
    verify = sum(r.spec_verify_ct for r in finished)
    accept = sum(r.completion_tokens for r in finished) / verify if verify else 1.0
    e2e = [last_at[r.id] - sent_at[r.id] for r in finished]
    return CellResult(concurrency, tokens_in_window / measure_s, accept,
                      1e3 * statistics.median(ttft) if ttft else float("nan"),
                      1e3 * statistics.fmean(gaps) if gaps else float("nan"),
                      statistics.fmean(r.completion_tokens / e for r, e in zip(finished, e2e)) if e2e else 0.0)
