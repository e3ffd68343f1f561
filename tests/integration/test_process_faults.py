"""Process faults on a real Ray: a load worker or the sink killed mid-step. Nothing the run had written is lost,
nothing is missing, and the run says what happened. (The driver stopped by SIGTERM or Ctrl-C, at every phase of a
run: tests/e2e/test_stop_signals.py.)"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import types
from collections import Counter
from pathlib import Path

import duckdb
import psutil
import pytest
import ray

from faultkit import rows, run, truth
from loadgen.driver import step

SLOW = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--time-scale", "1")


def _alive_pids(class_name: str) -> list[int]:
    """Actor processes of this session's Ray only (descendants of this pytest process: the local raylet's
    workers), never another engineer's."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if f"ray::{class_name}" in " ".join(proc.cmdline()):
                out.append(proc.pid)
        except psutil.Error:
            pass
    return out


def _kill_when(url: str, n_seen: int, class_name: str, delay_s: float, killed: list[int],
               written: Path | None = None) -> threading.Thread:
    """SIGKILL one live actor of `class_name` (a crash: Ray may restart it) once the server saw n requests (and,
    with `written`, once a Parquet part is under that folder: the sink's first incarnation wrote something)."""
    def ready() -> bool:
        return len(truth(url)) >= n_seen and (written is None or any(written.rglob("*.parquet")))

    def go() -> None:
        deadline = time.monotonic() + 60
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(delay_s)
        pid = _alive_pids(class_name)[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("policy", ["continue", "stop"])
def test_worker_killed_mid_step(policy, ray_local, emulator_factory, tmp_path):
    killed: list[int] = []
    with emulator_factory(*SLOW) as url:
        # 4 long streams over 2 workers; the kill comes while the first 4 are in flight (none finished)
        killer = _kill_when(url, 4, "LoadWorker", 0.6, killed)
        result = run(url, tmp_path, concurrency=(4, 2), requests=8, max_tokens=64, workers_per_target=2,
                     on_worker_death=policy)
        killer.join()
        seen = truth(url)
    assert killed
    got = rows(result)
    by_rid = {r["request_id"]: r for r in got}
    assert len(by_rid) == len(got)                                  # one row per request, no duplicates
    assert {t["rid"] for t in seen} <= set(by_rid)                  # nothing the server saw is missing
    step0 = [r for r in got if r["step_id"] == 0]
    lost = [r for r in step0 if r["status"] == "lost"]
    assert len(lost) == 2 and len({r["worker"] for r in lost}) == 1, Counter(r["status"] for r in step0)
    assert all("died" in r["error"] and r["t_sent_ns"] and r["prompt_id"] for r in lost)
    survivor = [r for r in step0 if r["worker"] != lost[0]["worker"]]
    # the other worker's rows stay; under "stop" its streams are cut at once (cancelled), else they finish
    assert survivor and {r["status"] for r in survivor} <= ({"ok", "cancelled"} if policy == "stop" else {"ok"})
    steps = {s["step_id"]: s for s in rows(result, "SELECT * FROM steps")}
    assert steps[0]["status"] == "incomplete" and "died" in steps[0]["status_reason"]
    [run_row] = rows(result, "SELECT * FROM runs")
    assert run_row["status"] == result.status == "incomplete"
    if policy == "stop":
        assert set(steps) == {0} and "died" in run_row["status_reason"]
    else:   # the job went on: the crashed worker was restarted by Ray and ran the next level
        assert steps[1]["status"] == "complete", steps[1]["status_reason"]
        step1 = [r for r in got if r["step_id"] == 1]
        assert len(step1) == 8 and {r["status"] for r in step1} == {"ok"}
        assert {r["worker"] for r in step1} == {"emu.w0", "emu.w1"}


@ray.remote(num_cpus=0, max_restarts=1)
class _SlowToRestart:
    """A stand-in worker whose restart takes 6 s (a loaded machine's LoadWorker restart; a call meanwhile fails after
    about 2 s, so a single check would return before it is back)."""

    def __init__(self) -> None:
        if ray.get_runtime_context().was_current_actor_reconstructed:
            time.sleep(6.0)

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


def test_a_step_waits_for_a_worker_ray_is_restarting(ray_local):
    """Called while Ray restarts it, a worker answers ActorUnavailableError: the step's start waits until it is back
    (else the step ran without its streams: seen under load as an incomplete step after a crash). A worker whose
    restarts are used up does not hold the step: it is named unavailable when the step starts."""
    worker = _SlowToRestart.remote()
    os.kill(ray.get(worker.pid.remote()), signal.SIGKILL)
    time.sleep(0.3)
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        ray.get(worker.node_id.remote())
    target = types.SimpleNamespace(workers=[worker])
    step._await_restarts([target])   # type: ignore[list-item]
    assert ray.get(worker.node_id.remote(), timeout=1)
    os.kill(ray.get(worker.pid.remote()), signal.SIGKILL)   # its one restart used
    time.sleep(0.3)
    t0 = time.monotonic()
    step._await_restarts([target])   # type: ignore[list-item]
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(worker.node_id.remote(), timeout=10)
    assert time.monotonic() - t0 < step.WORKER_RESTART_S


def test_sink_killed_mid_step(ray_local, emulator_factory, tmp_path):
    killed: list[int] = []
    with emulator_factory(*SLOW) as url:
        killer = _kill_when(url, 6, "ResultsSink", 0.3, killed, written=tmp_path)
        result = run(url, tmp_path, concurrency=(4, 2), requests=12, max_tokens=48)
        killer.join()
    assert killed
    files = list(tmp_path.rglob("*.parquet*"))
    assert not [f for f in files if not f.name.endswith(".parquet")]          # no temporary file left
    for f in files:                                                          # every file is whole
        duckdb.sql(f"SELECT count(*) FROM read_parquet('{f}')").fetchall()
    incarnations = {re.match(r"part-([0-9a-f]+)-", f.name).group(1) for f in files}
    assert len(incarnations) == 2                                            # the restart wrote new parts
    steps = rows(result, "SELECT * FROM steps ORDER BY step_id")
    assert [s["step_id"] for s in steps] == [0, 1]
    assert steps[1]["status"] == "complete"
    assert steps[0]["status"] == "complete" or "sink restarted" in steps[0]["status_reason"]
    # after the restart nothing is lost: the second level's rows are all there
    assert len([r for r in rows(result) if r["step_id"] == 1]) == 12
