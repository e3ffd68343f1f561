"""Every sentence of the answer true: an A/A run's exact tie reads as a tie, a difference under the noise is not a
crossover, a fleet's answer names the node off the fleet first, and every line fits 120 columns."""

from __future__ import annotations

from test_queries_compare import add_series

from loadgen.results import answer
from loadgen.results.analysis import open_results, run_query
from sqlfixtures import Results


def _pair(tmp_path, base: dict[int, list[float]], other: dict[int, list[float]]):
    r = Results()
    r.run("aa")
    add_series(r, "aa", "box-a", 0, "NEXTN", base)
    add_series(r, "aa", "box-b", 1, "NEXTN", other)
    return r.write(tmp_path)


def test_an_exact_tie_reads_as_no_difference_once(tmp_path):
    same = {2: [40.0], 3: [55.0], 4: [70.0]}
    folder = _pair(tmp_path, same, same)
    con = open_results(folder)
    [c] = answer.comparisons(con)
    assert [lv.change_pct for lv in c.levels] == [0.0, 0.0, 0.0]
    assert c.headline == ("no difference at C=2..4; noise: unknown, 1 repeat (set load.repeats = 2 or more "
                          "to see the spread)")
    text = answer.answer_text(con, str(folder), "aa")
    assert text.count("box-b vs box-a: ") == 1 and "  box-b vs box-a: no difference at C=2..4; noise" in text


def test_a_small_difference_of_unknown_noise_is_too_close_to_call_not_a_crossover(tmp_path):
    # box-b: +0.5% at C=1, -0.5% at C=8, +10% at C=16 (one repeat each; tok/s from 10 s windows, exact)
    folder = _pair(tmp_path, {1: [100.0], 8: [200.0], 16: [300.0]}, {1: [100.5], 8: [199.0], 16: [330.0]})
    [c] = answer.comparisons(open_results(folder))
    assert [lv.change_pct for lv in c.levels] == [0.5, -0.5, 10.0]
    assert c.headline == ("box-b ahead at C=16 (+10%), too close to call at C=1..8 (within 0.5%); noise: unknown, "
                          "1 repeat (set load.repeats = 2 or more to see the spread)")
    assert "crossover" not in c.headline


def test_a_lead_that_changes_beyond_the_close_band_is_still_a_crossover(tmp_path):
    folder = _pair(tmp_path, {1: [100.0], 8: [200.0], 16: [300.0]}, {1: [120.0], 8: [201.0], 16: [270.0]})
    [c] = answer.comparisons(open_results(folder))
    assert c.headline.startswith("box-b ahead up to C=1 (+20%), box-a ahead from C=16 (-10%), too close to call at "
                                 "C=8 (within 0.5%); crossover between 1 and 16; noise: unknown")


def test_a_fleet_answer_names_the_node_off_the_fleet_first(tmp_path):
    r = Results()
    r.run("fleet")
    tok_s = {"spark1": 100.0, "spark2": 100.6, "spark3": 77.0, "spark4": 99.5}   # spark3 -23% off the median
    for i, (node, value) in enumerate(tok_s.items()):
        add_series(r, "fleet", f"{node}.mtp", i, "NEXTN", {8: [value], 16: [2 * value]})
    for step in r.rows["steps"]:
        step["node"] = step["target"].split(".")[0]
    folder = r.write(tmp_path)
    con = open_results(folder)
    flagged = [(x["node"], x["concurrency"], x["tok_s_vs_fleet_pct"])
               for x in run_query(con, "fleet_nodes").to_pylist() if x["outlier"]]
    assert flagged == [("spark3", 8, -22.8), ("spark3", 16, -22.8)]   # 77 / median(100, 100.6, 77, 99.5) - 1
    lines = answer.answer_text(con, str(folder), "fleet").splitlines()
    assert lines[1] == "answer:"
    assert lines[2] == "  spark3 is off the fleet (mtp): tok/s -23% vs the fleet median of 4 nodes at C=8, C=16"
    spark2 = next(line for line in lines if line.startswith("  spark2.mtp vs spark1.mtp: "))
    assert "too close to call at C=8..16 (within 0.6%)" in spark2 and "crossover" not in spark2


def test_of_two_nodes_off_the_fleet_the_farthest_is_named_first(tmp_path):
    r = Results()
    r.run("fleet")
    tok_s = {"spark1": 120.0, "spark2": 100.0, "spark3": 60.0, "spark4": 100.0, "spark5": 101.0}   # +20%, -40%
    for i, (node, value) in enumerate(tok_s.items()):
        add_series(r, "fleet", f"{node}.mtp", i, "NEXTN", {8: [value]})
    for step in r.rows["steps"]:
        step["node"] = step["target"].split(".")[0]
    folder = r.write(tmp_path)
    lines = answer.answer_text(open_results(folder), str(folder), "fleet").splitlines()
    assert lines[2] == "  spark3 is off the fleet (mtp): tok/s -40% vs the fleet median of 5 nodes at C=8"
    assert lines[3] == "  spark1 is off the fleet (mtp): tok/s +20% vs the fleet median of 5 nodes at C=8"


def test_every_line_fits_120_columns_with_long_names(tmp_path):
    r = Results()
    r.run("wide")
    long_a, long_b = "a-very-long-target-name-for-the-baseline", "another-very-long-target-name-for-the-other"
    add_series(r, "wide", long_a, 0, "NEXTN", {1: [10.0], 2: [20.0], 4: [40.0], 8: [80.0], 16: [160.0]})
    add_series(r, "wide", long_b, 1, "DFLASH", {1: [13.0], 2: [19.9], 4: [48.0], 8: [70.0], 16: [120.0]})
    folder = r.write(tmp_path)
    text = answer.answer_text(open_results(folder), str(folder), "wide")
    wrapped = [line for line in text.splitlines() if str(folder) not in line]
    assert max(len(line) for line in wrapped) <= 120, text
    assert f"  loadgen query compare_algorithms --results {folder} --run wide" in text.splitlines()   # whole
