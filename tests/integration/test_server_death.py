"""Servers that crash at the limit, on a real Ray with real emulator processes: a launched server killed with
SIGKILL mid-step, or hung (SIGSTOP: the kernel still accepts its connections, it sends nothing), is recorded
(the step's row for it says failed with the cause and the log tail, a server_death sample), its level is a clear
SLO fail in level_slo, and it is restarted with the same profile for the next step; a url server that stops
answering (connections refused) is retried for server_retry_s, then dropped while the other target goes on."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from faultkit import rows
from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.emulator.launch import EmulatorProcess
from loadgen.results.analysis import level_verdicts
from loadgen.results.slo import Verdict

SLOW = {"model-path": "m", "speculative-algorithm": "NEXTN", "time-scale": "2"}
SLO = {"ttft_ms": 5000, "tpot_ms": 1000}


def _busy(url: str) -> bool:
    """The emulator has received requests (False while it is still starting)."""
    try:
        with urllib.request.urlopen(f"{url}/emulator/requests", timeout=5) as resp:
            return bool(json.load(resp)["requests"])
    except OSError:
        return False


def _hit_launched(results: Path, sig: int, out: dict) -> threading.Thread:
    """Send `sig` to the launched emulator (found by the pid in its log) 1 s after its first request arrived."""
    def go() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for log in results.glob("logs/run_id=*/emu.log"):
                text = log.read_text(errors="replace")
                pid, port = re.search(r"\[loadgen\] pid (\d+)", text), re.search(r"--port (\d+)", text)
                if pid and port and _busy(f"http://127.0.0.1:{port.group(1)}"):
                    time.sleep(1.0)
                    os.kill(int(pid.group(1)), sig)
                    out["pid"], out["at"] = int(pid.group(1)), time.monotonic()
                    return
            time.sleep(0.1)
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def _launched(tmp_path: Path, **load):
    return parse_experiment({
        "run": {"name": "death"}, "slo": SLO,
        "load": {"concurrency": [4, 2], "requests": 8, "stall_timeout_s": 2.0, **load},
        "prompts": {"max_new_tokens": 64, "ignore_eos": True, "seed": 1},
        "targets": [{"name": "emu", "emulator": SLOW}]}, Path("."))


@pytest.mark.parametrize("sig,cause", [(signal.SIGKILL, "killed by signal 9"), (signal.SIGSTOP, "hung")],
                         ids=["kill9", "hang"])
@pytest.mark.timeout(300)
def test_launched_server_dies_mid_step_and_is_restarted(sig, cause, ray_local, tmp_path):
    hit: dict = {}
    lines: list[str] = []
    killer = _hit_launched(tmp_path, sig, hit)
    result = run_experiment(_launched(tmp_path), str(tmp_path), log=lines.append)
    killer.join()
    assert hit, lines
    steps = {s["step_id"]: s for s in rows(result, "SELECT * FROM steps")}
    assert steps[0]["status"] == "failed" and cause in steps[0]["status_reason"], steps[0]
    assert "SLO fail" in steps[0]["status_reason"]
    if sig == signal.SIGKILL:
        assert "log tail: " in steps[0]["status_reason"] and "listening on" in steps[0]["status_reason"]
    else:   # its requests were cut by the stall timeout, not failed for another reason
        cut = rows(result, "SELECT * FROM requests WHERE step_id = 0 AND status = 'timeout'")
        assert cut and all("stall timeout" in r["error"] for r in cut)
    [death] = rows(result, "SELECT * FROM server_samples WHERE name = 'server_death'")
    assert death["step_id"] == 0 and json.loads(death["labels"])["cause"] == ("exited" if sig == signal.SIGKILL
                                                                            else "hung")
    # restarted with the same profile: the next level ran in full on a new process
    assert steps[1]["status"] == "complete"
    step1 = rows(result, "SELECT status FROM requests WHERE step_id = 1")
    assert len(step1) == 8 and {r["status"] for r in step1} == {"ok"}
    log = next(tmp_path.glob("logs/run_id=*/emu.log")).read_text()
    pids = [int(p) for p in re.findall(r"\[loadgen\] pid (\d+)", log)]
    assert len(pids) == 2 and pids[0] == hit["pid"] and "restarting the server with the same profile" in log
    # the level is a clear SLO fail for the search and the capacity queries; the other level passes
    verdicts = {r["level"]: (r["verdict"], r["clear"]) for r in rows(result, "SELECT * FROM level_slo")}
    assert verdicts[4.0] == ("fail", True) and verdicts[2.0][0] == "pass"
    # what a capacity search's plan reads (runner: ctx.judge): the level where the server died failed, clearly
    assert level_verdicts(result.results_dir, result.run_id, ["emu"])["emu"][4.0] == Verdict(False, True, 1)
    assert result.status == "complete"
    assert any("restarted after" in line for line in lines), lines


@pytest.mark.timeout(300)
def test_url_server_refusing_is_dropped_and_the_other_goes_on(ray_local, tmp_path):
    flags = ["--model-path", "m", "--speculative-algorithm", "NEXTN", "--time-scale", "2"]
    with EmulatorProcess(flags) as doomed, EmulatorProcess(flags) as good:
        exp = parse_experiment({
            "run": {"name": "drop"}, "slo": SLO,
            "load": {"concurrency": [2, 1, 3], "requests": 6, "stall_timeout_s": 2.0, "server_retry_s": 3.0},
            "prompts": {"max_new_tokens": 64, "ignore_eos": True, "seed": 1},
            "targets": [{"name": "doomed", "url": doomed.url}, {"name": "good", "url": good.url}]}, Path("."))

        def kill() -> None:
            while not _busy(doomed.url):
                time.sleep(0.05)
            time.sleep(1.0)
            doomed.proc.kill()
        killer = threading.Thread(target=kill, daemon=True)
        killer.start()
        lines: list[str] = []
        result = run_experiment(exp, str(tmp_path), log=lines.append)
        killer.join()
    steps = rows(result, "SELECT step_id, target, status, status_reason, t_start_ns, t_end_ns FROM steps "
                         "ORDER BY step_id, target")
    by = {(s["step_id"], s["target"]): s for s in steps}
    assert by[(0, "doomed")]["status"] == "failed" and "stopped answering" in by[(0, "doomed")]["status_reason"]
    assert [s["step_id"] for s in steps if s["target"] == "doomed"] == [0]          # dropped after step 0
    assert [(s["step_id"], s["status"]) for s in steps if s["target"] == "good"] == [
        (0, "complete"), (1, "complete"), (2, "complete")]                          # the other went on
    good_rows = rows(result, "SELECT step_id, status FROM requests WHERE target = 'good'")
    assert len(good_rows) == 18 and {r["status"] for r in good_rows} == {"ok"}
    assert result.status == "incomplete" and "doomed" in result.reason and "dropped" in result.reason
    assert any("dropped from the rest of the run" in line for line in lines)
    verdicts = {(r["target"], r["level"]): r["verdict"] for r in rows(result, "SELECT * FROM level_slo")}
    assert verdicts[("doomed", 2.0)] == "fail" and ("doomed", 1.0) not in verdicts
    # the dead url was retried for server_retry_s (3 s) between the steps, each try once (not 10 s of a control
    # call's own retries: the gap was 21 s), and its reasons are one line each, without Ray's traceback
    assert (by[(1, "good")]["t_start_ns"] - by[(0, "good")]["t_end_ns"]) / 1e9 < 20
    assert not any('File "' in line or "Traceback" in line for line in lines), lines
    assert "unreachable" in by[(0, "doomed")]["status_reason"] and "\n" not in by[(0, "doomed")]["status_reason"]


@pytest.mark.timeout(300)
def test_url_server_gone_between_steps_is_dropped_before_the_next(ray_local, tmp_path):
    flags = ["--model-path", "m", "--speculative-algorithm", "NEXTN", "--time-scale", "50"]
    with EmulatorProcess(flags) as doomed, EmulatorProcess(flags) as good:
        exp = parse_experiment({
            "run": {"name": "gone"},
            "load": {"concurrency": [1, 2], "requests": 4, "server_retry_s": 2.0},
            "prompts": {"max_new_tokens": 16, "seed": 1},
            "targets": [{"name": "doomed", "url": doomed.url}, {"name": "good", "url": good.url}]}, Path("."))
        lines: list[str] = []

        def log(line: str) -> None:   # the driver's own log: the first step is written, the next not started
            lines.append(line)
            if line.startswith("[step 1/") and " done in " in line:
                doomed.proc.kill()
                doomed.proc.wait()
        result = run_experiment(exp, str(tmp_path), log=log)
    steps = rows(result, "SELECT step_id, target, status FROM steps ORDER BY step_id, target")
    assert [(s["step_id"], s["target"], s["status"]) for s in steps] == [
        (0, "doomed", "complete"), (0, "good", "complete"), (1, "good", "complete")]
    assert len(rows(result, "SELECT * FROM requests WHERE step_id = 1")) == 4
    assert result.status == "incomplete" and "doomed" in result.reason and "server_retry_s" in result.reason
    assert any("does not answer before step 1" in line for line in lines), lines


def test_a_refused_flush_is_not_retried():
    """Before a step, a server that refuses connections is gone: the flush says so at once, and the caller brings
    it back or drops it within server_retry_s. (Its retries for a busy server once held a gone one 30 s more.)"""
    import asyncio

    import aiohttp

    from loadgen.errors import TargetError
    from loadgen.servers.ports import free_port
    from loadgen.servers.probe import flush_cache

    async def flush() -> None:
        async with aiohttp.ClientSession() as session:
            await flush_cache(session, f"http://127.0.0.1:{free_port()}", within_s=20.0)
    started = time.monotonic()
    with pytest.raises(TargetError, match="unreachable for /flush_cache"):
        asyncio.run(flush())
    assert time.monotonic() - started < 20.0   # retried, it would end only when within_s ran out


@pytest.mark.timeout(300)
def test_slow_server_is_told_from_a_hung_one(ray_local, tmp_path):
    """A server that holds every first token for 2.5 s (but answers control calls) under a 1 s stall timeout:
    its requests are cut by the stall timeout, and the step says the server is slow, not hung (not failed)."""
    flags = ["--model-path", "m", "--speculative-algorithm", "NEXTN", "--time-scale", "50",
             "--fault-slow-first-token-ms", "2500", "--fault-rate", "1"]
    with EmulatorProcess(flags) as slow:
        exp = parse_experiment({
            "run": {"name": "slow"},
            "load": {"concurrency": [2], "requests": 4, "stall_timeout_s": 1.0},
            "prompts": {"max_new_tokens": 16, "seed": 1},
            "targets": [{"name": "slow", "url": slow.url}]}, Path("."))
        result = run_experiment(exp, str(tmp_path), log=lambda *a: None)
    [step] = rows(result, "SELECT status, status_reason FROM steps")
    assert step["status"] == "complete" and "server slow is slow, not hung: 4 requests" in step["status_reason"]
    cut = rows(result, "SELECT status, error FROM requests")
    assert len(cut) == 4 and all(r["status"] == "timeout" and "stall timeout" in r["error"] for r in cut)
    assert not rows(result, "SELECT * FROM server_samples WHERE name = 'server_death'")
