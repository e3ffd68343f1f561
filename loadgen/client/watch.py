"""What runs beside a step's requests in a worker: the watchdog that cuts stalled streams, and the sampler of
the worker's own event-loop lag, CPU and in-flight count (client_samples) and of the server's figures
(server_samples). A mix-in of LoadWorker, which sets the attributes declared here."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import psutil

from loadgen.client.http_stream import StreamExchange
from loadgen.client.messages import StepSpec
from loadgen.client.preflight import ServerControl
from loadgen.client.shipping import RowShipper
from loadgen.clock import now_ns
from loadgen.errors import LoadgenError
from loadgen.servers import probe, serverid

SAMPLE_PERIOD_S = 0.5
WATCHDOG_PERIOD_S = 0.1


class StepWatch(ServerControl):
    """The background tasks of a LoadWorker's step."""

    streams: dict[str, StreamExchange]
    process: psutil.Process
    shipper: RowShipper

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
