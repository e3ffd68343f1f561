"""Start emulators from Python: in a background thread (tests) or as a child process (jobs, demos).

Both return once the server answers /health, and stop it on exit:
    with EmulatorProcess(["--speculative-algorithm", "NEXTN"]) as emu:
        url = emu.url
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import uvloop
from aiohttp import web

from loadgen.emulator.args import parse_args
from loadgen.emulator.server import Emulator, build_app
from loadgen.servers.health import NotHealthy, wait_healthy
from loadgen.servers.ports import free_port

T = TypeVar("T")


def _wait_healthy(url: str, timeout: float, alive: Callable[[], bool] = lambda: True) -> None:
    def check_alive() -> None:
        if not alive():
            raise RuntimeError(f"emulator at {url} exited during start-up")
    try:
        wait_healthy(url, timeout, check_alive, poll_s=0.05)
    except NotHealthy:
        raise TimeoutError(f"emulator at {url} not up after {timeout}s") from None


def _with_defaults(argv: list[str], port: int) -> list[str]:
    out = list(argv)
    if "--model-path" not in out:
        out += ["--model-path", "emulated/qwen3.8-27b-nvfp4"]
    if "--port" not in out:
        out += ["--port", str(port)]
    return out


def _secrets_to_env(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """A secret flag's value (--api-key KEY) goes to the emulator through its environment
    (LOADGEN_EMULATOR_API_KEY), where the process list does not show it."""
    from loadgen.servers.secrets import emulator_env, split_args
    plain, values = split_args(argv)
    return plain, dict(os.environ, **{emulator_env(flag): value for flag, value in values.items()})


class EmulatorThread:
    """An emulator on its own event loop in a daemon thread of this process; `.emu` gives its state."""

    def __init__(self, argv: list[str] | None = None) -> None:
        self.port = free_port()
        self.args = parse_args(_with_defaults(argv or [], self.port))
        self.port = self.args.port
        self.url = f"http://127.0.0.1:{self.port}"
        self.emu: Emulator | None = None
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"emulator-{self.port}")
        self._started = threading.Event()
        self._error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self.emu = Emulator(self.args)
            self._runner = web.AppRunner(build_app(self.emu), handler_cancellation=True, access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            self._loop.run_until_complete(site.start())
        except BaseException as exc:        # surfaced to the starting thread
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def call(self, fn: Callable[..., T], *a: Any) -> T:
        """Run fn(*a) on the emulator's loop (engine state is not thread-safe) and return its result."""
        async def _do() -> T:
            return fn(*a)
        return asyncio.run_coroutine_threadsafe(_do(), self._loop).result(5)

    def __enter__(self) -> EmulatorThread:
        self._thread.start()
        self._started.wait(10)
        if self._error:
            raise self._error
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class EmulatorProcess:
    """`python -m loadgen.emulator ARGV` as a child process, stopped with SIGTERM on exit."""

    def __init__(self, argv: list[str] | None = None, startup_timeout: float = 20.0) -> None:
        self.port = free_port()
        self.argv = _with_defaults(argv or [], self.port)
        self.port = int(self.argv[self.argv.index("--port") + 1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.timeout = startup_timeout
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> EmulatorProcess:
        self._log = tempfile.TemporaryFile()
        argv, env = _secrets_to_env(self.argv)
        self.proc = proc = subprocess.Popen([sys.executable, "-m", "loadgen.emulator", *argv], env=env,
                                            stdout=subprocess.DEVNULL, stderr=self._log)
        try:
            _wait_healthy(self.url, self.timeout, alive=lambda: proc.poll() is None)
        except BaseException as exc:
            self._stop()
            self._log.seek(0)
            raise RuntimeError(f"{exc}; emulator stderr: {self._log.read()[-2000:].decode(errors='replace')}") from exc
        return self

    def __exit__(self, *exc) -> None:
        self._stop()
        self._log.close()

    def _stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
