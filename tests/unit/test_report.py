"""loadgen report: the verdict says what is known and what is not, unequal conditions are named, the plots and
tables a reader needs are there (and only those), and the page renders in a real Chromium with no console error
and no request leaving the file. The seed sweep's report is kept as a screenshot under results/ci/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from test_queries_compare import DFLASH, MTP, add_series  # noqa: E402

from loadgen.results.analysis import open_results, run_query  # noqa: E402
from loadgen.results.report import write_report  # noqa: E402
from loadgen.results.report.data import load_report  # noqa: E402
from loadgen.results.report.html import markdown_summary  # noqa: E402
from loadgen.results.report.plots import plots  # noqa: E402
from sqlfixtures import Results  # noqa: E402


def server_info(**changes) -> str:
    """An SGLang-like /get_server_info as the runner records it in steps.server_info."""
    info = {"model_path": "Qwen/Qwen3.8-27B-NVFP4", "version": "0.5.9", "mem_fraction_static": 0.8,
            "max_total_num_tokens": 400000, "enable_torch_compile": True, "port": 30000, "host": "0.0.0.0",
            "random_seed": 1, "speculative_algorithm": "NEXTN", "speculative_num_draft_tokens": 4,
            "internal_states": [{"avg_spec_accept_length": 2.1, "last_gen_throughput": 100.0}]}
    return json.dumps({**info, **changes})


def seed_like(root: Path, one_repeat: bool = True, dflash_info: str | None = None) -> Path:
    """The field report's shape: DFlash2 ahead up to C=8, MTP from C=16 (tok/s from test_queries_compare)."""
    r = Results()
    r.run("seed")
    dflash = {c: v[:1] for c, v in DFLASH.items()} if one_repeat else DFLASH
    add_series(r, "seed", "mtp", 0, "NEXTN", MTP)
    add_series(r, "seed", "dflash", 1, "DFLASH", dflash)
    for step in r.rows["steps"]:
        step["server_info"] = (dflash_info or server_info()) if step["target"] == "dflash" else server_info()
    return r.write(root)


@pytest.fixture(scope="module")
def seed_report(tmp_path_factory):
    """seed_like's report, loaded once for the tests that only read it (a report runs ~20 queries: ~1.5 s)."""
    return load_report(seed_like(tmp_path_factory.mktemp("seed") / "results"))


@pytest.fixture(scope="module")
def seed_plot_titles(seed_report):
    """The titles of seed_like's plots, drawn once (~2 s of matplotlib)."""
    return [p.title for p in plots(seed_report)]


def test_verdict_names_the_crossover_and_says_the_noise_is_unknown_with_one_repeat(seed_report):
    md = markdown_summary(seed_report)
    answer = next(line for line in md.splitlines() if line.startswith("- dflash (DFLASH) vs mtp (NEXTN)"))
    assert "faster up to C=8, slower from C=16." in answer
    assert "+35.9% at C=1" in answer and "\u221216.9% at C=16" in answer
    assert "changes between C=8 and C=16" in answer
    assert "noise is unknown" in answer and "\u221216.9% (C=16)" in answer    # the smallest change named
    assert "| C=16 | 243.9 | 202.8 | -16.9% | 2 | 4 | unknown (1 repeat) |" in md
    assert "No SLO set" in md and "Emulated" in md


def test_verdict_with_repeats_says_where_the_difference_is_inside_the_spread(tmp_path):
    root = tmp_path / "results"
    r = Results()
    r.run("seed")
    add_series(r, "seed", "mtp", 0, "NEXTN", {1: [20.0, 21.0], 2: [40.0, 41.0]})
    add_series(r, "seed", "dflash", 1, "DFLASH", {1: [30.0, 31.0], 2: [40.5, 41.5]})
    md = markdown_summary(load_report(r.write(root)))
    assert "faster at every level both were measured at (C=1 to C=2)." in md
    assert "With 2 repeats, the difference is inside the spread (not a signal) at C=2." in md


def test_two_searched_targets_that_shared_one_level_are_compared_at_that_level_only(tmp_path):
    """A search probes each target at its own levels: k6 and k4 both ran C=1 only, so 'faster at every level'
    would claim what was not measured."""
    r = Results()
    r.run("search")
    add_series(r, "search", "k4", 0, "NEXTN", {1: [20.0], 2: [40.0], 4: [60.0]})
    add_series(r, "search", "k6", 1, "NEXTN", {1: [25.0], 8: [90.0], 16: [120.0]})
    md = markdown_summary(load_report(r.write(tmp_path / "results")))
    assert "k6 (NEXTN) vs k4 (NEXTN): faster at C=1, the only level both were measured at." in md, md
    assert "every level" not in md


def test_a_capacity_interval_one_level_wide_says_what_passed_and_what_failed(tmp_path):
    """Not 'between C=4 and C=4 given the noise': C=4 passed clearly and C=6 above it failed clearly."""
    r = Results()
    r.run("search", slo=json.dumps({"ttft_ms": 1000.0, "attainment": 0.9}))
    for step, (c, first_ms) in enumerate([(1, 1800), (2, 1800), (4, 1800), (8, 3000), (6, 3000)]):
        r.step("search", step, "k4", concurrency=c, window_ms=(1000, 11_000), probe="p")
        for i in range(40):   # 40 requests a level: every call is clear (TTFT 300 ms passes, 1500 ms fails)
            r.request("search", step, "k4", f"r{step}-{i}", sent_ms=1500, frames=[(first_ms, 1), (4000, 99)],
                      completion_tokens=200, spec_verify_ct=100)
    md = markdown_summary(load_report(r.write(tmp_path / "results")))
    assert ("k4 (NEXTN/8): capacity C=4 at the SLO (C=4 passed clearly and C=6, the next level probed above it, "
            "failed clearly)") in md, md
    assert "between" not in md


@pytest.mark.parametrize("scale, said", [(1.0, "emulator (hardware profile gb10), a cost model"),
                                         (2.0, "emulator (hardware profile gb10, at 2x its modelled speed: "
                                               "--time-scale 2), a cost model")])
def test_an_emulated_run_names_its_hardware_profile_and_its_speed(tmp_path, scale, said):
    r = Results()
    r.run("emu")
    add_series(r, "emu", "mtp", 0, "NEXTN", MTP)
    for step in r.rows["steps"]:
        step["emulated"] = True
        step["server_info"] = server_info(emulated=True, emulator={"hardware": "gb10", "time_scale": scale})
    md = markdown_summary(load_report(r.write(tmp_path / "results")))
    [line] = [line for line in md.splitlines() if line.startswith("- Emulated:")]
    assert said in line, line


def test_confounders_lists_unequal_settings_but_not_speculative_or_identity_ones(tmp_path):
    smaller = server_info(max_total_num_tokens=321600, enable_torch_compile=None, port=30001, random_seed=2,
                          speculative_algorithm="DFLASH", speculative_num_draft_tokens=8)
    root = seed_like(tmp_path / "results", dflash_info=smaller)
    rows = run_query(open_results(root), "confounders").to_pylist()
    assert [(r["setting"], r["baseline_value"], r["value"], r["change_pct"]) for r in rows] == [
        ("enable_torch_compile", "true", "null", None),
        ("max_total_num_tokens", "400000", "321600", -19.6)]
    assert {(r["baseline_target"], r["target"]) for r in rows} == {("mtp", "dflash")}
    md = markdown_summary(load_report(root))
    assert "Unequal conditions, dflash (DFLASH) vs mtp (NEXTN):" in md
    assert "KV pool (max_total_num_tokens, tokens): 321600 vs 400000 (\u221219.6%)" in md
    assert "enable_torch_compile: null vs true" in md


def test_like_for_like_comparison_is_said_to_be_one(tmp_path):
    root = seed_like(tmp_path / "results", dflash_info=server_info(port=30001, speculative_algorithm="DFLASH"))
    assert run_query(open_results(root), "confounders").to_pylist() == []
    assert "Like for like:" in markdown_summary(load_report(root))


def test_html_page_verdict_first_tables_readable(tmp_path):
    html_path = tmp_path / "report.html"
    write_report(seed_like(tmp_path / "results"), None, html_path)
    text = html_path.read_text()
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", text)            # nothing fetched from elsewhere
    assert "<script" not in text
    assert text.index("Verdict") < text.index("<img") < text.index("<h2>Tables")
    titles = re.findall(r"<figcaption><b>([^<]+)\.</b>", text)
    assert titles == ["Throughput", "Change vs baseline", "Per-user vs aggregate throughput", "Latency",
                      "Acceptance length by prompt kind", "Acceptance along the output"]   # no errors: no plot
    assert "lead changes" not in text        # text inside PNGs is not in the page; the crossover is in words:
    assert "changes between C=8 and C=16" in text
    tables = dict(re.findall(r"<summary>([^<(]+) \(\d+ rows?\)</summary><div class='scroll'>(.*?)</div>", text))
    spread = tables["Spread over repeats"]
    assert "spread (%)" not in spread and "tok/s min" not in spread    # one repeat: unknown, not a spread of 0
    assert "<th>run</th>" not in text and "<th>emulated</th>" not in text  # one run, all emulated: the title says
    throughput = tables["Throughput per step"]
    assert "<th>tok/s</th>" in throughput and "<th>window (s)</th>" in throughput      # units in headers
    assert "<th>tok/s change (%)</th>" in tables["Baseline vs others per level"]
    assert "<details open><summary>Where the faster series changes (1 row)" in text
    assert "<details><summary>Latency per step (ms; decode_tok_s in tok/s) (" in text   # long: collapsed


def test_errors_plot_only_when_measured_requests_failed(tmp_path, seed_plot_titles):
    assert "Errors" not in seed_plot_titles
    r = Results()
    r.run("seed")
    add_series(r, "seed", "mtp", 0, "NEXTN", {1: [20.0], 2: [40.0]})
    r.request("seed", 10, "mtp", "bad", sent_ms=1500, frames=[], status="timeout")
    report = load_report(r.write(tmp_path / "failed"))
    assert "Errors" in [p.title for p in plots(report)]
    assert "Measured requests failed: 1 timeout." in markdown_summary(report)


def test_warnings_name_incomplete_steps_and_runs(tmp_path):
    r = Results()
    r.run("cut", status="incomplete")
    add_series(r, "cut", "mtp", 0, "NEXTN", {1: [20.0], 2: [40.0]})
    r.rows["steps"][-1]["status"] = "interrupted"
    md = markdown_summary(load_report(r.write(tmp_path / "results")))
    assert "Step 20 of cut (mtp, C=2) is interrupted: its numbers may be partial." in md
    assert "Run cut is incomplete." in md


def test_capacity_search_report_shows_the_slo_capacity_and_probes(tmp_path):
    r = Results()
    r.run("search", slo=json.dumps({"ttft_ms": 1000.0, "attainment": 0.9}))
    for step, (c, probe, first_ms) in enumerate([(1, "start", 1800), (8, "double after pass", 1800),
                                                 (16, "double after pass", 3000), (12, "bisect 8-16", 1800)]):
        r.step("search", step, "mtp", concurrency=c, window_ms=(1000, 11_000), probe=probe)
        for i in range(3):
            r.request("search", step, "mtp", f"r{step}-{i}", sent_ms=1500, frames=[(first_ms, 1), (4000, 99)],
                      completion_tokens=200, spec_verify_ct=100)
    report = load_report(r.write(tmp_path / "results"))
    md = markdown_summary(report)
    assert "SLO: TTFT \u2264 1000 ms for 90% of requests" in md
    assert "mtp (NEXTN/8): capacity C=12 at the SLO" in md
    assert "Capacity search" in [p.title for p in plots(report)]


def test_fleet_report_shows_nodes_against_the_fleet_median(tmp_path, seed_plot_titles):
    r = Results()
    r.run("fleet")
    for i, (node, tok_s) in enumerate([("spark1", 100.0), ("spark2", 102.0), ("spark3", 70.0)]):
        add_series(r, "fleet", f"{node}.mtp", i, "NEXTN", {1: [tok_s / 4], 4: [tok_s]})
        for step in r.rows["steps"]:
            step.setdefault("node", node)
    report = load_report(r.write(tmp_path / "results"))
    assert "Nodes vs fleet median" in [p.title for p in plots(report)]
    md = markdown_summary(report)
    assert "Node spark3 is off the fleet in mtp: aggregate tok/s \u221230.0% at C=1, \u221230.0% at C=4" in md
    assert "spark1 is off" not in md and "spark2 is off" not in md
    assert "Nodes vs fleet median" not in seed_plot_titles


# ---- in a real browser -------------------------------------------------------------------------------------
