"""GPU telemetry queries on hand-built results (tests/sqlfixtures.py): gpu_by_step, energy, hardware and the
hardware rows of confounders, each checked against figures worked out by hand; and a folder whose runs predate
gpu_samples still opens and queries."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadgen.results import analysis, answer, gpu_answer
from sqlfixtures import Results, gpu_step, hardware, window_tokens


def query(root: Path, name: str, **params) -> list[dict]:
    return analysis.run_query(analysis.open_results(root), name, params).to_pylist()


def test_gpu_by_step_clock_power_throttling_and_energy_over_the_window(tmp_path):
    r = Results()
    r.run("r")
    # 5 samples in the window; the one at 3 s has the idle bit (left out of the clock median) and power brake
    gpu_step(r, "r", 0, "a", "n1", [2400, 2300, 2405, 2000, 2405], reasons=0, joules_per_s=80.0)
    r.rows["gpu_samples"][3]["clock_reasons_mask"] = 1 | 0x80
    row = query(r.write(tmp_path), "gpu_by_step")[0]
    assert row["samples"] == 5
    assert row["sm_clock_median_mhz"] == 2350   # median of 2400, 2300, 2000, 2405 (the idle sample left out)
    assert row["clock_pct_of_max"] == pytest.approx(100 * 2350 / 2405, abs=0.05)
    assert (row["power_p50_w"], row["power_max_w"]) == (100.0, 100.0)
    assert row["idle_pct"] == 20.0 and row["hw_power_brake_pct"] == 20.0 and row["throttled_pct"] == 20.0
    assert row["sw_power_cap_pct"] == 0.0
    assert row["temperature_max_c"] == 55.0
    # the counter grows 80 J/s: 4 s of window = 320 J, interpolated at both ends
    assert (row["energy_j"], row["energy_method"]) == (320.0, "counter")


def test_energy_without_a_counter_is_median_power_times_the_window(tmp_path):
    r = Results()
    r.run("r")
    gpu_step(r, "r", 0, "a", "n1", [2400] * 5, power=60.0)
    for s in r.rows["gpu_samples"]:
        s["energy_j"] = None
    row = query(r.write(tmp_path), "gpu_by_step")[0]
    assert (row["energy_j"], row["energy_method"]) == (240.0, "power")


def test_energy_tokens_per_joule_and_the_ratio_to_the_baseline(tmp_path):
    r = Results()
    r.run("r")
    for step, conc in ((0, 1), (1, 8)):
        gpu_step(r, "r", step, "mtp", "n1", [2400] * 5, joules_per_s=50.0, concurrency=conc, target_index=0,
                 algorithm="NEXTN")
        gpu_step(r, "r", step, "dflash2", "n2", [2400] * 5, joules_per_s=100.0, concurrency=conc, target_index=1,
                 algorithm="DFLASH")
        window_tokens(r, "r", step, "mtp", 10, 20)        # 200 tokens in 4 s at 50 J/s: 200 J -> 1.0 token/J
        window_tokens(r, "r", step, "dflash2", 30, 20)    # 600 tokens, 400 J -> 1.5 token/J
    rows = {(x["target"], x["concurrency"]): x for x in query(r.write(tmp_path), "energy")}
    mtp, dflash = rows[("mtp", 1)], rows[("dflash2", 1)]
    assert (mtp["tok_per_j"], mtp["energy_j"], mtp["j_per_request"]) == (1.0, 200.0, 200.0)
    assert mtp["tok_per_j_ratio"] is None
    assert (dflash["tok_per_j"], dflash["baseline_tok_per_j"], dflash["tok_per_j_ratio"]) == (1.5, 1.0, 1.5)
    assert dflash["tok_per_j_change_pct"] == 50.0
    con = analysis.open_results(tmp_path)
    assert "dflash2/mtp tokens per joule: C=1 1.50x, C=8 1.50x" in answer.answer_text(
        con, str(tmp_path), "r")


def fleet(tmp_path: Path, slow: dict[str, float], reasons: int = 0, **gpu) -> Path:
    """Three nodes, each one target; `slow` gives a node's clock under load, `reasons` its mask."""
    r = Results()
    r.run("f", slo=json.dumps({"ttft_ms": 1000}))
    for i, node in enumerate(("spark1", "spark2", "spark3")):
        clock = slow.get(node, 2405.0)
        extra = {"hardware": hardware(**gpu)} if node == "spark2" and gpu else {}
        gpu_step(r, "f", 0, f"{node}.mtp", node, [clock] * 5, reasons=reasons if node in slow else 0,
                 target_index=i, **extra)
    return r.write(tmp_path)


def hardware_rows(root: Path, **params) -> list[dict]:
    return [x for x in query(root, "confounders", **params) if x["note"]]


def test_a_node_whose_clock_is_over_10_pct_below_its_peers_is_named_with_its_throttle_reason(tmp_path):
    root = fleet(tmp_path, {"spark2": 780.0}, reasons=0x4)
    rows = hardware_rows(root)
    assert [(x["node"], x["setting"]) for x in rows] == [("spark2", "gpu.sm_clock_median_mhz")]
    assert rows[0]["note"] == ("spark2 ran at 780 MHz median vs 2,405 on its peers spark1, spark3 (software power "
                               "cap 100% of the window): its numbers are not comparable")
    assert (rows[0]["value"], rows[0]["baseline_value"], rows[0]["target"]) == ("780", "2405", "spark2.mtp")
    assert gpu_answer.hardware_lines(analysis.open_results(root)) == [rows[0]["note"]]


def test_a_capacity_search_on_a_throttled_node_says_so_next_to_its_answer(tmp_path):
    root = fleet(tmp_path, {"spark2": 780.0}, reasons=0x4)
    notes = {x["target"]: x["note"] for x in query(root, "capacity")}
    assert "spark2 ran at 780 MHz median" in notes["spark2.mtp"]
    assert "ran at" not in notes["spark1.mtp"] and "ran at" not in notes["spark3.mtp"]


def test_a_clock_9_pct_below_is_not_named_and_the_limit_is_a_parameter(tmp_path):
    root = fleet(tmp_path, {"spark2": 2190.0})   # 8.9% below 2,405
    assert hardware_rows(root) == []
    assert [x["node"] for x in hardware_rows(root, clock_drop_pct=5)] == ["spark2"]


def test_a_throttled_window_is_named_even_at_full_clock(tmp_path):
    r = Results()
    r.run("t")
    gpu_step(r, "t", 0, "a", "n1", [2405] * 5, concurrency=4)
    gpu_step(r, "t", 0, "b", "n1", [2405] * 5, target_index=1)
    for s in r.rows["gpu_samples"]:   # target a: thermal slowdown in 1 of its 5 window samples (20%)
        if s["target"] == "a" and s["t_ns"] == r.rows["gpu_samples"][2]["t_ns"]:
            s["clock_reasons_mask"] = 0x20
    rows = hardware_rows(r.write(tmp_path))
    assert [(x["node"], x["setting"], x["value"]) for x in rows] == [("a", "gpu.throttled_pct", "20.0")]
    assert rows[0]["note"] == ("a was throttled 20% of a window (software thermal slowdown, at C=4): its numbers "
                               "are not comparable")


def test_a_node_with_another_driver_is_named(tmp_path):
    root = fleet(tmp_path, {}, driver_version="575.57.08")
    rows = hardware_rows(root)
    assert [(x["node"], x["setting"], x["value"], x["baseline_value"]) for x in rows] == [
        ("spark2", "gpu.driver", "575.57.08", "580.95.05")]
    assert rows[0]["note"] == "spark2 has driver 575.57.08 vs 580.95.05 on the others: its numbers are not comparable"
    hw = {x["node"]: x for x in query(root, "hardware")}
    assert (hw["spark1"]["gpu_name"], hw["spark1"]["cuda_version"], hw["spark2"]["driver_version"]) == (
        "NVIDIA GB10", "13.0", "575.57.08")


def test_results_that_predate_gpu_samples_still_query(tmp_path):
    """Schema 5 folders have no gpu_samples/ and no steps.hardware: every GPU query is empty, nothing fails."""
    r = Results()
    r.run("old")
    r.step("old", 0, "a")
    r.step("old", 0, "b", target_index=1)
    root = r.write(tmp_path)
    for path in (root / "gpu_samples").rglob("*.parquet"):
        path.unlink()
    steps = next((root / "steps").rglob("*.parquet"))
    pq.write_table(pq.read_table(steps).drop_columns(["hardware"]), steps)
    for name in ("gpu_by_step", "energy", "hardware"):
        assert query(root, name) == []
    assert hardware_rows(root) == []
    assert query(root, "compare_algorithms")   # the rest of the folder reads as before


def test_a_violation_counter_that_outgrows_its_samples_span_is_all_of_the_window_not_more(tmp_path):
    """A counter read a little after its sample's timestamp can grow more than the samples' span (seen under load:
    "software power cap 101% of the window"); the share is at most 100%."""
    r = Results()
    r.run("v")
    gpu_step(r, "v", 0, "a", "n1", [800] * 5)
    inside = r.rows["gpu_samples"][1:-1]             # the window's samples, 1 s .. 5 s (4 s apart end to end)
    for i, s in enumerate(inside):
        s["power_violation_s"] = 1.05 * i            # 4.2 s of violation over a 4 s span
    con = analysis.open_results(r.write(tmp_path))
    [(pct,)] = con.execute("SELECT power_violation_pct FROM gpu_window").fetchall()
    assert pct == 100.0
