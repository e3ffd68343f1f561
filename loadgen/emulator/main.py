"""Process entry: parse flags, build the server, serve on uvloop until interrupted."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import uvloop
from aiohttp import web

from loadgen.emulator.args import parse_args
from loadgen.emulator.server import Emulator, build_app
from loadgen.errors import LoadgenError


async def serve(emu: Emulator) -> None:
    """Run until SIGINT/SIGTERM. handler_cancellation: a client disconnect cancels its handler at once,
    which aborts the request and frees its batch slot."""
    runner = web.AppRunner(build_app(emu), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, emu.args.host, emu.args.port, reuse_port=emu.args.reuse_port or None,
                       backlog=4096)
    await site.start()
    print(f"loadgen emulator (emulated SGLang {emu.spec.variant}) listening on "
          f"http://{emu.args.host}:{emu.args.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        emu = Emulator(args)
    except LoadgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    uvloop.run(serve(emu))
