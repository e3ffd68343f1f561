"""The vertical slice on a real local Ray against two emulators: SQL recovers the emulator's ground truth."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis

LEVELS = [1, 4]


def _experiment(mtp_url: str, dflash_url: str) -> dict:
    return {
        "run": {"name": "e2e"},
        "load": {"concurrency": LEVELS, "warmup_s": 0.5, "measure_s": 3.0, "drain_timeout_s": 20.0,
                 "workers_per_target": 2},
        "prompts": {"seed": 3, "max_new_tokens": 24},
        "targets": [{"name": "mtp", "url": mtp_url}, {"name": "dflash2", "url": dflash_url}],
    }


def _truth(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/emulator/requests") as resp:
        return json.load(resp)["requests"]


@pytest.fixture(scope="module")
def finished_run(ray_local, emulator_factory, tmp_path_factory):
    draft = Path(__file__).parents[2] / "loadgen/emulator/drafts/dflash2"
    with emulator_factory("--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4") as mtp, \
         emulator_factory("--model-path", "m", "--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens",
                          "8", "--speculative-draft-model-path", str(draft)) as dflash:
        exp = parse_experiment(_experiment(mtp, dflash), Path("."))
        results = tmp_path_factory.mktemp("results")
        outcome = run_experiment(exp, str(results), log=lambda *a: None)
        yield outcome, {"mtp": _truth(mtp), "dflash2": _truth(dflash)}


def _query(outcome, sql: str) -> list[tuple]:
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    return con.execute(sql).fetchall()


def test_run_completes(finished_run):
    outcome, _ = finished_run
    assert outcome.status == "complete", outcome.reason


def test_one_requests_row_per_request_the_server_saw(finished_run):
    outcome, truth = finished_run
    for target, seen in truth.items():
        rows = dict(_query(outcome, f"SELECT request_id, status FROM requests WHERE target = '{target}'"))
        assert len(rows) == len(_query(outcome, f"SELECT * FROM requests WHERE target = '{target}'"))
        server_rids = [t["rid"] for t in seen]
        assert len(set(server_rids)) == len(server_rids)
        assert set(server_rids) <= set(rows), [t for t in seen if t["rid"] not in rows]
        # the only requests the server never saw are drain requests cut while connecting
        assert {rows[r] for r in set(rows) - set(server_rids)} <= {"cancelled"}


def test_acceptance_per_concurrency_equals_ground_truth(finished_run):
    outcome, truth = finished_run
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    table = analysis.run_query(con, "acceptance_by_concurrency").to_pylist()
    measured = {(r[0], r[1]): r[2] for r in con.execute(
        "SELECT server_request_id, target, concurrency FROM requests JOIN steps USING (run_id, step_id, target) "
        "WHERE phase = 'measure' AND requests.status = 'ok'").fetchall()}
    for row in table:
        seen = [t for t in truth[row["target"]] if measured.get((t["id"], row["target"])) == row["concurrency"]]
        assert seen, row
        expected = sum(t["completion_tokens"] for t in seen) / sum(t["spec_verify_ct"] for t in seen)
        # the query rounds to 3 places: a tie (x.xxx5) is off by 5e-4 plus float error
        assert row["accept_len"] == pytest.approx(expected, abs=5e-4 + 1e-9)
    assert {(r["target"], r["concurrency"]) for r in table} == {(t, c) for t in truth for c in LEVELS}


def test_frame_deltas_sum_to_completion_tokens(finished_run):
    outcome, _ = finished_run
    bad = _query(outcome, """
        SELECT r.request_id, r.completion_tokens, sum(f.tokens)
        FROM requests r JOIN frames f USING (run_id, request_id)
        WHERE r.status = 'ok' GROUP BY ALL HAVING sum(f.tokens) != r.completion_tokens""")
    assert bad == []
    assert _query(outcome, "SELECT count(*) FROM requests WHERE status = 'ok'")[0][0] > 10


def test_in_flight_equals_concurrency_during_the_window(finished_run):
    outcome, _ = finished_run
    rows = _query(outcome, """
        SELECT c.in_flight, c.target_in_flight
        FROM client_samples c JOIN (SELECT DISTINCT run_id, step_id, t_measure_start_ns, t_measure_end_ns FROM steps) s
          USING (run_id, step_id)
        WHERE c.t_ns BETWEEN s.t_measure_start_ns AND s.t_measure_end_ns""")
    assert len(rows) >= 10
    assert all(in_flight == target for in_flight, target in rows)
