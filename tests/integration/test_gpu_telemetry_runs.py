"""GPU telemetry: the emulator's modelled GPU read through the DCGM reader the sampler uses (healthy against
--fault degraded-power), the exporter parser on dcgm-exporter's own page shape, /proc/meminfo's unified memory,
which GPU each target's sampler reads, and the sampler inside a real run (real Ray, a real emulator). NVML needs
an NVIDIA driver: its test skips here with the reason (tests/gpu/nvml_check.py is the check on a real GPU)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loadgen.config import TargetConfig, parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis
from loadgen.servers.telemetry import dcgm
from loadgen.servers.telemetry.readings import GpuReading


def read(url: str) -> GpuReading:
    async def once() -> GpuReading:
        reader = dcgm.DcgmReader(f"{url}/emulator/dcgm/metrics", None)
        try:
            await reader.open()
            return (await reader.read())[0]
        finally:
            await reader.close()
    return asyncio.run(once())


def target(**kw) -> TargetConfig:
    return TargetConfig(**{"name": "t", "flavor": "sglang", "url": None, "emulator_args": (), "node": "n",
                           "api_key_env": None, **kw})


@pytest.fixture(scope="module")
def sampled_run(ray_local, emulator_factory, tmp_path_factory):
    results = tmp_path_factory.mktemp("gpu")
    with emulator_factory("--model-path", "m", "--speculative-algorithm", "NEXTN", "--time-scale", "5") as url, \
         emulator_factory("--model-path", "m", "--hardware", "zero") as no_gpu:   # a server with no GPU to read
        exp = parse_experiment({"run": {"name": "gpu"}, "load": {"concurrency": [2, 4], "warmup_s": 0.5,
                                                                 "measure_s": 2.5, "drain_timeout_s": 20.0},
                                "prompts": {"max_new_tokens": 64},
                                "targets": [{"name": "emu", "url": url}, {"name": "nogpu", "url": no_gpu}]},
                               Path("."))
        lines: list[str] = []
        outcome = run_experiment(exp, str(results), log=lines.append)
    return outcome, analysis.open_results(outcome.results_dir, [outcome.run_id]), lines


def test_the_sampler_marks_every_step_and_samples_once_a_second_between(sampled_run):
    outcome, con, lines = sampled_run
    assert outcome.status == "complete", outcome.reason
    said = ": GPU telemetry from each emulator's modelled DCGM exporter"   # once for the targets it holds for
    assert any(line.startswith("target emu on ") and said in line for line in lines), lines
    marks = con.execute("SELECT step_id, moment, count(*) FROM gpu_samples WHERE moment <> 'during' "
                        "GROUP BY ALL ORDER BY ALL").fetchall()
    assert marks == [(0, "step_end", 1), (0, "step_start", 1), (1, "step_end", 1), (1, "step_start", 1)]
    gaps = [g for (g,) in con.execute(
        "SELECT (t_ns - lag(t_ns) OVER (ORDER BY t_ns)) / 1e9 FROM gpu_samples WHERE moment = 'during'").fetchall()
        if g is not None]
    assert len(gaps) >= 5 and 0.8 < sorted(gaps)[len(gaps) // 2] < 1.2   # once a second
    [(name, host)] = con.execute("SELECT DISTINCT hardware ->> '$.gpus[0].name', hardware ->> 'host' "
                                 "FROM steps WHERE target = 'emu'").fetchall()
    assert name == "NVIDIA GB10" and host


def test_a_server_without_a_gpu_to_read_is_one_line_and_nothing_else(sampled_run):
    outcome, con, lines = sampled_run
    said = [line for line in lines if line.startswith("target nogpu: no GPU telemetry")]
    assert len(said) == 1 and "answered HTTP 404" in said[0], lines
    assert con.execute("SELECT count(*) FROM gpu_samples WHERE target = 'nogpu'").fetchall() == [(0,)]
    assert con.execute("SELECT DISTINCT hardware ->> 'unavailable' FROM steps WHERE target = 'nogpu'"
                       ).fetchall() == [(said[0].split("no GPU telemetry: ")[1],)]
    assert con.execute("SELECT count(*) FROM requests WHERE target = 'nogpu' AND status = 'ok'").fetchall()[0][0] > 0


def test_gpu_by_step_and_energy_on_a_real_run(sampled_run):
    outcome, con, _ = sampled_run
    rows = analysis.run_query(con, "gpu_by_step").to_pylist()
    assert [(r["target"], r["concurrency"]) for r in rows] == [("emu", 2), ("emu", 4)]
    for r in rows:
        assert r["sm_clock_median_mhz"] == 2405 and r["throttled_pct"] == 0 and r["energy_method"] == "counter"
        assert 15 < r["power_p50_w"] <= 140 and r["energy_j"] > 0
        # the window's energy at the window's mean power: modelled seconds = wall x time scale (5)
        assert r["energy_j"] / (r["window_s"] * 5) == pytest.approx(r["power_p50_w"], rel=0.35)
    energy = analysis.run_query(con, "energy").to_pylist()
    assert [r["concurrency"] for r in energy] == [2, 4] and all(r["tok_per_j"] > 0 for r in energy)
    # one target with telemetry: no peer to compare, no hardware row
    assert [r for r in analysis.run_query(con, "confounders").to_pylist() if r["note"]] == []
