"""The job's answer in words (loadgen/results/answer.py) over the field report's numbers
(tests/unit/test_queries_compare.py's folder): the headline names who is ahead where, by how much, the crossover and
the noise; the table fits 120 columns; summary.json and summary.md say the same."""

from __future__ import annotations

import json

from test_queries_compare import DFLASH, MTP, add_series

from loadgen.results import answer
from loadgen.results.analysis import open_results
from sqlfixtures import Results


def _folder(tmp_path, dflash: dict[int, list[float]], mtp: dict[int, list[float]] = MTP):
    r = Results()
    r.run("seed")
    add_series(r, "seed", "mtp", 0, "NEXTN", mtp)
    add_series(r, "seed", "dflash", 1, "DFLASH", dflash)
    return r.write(tmp_path)


def test_headline_names_the_leader_per_range_the_crossover_and_unknown_noise(tmp_path):
    one_repeat = {c: v[:1] for c, v in DFLASH.items()}   # C=16: 202.8 only
    [c] = answer.comparisons(open_results(_folder(tmp_path, one_repeat)))
    # dflash vs mtp: +36, +39, +23, +23 % up to C=8; -17 % (202.8 / 243.9) and -21 % from C=16
    assert c.headline == ("dflash ahead up to C=8 (+23..+39%), mtp ahead from C=16 (-17..-21%); "
                          "crossover between 8 and 16; noise: unknown, 1 repeat (set load.repeats = 2 or more "
                          "to see the spread)")
    assert [(lv.level, lv.baseline_n, lv.n) for lv in c.levels][:2] == [("C=1", 1, 1), ("C=2", 1, 1)]


def test_noise_with_repeats_says_where_a_difference_is_inside_the_spread(tmp_path):
    mtp = {16: [243.9, 200.0], 32: [385.0, 380.0]}
    dflash = {16: [202.8, 221.9], 32: [302.8, 300.0]}   # C=16 ranges overlap, C=32 do not
    [c] = answer.comparisons(open_results(_folder(tmp_path, dflash, mtp)))
    assert c.headline.startswith("mtp ahead at C=32 (-21%), too close to call at C=16; ")   # C=16: no signal
    assert c.headline.endswith("; noise: inside the spread over 2 repeats at C=16 (no signal there)")
    assert [lv.signal for lv in c.levels] == [False, True]


def test_printed_answer_fits_120_columns_and_summary_files_agree(tmp_path):
    folder = _folder(tmp_path, DFLASH)
    con = open_results(folder)
    text = answer.answer_text(con, str(folder), "seed")
    assert max(len(line) for line in text.splitlines() if str(folder) not in line) <= 120, text
    lines = text.splitlines()
    assert lines[1] == "answer:" and lines[2].startswith("  dflash vs mtp: dflash ahead up to C=8")
    headline = " ".join(line.strip() for line in lines[2:4]).removeprefix("dflash vs mtp: ")   # wrapped
    assert "level    n  mtp tok/s  mtp acc  dflash tok/s  dflash acc  change   signal" in text
    assert f"loadgen query compare_algorithms --results {folder} --run seed" in text
    out = answer.write_summary(con, str(folder), "seed", "complete")
    assert out == folder / "summary" / "run_id=seed"
    data = json.loads((out / "summary.json").read_text())
    [comp] = data["comparisons"]
    assert comp["headline"] == headline
    assert [lv["change_pct"] for lv in comp["levels"]] == [35.9, 39.2, 22.6, 23.3, -12.9, -21.4]
    md = (out / "summary.md").read_text()
    assert comp["headline"] in md and "| C=32 | 1/1 | 385.0 | 2.00 | 302.8 | 4.00 | -21.4% | unknown |" in md
    open_results(folder)   # the summary folder does not disturb the views


def test_two_series_sharing_one_level_are_said_to_share_only_that_one(tmp_path):
    """A search runs each target at its own levels: mtp at C=1, 2, 4 and dflash at C=1, 8, 16 share only C=1."""
    folder = _folder(tmp_path, {1: [25.0], 8: [90.0], 16: [120.0]}, {1: [20.0], 2: [40.0], 4: [60.0]})
    [c] = answer.comparisons(open_results(folder))
    assert c.headline.startswith("dflash ahead at C=1, the only level both were measured at (+25%); noise: ")
