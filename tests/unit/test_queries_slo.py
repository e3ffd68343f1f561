"""goodput, capacity and pareto against hand-built results whose verdicts are worked out here by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

from loadgen.results.analysis import open_results, run_query
from loadgen.results.slo import Slo
from loadgen.results.slo_answer import capacity_lines
from sqlfixtures import Results


def query(root: Path, name: str, **params) -> list[dict]:
    return run_query(open_results(root), name, params).to_pylist()


def wilson(k: int, n: int) -> tuple[float, float]:
    z = 1.96
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def add_step(r: Results, step_id: int, level: int, ttfts: list[float], *, target: str = "t", statuses=None,
             tokens: int = 11, run: str = "r", **step) -> None:
    """A closed-loop step at C=level, window [1000, 2000) ms, one measured request per TTFT (ms), each with
    `tokens` tokens 10 ms apart after the first (TPOT 10 ms)."""
    r.step(run, step_id, target, concurrency=level, **step)
    for i, ttft in enumerate(ttfts):
        sent = 1100 + i
        frames = [(sent + ttft + 10 * k, 1) for k in range(tokens)]
        status = statuses[i] if statuses else "ok"
        r.request(run, step_id, target, f"{target}-{step_id}-{i}", sent_ms=sent, frames=frames, status=status)


def test_goodput_judges_each_measured_request_against_every_line(tmp_path):
    r = Results()
    r.run("r", slo=Slo(ttft_ms=100, tpot_ms=20, attainment=0.6, max_error_rate=0.2).to_json())
    # 10 measured: 6 meet the SLO, 2 are over the TTFT line, 1 failed (http_error), 1 cut at the step's end
    add_step(r, 1, 4, [50] * 6 + [150, 300, 50, 50],
             statuses=["ok"] * 8 + ["http_error", "cancelled"])
    r.request("r", 1, "t", "warm", sent_ms=500, frames=[(900, 5)], phase="warmup")   # not judged
    [row] = query(r.write(tmp_path), "goodput")
    assert (row["measured"], row["ok"], row["met"]) == (10, 8, 6)
    assert row["attainment"] == 0.6 and row["error_rate"] == 0.1
    low, high = wilson(6, 10)
    assert row["attainment_low"] == round(low, 4) and row["attainment_high"] == round(high, 4)
    assert row["worst_line"] == "ttft"
    assert row["verdict"] == "pass" and row["clear"] is False      # 0.6 is inside [0.31, 0.83]
    assert row["goodput_req_s"] == 6.0                              # 6 met in a 1 s window
    assert row["goodput_tok_s"] == 66.0                             # their 6 x 11 tokens


def test_an_old_run_is_judged_again_against_another_slo(tmp_path):
    r = Results()
    r.run("r", slo=Slo(ttft_ms=100, attainment=0.6).to_json())
    add_step(r, 1, 4, [50] * 6 + [150] * 4)
    root = r.write(tmp_path)
    assert query(root, "goodput")[0]["verdict"] == "pass"
    [tighter] = query(root, "goodput", slo_ttft_ms=40)
    assert tighter["met"] == 0 and tighter["verdict"] == "fail" and tighter["clear"] is True
    [tpot] = query(root, "goodput", slo_tpot_ms=5)        # TPOT is 10 ms: every ok request misses it
    assert tpot["worst_line"] == "tpot" and tpot["met"] == 0
    [errors] = query(root, "goodput", slo_attainment=0.5, slo_max_error_rate=0.0)
    assert errors["verdict"] == "pass"


def test_without_an_slo_there_is_no_verdict(tmp_path):
    r = Results()
    r.run("r")
    add_step(r, 1, 4, [50, 60])
    [row] = query(r.write(tmp_path), "goodput")
    assert row["verdict"] is None and row["met"] == 2
    assert query(r.write(tmp_path), "capacity") == []


def _search_run(tmp_path: Path) -> Path:
    """A search's probes at 1, 2, 4, 8, 6 (twice: unclear), 5; the SLO passes up to 5, attainment 0.5."""
    r = Results()
    r.run("r", slo=Slo(ttft_ms=100, attainment=0.5).to_json())
    ok, bad = [50.0] * 12, [500.0] * 12
    levels = [(1, ok), (2, ok), (4, ok), (8, bad), (6, [50.0] * 4 + [500.0] * 3),  # 4/7: pass, unclear
              (6, [50.0] * 2 + [500.0] * 5),                                       # pooled 6/14: fail, unclear
              (5, ok)]
    for step_id, (level, ttfts) in enumerate(levels):
        add_step(r, step_id, level, ttfts, probe=f"probe {step_id}", window_ms=(1000, 2000))
    return r.write(tmp_path)


def test_capacity_is_the_highest_pass_below_the_first_fail_with_its_interval(tmp_path):
    root = _search_run(tmp_path)
    [row] = query(root, "capacity")
    assert (row["capacity"], row["capacity_low"], row["capacity_high"], row["first_fail"]) == (5, 5, 6, 6)
    assert row["levels_probed"] == 6 and row["steps"] == 7
    assert row["step_s"] == 7 * 3.0                          # each step: start to end 3 s (fixture)
    assert row["note"] == "unclear at 6 (decided on the point estimate)"
    assert row["user_tok_s"] == 100.0                         # TPOT 10 ms at the capacity level
    level6 = [g for g in query(root, "goodput") if g["concurrency"] == 6]
    assert [g["probe"] for g in level6] == ["probe 4", "probe 5"]


def test_capacity_when_nothing_fails_and_when_everything_fails(tmp_path):
    r = Results()
    r.run("r", slo=Slo(ttft_ms=100, attainment=0.5).to_json())
    for step_id, level in enumerate([1, 2, 4]):
        add_step(r, step_id, level, [50.0] * 12, target="fast")
        add_step(r, 10 + step_id, level, [500.0] * 12, target="slow")
    rows = {x["target"]: x for x in query(r.write(tmp_path), "capacity")}
    assert (rows["fast"]["capacity"], rows["fast"]["capacity_high"]) == (4, None)
    assert rows["fast"]["note"] == "no level failed: the capacity is at least 4"
    assert rows["slow"]["capacity"] is None and rows["slow"]["first_fail"] == 1
    assert rows["slow"]["note"] == "every level failed: the capacity is below 1"


def test_fleet_capacity_at_the_slo_sums_the_nodes(tmp_path):
    r = Results()
    r.run("r", slo=Slo(ttft_ms=100, attainment=0.5).to_json())
    for node, capacity in (("n1", 2), ("n2", 4)):
        for step_id, level in enumerate([1, 2, 4, 8]):
            ttfts = [50.0] * 12 if level <= capacity else [500.0] * 12
            add_step(r, step_id, level, ttfts, target=f"{node}.mtp", node=node)
    rows = {(x["target"], x["node"]): x for x in query(r.write(tmp_path), "capacity")}
    assert rows[("n1.mtp", "n1")]["capacity"] == 2 and rows[("n2.mtp", "n2")]["capacity"] == 4
    fleet = rows[("mtp", "(fleet)")]
    assert (fleet["capacity"], fleet["capacity_low"], fleet["capacity_high"]) == (6, 6, 6)
    assert fleet["note"] == "2 nodes"
    lines = capacity_lines(open_results(tmp_path))
    assert lines[0] == ("at TTFT <= 100 ms for 50% of requests: n1.mtp 2 users, n2.mtp 4 users: "
                        "n2.mtp serves 100% more than n1.mtp")
    assert lines[-1] == "  fleet mtp: 6 users over 2 nodes"


def test_the_answer_in_words_gives_each_capacity_its_interval_and_says_when_it_is_not_clear(tmp_path):
    lines = capacity_lines(open_results(_search_run(tmp_path)))
    assert lines[0] == "at TTFT <= 100 ms for 50% of requests: t 5 users (5-6)"
    assert lines[1].startswith("  t: at 5 users: ") and "unclear at 6 (decided on the point estimate)" in lines[1]


def test_pareto_marks_the_frontier_of_user_speed_and_throughput(tmp_path):
    r = Results()
    r.run("r")
    # C=1: 1 request, 100 tok/s for its user; C=2: 2 requests, C=4: 4 requests, all at TPOT 10 ms
    # (100 tok/s per user), C=8: slower users (TPOT 20 ms) and fewer tokens in the window: dominated
    for step_id, (level, n, gap) in enumerate([(1, 1, 10), (2, 2, 10), (4, 4, 10), (8, 3, 20)]):
        r.step("r", step_id, "t", concurrency=level)
        for i in range(n):
            frames = [(1100 + gap * k, 1) for k in range(11)]
            r.request("r", step_id, "t", f"{step_id}-{i}", sent_ms=1050, frames=frames)
    rows = {x["concurrency"]: x for x in query(r.write(tmp_path), "pareto")}
    assert rows[4]["tok_s"] == 44.0 and rows[4]["user_tok_s"] == 100.0
    assert rows[8]["user_tok_s"] == 50.0
    assert {c for c, x in rows.items() if x["on_series_frontier"]} == {4}   # 4 is as fast per user, and more
    assert all(x["verdict"] is None for x in rows.values())


def test_runs_saved_before_schema_3_still_query(tmp_path):
    """Results of an older loadgen have no runs.slo nor steps.probe: every query still runs, without verdicts."""
    import pyarrow.parquet as pq
    root = _search_run(tmp_path)
    for table, column in (("runs", "slo"), ("steps", "probe")):
        path = root / table / "run_id=r" / "part-0-0.parquet"
        pq.write_table(pq.read_table(path).drop_columns([column]), path)
    assert {g["verdict"] for g in query(root, "goodput")} == {None}
    assert query(root, "goodput", slo_ttft_ms=100, slo_attainment=0.5)[0]["verdict"] == "pass"
    assert json.loads(json.dumps(query(root, "capacity", slo_ttft_ms=100, slo_attainment=0.5)[0]["capacity"])) == 5
