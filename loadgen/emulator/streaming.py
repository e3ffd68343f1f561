"""The SSE stream of one request, shared by every route: waits for the engine's outputs, asks the route's
formatter for the frames, applies the request's fault, and turns a client disconnect into an abort.

If the HTTP task falls behind the engine, only the newest output is sent (one frame may then cover several
decode steps), as SGLang does.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Protocol

from aiohttp import web

from loadgen.emulator.engine import Engine
from loadgen.emulator.faults import Fault
from loadgen.emulator.request import EmuRequest

DONE = b"data: [DONE]\n\n"
MALFORMED = b'data: {"text": "trunc\n\n'


class Formatter(Protocol):
    headers_after_first: bool    # OpenAI routes send status and headers only with the first output

    def frames(self, req: EmuRequest, start: int, end: int, final: bool) -> bytes: ...

    def abort_frames(self, req: EmuRequest) -> bytes: ...


SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


def close_connection(request: web.Request, mode: str) -> None:
    """Close the request's TCP connection: `fin` (an orderly close) or `rst` (a reset)."""
    transport = request.transport
    if transport is None:
        return
    if mode == "rst":
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()


class _Stop(Exception):
    """The fault ended the stream; the connection is already handled."""


async def stream(request: web.Request, req: EmuRequest, engine: Engine, fmt: Formatter) -> web.StreamResponse:
    """Serve req as SSE until it finishes, is aborted, or a fault ends it."""
    resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
    if not fmt.headers_after_first:
        await resp.prepare(request)
    fault = req.fault
    sent = k = 0
    try:
        while True:
            await req.event.wait()
            req.event.clear()
            if req.emit_upto <= sent and not req.done:
                continue
            if fault is not None and not fault.applied and k == fault.at:
                await _apply(request, resp, req, engine, fmt, fault)
            done, upto = req.done, req.emit_upto
            chunk = fmt.frames(req, sent, upto, done)
            if not resp.prepared:
                await resp.prepare(request)
            await resp.write(chunk)
            if not req.t_first_ns and upto > 0:
                req.t_first_ns = time.time_ns()
            sent, k = upto, k + 1
            if done:
                break
        if fault is not None and fault.type == "no_done" and not fault.applied:
            fault.applied = True           # K past the end: complete stream, only [DONE] missing
        else:
            await resp.write(DONE)
        await resp.write_eof()
    except _Stop:
        pass
    except (ConnectionError, asyncio.CancelledError):
        engine.abort(req, "client_disconnected")
        raise
    finally:
        req.t_done_ns = req.t_done_ns or time.time_ns()
        if req.status == "finished" and fault is not None and fault.applied and fault.type == "no_done":
            req.status = "faulted"
    return resp


async def _apply(request: web.Request, resp: web.StreamResponse, req: EmuRequest, engine: Engine,
                 fmt: Formatter, fault: Fault) -> None:
    """Apply the fault due before token frame k. Raises _Stop when the fault ends the stream."""
    kind = fault.type
    if kind in ("abort", "no_done") and req.done:
        # Finished before frame k went out (a slow stream task): SGLang can no longer abort it, and a body
        # cut here would hold no finish frame although the log says finished. The stream goes on: an abort
        # is not applied, a no_done drops only [DONE] (as when k is past the end).
        return
    fault.applied = True
    if kind in ("stall", "slow_first_token"):
        await asyncio.sleep(fault.info["ms"] / 1e3)
        return
    if not resp.prepared:
        await resp.prepare(request)
    if kind == "malformed":
        await resp.write(MALFORMED)
        return
    engine.abort(req, "faulted", f"emulator fault injection: request aborted (id {req.id})",
                 fault.info.get("status", 503))
    if kind == "abort":
        await resp.write(fmt.abort_frames(req) + DONE)
        await resp.write_eof()
    elif kind == "no_done":
        await resp.write_eof()
    elif kind == "close":
        close_connection(request, fault.info["mode"])
    req.t_done_ns = time.time_ns()
    raise _Stop()
