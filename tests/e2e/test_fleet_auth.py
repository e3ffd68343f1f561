"""A fleet no one else can drive, and secrets that never leak: infra/ray-emulated-fleet.sh brings up three
raylets on loopback with Ray's token auth; a job without the token (or with a wrong one) is refused, with it
the capacity job runs against a launched emulator with a key and a running one with a client key. None of
the three secrets appears in the results, the job's output, Ray's logs or the process list."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from secrets import token_hex

import duckdb

from faultkit import EMU
from loadgen.emulator.launch import EmulatorProcess

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "infra" / "ray-emulated-fleet.sh"
# made at run time: the job ships this repository (tests included) into Ray's temp dir, which is searched
SERVER_KEY = "sk-" + token_hex(12)   # the launched emulator's key (its client uses it too)
CLIENT_KEY = "sk-" + token_hex(12)   # the key a client sends to a server loadgen did not launch

EXPERIMENT = """
[run]
name = "secured"
[load]
concurrency = [2]
requests = 6
[prompts]
max_new_tokens = 8
[[targets]]
name = "launched"
api_key_env = "LG_TEST_SERVER_KEY"
[targets.emulator]
api-key = {{ env = "LG_TEST_SERVER_KEY" }}
model-path = "m"
speculative-algorithm = "NEXTN"
time-scale = 50
[[targets]]
name = "running"
url = "{url}"
api_key_env = "LG_TEST_CLIENT_KEY"
"""


def _free_block(size: int) -> int:
    """The first of `size` consecutive loopback ports that are free now."""
    for _ in range(200):
        base = random.randrange(30000, 60000 - size)
        for port in range(base, base + size):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    break
        else:
            return base
    raise RuntimeError("no free block of ports")


def _fleet_env(tmp: Path, ray_dir: str) -> dict[str, str]:
    base = _free_block(35)   # gcs, client server, dashboard; 3 x 10 raylet ports; then 3 x 1000 worker ports
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return dict(env, LOADGEN_FLEET_DIR=ray_dir, LOADGEN_FLEET_PORT=str(base), LOADGEN_FLEET_DASHBOARD=str(base + 3),
                LOADGEN_FLEET_PORT_BASE=str(base + 5), LOADGEN_FLEET_WORKER_PORTS=str(base + 35),
                LOADGEN_FLEET_TOKEN=str(tmp / "auth" / "token"),
                LG_TEST_SERVER_KEY=SERVER_KEY, LG_TEST_CLIENT_KEY=CLIENT_KEY)


def _submit(address: str, env: dict, *entrypoint: str, results: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["ray", "job", "submit", "--address", address, "--working-dir", str(REPO), "--",
                           *entrypoint], capture_output=True, text=True, timeout=300, env=env)


def _cells(results: Path) -> str:
    """Every cell of every table as text (Parquet is compressed: grepping its bytes proves nothing)."""
    con = duckdb.connect()
    out = []
    for table_dir in results.iterdir():
        if table_dir.is_dir() and list(table_dir.rglob("*.parquet")):
            rows = con.sql(f"SELECT * FROM read_parquet('{table_dir}/*/*.parquet', union_by_name=true)").fetchall()
            out += [json.dumps(row, default=str) for row in rows]
    return "\n".join(out)


def _files_with(root: Path, needles: list[str]) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                data = p.read_bytes()
            except OSError:
                continue
            hits += [f"{p}: {n[:6]}..." for n in needles if n.encode() in data]
    return hits


def test_token_fleet_refuses_strangers_and_no_secret_leaks(tmp_path):
    ray_dir = tempfile.mkdtemp(prefix="lga-", dir="/tmp")   # short: Ray's socket paths must fit in 107 bytes
    env = _fleet_env(tmp_path, ray_dir)
    up = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=240, env=env)
    address = f"http://127.0.0.1:{env['LOADGEN_FLEET_DASHBOARD']}"
    procs: set[str] = set()
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        token_file = Path(env["LOADGEN_FLEET_TOKEN"])
        token = token_file.read_text()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and len(token) == 64

        # refused: the job API without a token (401) and with another cluster's token (403), and the CLI
        for headers, code in (({}, 401), ({"Authorization": "Bearer " + "0" * 64}, 403)):
            try:
                urllib.request.urlopen(urllib.request.Request(f"{address}/api/jobs/", headers=headers), timeout=10)
                status = 200
            except urllib.error.HTTPError as exc:
                status = exc.code
            assert status == code
        stranger = _submit(address, dict(env, RAY_AUTH_MODE="disabled"), "python3", "-c", "print('ran')")
        assert stranger.returncode != 0 and "Unauthorized" in stranger.stderr and "ran" not in stranger.stdout
        other = tmp_path / "other-token"
        other.write_text("1" * 64)
        wrong = _submit(address, dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(other)),
                        "python3", "-c", "print('ran')")
        assert wrong.returncode != 0 and "Forbidden" in wrong.stderr and "ran" not in wrong.stdout

        # accepted with the token: the capacity job, with a launched server's key and a client key
        done = threading.Event()

        def watch() -> None:   # the process list, sampled for the whole job
            while not done.is_set():
                procs.update(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines())
                time.sleep(0.3)
        watcher = threading.Thread(target=watch, daemon=True)
        results = tmp_path / "results"
        with EmulatorProcess([*EMU, "--api-key", CLIENT_KEY]) as running:
            config = tmp_path / "secured.toml"
            config.write_text(EXPERIMENT.format(url=running.url))
            watcher.start()
            job = _submit(address, dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file)),
                          "python3", "-m", "jobs.capacity", "--config", str(config), "--results", str(results))
            done.set()
            watcher.join(5)
        output = job.stdout + job.stderr
        assert job.returncode == 0 and ": complete" in job.stdout, output[-4000:]

        secrets = [SERVER_KEY, CLIENT_KEY, token]
        text = _cells(results)
        assert '\\"api-key\\": {\\"env\\": \\"LG_TEST_SERVER_KEY\\"}' in text   # runs.config: where the key is ...
        assert (results / "logs").is_dir() and list((results / "logs").rglob("launched.log"))
        for secret in secrets:                                      # ... never what it is
            assert secret not in text and secret not in output
            assert not [line for line in procs if secret in line]
        assert _files_with(results, secrets) == []
        assert _files_with(Path(ray_dir), secrets) == []             # Ray's own logs, the job driver's log
        environs = []   # the token is in no process's environment either (only its file's path is)
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                environs.append(Path(f"/proc/{pid}/environ").read_bytes())
            except OSError:
                continue
        assert len(environs) > 10 and not [e for e in environs if token.encode() in e]
    finally:
        subprocess.run([str(SCRIPT), "down"], capture_output=True, text=True, timeout=120, env=env)
        shutil.rmtree(ray_dir, ignore_errors=True)


def test_the_spark_script_never_starts_an_open_or_leaky_node(tmp_path):
    """infra/ray-spark-fleet.sh refuses, before `ray start`: auth switched off, a worker without the head's
    token, a token file others can read. (The head's happy path is the emulated fleet's above.)"""
    spark = REPO / "infra" / "ray-spark-fleet.sh"
    token = tmp_path / "auth_token"
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env = dict(base, NODE_IP="127.0.0.1", RAY_AUTH_TOKEN_PATH=str(token))

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(spark), *args], capture_output=True, text=True, timeout=60, env=dict(env, **extra))
    off = run("head", "spark1", RAY_AUTH_MODE="disabled")
    assert off.returncode == 2 and "fix: unset it" in off.stderr
    missing = run("worker", "spark2", "127.0.0.1")
    assert missing.returncode == 2 and f"no token at {token}" in missing.stderr
    token.write_text("a" * 64)
    token.chmod(0o644)
    readable = run("worker", "spark2", "127.0.0.1")
    assert readable.returncode == 2 and f"chmod 600 {token}" in readable.stderr
    for done in (off, missing, readable):
        assert "Ray runtime started" not in done.stdout + done.stderr


def test_the_emulated_fleet_refuses_a_token_file_others_can_read(tmp_path):
    token = tmp_path / "token"
    token.write_text("b" * 64)
    token.chmod(0o640)
    env = dict(os.environ, LOADGEN_FLEET_TOKEN=str(token), LOADGEN_FLEET_DIR=str(tmp_path / "ray"))
    up = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=60, env=env)
    assert up.returncode == 2 and f"chmod 600 {token}" in up.stderr and not (tmp_path / "ray").exists()
