"""loadgen.results.analysis: bad input names the problem and the fix; render formats; the files run in the
duckdb CLI."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from loadgen.errors import LoadgenError
from loadgen.results.analysis import QUERIES_DIR, list_queries, open_results, render, run_query
from loadgen.results.schema import SCHEMA_VERSION
from sqlfixtures import Results, two_runs_mtp_vs_dflash

REPO = Path(__file__).parents[2]
ISSUE_QUERIES = {
    "acceptance_by_concurrency", "throughput_by_concurrency", "latency_by_concurrency", "compare_algorithms",
    "acceptance_by_kind", "acceptance_by_position", "acceptance_sources", "crossover", "repeats",
    "concurrency_pair", "errors_by_class", "client_health", "runs", "compare_runs",
}


@pytest.fixture
def folder(tmp_path) -> Path:
    return two_runs_mtp_vs_dflash(tmp_path / "results")


def test_the_issue_queries_exist():
    assert ISSUE_QUERIES <= set(list_queries()) and "views" not in list_queries()
    assert QUERIES_DIR.resolve() == REPO / "queries"   # package data: a link to the top-level folder


def test_every_query_runs_and_labels_emulated_numbers(folder):
    con = open_results(folder)
    for name in list_queries():
        table = run_query(con, name)
        assert "emulated" in table.column_names, name


def test_unknown_query_names_the_choices(folder):
    with pytest.raises(LoadgenError, match="unknown query 'acceptance'.*acceptance_by_concurrency"):
        run_query(open_results(folder), "acceptance")


def test_unknown_parameter_is_refused(folder):
    with pytest.raises(LoadgenError, match="unknown query parameter 'basline'"):
        run_query(open_results(folder), "compare_algorithms", {"basline": "mtp"})


def test_run_id_not_in_the_folder(folder):
    with pytest.raises(LoadgenError, match="run id.* nope not in .*runs there: r1, r2"):
        open_results(folder, ["r1", "nope"])


def test_run_filter_limits_every_view(folder):
    rows = run_query(open_results(folder, ["r2"]), "acceptance_by_concurrency").to_pylist()
    assert {x["run_id"] for x in rows} == {"r2"} and len(rows) == 2


def test_not_a_results_folder(tmp_path):
    with pytest.raises(LoadgenError, match="not a loadgen results folder"):
        open_results(tmp_path)


def test_newer_schema_version_asks_for_an_upgrade(tmp_path):
    r = Results()
    r.run("future", schema_version=SCHEMA_VERSION + 1)
    root = r.write(tmp_path)
    with pytest.raises(LoadgenError, match=f"schema version {SCHEMA_VERSION + 1}.*upgrade loadgen"):
        open_results(root)


def test_render_formats(folder):
    table = pa.table({"a": [1, None], "b": ["x", "y"], "ok": [True, False], "f": [1.5, float("nan")]})
    assert json.loads(render(table, "json")) == [{"a": 1, "b": "x", "ok": True, "f": 1.5},
                                                 {"a": None, "b": "y", "ok": False, "f": None}]
    assert list(csv.reader(io.StringIO(render(table, "csv")))) == [["a", "b", "ok", "f"], ["1", "x", "true", "1.5"],
                                                                   ["", "y", "false", "nan"]]
    text = render(table, "table").splitlines()
    assert text[0].split() == ["a", "b", "ok", "f"] and text[2].split() == ["1", "x", "true", "1.5"]
    assert text[-1] == "(2 rows)"
    with pytest.raises(LoadgenError, match="unknown format"):
        render(table, "xml")


def test_cli_set_passes_parameters_and_refuses_malformed_ones(folder, capsys):
    from loadgen import cli
    assert cli.main(["query", "compare_algorithms", "--results", str(folder), "--format", "json",
                     "--set", "baseline=df"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {(r["baseline_target"], r["target"]) for r in rows} == {("df", "mtp")}
    assert cli.main(["query", "client_health", "--results", str(folder), "--set", "max_read_delay_ms"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err
    assert cli.main(["query", "client_health", "--results", str(folder), "--set", "max_lag=5"]) == 2
    assert "unknown query parameter 'max_lag'" in capsys.readouterr().err


def test_parse_params_types():
    from loadgen.results.analysis import parse_params
    assert parse_params(["outlier_pct=10", "min_in_flight_share=0.5", "baseline=mtp"]) == {
        "outlier_pct": 10, "min_in_flight_share": 0.5, "baseline": "mtp"}


def test_query_list_names_every_query_with_its_files_header(capsys):
    from loadgen import cli
    assert cli.main(["query", "--list"]) == 0
    listed = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert list(listed) == list_queries()
    for name, text in listed.items():   # the header's first sentence, wrapped lines joined
        header = " ".join(line.removeprefix("--").strip() for line in
                          (QUERIES_DIR / f"{name}.sql").read_text().split("\n--\n")[0].splitlines())
        assert header.startswith(f"{name}: {text}") and text[-1] in ".?", (name, text)
    assert listed["workload_check"] == "did the server run the workload that was asked for?"   # one sentence of two
    assert listed["acceptance_sources"].endswith("and which source each figure came from.")   # wrapped, joined
    assert listed["goodput"].endswith("--set slo_ttft_ms=... and friends).")                  # '...' ends nothing
    with pytest.raises(SystemExit):
        cli.main(["query", "--help"])
    helped = capsys.readouterr().out
    assert all(re.search(rf"^{name} +{re.escape(text)}$", helped, re.M) for name, text in listed.items()), helped


def test_a_query_file_without_its_header_and_a_missing_name_are_one_line(tmp_path, capsys):
    from loadgen import cli
    from loadgen.results.analysis import describe_query
    bad = tmp_path / "mine.sql"
    bad.write_text("SELECT 1;\n")
    with pytest.raises(LoadgenError, match="make its first line `-- mine: <what it answers>.`"):
        describe_query(bad)
    assert cli.main(["query"]) == 2
    assert capsys.readouterr().err.strip().endswith("see them all with `loadgen query --list`")
