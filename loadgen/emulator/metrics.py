"""`GET /metrics` (only with --enable-metrics): Prometheus text with SGLang's metric names and labels.

Latency histograms are fed by the engine as tokens are committed (wall seconds): TTFT at the first token,
inter-token latency per token (a multi-token step's gap split evenly over its tokens, as SGLang does),
e2e at the end.
"""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.emulator.engine import Engine
    from loadgen.emulator.request import EmuRequest
    from loadgen.emulator.spec import SpecConfig

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 160.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2,
               0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0,
               200.0, 250.0, 300.0, 350.0, 500.0, 1000.0)


class Histogram:
    """Cumulative-bucket histogram, rendered in Prometheus text format."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += times
        self.sum += value * times
        self.count += times

    def render(self, name: str, labels: str) -> list[str]:
        lines, acc = [], 0
        for bound, c in zip(self.buckets, self.counts):
            acc += c
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {acc}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum{{{labels}}} {self.sum}")
        lines.append(f"{name}_count{{{labels}}} {self.count}")
        return lines


class Metrics:
    """The engine's observer: turns token commits into SGLang's latency histograms."""

    def __init__(self) -> None:
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self._last: dict[int, float] = {}

    def on_tokens(self, req: EmuRequest, n: int) -> None:
        now = time.perf_counter()
        key = id(req)
        last = self._last.get(key)
        if last is None:
            self.ttft.observe(now - req.t_received_perf)
        elif n > 0:
            self.itl.observe((now - last) / n, n)
        self._last[key] = now
        if req.done:
            self._last.pop(key, None)
            self.e2e.observe(now - req.t_received_perf)

    def on_abort(self, req: EmuRequest) -> None:
        self._last.pop(id(req), None)


def render(m: Metrics, eng: Engine, spec: SpecConfig, model_name: str) -> str:
    """The full /metrics page: the engine's gauges and counters, then the histograms."""
    c = eng.counters
    labels = f'model_name="{model_name}",tp_rank="0",dp_rank="0"'
    used = sum(r.prompt_tokens + len(r.output_ids) for r in eng.running)
    proposed = c.verify_steps * (spec.verify_tokens - 1)
    gauges = {
        "num_running_reqs": len(eng.running), "num_queue_reqs": len(eng.waiting),
        "gen_throughput": c.last_gen_throughput, "token_usage": used / max(1, eng.kv_budget),
        "cache_hit_rate": c.cached_tokens_total / c.admitted_prompt_tokens if c.admitted_prompt_tokens else 0.0,
        "spec_accept_length": c.avg_spec_accept_length,
        "spec_accept_rate": (c.verify_tokens - c.verify_steps) / proposed if proposed else 0.0,
        "spec_num_draft_tokens": spec.num_draft_tokens or 0,
    }
    counters = {"spec_verify_calls_total": c.spec_verify_calls_total, "prompt_tokens_total": c.prompt_tokens_total,
                "cached_tokens_total": c.cached_tokens_total,
                "generation_tokens_total": c.generation_tokens_total, "num_requests_total": c.num_requests_total}
    lines: list[str] = []
    for name, value in gauges.items():
        lines += [f"# HELP sglang:{name} {name.replace('_', ' ')}", f"# TYPE sglang:{name} gauge",
                  f"sglang:{name}{{{labels}}} {float(value)}"]
    for name, value in counters.items():
        lines += [f"# HELP sglang:{name} {name.replace('_', ' ')}", f"# TYPE sglang:{name} counter",
                  f"sglang:{name}{{{labels}}} {float(value)}"]
    for name, hist in (("time_to_first_token_seconds", m.ttft), ("inter_token_latency_seconds", m.itl),
                       ("e2e_request_latency_seconds", m.e2e)):
        lines += [f"# HELP sglang:{name} {name.replace('_', ' ')}", f"# TYPE sglang:{name} histogram"]
        lines += hist.render(f"sglang:{name}", labels)
    return "\n".join(lines) + "\n"
