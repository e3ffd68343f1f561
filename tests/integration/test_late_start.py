"""A step whose workers get their orders after its shared start instant (a driver's machine so busy that the
Ray call took longer than the start delay) would send every open-loop arrival of its first moments late. The
step is cut at once and run again under a new step id with twice the delay; the late attempt's rows stay in the
files but its ids go to runs.superseded_steps, so every view (and the search's judge) reads the rerun only."""

from __future__ import annotations

import duckdb

from loadgen.config import parse_experiment
from loadgen.driver import step as step_module
from loadgen.driver.runner import START_DELAY_S, run_experiment
from loadgen.results import analysis

LATE_S = 1.0   # the first attempt's orders arrive this long after its shared start


def test_a_late_step_is_run_again_and_only_the_rerun_is_read(ray_local, emulator_factory, tmp_path, monkeypatch):
    plan_times = step_module._plan_times
    delays: list[float] = []

    def late_first(load, step, delay_s):   # the first step's instant is set LATE_S in the past
        delays.append(delay_s)
        return plan_times(load, step, -LATE_S if len(delays) == 1 else delay_s)
    monkeypatch.setattr(step_module, "_plan_times", late_first)
    lines: list[str] = []
    with emulator_factory("--model-path", "m", "--time-scale", "50") as url:
        exp = parse_experiment({
            "run": {"name": "late"},
            "load": {"mode": "open", "rates": [4.0], "arrival": "constant", "warmup_s": 0.5, "measure_s": 2.0,
                     "drain_timeout_s": 30.0},
            "prompts": {"seed": 1, "max_new_tokens": 16},
            "targets": [{"name": "emu", "url": url}],
        }, tmp_path)
        outcome = run_experiment(exp, str(tmp_path), log=lines.append)
    assert outcome.status == "complete", outcome.reason
    assert delays == [START_DELAY_S, 2 * START_DELAY_S]
    assert any("step 1 started late" in line and "again as step 2" in line for line in lines), lines

    con = analysis.open_results(tmp_path, [outcome.run_id])
    assert con.execute("SELECT step_id, status FROM steps").fetchall() == [(1, "complete")]
    assert con.execute("SELECT superseded_steps FROM runs").fetchall() == [([0],)]
    # the files keep the late attempt, with its reason; no view reads its requests
    [(status, reason)] = duckdb.sql(f"SELECT status, status_reason FROM '{tmp_path}/steps/*/*.parquet' "
                                    "WHERE step_id = 0").fetchall()
    assert status == "incomplete" and "after the step's shared start: its sends began late" in reason, reason
    assert con.execute("SELECT DISTINCT step_id FROM requests").fetchall() == [(1,)]
    # the rerun sent on time: the planned and the real send agree within the client's ordinary lateness
    [(measured, worst_ms)] = con.execute(
        "SELECT count(*), max((t_sent_ns - t_scheduled_ns) / 1e6) FROM requests WHERE phase = 'measure'"
    ).fetchall()
    assert measured >= 6 and worst_ms < 1000 * LATE_S / 2, (measured, worst_ms)
