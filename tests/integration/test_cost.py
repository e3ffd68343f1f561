"""[cost]: prices in the experiment file (checked before any load), and what a million output tokens cost per
target and level (queries/cost.sql), in the answer and the report, against a hand computation from the run's own
rows: window seconds, joules from the GPU's energy counter, output tokens of the frames in the window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.config.cost import Prices
from loadgen.errors import ConfigError
from loadgen.results import analysis, answer
from loadgen.results.report.data import load_report
from loadgen.results.report.findings import verdict
from sqlfixtures import Results, gpu_step, window_tokens

REPO = Path(__file__).parents[2]
TARGETS = [{"name": "mtp", "url": "http://127.0.0.1:30000"},
           {"name": "dflash2", "url": "http://127.0.0.1:30001", "cost": {"node_hour": 3.0}}]


LOAD = {"concurrency": [1]}


def _experiment(cost: object, targets: list[dict] = TARGETS):
    return parse_experiment({"load": LOAD, "cost": cost, "targets": targets}, Path("."))


def test_prices_are_read_with_a_targets_own_keys_over_the_files():
    exp = _experiment({"node_hour": 2.10, "energy_kwh": 0.30})
    assert exp.cost == Prices(2.10, 0.30)
    assert [t.cost for t in exp.targets] == [Prices(2.10, 0.30), Prices(3.0, 0.30)]   # energy_kwh from [cost]
    assert parse_experiment({"load": LOAD, "targets": TARGETS[:1]}, Path(".")).targets[0].cost is None   # none


@pytest.mark.parametrize(("cost", "targets", "message"), [
    ({"node_hour": -2.1}, TARGETS,
     "cost.node_hour: must be a finite number >= 0, got -2.1 (fix: give `node_hour` a number >= 0)"),
    ({"energy_kwh": "0.30"}, TARGETS,
     "cost.energy_kwh: must be a number, got str '0.30' (fix: write the number without quotes: `energy_kwh = 0.30`)"),
    ({"node_hour": 2.1}, [{"name": "a", "url": "http://127.0.0.1:30000", "cost": {"energy_kwh": "cheap"}}],
     "targets[0].cost.energy_kwh: must be a number, got str 'cheap' (fix: write a number: `energy_kwh = <number>`)"),
    ({"node_hours": 2.1}, TARGETS, "cost.node_hours: unknown key (fix: did you mean `node_hour`?"),
])
def test_a_bad_price_names_its_key_and_the_fix(cost, targets, message):
    with pytest.raises(ConfigError) as err:
        _experiment(cost, targets)
    assert str(err.value).startswith(message)


def test_a_negative_price_stops_the_job_in_one_line_before_ray(tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text('[load]\nconcurrency = [1]\n[cost]\nnode_hour = -1\n[[targets]]\nname = "a"\nurl = "http://127.0.0.1:9"\n')
    job = subprocess.run([sys.executable, "-m", "jobs.capacity", "--config", str(config), "--results",
                          str(tmp_path / "results")], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, RAY_ADDRESS=""))
    assert job.returncode == 2 and job.stdout == ""
    assert job.stderr == ("error: cost.node_hour: must be a finite number >= 0, got -1.0 "
                          "(fix: give `node_hour` a number >= 0)\n")


def _run(tmp_path: Path, config: dict) -> tuple[Path, Results]:
    """mtp and dflash2 at C=1 and C=8, each step's window [1 s, 5 s] with the GPU's counter at 50 and 100 J/s."""
    r = Results()
    r.run("r", config=json.dumps(config))
    for step, conc in ((0, 1), (1, 8)):
        gpu_step(r, "r", step, "mtp", "n1", [2400] * 5, joules_per_s=50.0, concurrency=conc, target_index=0,
                 algorithm="NEXTN")
        gpu_step(r, "r", step, "dflash2", "n2", [2400] * 5, joules_per_s=100.0, concurrency=conc, target_index=1,
                 algorithm="DFLASH")
        window_tokens(r, "r", step, "mtp", 10, 20 + 10 * step)
        window_tokens(r, "r", step, "dflash2", 30, 20)
    return r.write(tmp_path), r


def _by_hand(r: Results, target: str, step: int, node_hour: float, energy_kwh: float) -> float:
    """From the rows themselves: the step's window, the counter's joules at its ends, the frames inside it."""
    [s] = [s for s in r.rows["steps"] if s["target"] == target and s["step_id"] == step]
    start, end = s["t_measure_start_ns"], s["t_measure_end_ns"]
    counter = {g["t_ns"]: g["energy_j"] for g in r.rows["gpu_samples"] if g["target"] == target
               and g["step_id"] == step}
    joules = counter[end] - counter[start]
    ids = {q["request_id"] for q in r.rows["requests"] if q["target"] == target and q["step_id"] == step}
    tokens = sum(f["tokens"] for f in r.rows["frames"] if f["request_id"] in ids and start <= f["t_ns"] < end)
    return ((end - start) / 1e9 / 3600 * node_hour + joules / 3.6e6 * energy_kwh) / tokens * 1e6


def test_cost_per_million_tokens_per_target_and_level_against_the_rows(tmp_path):
    folder, r = _run(tmp_path, {"cost": {"node_hour": 2.10, "energy_kwh": 0.30}, "targets": TARGETS})
    rows = {(x["target"], x["concurrency"]): x for x in analysis.run_query(analysis.open_results(folder), "cost")
            .to_pylist()}
    assert sorted(rows) == [("dflash2", 1), ("dflash2", 8), ("mtp", 1), ("mtp", 8)]
    mtp = rows[("mtp", 1)]
    assert (mtp["window_s"], mtp["energy_j"], mtp["tokens"]) == (4.0, 200.0, 200.0)   # 4 s at 50 J/s; 20 x 10
    assert (mtp["node_hour"], mtp["energy_kwh"], rows[("dflash2", 1)]["node_hour"]) == (2.10, 0.30, 3.0)
    for (target, conc), row in rows.items():
        prices = (3.0 if target == "dflash2" else 2.10, 0.30)
        expected = _by_hand(r, target, 0 if conc == 1 else 1, *prices)
        assert row["cost_per_m_tokens"] == pytest.approx(expected, abs=1e-4), (target, conc)
        assert row["cost_per_m_tokens"] == pytest.approx(
            Prices(*prices).per_million_tokens(row["window_s"], row["energy_j"], row["tokens"]), abs=1e-4)
    # (4 / 3600 x 2.10 + 200 / 3.6e6 x 0.30) / 200 x 1e6 = 11.75; mtp at C=8 makes 300 tokens: 7.833
    assert (mtp["cost_per_m_tokens"], rows[("mtp", 8)]["cost_per_m_tokens"]) == (11.75, 7.8333)
    line = "  cost per M output tokens, each at its cheapest level: dflash2 5.61 at C=1, mtp 7.83 at C=8"
    assert line in answer.answer_text(analysis.open_results(folder), str(folder), "r").splitlines()
    assert [f.text for f in verdict(load_report(folder)) if f.text.startswith("cost per M")] == [line.strip()]


def test_priced_energy_without_telemetry_is_unknown_and_no_prices_no_rows(tmp_path):
    folder, r = _run(tmp_path / "a", {"cost": {"node_hour": 2.10, "energy_kwh": 0.30}, "targets": TARGETS})
    r.rows["gpu_samples"] = [g for g in r.rows["gpu_samples"] if g["target"] != "mtp"]
    r.write(tmp_path / "a")
    rows = analysis.run_query(analysis.open_results(folder), "cost").to_pylist()
    assert {x["target"]: x["cost_per_m_tokens"] is None for x in rows} == {"mtp": True, "dflash2": False}
    free_energy, _ = _run(tmp_path / "b", {"cost": {"node_hour": 2.10}, "targets": TARGETS[:1]})
    priced = analysis.run_query(analysis.open_results(free_energy), "cost").to_pylist()
    # node time only: (4 / 3600 x 2.10) / 200 x 1e6
    assert [x["cost_per_m_tokens"] for x in priced if x["target"] == "mtp"][0] == round(4 / 3600 * 2.10 / 200 * 1e6, 4)
    unpriced, _ = _run(tmp_path / "c", {"targets": TARGETS[:1]})
    assert analysis.run_query(analysis.open_results(unpriced), "cost").num_rows == 0
