"""A real llama.cpp `llama-server` for the tests: built (or found in the cache) by .ci/build-llama-server.sh.

`llama_server_paths()` returns (binary, model) or the reason they cannot be had; `LlamaServer` starts one on a
free loopback port with speculative decoding (the model as its own draft) and `--metrics`, and stops exactly
that process (by PID) at exit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from loadgen.servers.ports import free_port

REPO = Path(__file__).parents[1]
SCRIPT = REPO / ".ci" / "build-llama-server.sh"
BUILD_TIMEOUT_S = 1800


def llama_server_paths() -> tuple[str, str] | str:
    """(binary, model) from $LOADGEN_LLAMA_SERVER / $LOADGEN_LLAMA_MODEL, else from the build script (which
    reuses its cache in seconds, or builds: ~6-7 min on 2 cores). A string is the reason there is none."""
    binary, model = os.environ.get("LOADGEN_LLAMA_SERVER"), os.environ.get("LOADGEN_LLAMA_MODEL")
    if binary and model:
        return binary, model
    try:
        reuse = ["--reuse-only"] if os.environ.get("LOADGEN_LLAMA_REUSE_ONLY") == "1" else []  # .ci/run built it
        out = subprocess.run(["bash", str(SCRIPT), *reuse], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"llama-server could not be built: {exc}"
    found = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    if out.returncode != 0 or "LLAMA_SERVER" not in found or "LLAMA_MODEL" not in found:
        return (f"llama-server could not be built by {SCRIPT.relative_to(REPO)} (exit {out.returncode}): "
                f"{out.stderr.strip()[-600:]}")
    return found["LLAMA_SERVER"], found["LLAMA_MODEL"]


class LlamaServer:
    """`llama-server -m MODEL -md MODEL` (its own draft: greedy drafts are accepted unless the draft stops early;
    draft=False: no draft) with `--metrics`, N slots, on 127.0.0.1."""

    def __init__(self, binary: str, model: str, log_path: Path, parallel: int = 4, draft_max: int = 4,
                 ctx_per_slot: int = 4096, extra: tuple[str, ...] = (), draft: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        drafting = ["-md", model, "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max)] if draft else []
        self.args = [binary, "-m", model, *drafting, "--metrics", "--host", "127.0.0.1",
                     "--port", str(self.port), "-np", str(parallel), "-c", str(ctx_per_slot * parallel),
                     "-t", "2", "--no-webui", *extra]
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LlamaServer:
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        import urllib.error
        import urllib.request
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"llama-server not healthy within 120 s: {self.tail()}")

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

    def metrics(self) -> dict[str, float]:
        """The `llamacpp:` counters and gauges now (unlabelled series)."""
        import urllib.request
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # only the process this object started, by its PID
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


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
