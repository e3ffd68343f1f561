"""Stop signals at every phase of a run. A real driver (`python -m jobs.capacity`, joined to the session's Ray) gets
SIGINT (Ctrl-C) or SIGTERM (`ray job stop`) during Ray's start-up, bring-up, calibration, a step's warm-up, window
and drain, the judge between a capacity search's probes, and the answer, in a grid and in a search (the fleet job:
tests/e2e/test_fleet_cluster.py). Every stop ends the same way: exit 130 / 143 with one line and no traceback, the run
row `incomplete` naming the signal and the phase, every Parquet file readable by DuckDB, the step that was running
written with its requests cut, and no server that loadgen launched left (checked by PID).

The driver is started with SIGINT at its default, whatever this test process inherited (a CI script's background
job ignores it). The phase is hit by design: the driver's own log line says it has begun, and the emulator holds
it (a start-up delay, every first token held back) or the step's own schedule bounds it (window, drain); the
judge and the answer are the SQL right after a line the driver prints."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import duckdb
import psutil
import pytest
import ray

from conftest import sigint_default, wait_until
from loadgen.driver import stop
from loadgen.results import analysis

REPO = Path(__file__).parents[2]
HOLD = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--fault-slow-first-token-ms", "600000",
        "--fault-rate", "1")   # every request is held before its first token: a step's requests stay in flight
FAST = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--time-scale", "20")


@dataclass(frozen=True)
class Case:
    phase: str          # what the run row's reason must name
    load: str           # the experiment's [load] keys
    trigger: str        # the driver's line (a regex) that says the phase has begun
    after_s: float = 0  # then this long (after a step's first request, if it has one to cut), by the run's own
                        # schedule (the window's length), before the phase has surely begun
    target: str = "hold"  # a shared emulator (hold, fast), or one loadgen launches (starting: never healthy)
    prompts: str = ""   # more [prompts] keys
    cut: bool = False   # a step was running: written, every request it sent cut and recorded


GRID = {
    "start-up": Case("start-up", "concurrency = [1]\nrequests = 1\n", "results go to"),
    "bring-up": Case("bring-up", "concurrency = [1]\nrequests = 1\n", r"^run \S+: ", target="starting"),
    "calibration": Case("calibration", "concurrency = [1]\nrequests = 1\n", "calibrating input tokens",
                        target="launched", prompts="input_tokens = 64\n"),
    "warm-up": Case("the warm-up of step 1", "concurrency = [2]\nwarmup_s = 600\nmeasure_s = 1\n", r"^\[step 1/",
                    cut=True),
    "window": Case("the window of step 1", "concurrency = [2]\nwarmup_s = 0\nmeasure_s = 600\n", r"^\[step 1/",
                   cut=True),
    "drain": Case("the drain of step 1", 'mode = "open"\nrates = [4]\narrival = "constant"\nwarmup_s = 0\n'
                  "measure_s = 0.5\ndrain_timeout_s = 600\n", r"^\[step 1/", 0.7, cut=True),
    "answer": Case("the answer", "concurrency = [1, 2]\nrequests = 2\n", r"^run \S+: complete", target="fast"),
}
SEARCH = '[slo]\nttft_ms = 5000\nattainment = 0.8\n[load]\nsearch = "capacity"\nsearch_min = 1\nsearch_max = 2\n'
SEARCHES = {
    "judge": Case("the judge", "warmup_s = 0.2\nmeasure_s = 0.5\n", r"^\[step 1\] done in", target="fast"),
    "window": Case("the window of step 1", "warmup_s = 0\nmeasure_s = 600\n", r"^\[step 1\]", cut=True),
    "answer": Case("the answer", "warmup_s = 0.2\nmeasure_s = 0.5\n", r"^run \S+: complete", target="fast"),
}
LAUNCHED = {"starting": '[targets.emulator]\nmodel-path = "m"\nstartup-delay-s = 600\n',
            "launched": '[targets.emulator]\nmodel-path = "m"\nfault-slow-first-token-ms = 600000\nfault-rate = 1\n'}
# A driver builds its pool of 4096 prompts from these in 0.1 s (from the built-in mix: 15+ s on a busy machine)
PROMPTS = Path(__file__).parents[1] / "data/short-prompts.jsonl"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def test_a_stop_signal_during_a_duckdb_query_lets_it_finish_and_is_acted_on_after():
    """The judge's and the answer's SQL: a handler that raised turned the signal into `RuntimeError: Query
    interrupted` inside DuckDB. Sent while the query runs (DuckDB reports its progress), in this process."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = true; SET enable_progress_bar_print = false")
    sent: list[float] = []

    def signal_while_it_runs() -> None:
        while (progress := con.query_progress()) <= 0 and not done.is_set():
            time.sleep(0.005)
        if not done.is_set():
            sent.append(progress)
            os.kill(os.getpid(), signal.SIGTERM)

    done = threading.Event()
    with stop.handling():
        stop.during("the judge")
        thread = threading.Thread(target=signal_while_it_runs)
        thread.start()
        try:
            [(total,)] = con.execute("SELECT sum(i % 7) FROM range(40000000) t(i)").fetchall()
        finally:
            done.set()
            thread.join()
        assert sent and 0 < sent[0] < 100 and stop.requested()   # it landed inside the query
        assert total == sum(i % 7 for i in range(7)) * (40000000 // 7) + sum(range(40000000 % 7))
        with pytest.raises(stop.Stopped, match="^received SIGTERM during the judge$") as stopped:
            stop.check()
    assert stopped.value.exit_code == 143


@pytest.mark.parametrize("start", ["ignored", "default", "blocked"])
def test_sigint_is_a_stop_unless_the_process_started_with_it_ignored(start):
    """A background job of a non-interactive shell starts with SIGINT ignored, on purpose: it stays ignored.
    Otherwise Ctrl-C is a stop like SIGTERM, never a KeyboardInterrupt; also where Ray's block on SIGINT was
    inherited (the driver of a `ray job submit`)."""
    def child() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if start == "ignored" else signal.SIG_DFL)
        if start == "blocked":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    code = ("import os, signal; from loadgen.driver import stop; stop.install(); os.kill(os.getpid(), signal.SIGINT); "
            "print(stop.requested(), signal.getsignal(signal.SIGINT) == signal.SIG_IGN)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                         preexec_fn=child)
    assert out.returncode == 0 and out.stdout.split() == (["False", "True"] if start == "ignored"
                                                          else ["True", "False"]), out


@pytest.fixture(scope="module")
def emulators(emulator_factory):
    with emulator_factory(*HOLD) as hold, emulator_factory(*FAST) as fast:
        yield {"hold": hold, "fast": fast}


def _seen(hold: str, run: str) -> set[str]:
    """The request ids of run `run` (its 6-hex suffix) that the holding emulator received, by its own log."""
    with urllib.request.urlopen(f"{hold}/emulator/requests", timeout=10) as resp:
        return {r["rid"] for r in json.load(resp)["requests"] if r["rid"].startswith(f"{run}-")}


def _run_suffix(out: str) -> str:
    return re.search(r"^run \S+-([0-9a-f]{6}): ", out, re.M).group(1)   # request ids start with it


def _stop_at(case: Case, sig: signal.Signals, experiment: str, tmp_path: Path, hold: str
             ) -> tuple[int, str, Path]:
    """Run the driver, send `sig` once it logged `case.trigger` and `case.after_s` passed (and, for a step to cut,
    once the holding emulator has a request of it: on a busy machine the workers can start later than the
    schedule); its exit code, output and results folder."""
    tmp_path.mkdir()
    config, results = tmp_path / "exp.toml", tmp_path / "results"
    config.write_text(experiment)
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "jobs.capacity", "--config", str(config), "--results",
                             str(results)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, preexec_fn=sigint_default)
    out: list[str] = []
    try:
        for line in proc.stdout:
            out.append(line)
            if re.search(case.trigger, line):
                break
        else:
            pytest.fail(f"the driver never logged {case.trigger!r}:\n{''.join(out)}")
        if case.target == "starting":   # and the server it launches logged its PID: that process is starting
            wait_until(lambda: "[loadgen] pid" in "".join(f.read_text() for f in results.glob("logs/run_id=*/*")),
                       what="the launched server's PID in its log")
        if case.cut:   # the step has begun once its first request reached the server
            run = _run_suffix("".join(out))
            wait_until(lambda: _seen(hold, run), what="the step's first request at the server")
        time.sleep(case.after_s)   # a bound the run's own schedule sets (the window's length), not a hope
        proc.send_signal(sig)
        out.append(proc.communicate(timeout=120)[0])
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(out), results


def _assert_stopped(code: int, out: str, results: Path, sig: signal.Signals, case: Case, hold: str) -> None:
    """What every stop must leave; `hold`: the emulator that holds requests (its own log of what it received)."""
    why = f"received {sig.name} during {case.phase}"
    assert code == 128 + sig and "Traceback" not in out and "PC: @" not in out, out   # nor Ray's native dump
    assert re.search(rf"^run stopped \({re.escape(why)}\); what was measured is kept\ncontinue it with --resume "
                     r"\S+$", out, re.M), out
    files = list(results.rglob("*.parquet*"))
    assert files and all(f.name.endswith(".parquet") for f in files), files   # whole files, no temporary one left
    for f in files:
        duckdb.sql(f"SELECT count(*) FROM read_parquet('{f}')").fetchall()
    con = analysis.open_results(results)
    assert con.sql("SELECT status, status_reason FROM runs").fetchall() == [("incomplete", f"stopped: {why}")], out
    pids = [int(pid) for log in results.glob("logs/run_id=*/*.log")
            for pid in re.findall(r"\[loadgen\] pid (\d+)", log.read_text(errors="replace"))]
    assert len(pids) == (case.target in LAUNCHED), out
    for pid in pids:   # the server loadgen launched is gone (it dies with its actor, which Ray reaps: seconds
        try:               # here, over 10 s on a loaded machine); still there after a minute: TimeoutExpired
            psutil.Process(pid).wait(60)
        except psutil.NoSuchProcess:
            pass
        assert not psutil.pid_exists(pid), pid
    if case.cut:   # the step that was running: written, each request it sent cut and recorded, none missing
        [(status, reason)] = con.sql("SELECT status, status_reason FROM steps").fetchall()
        assert status == "incomplete" and f"run stopped ({why}); requests in flight were cut" in reason, reason
        rows = dict(con.sql("SELECT request_id, status FROM requests").fetchall())
        seen = _seen(hold, _run_suffix(out))
        assert seen and set(rows) == seen and set(rows.values()) == {"cancelled"}, (rows, seen, out)


def _both(kind: str, name: str, emulators: dict, tmp_path: Path) -> None:
    """SIGINT and SIGTERM each stop a driver of their own at the same phase, side by side (half the wall time)."""
    case = (GRID if kind == "grid" else SEARCHES)[name]
    target = LAUNCHED.get(case.target) or f'url = "{emulators[case.target]}"\n'   # launched: its log has its PID
    experiment = (f'[run]\nname = "stop-{name}"\n' + ("[load]\n" if kind == "grid" else SEARCH) + case.load
                  + f'[prompts]\nmax_new_tokens = 16\n{case.prompts}[[prompts.sources]]\nformat = "jsonl"\n'
                  f'path = "{PROMPTS}"\n[[targets]]\nname = "emu"\n{target}')
    with ThreadPoolExecutor(2) as pool:
        runs = {sig: pool.submit(_stop_at, case, sig, experiment, tmp_path / sig.name, emulators["hold"])
                for sig in SIGNALS}
    for sig, run in runs.items():
        _assert_stopped(*run.result(), sig, case, emulators["hold"])


@pytest.mark.parametrize("name", list(GRID))
def test_grid_stopped_by_sigint_and_sigterm_at_every_phase(name, ray_local, emulators, tmp_path):
    _both("grid", name, emulators, tmp_path)


@pytest.mark.parametrize("name", list(SEARCHES))
def test_search_stopped_by_sigint_and_sigterm_at_every_phase(name, ray_local, emulators, tmp_path):
    _both("search", name, emulators, tmp_path)
