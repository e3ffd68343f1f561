"""A server process that dies mid-step: every request keeps exactly one row, none of the cut ones is `ok`, the
step is written as incomplete, and the run stops with the server named."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import duckdb
import pytest

from loadgen.config import parse_experiment
from loadgen.emulator.launch import EmulatorProcess
from loadgen.errors import LoadgenError
from loadgen.runner import run_experiment

MTP = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
       "--speculative-num-draft-tokens", "4"]


def _kill_when_busy(emu: EmulatorProcess) -> None:
    """SIGKILL the server 1 s after its first requests arrived (they take ~3 s: both are still in flight)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{emu.url}/emulator/requests", timeout=2) as resp:
            if json.load(resp)["requests"]:
                break
        time.sleep(0.05)
    time.sleep(1.0)
    emu.proc.kill()


def test_server_killed_mid_step(ray_local, tmp_path):
    with EmulatorProcess(MTP) as emu:
        exp = parse_experiment({
            "load": {"concurrency": [2, 4], "requests": 10, "stall_timeout_s": 5.0},
            "prompts": {"max_new_tokens": 64, "ignore_eos": True},
            "targets": [{"name": "doomed", "url": emu.url}]}, Path("."))
        killer = threading.Thread(target=_kill_when_busy, args=(emu,), daemon=True)
        killer.start()
        with pytest.raises(LoadgenError, match="doomed|127.0.0.1"):
            run_experiment(exp, str(tmp_path), log=lambda *a: None)
        killer.join()
    glob = f"{tmp_path}/%s/*/*.parquet"
    rows = duckdb.sql(f"SELECT request_id, status, error FROM read_parquet('{glob % 'requests'}')").fetchall()
    assert len(rows) == 10 and len({r[0] for r in rows}) == 10     # the whole quota of step 0, once each
    statuses = [r[1] for r in rows]
    assert statuses.count("stream_broken") >= 1                    # in flight when the process died
    assert "client_error" in statuses and all(s in ("ok", "stream_broken", "client_error") for s in statuses)
    assert all("connect" in r[2] for r in rows if r[1] == "client_error")
    steps = duckdb.sql(f"SELECT step_id, status, status_reason FROM read_parquet('{glob % 'steps'}')").fetchall()
    assert [(s[0], s[1]) for s in steps] == [(0, "incomplete")] and "unreachable" in steps[0][2]
    run = duckdb.sql(f"SELECT status FROM read_parquet('{glob % 'runs'}') ORDER BY finished_at_ns DESC NULLS LAST "
                     "LIMIT 1").fetchall()
    assert run == [("failed",)]
