"""One load level of a twin in virtual time, measured the way queries/views.sql measures a real step.

The fit compares these figures with the measured ones (fit.py); a prediction writes the requests and frames
themselves (predict.py), so the SQL computes its figures as for any step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.emulator.gpu import GpuModel, window_joules
from loadgen.emulator.simulate import LevelRun, SimPrompt, Window, run_closed
from loadgen.twin.model import Twin

DRAIN_FOREVER_S = 1e9     # the fit waits for every measured request (a measured step's drain does the same)


def as_measured(warmup_s: float, window_s: float) -> Protocol:
    """A measured step's own window: the fit compares like with like (a short warm-up's transient included)."""
    return Protocol(warmup_s, window_s, 0, window_s)


@dataclass(frozen=True)
class Protocol:
    """A step's window settings (LoadConfig's), in seconds; min_measured: requests the window must hold."""

    warmup_s: float
    measure_s: float
    min_measured: int
    max_measure_s: float
    drain_s: float = DRAIN_FOREVER_S

    def window(self, concurrency: int) -> Window:
        start = self.warmup_s
        return Window(start, start + self.measure_s, start + max(self.max_measure_s, self.measure_s),
                      max(self.min_measured, concurrency), self.drain_s)


def simulate(twin: Twin, concurrency: int, prompts: Sequence[SimPrompt], protocol: Protocol, seed: int,
             max_new_tokens: int | None = None) -> LevelRun:
    return run_closed(twin.engine(seed), concurrency, prompts, max_new_tokens or twin.max_new_tokens,
                      protocol.window(concurrency))


def level_figures(run: LevelRun, measure_start: float) -> dict[str, float]:
    """tok_s (tokens of frames inside the window / window), TTFT p50/p90 and TPOT p50 (ms) over the requests sent
    inside the window that finished, and their acceptance length: views.sql's definitions."""
    t0, t1 = measure_start, run.measure_end
    tokens = sum(n for r in run.requests for t, n in r.frames if t0 <= t < t1)
    done = [r for r in run.requests if t0 <= r.sent < t1 and r.done is not None and r.first is not None]
    ttft = np.array([r.first - r.sent for r in done])   # type: ignore[operator]
    tpot = np.array([(r.last - r.first) / (r.completion_tokens - 1) for r in done   # type: ignore[operator]
                     if r.completion_tokens > 1])
    verify = sum(r.spec_verify_ct for r in done)
    out = {"tok_s": tokens / (t1 - t0) if t1 > t0 else float("nan"),
           "ttft_p50_ms": 1e3 * float(np.quantile(ttft, 0.5)) if len(ttft) else float("nan"),
           "ttft_p90_ms": 1e3 * float(np.quantile(ttft, 0.9)) if len(ttft) else float("nan"),
           "tpot_p50_ms": 1e3 * float(np.quantile(tpot, 0.5)) if len(tpot) else float("nan"),
           "accept_len": sum(r.completion_tokens for r in done) / verify if verify else float("nan")}
    return out


def window_power(twin: Twin, run: LevelRun, measure_start: float) -> float:
    """The twin's modelled GPU's mean power over the run's window, W: its energy counter's rise over the window's
    modelled seconds."""
    joules = window_joules(GpuModel(twin.hardware, twin.time_scale), run.forwards, measure_start, run.measure_end)
    return joules / ((run.measure_end - measure_start) * twin.time_scale)


def expected_power(twin: Twin, concurrency: int, prompts: Sequence[SimPrompt], protocol: Protocol,
                   seeds: Sequence[int]) -> float:
    """window_power averaged over the seeded runs expected_figures makes."""
    return float(np.mean([window_power(twin, simulate(twin, concurrency, prompts, protocol, s), protocol.warmup_s)
                          for s in seeds]))


def seeded_figures(twin: Twin, concurrency: int, prompts: Sequence[SimPrompt], protocol: Protocol,
                   seeds: Sequence[int], max_new_tokens: int | None = None) -> list[dict[str, float]]:
    """The figures of a level, one dict per seeded run."""
    return [level_figures(simulate(twin, concurrency, prompts, protocol, s, max_new_tokens), protocol.warmup_s)
            for s in seeds]


def expected_figures(twin: Twin, concurrency: int, prompts: Sequence[SimPrompt], protocol: Protocol,
                     seeds: Sequence[int], max_new_tokens: int | None = None) -> dict[str, float]:
    """The figures of a level averaged over a few seeded runs (the same seeds every call: a smooth function of
    the twin's numbers for the fit)."""
    runs = seeded_figures(twin, concurrency, prompts, protocol, seeds, max_new_tokens)
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
