"""Resuming a run: the driver (`python -m jobs.capacity`, a real process on the session's Ray) is SIGKILLed at
random points of a grid over two emulators, resumed with --resume RUN_ID (once, or killed again during the
resume and resumed a second time), and the final tables are compared with what an uninterrupted run on the same
emulators writes: every step of the grid, each once, and every step's requests exactly once (none duplicated, none
missing). A changed experiment is refused with what changed, before Ray starts."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest
import ray

from loadgen.config import load_experiment
from loadgen.driver.resume import load_resume
from loadgen.errors import LoadgenError
from loadgen.plan.search import next_probe
from loadgen.results import analysis
from loadgen.results.slo import Verdict

REPO = Path(__file__).parents[2]
SHORT_PROMPTS = Path(__file__).parents[1] / "data/short-prompts.jsonl"   # a prefill of a few ms
EMU = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--time-scale", "8")
REQUESTS = 6
LEVELS = (1, 2, 4)
REPEATS = 2


def _experiment(tmp_path: Path, urls: list[str], levels=LEVELS) -> Path:
    path = tmp_path / "exp.toml"
    targets = "".join(f'[[targets]]\nname = "emu{i}"\nurl = "{u}"\n' for i, u in enumerate(urls))
    path.write_text(f'[run]\nname = "resume"\n[load]\nconcurrency = {list(levels)}\nrepeats = {REPEATS}\n'
                    f'requests = {REQUESTS}\n[prompts]\nseed = 3\nmax_new_tokens = 48\n' + targets)
    return path


def _driver(config: Path, results: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "jobs.capacity", "--config", str(config), "--results",
                             str(results), *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)


def _kill_after(proc: subprocess.Popen, seconds: float, sig: int = signal.SIGKILL,
                step: int = 1) -> tuple[str | None, list[str]]:
    """Read the driver's output until `seconds` after its `step`-th step started, then send `sig` (SIGKILL: the
    driver dies on the spot; SIGTERM: `ray job stop`, it writes the cut step). Returns the run id and the output."""
    out: list[str] = []
    run_id = None
    started = 0
    for line in proc.stdout:
        out.append(line)
        if m := re.match(r"run (\S+): ", line):
            run_id = m.group(1)
        started += line.startswith("[step ") and " done in " not in line
        if started == step:
            break
    time.sleep(seconds)
    proc.send_signal(sig)
    proc.wait(60)
    return run_id, out


def _run_to_end(proc: subprocess.Popen) -> str:
    text, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, text
    return text


def _tables(results: Path, run_id: str) -> dict:
    """What the views say about one run: steps by (target, level, repeat), requests per such step."""
    con = analysis.open_results(results, [run_id])
    steps = con.sql("SELECT target, concurrency, \"repeat\", status, step_id FROM steps").fetchall()
    per_step = con.sql("SELECT s.target, s.concurrency, s.\"repeat\", count(*), count(DISTINCT r.request_id), "
                       "count(*) FILTER (r.status = 'ok') FROM requests r JOIN steps s USING (run_id, step_id, target) "
                       "GROUP BY ALL").fetchall()
    [(requests, distinct, orphans)] = con.sql(
        "SELECT count(*), count(DISTINCT request_id), count(*) FILTER (step_id NOT IN (SELECT step_id FROM steps)) "
        "FROM requests").fetchall()
    [(orphan_frames,)] = con.sql("SELECT count(*) FROM frames WHERE request_id NOT IN "
                                 "(SELECT request_id FROM requests)").fetchall()
    [(status, n_runs)] = con.sql("SELECT status, (SELECT count(*) FROM runs) FROM runs").fetchall()
    return {"step_ids": {sid for *_, sid in steps}, "steps": Counter((t, c, r) for t, c, r, _, _ in steps),
            "statuses": {s for *_, s, _ in steps},
            "per_step": {(t, c, r): (n, d, ok) for t, c, r, n, d, ok in per_step},
            "requests": (requests, distinct, orphans), "orphan_frames": orphan_frames, "run": (status, n_runs)}


def _finished_steps(results: Path, run_id: str) -> set[int]:
    glob = f"{results}/steps/run_id={run_id}/*.parquet"
    sql = f"SELECT step_id FROM read_parquet('{glob}') WHERE status = 'complete'"
    return {sid for (sid,) in duckdb.sql(sql).fetchall()}


def _raw_requests(results: Path, run_id: str) -> int:
    glob = f"{results}/requests/run_id={run_id}/*.parquet"
    return duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}')").fetchall()[0][0]


@pytest.fixture(scope="module")
def emulators(ray_local, emulator_factory):
    """The two emulators the kills below run their grids on (the first also the refused resume's)."""
    with emulator_factory(*EMU) as a, emulator_factory(*EMU) as b:
        yield [a, b]


@pytest.mark.parametrize("sig,seed", [(signal.SIGKILL, 0), (signal.SIGKILL, 2), (signal.SIGTERM, 3)],
                         ids=["kill-0", "kill-2", "term-3"])
@pytest.mark.timeout(600)
def test_sigkill_and_resume_equals_uninterrupted(sig, seed, emulators, tmp_path):
    rng = random.Random(seed)
    kills = 2 if seed == 2 else 1   # seed 2: the resumed driver is killed too, and resumed again
    config = _experiment(tmp_path, emulators)
    results = tmp_path / "results"
    # the kills fall anywhere in the steps' time line, whatever the machine's speed: up to 1 s into any step but
    # the last (a step runs both targets, ~1 s here), its start, its middle, its end or the next one's start
    steps = len(LEVELS) * REPEATS
    first_kill = rng.uniform(0.1, 1.0)
    kill_step = 1
    if sig == signal.SIGTERM:   # inside the first step (>= 1 s): its cut rows are written, then superseded
        first_kill = rng.uniform(0.3, 0.8)
    else:
        kill_step = rng.randint(1, steps // 3 if kills == 2 else steps - 1)   # seed 2 leaves room for a second
    run_id, out = _kill_after(_driver(config, results), first_kill, sig, kill_step)
    assert run_id, "".join(out)
    for _ in range(kills - 1):   # the resumed driver killed in its turn
        _, more = _kill_after(_driver(config, results, "--resume", run_id), rng.uniform(0.1, 1.5))
        out += more
    finished = _finished_steps(results, run_id)
    t0 = time.monotonic()
    proc = _driver(config, results, "--resume", run_id)
    recovery, lines = None, []
    for line in proc.stdout:
        lines.append(line)
        if recovery is None and "[step " in line:
            recovery = time.monotonic() - t0     # from the resume command to its first step
    proc.wait(300)
    assert proc.returncode == 0, "".join(lines)
    resumed_text = "".join(lines)
    assert f"resuming run {run_id}" in resumed_text
    got = _tables(results, run_id)
    expected_keys = {(f"emu{i}", c, r) for i in range(2) for c in LEVELS for r in range(REPEATS)}
    assert got["steps"] == Counter(expected_keys)                   # every step of the grid, each once
    assert got["statuses"] == {"complete"}
    assert got["per_step"] == dict.fromkeys(expected_keys, (REQUESTS, REQUESTS, REQUESTS))   # each request once, ok
    assert got["requests"] == (len(expected_keys) * REQUESTS, len(expected_keys) * REQUESTS, 0)
    assert got["orphan_frames"] == 0
    assert finished <= got["step_ids"]                              # every step finished before a kill is kept
    assert got["run"] == ("complete", 1)                            # one run, its newest row
    # the files keep the interrupted step's rows; the views leave them out
    assert _raw_requests(results, run_id) > got["requests"][0] if sig == signal.SIGTERM else (
        _raw_requests(results, run_id) >= got["requests"][0])
    print(f"{signal.Signals(sig).name} seed {seed}: {first_kill:.2f} s into step {kill_step}, kills {kills}, "
          f"kept {len(finished)} steps, "
          f"raw requests {_raw_requests(results, run_id)}, "
          f"counted {got['requests'][0]}, first resumed step after {recovery} s")


def test_resume_refuses_a_changed_experiment(emulators, tmp_path):
    config = _experiment(tmp_path, emulators[:1], levels=(1,))
    results = tmp_path / "results"
    run_id, out = _kill_after(_driver(config, results), 0.3)
    assert run_id, "".join(out)
    exp = load_experiment(config)
    state = load_resume(results, run_id, exp)
    assert state.run_id == run_id and state.done == frozenset()      # killed in its first step
    changed = tmp_path / "changed.toml"
    changed.write_text(config.read_text().replace("concurrency = [1]", "concurrency = [1, 8]"))
    proc = _driver(changed, results, "--resume", run_id)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2
    [line] = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert "load.concurrency[1]: (none) -> 8" in line and "start a new run" in line, text
    assert text.strip().splitlines() == [line], text                  # one line, before Ray started
    with pytest.raises(LoadgenError, match="no such run"):
        load_resume(results, "nope", exp)
    text = _run_to_end(_driver(config, results, "--resume", run_id))
    with pytest.raises(LoadgenError, match="complete, there is nothing to resume"):
        load_resume(results, run_id, exp)


@pytest.mark.timeout(600)
def test_search_resumes_from_its_verdicts(ray_local, emulator_factory, tmp_path):
    """A capacity search (an emulator whose capacity is exactly 3: --max-running-requests 3 at a TTFT line)
    killed in its third probe and resumed: it goes on from the verdicts in the results, probing the levels in the
    order and giving the answer of an uninterrupted search of that capacity (the search's own path over the true
    verdicts: pass up to 3, fail above)."""
    flags = ("--model-path", "m", "--max-running-requests", "3", "--time-scale", "10", "--seed", "3")
    with emulator_factory(*flags) as url:
        config = tmp_path / "search.toml"
        config.write_text('[run]\nname = "search"\n[load]\nsearch = "capacity"\nsearch_min = 1\nsearch_max = 16\n'
                          'warmup_s = 0.5\nmeasure_s = 1.0\ndrain_timeout_s = 30\n[slo]\nttft_ms = 200\n'
                          'attainment = 0.8\n[prompts]\nseed = 5\nmax_new_tokens = 128\n'
                          f'[[prompts.sources]]\nformat = "jsonl"\npath = "{SHORT_PROMPTS}"\n'   # TTFT far below 200 ms
                          f'[[targets]]\nname = "k3"\nurl = "{url}"\n')
        results = tmp_path / "results"
        proc = _driver(config, results)
        run_id, steps_seen = None, 0
        for line in proc.stdout:   # kill it 1 s into its third probe
            run_id = run_id or (m.group(1) if (m := re.match(r"run (\S+): ", line)) else None)
            steps_seen += line.startswith("[step ") and " done in " not in line
            if steps_seen == 3:
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        resumed = _run_to_end(_driver(config, results, "--resume", run_id))
    assert f"resuming run {run_id}" in resumed

    def probes(folder: Path, rid: str) -> tuple[list, list]:
        con = analysis.open_results(folder, [rid])
        levels = [c for (c,) in con.sql("SELECT concurrency FROM steps ORDER BY step_id").fetchall()]
        capacity = [(r["capacity"], r["first_fail"]) for r in analysis.run_query(con, "capacity").to_pylist()]
        return levels, capacity
    levels, capacity = probes(results, run_id)
    assert capacity == [(3, 4)]
    search, true_path = load_experiment(config).load.search, []
    while probe := next_probe(search, {c: Verdict(c <= 3, True, 1) for c in true_path}):
        true_path.append(probe.level)
    # the true path of levels; a level may run once more, where its call was too close to the threshold (at
    # C = K + 1 the attainment lies near it)
    assert list(dict.fromkeys(levels)) == true_path, (levels, true_path)
    assert _raw_requests(results, run_id) >= len(levels)
