"""What runs beside a step's requests in a worker: the watchdog that cuts stalled streams, and the sampler of
the worker's own event-loop lag, CPU and in-flight count (client_samples) and of the server's figures
(server_samples)."""

from __future__ import annotations

import asyncio

import aiohttp
import psutil

from loadgen.client.http_stream import ReadLoop, StreamExchange
from loadgen.client.messages import StepSpec
from loadgen.client.preflight import ServerControl
from loadgen.client.shipping import RowShipper
from loadgen.clock import now_ns
from loadgen.errors import LoadgenError

SAMPLE_PERIOD_S = 0.5
WATCHDOG_PERIOD_S = 0.1


class StepWatch:
    """The background tasks of a worker's step, over the worker's streams, reads and rows."""

    def __init__(self, control: ServerControl, streams: dict[str, StreamExchange], reads: ReadLoop,
                 shipper: RowShipper) -> None:
        self.control = control
        self.streams = streams
        self.reads = reads
        self.shipper = shipper
        self.process = psutil.Process()

    async def watchdog(self, step: StepSpec) -> None:
        stall_ns, total_ns = int(step.stall_timeout_s * 1e9), int(step.request_timeout_s * 1e9)
        while True:
            await asyncio.sleep(WATCHDOG_PERIOD_S)
            t = now_ns()
            for protocol in list(self.streams.values()):
                if t - protocol.t_last_read > stall_ns:
                    protocol.cut("timeout", f"no data for {step.stall_timeout_s:g} s (stall timeout)")
                elif t - protocol.state.t_scheduled_ns > total_ns:
                    protocol.cut("timeout", f"request took over {step.request_timeout_s:g} s (request timeout)")

    async def sampler(self, step: StepSpec) -> None:
        rows: dict[str, list] = {k: [] for k in ("t_ns", "loop_lag_ms", "read_delay_max_ms", "cpu_percent",
                                                        "in_flight")}
        self.process.cpu_percent(None)
        server_rows: list[dict] = await self.control.server_rows(step) if step.sample_server else []  # at start
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
            if step.sample_server and tick % 2 == 0:
                server_rows += await self.control.server_rows(step)
            if tick % 4 == 0:
                self.shipper.write_samples(rows, server_rows)
                rows = {k: [] for k in rows}
                server_rows = []

    async def last_sample(self, step: StepSpec) -> None:
        """A last server sample, after the step's last request."""
        if step.sample_server and self.control.session is not None:
            try:
                self.shipper.write_samples({"t_ns": []}, await self.control.server_rows(step))
            except (aiohttp.ClientError, TimeoutError, LoadgenError):
                pass
