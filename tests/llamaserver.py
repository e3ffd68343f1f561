"""A real llama.cpp `llama-server` for the tests: built (or found in the cache) by .ci/build-llama-server.sh.

`llama_server_paths()` returns (binary, model) or the reason they cannot be had; `LlamaServer` starts one on a
free loopback port with speculative decoding (the model as its own draft) and `--metrics`, and stops exactly
that process (by PID) at exit. `built_paths` and `ServerProcess` are what the real-server helpers share
(tests/vllmserver.py too).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Self

from loadgen.servers.ports import free_port

REPO = Path(__file__).parents[1]
SCRIPT = REPO / ".ci" / "build-llama-server.sh"
BUILD_TIMEOUT_S = 1800


def llama_server_paths() -> tuple[str, str] | str:
    """(binary, model) from $LOADGEN_LLAMA_SERVER / $LOADGEN_LLAMA_MODEL, else from the build script (which
    reuses its cache in seconds, or builds: ~6-7 min on 2 cores). A string is the reason there is none."""
    return built_paths(SCRIPT, ("LLAMA_SERVER", "LLAMA_MODEL"), "LOADGEN_LLAMA_", "llama-server")


def built_paths(script: Path, keys: tuple[str, str], env_prefix: str, what: str) -> tuple[str, str] | str:
    """The two paths a .ci build script prints as KEY=VALUE lines, or $<env_prefix><KEY without its first word>
    where both are set; with $<env_prefix>REUSE_ONLY=1 (.ci/run built it) the script only reuses its cache."""
    env = [env_prefix + key.split("_", 1)[1] for key in keys]
    first, second = os.environ.get(env[0]), os.environ.get(env[1])
    if first and second:
        return first, second
    try:
        reuse = ["--reuse-only"] if os.environ.get(f"{env_prefix}REUSE_ONLY") == "1" else []
        out = subprocess.run(["bash", str(script), *reuse], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{what} could not be built: {exc}"
    found = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    if out.returncode != 0 or keys[0] not in found or keys[1] not in found:
        return (f"{what} could not be built by {script.relative_to(REPO)} (exit {out.returncode}): "
                f"{out.stderr.strip()[-600:]}")
    return found[keys[0]], found[keys[1]]


class ServerProcess:
    """A server process started on a free loopback port, healthy (GET `health` answers 200) within
    `start_timeout_s`, its output in `log_path`; at exit exactly that process (by PID) is stopped."""

    name = "server"
    health = "/health"
    start_timeout_s = 120.0

    def __init__(self, args: list[str], log_path: Path, port: int, env: dict[str, str] | None = None) -> None:
        self.args, self.log_path, self.port, self.env = args, log_path, port, env
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.start_s: float | None = None   # seconds from launch to healthy

    def __enter__(self) -> Self:
        self.log = open(self.log_path, "wb")
        started = time.monotonic()
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env)
        deadline = started + self.start_timeout_s
        import urllib.error
        import urllib.request
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}{self.health}", timeout=2) as resp:
                    if resp.status == 200:
                        self.start_s = time.monotonic() - started
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"{self.name} not healthy within {self.start_timeout_s:g} s: {self.tail()}")

    def tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def tail_bytes(self) -> bytes:
        """The server's whole log so far."""
        self.log.flush()
        try:
            return self.log_path.read_bytes()
        except OSError:
            return b""

    def metrics_text(self) -> str:
        import urllib.request
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as resp:
            return resp.read().decode()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # only the process this object started, by its PID
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


class LlamaServer(ServerProcess):
    """`llama-server -m MODEL -md MODEL` (its own draft: greedy drafts are accepted unless the draft stops early;
    draft=False: no draft) with `--metrics`, N slots, on 127.0.0.1."""

    name = "llama-server"

    def __init__(self, binary: str, model: str, log_path: Path, parallel: int = 4, draft_max: int = 4,
                 ctx_per_slot: int = 4096, extra: tuple[str, ...] = (), draft: bool = True) -> None:
        port = free_port()
        drafting = ["-md", model, "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max)] if draft else []
        super().__init__([binary, "-m", model, *drafting, "--metrics", "--host", "127.0.0.1",
                          "--port", str(port), "-np", str(parallel), "-c", str(ctx_per_slot * parallel),
                          "-t", "2", "--no-webui", *extra], log_path, port)

    def metrics(self) -> dict[str, float]:
        """The `llamacpp:` counters and gauges now (unlabelled series)."""
        out = {}
        for line in self.metrics_text().splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out


_TIMING = re.compile(r"task (\d+) \| +(prompt eval|eval|total) time = +([\d.]+) ms / +(\d+) tokens")
_DRAFT = re.compile(r"task (\d+) \| draft acceptance = [\d.]+ \( *(\d+) accepted / *(\d+) generated\)")


def server_log_timings(text: str) -> list[dict]:
    """llama-server's own per-request figures, from the lines its slot prints when a request ends
    (server-context.cpp print_timings): prompt eval time / tokens, eval time / tokens, drafts accepted."""
    tasks: dict[int, dict] = {}
    for m in _TIMING.finditer(text):
        t = tasks.setdefault(int(m[1]), {})
        if m[2] == "prompt eval":
            t["prompt_ms"], t["prompt_n"] = float(m[3]), int(m[4])
        elif m[2] == "eval":
            t["gen_ms"], t["gen_n"] = float(m[3]), int(m[4])
    for m in _DRAFT.finditer(text):
        tasks.setdefault(int(m[1]), {}).update(accepted=int(m[2]), drafted=int(m[3]))
    return [dict(t, task=task) for task, t in sorted(tasks.items()) if "gen_ms" in t]


def without_draft_probe(logged: list[dict], con) -> list[dict]:
    """The server's tasks of a run but loadgen's one drafting probe (client/drafting.py: one short request per
    llama.cpp target before any load, recorded in steps.server_info), checked to be the first task."""
    [(observed,)] = con.execute("SELECT DISTINCT server_info->>'$.speculative_observed' FROM steps").fetchall()
    probe = json.loads(observed)
    assert logged and logged[0]["gen_n"] == probe["completion_tokens"], (logged[:1], probe)
    return logged[1:]
