"""What the routes need from the emulator, as a Protocol, and the app key that holds it.

server.Emulator is the one implementation; the route modules (native, openai_routes, and the server-state
routes in server.py) see only this, so none of them imports server.py and server.py imports them one way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from loadgen.emulator.engine import Engine
from loadgen.emulator.faults import KeepAliveLimit
from loadgen.emulator.gpu import GpuModel
from loadgen.emulator.metrics import Metrics
from loadgen.emulator.profiles import ModelProfile
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.spec import SpecConfig


class EmulatorState(Protocol):
    """One emulated server as the routes use it: its flags, spec and model, engine, and request life cycle."""

    args: argparse.Namespace
    spec: SpecConfig
    model: ModelProfile
    engine: Engine
    metrics: Metrics
    keepalive: KeepAliveLimit | None   # --fault-keepalive-requests (faults.KeepAliveLimit), None without it
    gpu: GpuModel | None           # the modelled GPU (loadgen/emulator/gpu.py), None without one
    served_model_name: str
    startup_time: float

    @property
    def starting(self) -> bool: ...

    async def ready(self) -> None: ...

    def new_request(self, prompt: str | list[int], route: str, *, rid: str | None, max_new_tokens: int,
                    min_new_tokens: int, ignore_eos: bool, stream_interval: int | None,
                    stream: bool, thinking: bool = False, script: tuple[str, ...] = ()) -> EmuRequest: ...

    def submit(self, req: EmuRequest) -> None: ...

    def http_fault(self, req: EmuRequest) -> web.Response: ...

    async def wait_whole(self, req: EmuRequest, build: Callable[[], web.Response]) -> web.Response: ...

    def abort_error(self, req: EmuRequest) -> web.Response | None: ...

    def server_info(self) -> dict: ...


EMU: web.AppKey[EmulatorState] = web.AppKey("emu")


def emulator(request: web.Request) -> EmulatorState:
    """The emulator serving this request."""
    return request.app[EMU]
