"""The twin's parts against the engine's own ground truth (virtual time, no Ray): acceptance read from request counts
and from one-step frames, the twin file and its what-ifs, predicted runs in the tables (schema 6) with every query
and the answer saying PREDICTED, and bad input refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.results import analysis, answer
from loadgen.twin.predict import run_predicted
from twinkit import hidden_profile


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("predicted")
    mtp, dflash = hidden_profile(11, folder / "m", "mtp"), hidden_profile(12, folder / "d", "dflash2")
    exp = parse_experiment({
        "run": {"name": "pred"}, "load": {"concurrency": [1, 8, 32], "warmup_s": 2.0, "measure_s": 20.0},
        "slo": {"tpot_ms": 30.0}, "prompts": {"seed": 1, "max_new_tokens": 64, "ignore_eos": True},
        "targets": [{"name": "mtp", "twin": str(mtp.truth)}, {"name": "dflash2", "twin": str(dflash.truth)}]},
        Path("."))
    return folder / "results", run_predicted(exp, folder / "results", log=lambda *a: None)


def test_a_predicted_run_is_an_ordinary_run_marked_predicted(predicted):
    results, run_id = predicted
    con = analysis.open_results(results, [run_id])
    for name in analysis.list_queries():
        table = analysis.run_query(con, name)
        if "predicted" in table.column_names and table.num_rows:
            assert set(table.column("predicted").to_pylist()) == {True}, name
    levels = con.execute("SELECT target, concurrency, requests, tok_s, accept_len FROM level_metrics "
                         "ORDER BY target, concurrency").fetchall()
    assert [(t, c) for t, c, *_ in levels] == [(t, c) for t in ("dflash2", "mtp") for c in (1, 8, 32)]
    assert all(n >= 100 and tok_s > 0 and acc > 1 for _, _, n, tok_s, acc in levels)
    text = answer.answer_text(con, str(results), run_id)
    assert "(PREDICTED: mtp by the twin of truth in run hidden-11" in text
    lines = text.splitlines()
    [at] = [i for i, line in enumerate(lines) if line.strip().startswith("mtp: at")]
    capacity = " ".join(line.strip() for line in lines[at:at + 2])   # wrapped at 120 columns
    assert capacity.endswith("PREDICTED"), capacity
