"""Server processes that loadgen launches (the emulator; SGLang itself on real nodes), as Ray actors.

The actor lives on the node the server must run on. The server is started in its own process group with
PR_SET_PDEATHSIG, so it dies with the actor even when Ray kills the actor hard: a server never outlives its job.
Its log goes to a file, which the job copies into the results.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import ray

from loadgen.errors import TargetError
from loadgen.servers import secrets
from loadgen.servers.health import NotHealthy, wait_healthy
from loadgen.servers.ports import free_port

_PR_SET_PDEATHSIG = 1


def _before_exec() -> None:
    """Runs in the child before exec: SIGKILL it when the launching process dies, and run it at the priority a
    server started by hand has (Ray runs its workers at nice 15, which the server would inherit), where the node
    allows raising it (root or CAP_SYS_NICE); elsewhere it keeps the worker's."""
    os.setsid()
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except PermissionError:
        pass


def _niceness(pid: int) -> int | str:
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:   # it exited already
        return "?"


def server_command(module: str, args: tuple[str, ...] | list[str], host: str, port: int) -> list[str]:
    return [sys.executable, "-m", module, *args, "--host", host, "--port", str(port)]


def _copy_masked(pipe: IO[bytes], log: IO[bytes] | None, hide: list[str]) -> None:
    """The server's output, line by line, into its log with every secret value masked; ends with the pipe.
    A log that cannot be written (its disk full or gone) drops the output but keeps draining the pipe: the
    server never blocks on a full pipe or dies of a closed one."""
    try:
        for line in iter(pipe.readline, b""):
            if log is None:
                continue
            try:
                log.write(secrets.mask(line.decode(errors="replace"), hide).encode())
                log.flush()
            except (OSError, ValueError):
                _close_quietly(log)
                log = None
    finally:
        pipe.close()
        _close_quietly(log)


def _close_quietly(log: IO[bytes] | None) -> None:
    try:
        if log is not None:
            log.close()
    except OSError:
        pass


@ray.remote(num_cpus=0)
class ServerProcess:
    """Launches one server, waits until it is healthy, stops it (and only it) on request or on death."""

    def __init__(self, name: str, log_dir: str) -> None:
        self.name = name
        self.log_path = Path(log_dir) / f"{name}.log"
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:  # the results folder is on the driver's machine; the driver copies the log there
            self.log_path = Path(tempfile.mkdtemp(prefix="loadgen-server-")) / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.pump: threading.Thread | None = None
        self.launch: tuple | None = None   # start_server's arguments, port resolved: a restart reuses them

    def start_emulator(self, args: list[str], timeout_s: float = 60.0) -> str:
        return self.start_server("loadgen.emulator", args, "127.0.0.1", 0, timeout_s)

    def start_server(self, module: str, args: list[str], host: str, port: int, timeout_s: float) -> str:
        """`python -m MODULE ARGS --host H --port P` (sglang.launch_server or loadgen.emulator, same flags);
        port 0 picks a free one. Returns the URL once /health answers 200. Secret flags (`--api-key env:NAME`,
        loadgen.servers.secrets) are read here, on the server's node, and handed over off the command line."""
        port = port or free_port(host)
        self.launch = (module, list(args), host, port, timeout_s)
        args, refs = secrets.split_args(args)
        values = {flag: secrets.resolve(flag, ref) for flag, ref in refs.items()}
        env, config = None, None
        if values and module == "loadgen.emulator":
            env = dict(os.environ, **{secrets.emulator_env(flag): v for flag, v in values.items()})
        elif values:   # sglang.launch_server takes no key from its environment, but reads a --config YAML
            if "--config" in args:
                raise TargetError(f"server {self.name}: a launch --config cannot be combined with secret flags "
                                  f"({', '.join(values)}) (fix: move them into that file, or drop --config)")
            config = secrets.sglang_config_file(values)
            args = [*args, "--config", config]
        try:
            return self._start(server_command(module, args, host, port), f"http://{host}:{port}", timeout_s, env,
                               list(values.values()))
        finally:
            if config:   # read at start-up; a restart writes it again
                shutil.rmtree(os.path.dirname(config), ignore_errors=True)

    def _start(self, command: list[str], url: str, timeout_s: float, env: dict | None = None,
               secret_values: Sequence[str] = ()) -> str:
        self.stop()
        # everything the server prints goes through the mask on its way to the log: SGLang prints its arguments
        hide = [*secret_values, *secrets.env_values(env or os.environ)]
        log = open(self.log_path, "ab")
        log.write(secrets.mask(f"$ {' '.join(command)}\n", hide).encode())
        log.flush()
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=_before_exec, env=env)
        log.write(f"[loadgen] pid {self.proc.pid}, nice {_niceness(self.proc.pid)}\n".encode())
        log.flush()
        self.pump = threading.Thread(target=_copy_masked, args=(self.proc.stdout, log, hide), daemon=True,
                                     name=f"log-{self.name}")
        self.pump.start()
        try:
            wait_healthy(url, timeout_s, self._check_alive, poll_s=0.2)
        except NotHealthy as exc:
            self.stop()
            raise TargetError(f"server {self.name} did not become healthy in {timeout_s:g} s: {exc}; "
                              f"log tail:\n{self.log_tail()}") from None
        return url

    def _check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = self.proc.returncode if self.proc else None
            raise TargetError(f"server {self.name} exited with code {code} while starting; "
                              f"log tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def restart(self) -> str:
        """Start the server again with the same profile, on the same port (the workers keep its URL): after it
        died or hung (runner: on_server_death = "restart"). A hung process is killed first (stop)."""
        assert self.launch is not None, "restart before start"
        module, args, host, port, timeout_s = self.launch
        self.stop()
        with open(self.log_path, "ab") as log:
            log.write(b"[loadgen] restarting the server with the same profile\n")
        return self.start_server(module, args, host, port, timeout_s)

    def exit_code(self) -> int | None:
        """The server's exit code once it has exited (negative: the signal that killed it), else None."""
        return self.proc.poll() if self.proc is not None else None

    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def read_log(self) -> tuple[str, bytes]:
        """(file name, content) of the server's log, for the driver to keep with the results."""
        try:
            return self.log_path.name, self.log_path.read_bytes()
        except OSError:
            return self.log_path.name, b""

    def visible_gpus(self) -> str | None:
        """CUDA_VISIBLE_DEVICES as Ray set it for this actor (fleet.server_resources = {GPU = 1}): the GPUs its
        server uses, which the GPU sampler reads (loadgen/servers/telemetry/)."""
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def stop(self, grace_s: float = 5.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if self.pump is not None:   # the log is complete once the pipe is drained
            self.pump.join(grace_s)
