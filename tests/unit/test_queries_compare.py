"""Comparisons (A vs B, crossover, repeats/signal, C=8 vs C=16, run vs run) rebuilt from the field report.

The folder reproduces the seed report's aggregate throughput exactly: each step has a 10 s window with
frames carrying tok/s x 10 tokens, so every % change below is the report's, computed here by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from loadgen.errors import LoadgenError
from loadgen.results.analysis import open_results, run_query
from sqlfixtures import Results

MTP = {1: [20.9], 2: [39.5], 4: [77.4], 8: [138.4], 16: [243.9], 32: [385.0]}
DFLASH = {1: [28.4], 2: [55.0], 4: [94.9], 8: [170.7], 16: [202.8, 221.9], 32: [302.8]}
ACCEPT = {"mtp": {1: 2.2, 2: 2.78, 4: 2.1, 8: 2.07, 16: 2.0, 32: 2.0},
          "dflash": {1: 4.23, 2: 3.10, 4: 4.34, 8: 4.15, 16: 4.0, 32: 4.0}}


def query(root: Path, name: str, run_ids: list[str] | None = None, **params) -> list[dict]:
    return run_query(open_results(root, run_ids), name, params).to_pylist()


def add_series(r: Results, run: str, target: str, index: int, algorithm: str, levels: dict[int, list[float]],
               emulated: bool = True, draft_tokens: int = 8) -> None:
    """One step per (concurrency, repeat) with a 10 s window; tok/s * 10 tokens arrive inside it."""
    for c, values in levels.items():
        for rep, tok_s in enumerate(values):
            step = c * 10 + rep
            r.step(run, step, target, target_index=index, algorithm=algorithm, concurrency=c, repeat=rep,
                   window_ms=(1000, 11_000), emulated=emulated, draft_tokens=draft_tokens)
            acc = ACCEPT[target][c] if target in ACCEPT else 2.0
            r.request(run, step, target, f"{target}-{step}", sent_ms=1500,
                      frames=[(2000, 1), (3000, round(tok_s * 10) - 1)],
                      completion_tokens=round(acc * 100), spec_verify_ct=100)


@pytest.fixture
def report(tmp_path) -> Path:
    r = Results()
    r.run("seed")
    add_series(r, "seed", "mtp", 0, "NEXTN", MTP)
    add_series(r, "seed", "dflash", 1, "DFLASH", DFLASH, emulated=False)
    return r.write(tmp_path)


def test_compare_algorithms_reproduces_the_field_report(report):
    rows = query(report, "compare_algorithms")
    assert [x["concurrency"] for x in rows] == [1, 2, 4, 8, 16, 32]
    assert {(x["baseline_target"], x["target"]) for x in rows} == {("mtp", "dflash")}
    assert [x["baseline_tok_s"] for x in rows] == [20.9, 39.5, 77.4, 138.4, 243.9, 385.0]
    assert [x["tok_s"] for x in rows] == [28.4, 55.0, 94.9, 170.7, 212.35, 302.8]    # C16: median of 2
    # 100 * (B / A - 1): +36 %, +39 %, +23 %, +23 %, -13 % (median of -17/-9), -21 %
    assert [x["tok_s_change_pct"] for x in rows] == [35.9, 39.2, 22.6, 23.3, -12.9, -21.4]
    assert [x["baseline_accept_len"] for x in rows][:4] == [2.2, 2.78, 2.1, 2.07]
    assert [x["accept_len"] for x in rows][:4] == [4.23, 3.1, 4.34, 4.15]
    assert rows[0]["accept_len_change_pct"] == round(100 * (4.23 / 2.2 - 1), 1)
    # only C16 has repeats; its ranges [202.8, 221.9] and [243.9] do not overlap
    assert [x["signal"] for x in rows] == [None, None, None, None, True, None]
    assert all(x["emulated"] is True for x in rows)     # one side emulated labels the row


def test_baseline_parameter_swaps_the_sides(report):
    rows = query(report, "compare_algorithms", baseline="DFLASH")
    assert {(x["baseline_target"], x["target"]) for x in rows} == {("dflash", "mtp")}
    assert rows[0]["tok_s_change_pct"] == round(100 * (20.9 / 28.4 - 1), 1)
    with pytest.raises(LoadgenError, match="baseline 'EAGLE'.*choose one of"):
        query(report, "compare_algorithms", baseline="EAGLE")


def test_crossover_is_where_the_winner_changes(report):
    [row] = query(report, "crossover")
    assert (row["previous_concurrency"], row["concurrency"], row["winner"]) == (8, 16, "mtp")
    assert (row["previous_tok_s_change_pct"], row["tok_s_change_pct"], row["signal"]) == (23.3, -12.9, True)


def test_no_crossover_gives_no_rows(tmp_path):
    r = Results()
    r.run("x")
    add_series(r, "x", "mtp", 0, "NEXTN", {1: [10.0], 2: [20.0]})
    add_series(r, "x", "dflash", 1, "DFLASH", {1: [12.0], 2: [25.0]})
    assert query(r.write(tmp_path), "crossover") == []


def test_repeats_spread_and_signal(report):
    rows = {(x["target"], x["concurrency"]): x for x in query(report, "repeats")}
    c16 = rows[("dflash", 16)]
    assert c16["repeats"] == 2 and c16["tok_s_values"] == [202.8, 221.9]
    assert (c16["tok_s_min"], c16["tok_s_median"], c16["tok_s_max"]) == (202.8, 212.35, 221.9)
    assert c16["spread_pct"] == round(100 * 19.1 / 212.35, 1)                            # 9.0 %: the report's +-9 %
    assert c16["signal"] is True
    base = rows[("mtp", 16)]
    assert base["tok_s_change_pct"] is None and base["signal"] is None                  # the baseline itself


def test_a_difference_inside_the_spread_is_not_a_signal(tmp_path):
    r = Results()
    r.run("x")
    add_series(r, "x", "mtp", 0, "NEXTN", {16: [210.0, 243.9]})
    add_series(r, "x", "dflash", 1, "DFLASH", {16: [202.8, 221.9]})
    [row] = query(r.write(tmp_path), "compare_algorithms")
    assert row["tok_s_change_pct"] == round(100 * (212.35 / 226.95 - 1), 1) and row["signal"] is False


def test_concurrency_pair_is_the_reports_c8_vs_c16_table(tmp_path):
    r = Results()
    r.run("x")
    for c, ttft, itl in ((8, 438, 48), (16, 2000, 85)):
        r.step("x", c, "dflash", algorithm="DFLASH", concurrency=c, window_ms=(1000, 60_000))
        for i in range(2):   # two identical requests: 3 frames, one token each
            t = 1000 + ttft
            r.request("x", c, "dflash", f"{c}-{i}", sent_ms=1000, frames=[(t, 1), (t + itl, 1), (t + 2 * itl, 1)])
    rows = {x["metric"]: x for x in query(r.write(tmp_path), "concurrency_pair")}
    assert list(rows) == ["ttft_ms", "itl_ms", "itl_frame_ms", "decode_tok_s"]
    assert (rows["ttft_ms"]["p50_a"], rows["ttft_ms"]["p50_b"]) == (438, 2000)
    assert (rows["itl_frame_ms"]["p50_a"], rows["itl_frame_ms"]["p50_b"]) == (48, 85)
    assert (rows["itl_ms"]["mean_a"], rows["itl_ms"]["mean_b"]) == (48, 85)   # one token a frame: the same
    assert rows["decode_tok_s"]["p50_a"] == round(1000 / 48, 2)                         # 2 tokens over 96 ms
    assert rows["ttft_ms"]["change_pct"] == round(100 * (2000 / 438 - 1), 1)
    other = query(tmp_path, "concurrency_pair", conc_a=16, conc_b=8)
    assert other[0]["p50_a"] == 2000


def test_compare_runs_before_and_after(tmp_path):
    r = Results()
    r.run("before", started_ms=0)
    r.run("after", started_ms=100_000)
    r.run("unrelated", started_ms=50_000)
    add_series(r, "before", "dflash", 0, "DFLASH", {8: [170.7], 16: [202.8]}, draft_tokens=8)
    add_series(r, "after", "dflash", 0, "DFLASH", {8: [160.0], 16: [250.0]}, draft_tokens=4)
    add_series(r, "unrelated", "mtp", 0, "NEXTN", {8: [1.0]})
    root = r.write(tmp_path)
    rows = query(root, "compare_runs", run_ids=["before", "after"])
    assert [(x["run_a"], x["run_b"], x["concurrency"]) for x in rows] == [("before", "after", 8),
                                                                          ("before", "after", 16)]
    assert (rows[1]["draft_tokens_a"], rows[1]["draft_tokens_b"]) == (8, 4)
    assert (rows[1]["tok_s_a"], rows[1]["tok_s_b"]) == (202.8, 250.0)
    assert rows[1]["tok_s_change_pct"] == round(100 * (250 / 202.8 - 1), 1)
    explicit = query(root, "compare_runs", run_a="unrelated", run_b="before")
    assert [(x["concurrency"], x["tok_s_a"]) for x in explicit] == [(8, 1.0)]


def _paired_folder(tmp_path: Path, ratios: list[float]) -> Path:
    """Two series in one step at C = 4, serving prompts p0..p(n-1) once each: the baseline's TPOT per prompt is
    10 + 2k ms (the prompts differ), the other's that times ratios[k]; TTFT 50 ms against 40 ms."""
    r = Results()
    r.run("paired")
    for index, target in enumerate(("mtp", "dflash")):
        r.step("paired", 0, target, target_index=index, algorithm=target.upper(), concurrency=4,
               window_ms=(1000, 60_000))
        for k, ratio in enumerate(ratios):
            tpot = (10 + 2 * k) * (ratio if index else 1.0)
            first = 2000 + (40 if index else 50)
            r.request("paired", 0, target, f"{target}-{k}", sent_ms=2000, prompt_id=f"p{k}",
                      frames=[(first, 1), (first + 10 * tpot, 10)])
    return r.write(tmp_path)


def test_paired_reads_the_ratio_prompt_by_prompt(tmp_path):
    """Per prompt the other decodes in 0.8x the time (+-1%): the verdict is clear from 8 prompts although the
    prompts' own TPOTs spread 10-24 ms, and the ratio is the prompts' geometric mean, by hand."""
    ratios = [0.8 * (1.01 if k % 2 else 0.99) for k in range(8)]
    [row] = query(_paired_folder(tmp_path, ratios), "paired")
    assert (row["baseline_target"], row["target"], row["pairs"], row["verdict"]) == ("mtp", "dflash", 8, "faster")
    assert row["tpot_ratio"] == pytest.approx(math.exp(sum(math.log(x) for x in ratios) / 8), abs=1e-3)
    assert row["tpot_ratio_low"] < row["tpot_ratio"] < row["tpot_ratio_high"] < 1
    assert row["ttft_ratio"] == pytest.approx(0.8, abs=1e-3)


def test_paired_says_no_difference_when_prompts_disagree(tmp_path):
    """Half the prompts 20% faster, half 20% slower: the interval spans 1."""
    [row] = query(_paired_folder(tmp_path, [0.8, 1.25] * 4), "paired")
    assert row["verdict"] == "no difference" and row["tpot_ratio_low"] < 1 < row["tpot_ratio_high"]
