"""The twin's parts against the engine's own ground truth (virtual time, no Ray): acceptance read from request counts
and from one-step frames, the twin file and its what-ifs, predicted runs in the tables (schema 6) with every query
and the answer saying PREDICTED, and bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.campaigns.plan_fleet import Demand, run_fleet
from loadgen.config import parse_experiment
from loadgen.prompts.config import parse_prompts_config
from loadgen.results import analysis, answer
from loadgen.results.slo import Slo
from loadgen.twin.model import load_twin
from loadgen.twin.predict import run_predicted, twin_prompts
from loadgen.twin.vtime import Protocol
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


def test_a_predicted_run_has_its_twins_modelled_energy(predicted):
    """The twin's modelled GPU is sampled as a measured run's is (its energy counter once a virtual second), so
    `energy` gives a prediction's tokens per joule: each window's joules lie between idle and full power over it
    (modelled seconds: window x time_scale), and they agree with `loadgen plan`'s own accounting of the same twin at
    the same level (plan_fleet sums each forward's power inside the window: another path to the same model)."""
    results, run_id = predicted
    con = analysis.open_results(results, [run_id])
    rows = {(r["target"], r["concurrency"]): r for r in analysis.run_query(con, "energy").to_pylist()}
    assert set(rows) == {(t, c) for t in ("dflash2", "mtp") for c in (1, 8, 32)}
    [(config,)] = con.execute("SELECT config FROM runs").fetchall()
    twins = {t["name"]: load_twin(t["twin"], "twin") for t in json.loads(config)["targets"]}
    windows = dict(((t, c), w) for t, c, w in con.execute("SELECT target, concurrency, window_s FROM step_info")
                   .fetchall())
    for (target, c), r in rows.items():
        hw, scale = twins[target].hardware, twins[target].time_scale
        modelled_s = windows[(target, c)] * scale
        assert r["energy_method"] == "counter" and r["tok_per_j"] > 0, r
        assert hw.idle_power_w * modelled_s < r["energy_j"] < hw.max_power_w * modelled_s, (r, modelled_s)
    workload = parse_prompts_config({"seed": 1, "max_new_tokens": 64, "ignore_eos": True})
    for target, twin in twins.items():
        demand = Demand(8)
        [level] = run_fleet([(twin, twin_prompts(twin, workload)[1], 1.0)], demand, 64, "least-outstanding",
                            Protocol(2.0, 20.0, 200, 1e6), [Slo()], 3)
        assert level.tokens_per_joule == pytest.approx(rows[(target, 8)]["tok_per_j"], rel=0.1), target
