"""Trace replay, ramps and counted warm-up on a real local Ray against emulators, checked against what each
emulator was sent (GET /emulator/requests: every request's rid, max_new_tokens, and `t_arrived_ns`, when its head
arrived). Timing bounds here are loose enough to hold on a loaded machine; the tight figures are measured by
tests/benchmarks/bench_trace_replay.py."""

from __future__ import annotations

import json
import math
import statistics
import urllib.request
from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.config.ramp_profile import build
from loadgen.driver.runner import run_experiment
from loadgen.prompts.traces import read_trace
from loadgen.results import analysis

REPO = Path(__file__).parents[2]
EXCERPT = REPO / "jobs/experiments/traces/azure-llm-conv-2023-excerpt.csv"
EMU = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
# Send-time error bounds that hold on a loaded machine (2 cores at load average 25-67 here, where the tail is the
# machine's: bench_trace_replay.py). A wrong schedule (an offset, the speedup not applied, rows sent together)
# moves the median by far more.
MEDIAN_MS, P90_MS = 10.0, 100.0


def _truth(url: str) -> dict[str, dict]:
    """The load's requests the emulator was sent (the input-length calibration's left out), by rid."""
    with urllib.request.urlopen(f"{url}/emulator/requests") as resp:
        return {r["rid"]: r for r in json.load(resp)["requests"]
                if r["rid"] and not r["rid"].startswith("calibrate-")}


def _run(exp: dict, results: Path) -> tuple:
    outcome = run_experiment(parse_experiment(exp, REPO), str(results), log=lambda *a: None)
    assert outcome.status == "complete", outcome.reason
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    return outcome, con


def _rows(con, sql: str) -> list[dict]:
    return con.sql(sql).to_arrow_table().to_pylist()


# ---- trace replay: the shipped Azure excerpt at 20x, a seeded third of its rows (~100 in 4 s), two workers, a
# zero-cost emulator that streams every 4th token (an emulator busy streaming stamps arrivals late)
SPEEDUP, SAMPLE = 20.0, 0.33


@pytest.fixture(scope="module")
def trace_run(ray_local, emulator_factory, tmp_path_factory):
    with emulator_factory(*EMU, "--hardware", "zero", "--stream-interval", "4") as url:
        exp = {"run": {"name": "trace"},
               "load": {"mode": "trace", "workers_per_target": 2, "drain_timeout_s": 60.0,
                        "trace": {"path": str(EXCERPT), "speedup": SPEEDUP, "sample": SAMPLE, "seed": 1}},
               "prompts": {"seed": 2},
               "targets": [{"name": "emu", "url": url}]}
        outcome, con = _run(exp, tmp_path_factory.mktemp("results"))
        yield con, _truth(url)


def _replayed() -> list:
    """The rows the replay sends: the excerpt's, thinned as the experiment asks (seeded), times from the first."""
    return list(read_trace(EXCERPT, None, "k").select(0.0, None, SAMPLE, 1).rows)


def test_every_row_is_sent_once_at_its_scaled_time(trace_run):
    con, truth = trace_run
    rows = _replayed()
    assert 80 <= len(rows) <= 120
    [step] = _rows(con, "SELECT * FROM steps")
    assert (step["mode"], step["speedup"], step["concurrency"]) == ("trace", SPEEDUP, None)
    assert step["rate"] == pytest.approx(len(rows) * SPEEDUP / rows[-1].t_s, rel=5e-4)
    sent = {r["prompt_id"]: r for r in _rows(con, "SELECT * FROM requests")}
    assert sorted(sent) == sorted(f"azure-llm-conv-2023-excerpt#{r.index}" for r in rows)
    for row in rows:
        r = sent[f"azure-llm-conv-2023-excerpt#{row.index}"]
        assert abs(r["t_scheduled_ns"] - step["t_start_ns"] - row.t_s / SPEEDUP * 1e9) <= 1   # the plan, to the ns
        assert (r["phase"], r["status"]) == ("measure", "ok")
    assert step["t_measure_end_ns"] > max(r["t_scheduled_ns"] for r in sent.values())      # the last row measured
    assert {r["request_id"] for r in sent.values()} == set(truth)                         # the server saw each once


def test_send_times_are_the_traces_within_a_loose_bound(trace_run):
    """The client's own lateness (t_sent - t_scheduled) and the server's: when each request's head reached the
    emulator, against its planned time (both wall clocks of this host)."""
    con, truth = trace_run
    sent = _rows(con, "SELECT request_id, t_scheduled_ns, t_sent_ns FROM requests")
    client = sorted((r["t_sent_ns"] - r["t_scheduled_ns"]) / 1e6 for r in sent)
    server = sorted((truth[r["request_id"]]["t_arrived_ns"] - r["t_scheduled_ns"]) / 1e6 for r in sent)
    for late in (client, server):
        assert late[0] >= -1.0                                     # never early (1 ms: two processes' clocks)
        assert statistics.median(late) <= MEDIAN_MS and late[int(0.9 * len(late))] <= P90_MS
    [lateness] = analysis.run_query(con, "arrival_lateness").to_pylist()
    assert lateness["measured"] == len(sent) and lateness["lateness_p50_ms"] == pytest.approx(
        statistics.median(client), abs=1e-3)


def test_each_row_gets_its_lengths_in_the_servers_count(trace_run):
    con, truth = trace_run
    rows = {f"azure-llm-conv-2023-excerpt#{r.index}": r for r in _replayed()}
    for r in _rows(con, "SELECT * FROM requests"):
        row, seen = rows[r["prompt_id"]], truth[r["request_id"]]
        assert seen["max_new_tokens"] == row.output_tokens == r["completion_tokens_target"]
        assert r["completion_tokens"] == row.output_tokens                     # ignore_eos: all of it
        assert r["prompt_tokens_target"] == row.input_tokens
        if row.input_tokens >= 50:   # the emulator counts ceil(characters / 4); tiny rows round a lot
            assert seen["prompt_tokens"] == pytest.approx(row.input_tokens, rel=0.1)
    [check] = [c for c in analysis.run_query(con, "workload_check").to_pylist() if c["prompt_kind"] == "(all)"]
    assert check["output_tokens_asked"] == check["output_tokens_actual"] and check["early_stops"] == 0


# ---- a rate ramp: constant arrivals, 2/s held, a linear ramp to 12/s, 12/s held; zero-cost emulator
RAMP = {"mode": "open", "rates": [2, 12], "arrival": "constant", "ramp": "linear", "ramp_s": 3.0, "hold_s": 1.5,
        "warmup_s": 1.1, "workers_per_target": 2, "drain_timeout_s": 30.0}


@pytest.fixture(scope="module")
def ramp_run(ray_local, emulator_factory, tmp_path_factory):
    with emulator_factory(*EMU, "--hardware", "zero") as url:
        exp = {"run": {"name": "ramp"}, "load": RAMP, "prompts": {"seed": 3, "max_new_tokens": 16},
               "targets": [{"name": "emu", "url": url}]}
        outcome, con = _run(exp, tmp_path_factory.mktemp("results"))
        yield con, _truth(url)


def test_each_ramp_window_is_a_steps_row_with_the_rate_the_server_saw(ramp_run):
    con, truth = ramp_run
    profile = build([2, 12], "linear", 3.0, 1.5, 1.1)
    steps = _rows(con, "SELECT * FROM steps ORDER BY step_id")
    assert [(s["step_id"], s["ramp"], s["level_start"], s["level_end"]) for s in steps] == [
        (0, "hold", 2, 2), (1, "linear", 2, 12), (2, "hold", 12, 12)]
    arrived = sorted(r["t_arrived_ns"] for r in truth.values())
    for s, (start, end, _) in zip(steps, profile.windows()):
        assert s["rate"] == pytest.approx(profile.mean(start, end)) and s["concurrency"] is None
        assert (s["t_measure_end_ns"] - s["t_measure_start_ns"]) / 1e9 == pytest.approx(end - start, abs=1e-6)
        # constant arrivals: the window holds the rate's integral over it (no edge falls on a whole arrival)
        expected = math.floor(profile.mean(0, end) * end) - math.floor(profile.mean(0, start) * start)
        measured = _rows(con, f"SELECT count(*) AS n FROM requests WHERE step_id = {s['step_id']} "
                              "AND phase = 'measure'")[0]["n"]
        seen = sum(s["t_measure_start_ns"] <= t < s["t_measure_end_ns"] for t in arrived)
        assert measured == expected and abs(seen - expected) <= 1    # the server's count: a late arrival may cross
    # every frame is filed under the window it arrived in, whichever its request was sent in
    misfiled = _rows(con, """SELECT count(*) AS n FROM frames f JOIN steps s ON s.step_id = f.step_id
                             WHERE (f.t_ns < s.t_measure_start_ns AND s.step_id > 0)
                                OR (f.t_ns >= s.t_measure_end_ns AND s.step_id < 2)""")[0]["n"]
    assert misfiled == 0


# ---- a user ramp: 1 user held, a linear ramp to 4, 4 held; requests last ~0.4 s on the emulator
@pytest.fixture(scope="module")
def users_run(ray_local, emulator_factory, tmp_path_factory):
    with emulator_factory(*EMU, "--time-scale", "5") as url:
        exp = {"run": {"name": "users"},
               "load": {"concurrency": [1, 4], "ramp": "linear", "ramp_s": 3.0, "hold_s": 1.5, "warmup_s": 1.0,
                        "workers_per_target": 2, "drain_timeout_s": 30.0},
               "prompts": {"seed": 4, "max_new_tokens": 16, "ignore_eos": True},
               "targets": [{"name": "emu", "url": url}]}
        outcome, con = _run(exp, tmp_path_factory.mktemp("results"))
        yield con, _truth(url)


def test_users_in_flight_at_the_server_follow_the_ramp(users_run):
    """The emulator's own in-flight count (from each request's arrival to its end), averaged over each window,
    is the window's mean users (steps.concurrency)."""
    con, truth = users_run
    steps = _rows(con, "SELECT * FROM steps ORDER BY step_id")
    assert [(s["ramp"], s["concurrency"], s["level_start"], s["level_end"]) for s in steps] == [
        ("hold", 1, 1, 1), ("linear", 2, 1, 4), ("hold", 4, 4, 4)]
    spans = [(r["t_arrived_ns"], r["t_done_ns"]) for r in truth.values() if r["t_done_ns"]]
    for s in steps:
        a, b = s["t_measure_start_ns"], s["t_measure_end_ns"]
        busy = sum(max(min(end, b) - max(start, a), 0) for start, end in spans) / (b - a)
        assert busy == pytest.approx(s["concurrency"], abs=0.35)
    targets = _rows(con, "SELECT DISTINCT target_in_flight AS n FROM client_samples ORDER BY n")
    assert [r["n"] for r in targets] == [0, 1, 2]         # worker 0 runs users 0, 2; worker 1 users 1, 3


# ---- counted steps with warm-up: 4 warm-up requests, then 6 measured, over 2 workers at C = 2
def test_counted_warmup_sends_k_then_measures_n(ray_local, emulator_factory, tmp_path):
    with emulator_factory(*EMU, "--time-scale", "5") as url:
        exp = {"run": {"name": "warm"},
               "load": {"concurrency": [2], "requests": 6, "warmup_requests": 4, "workers_per_target": 2},
               "prompts": {"seed": 5, "max_new_tokens": 16, "ignore_eos": True},
               "targets": [{"name": "emu", "url": url}]}
        _, con = _run(exp, tmp_path)
        truth = _truth(url)
    sent = _rows(con, "SELECT * FROM requests ORDER BY t_sent_ns")
    assert sorted(r["phase"] for r in sent) == ["measure"] * 6 + ["warmup"] * 4
    assert {r["request_id"] for r in sent} == set(truth)
    assert all(r["status"] == "ok" for r in sent if r["phase"] == "measure")
    for worker in ("emu.w0", "emu.w1"):   # each worker's first two sends are its warm-up
        mine = [r["phase"] for r in sent if r["worker"] == worker]
        assert mine == ["warmup", "warmup", "measure", "measure", "measure"]
    [step] = _rows(con, "SELECT * FROM steps")
    firsts = [min(r["t_scheduled_ns"] for r in sent if r["worker"] == w and r["phase"] == "measure")
              for w in ("emu.w0", "emu.w1")]
    assert step["t_measure_start_ns"] == max(firsts)      # the window opens when every worker is past its warm-up
