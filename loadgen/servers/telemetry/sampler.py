"""The GPU sampler: a Ray actor on the node that hosts a target's server (pinned there like the workers), reading
the target's GPU once a second and at each step's start and end. It holds its rows until the driver marks the
next step boundary, which returns them: the driver writes them to `gpu_samples` before the step's flush, so a
step's rows are on disk with it. It runs at nice 10 and does one read a second: nothing a worker would notice.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import platform
import socket
from dataclasses import asdict
from typing import Any

import aiohttp
import pynvml
import ray

from loadgen import __version__
from loadgen.clock import now_ns
from loadgen.servers.telemetry.dcgm import DcgmReader
from loadgen.servers.telemetry.nvml import NvmlReader
from loadgen.servers.telemetry.readings import TelemetryUnavailable
from loadgen.servers.telemetry.source import TelemetrySource

INTERVAL_S = 1.0
READ_ERRORS = (TelemetryUnavailable, aiohttp.ClientError, TimeoutError, pynvml.NVMLError)


async def _maybe_await(value: Any) -> Any:
    """NVML's reader is synchronous, the exporter's asynchronous: one call site for both."""
    return await value if inspect.isawaitable(value) else value


@ray.remote(num_cpus=0)
class GpuSampler:
    """Reads one target's GPU(s); `start` says what it found, `mark` returns the rows since the last mark."""

    def __init__(self, source: TelemetrySource) -> None:
        os.nice(10)   # a sample may wait; a worker's read must not
        self.source = source
        self.reader: NvmlReader | DcgmReader = (NvmlReader(source.devices) if source.kind == "nvml"
                                                else DcgmReader(source.url or "", source.devices))
        self.rows: list[dict] = []
        self.last: list[dict] = []   # the latest reading of each GPU: the driver's live metrics
        self.step_id: int | None = None
        self.failed_reads = 0
        self.task: asyncio.Task | None = None

    async def start(self) -> dict:
        """The node and its GPUs (recorded in steps.hardware), or {"unavailable": why}; sampling starts."""
        try:
            gpus = await _maybe_await(self.reader.open())
        except TelemetryUnavailable as exc:
            await _maybe_await(self.reader.close())
            return {"unavailable": str(exc)}
        self.task = asyncio.create_task(self._every_second())
        return {"source": self.source.describe(), "host": socket.gethostname(), "os": platform.platform(),
                "python": platform.python_version(), "loadgen_version": __version__,
                "gpus": [asdict(g) for g in gpus]}

    async def mark(self, step_id: int, moment: str) -> list[dict]:
        """A sample now, tagged `moment` (step_start | step_end); returns every row held. Samples between a
        step's start and end carry its id, the others none."""
        if moment == "step_start":
            self.step_id = step_id
        await self._sample(moment)
        if moment == "step_end":
            self.step_id = None
        rows, self.rows = self.rows, []
        return rows

    async def latest(self) -> list[dict]:
        """The latest sample's rows (one per GPU; none before the first), kept for the next mark too."""
        return self.last

    async def failures(self) -> int:
        """Reads that failed (an exporter that did not answer once): their samples are missing, nothing else."""
        return self.failed_reads

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        await _maybe_await(self.reader.close())

    async def _every_second(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += INTERVAL_S
            await asyncio.sleep(max(0.0, due - loop.time()))
            await self._sample("during")

    async def _sample(self, moment: str) -> None:
        t_ns = now_ns()
        try:
            readings = await _maybe_await(self.reader.read())
        except READ_ERRORS:
            self.failed_reads += 1
            return
        self.last = [{"step_id": self.step_id, "t_ns": t_ns, "moment": moment, "source": self.reader.source,
                      **r.row()} for r in readings]
        self.rows += self.last
