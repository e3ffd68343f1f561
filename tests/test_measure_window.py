"""A closed-loop window stays open until C requests were sent in it, and phases follow the window exactly."""

from __future__ import annotations

from pathlib import Path

from loadgen import analysis
from loadgen.config import parse_experiment
from loadgen.runner import run_experiment


def test_window_extends_until_c_requests_were_sent_in_it(ray_local, emulator_factory, tmp_path):
    with emulator_factory("--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4") as url:
        exp = parse_experiment({
            # requests take ~2-3 s; a 0.5 s window would hold none of them without the extension
            "load": {"concurrency": [3], "warmup_s": 0.3, "measure_s": 0.5, "max_measure_s": 20.0, "drain_timeout_s": 30.0},
            "prompts": {"max_new_tokens": 48, "ignore_eos": True},
            "targets": [{"name": "mtp", "url": url}]}, Path("."))
        outcome = run_experiment(exp, str(tmp_path), log=lambda *a: None)
    assert outcome.status == "complete", outcome.reason
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    (ms, me), = con.execute("SELECT t_measure_start_ns, t_measure_end_ns FROM steps").fetchall()
    assert me - ms > 0.5e9
    rows = con.execute("SELECT phase, t_scheduled_ns, status FROM requests").fetchall()
    measured = [r for r in rows if r[0] == "measure"]
    assert len(measured) >= 3 and all(r[2] == "ok" for r in measured)
    for phase, t, _ in rows:
        expected = "warmup" if t < ms else "measure" if t < me else "drain"
        assert phase == expected, (phase, t, ms, me)
    accept = analysis.run_query(con, "acceptance_by_concurrency").to_pylist()
    assert accept[0]["accept_len"] is not None and accept[0]["ok_requests"] >= 3
