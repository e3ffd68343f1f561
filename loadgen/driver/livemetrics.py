"""Live metrics while a campaign runs: per target and step, requests done, failed and in flight, output tok/s,
recent TTFT and ITL quantiles, SLO attainment so far, GPU clock and power, as Prometheus metrics through Ray's
metrics (ray.util.metrics), so every Ray node's metrics endpoint (its metrics export port) serves them to any
Prometheus and Grafana (docs/telemetry.md "Live metrics"; infra/grafana/loadgen-live.json).

The driver exports what it already gathers for its progress line (each worker's polled WorkerProgress,
loadgen.driver.progress) every EXPORT_EVERY_S and once more at the step's end, never from a worker's request path.
Ray names them `ray_<name>` on the endpoint: `ray_loadgen_requests_done_total` and so on.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from typing import Any

import ray
from ray.util.metrics import Counter, Gauge

from loadgen.clock import now_ns
from loadgen.driver.tally import Tally

EXPORT_EVERY_S = 5.0              # the driver polls its workers and exports at least this often
QUANTILES = (0.5, 0.9, 0.99)      # of the recent TTFT and ITL
GPU_READ_TIMEOUT_S = 2.0          # a GPU sampler that does not answer in this long is skipped this time
TAGS = ("run", "target", "step", "level")


class LiveMetrics:
    """The metrics, defined once per driver process (live_metrics())."""

    def __init__(self) -> None:
        self.done = Counter("loadgen_requests_done", "requests finished in the step, any status", tag_keys=TAGS)
        self.failed = Counter("loadgen_requests_failed", "requests failed in the step (not ok, not cut at its end)",
                              tag_keys=TAGS)
        self.in_flight = Gauge("loadgen_requests_in_flight", "requests in flight", tag_keys=TAGS)
        self.tok_s = Gauge("loadgen_output_tokens_per_second", "output tokens per second over the step so far",
                           tag_keys=TAGS)
        self.ttft = Gauge("loadgen_ttft_ms", "time to first token of recent ok requests, by quantile",
                          tag_keys=(*TAGS, "quantile"))
        self.itl = Gauge("loadgen_itl_ms", "inter-token latency of recent ok requests (each one's mean time per "
                         "output token after the first), by quantile", tag_keys=(*TAGS, "quantile"))
        self.slo = Gauge("loadgen_slo_attainment", "share of the step's measured requests so far that met the SLO",
                         tag_keys=TAGS)
        self.gpu_clock = Gauge("loadgen_gpu_sm_clock_mhz", "SM clock of the target's GPU", tag_keys=(*TAGS, "gpu"))
        self.gpu_power = Gauge("loadgen_gpu_power_watts", "power draw of the target's GPU", tag_keys=(*TAGS, "gpu"))
        self.counted: dict[tuple[str, ...], tuple[int, int]] = {}   # tags -> (done, failed) exported so far


@functools.cache
def live_metrics() -> LiveMetrics:
    return LiveMetrics()


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values` (linear between order statistics, as DuckDB's quantile_cont)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


class StepLive:
    """One step's export: its tags, the GPU samplers of its targets, when the next export is due."""

    def __init__(self, run_id: str, step_id: int, levels: dict[str, str], samplers: list[tuple[str, Any]],
                 clock: Callable[[], int] = now_ns) -> None:
        self.metrics = live_metrics()
        self.run_id, self.step = run_id, str(step_id)
        self.levels = levels            # target -> its level in words (`C=8`, `rate=4/s`)
        self.samplers = samplers        # (target, GpuSampler actor)
        self.clock = clock
        self.next_ns = clock()

    def due(self) -> bool:
        return self.clock() >= self.next_ns

    def export(self, found: list[Tally], seconds: float) -> None:
        """Every figure of every target, from its tally over the step's `seconds` so far."""
        self.next_ns = self.clock() + int(EXPORT_EVERY_S * 1e9)
        m = self.metrics
        gpus = self._gpus()
        for t in found:
            tags = {"run": self.run_id, "target": t.target, "step": self.step, "level": self.levels.get(t.target, "")}
            key = tuple(tags.values())
            done, failed = m.counted.get(key, (0, 0))
            if t.done > done:        # a counter only grows: a worker that died takes its counts with it
                m.done.inc(t.done - done, tags)
            if t.failed > failed:
                m.failed.inc(t.failed - failed, tags)
            m.counted[key] = (max(done, t.done), max(failed, t.failed))
            m.in_flight.set(t.in_flight, tags)
            m.tok_s.set(t.tokens / max(seconds, 1e-9), tags)
            for gauge, values in ((m.ttft, sorted(t.ttft_ms)), (m.itl, sorted(t.itl_ms))):
                for q in QUANTILES if values else ():
                    gauge.set(quantile(values, q), {**tags, "quantile": f"{q:g}"})
            if t.slo_judged:
                m.slo.set(t.slo_met / t.slo_judged, tags)
            for row in gpus.get(t.target, []):
                at = {**tags, "gpu": str(row["gpu"])}
                if row.get("sm_clock_mhz") is not None:
                    m.gpu_clock.set(row["sm_clock_mhz"], at)
                if row.get("power_w") is not None:
                    m.gpu_power.set(row["power_w"], at)

    def _gpus(self) -> dict[str, list[dict]]:
        """Each target's latest GPU readings (none from a sampler that is gone or slow)."""
        out: dict[str, list[dict]] = {}
        for target, actor in self.samplers:
            try:
                out[target] = ray.get(actor.latest.remote(), timeout=GPU_READ_TIMEOUT_S)
            except (ray.exceptions.RayError, TimeoutError):
                continue
        return out
