"""loadgen.results.analysis: bad input names the problem and the fix; render formats; the files run in the
duckdb CLI."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.results.analysis import list_queries
from sqlfixtures import two_runs_mtp_vs_dflash

REPO = Path(__file__).parents[2]


@pytest.fixture
def folder(tmp_path) -> Path:
    return two_runs_mtp_vs_dflash(tmp_path / "results")


def _cli(folder: Path, *commands: str, cwd: Path) -> str:
    args = ["duckdb", "-csv", "-c", f"SET VARIABLE results = '{folder}'", "-c", ".read queries/views.sql"]
    for c in commands:
        args += ["-c", c]
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Error" not in done.stderr, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("duckdb") is None, reason="the duckdb CLI is not installed")
def test_the_files_run_unchanged_in_the_duckdb_cli(folder):
    repo = REPO
    out = _cli(folder, ".read queries/compare_algorithms.sql", cwd=repo)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(x["run_id"], x["baseline_target"], x["target"], x["tok_s_change_pct"]) for x in rows] == \
        [("r1", "mtp", "df", "100.0"), ("r2", "mtp", "df", "100.0")]          # 8 vs 4 tokens in 1 s
    filtered = _cli(folder, "SET VARIABLE run_ids = ['r2']", ".read queries/acceptance_by_concurrency.sql", cwd=repo)
    assert {x["run_id"] for x in csv.DictReader(io.StringIO(filtered))} == {"r2"}
    for name in list_queries():                                              # and every other file too
        _cli(folder, f".read queries/{name}.sql", cwd=repo)



def test_a_listing_into_a_closed_pipe_ends_without_a_traceback():
    """`loadgen query --list | head -1`: once the reader has gone, loadgen stops quietly (exit 1, as Python's own
    tools do on a broken pipe) instead of printing a traceback. Here the reader is gone before the first line."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "loadgen.cli", "query", "--list"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert done.returncode == 1 and done.stderr == "", done.stderr
