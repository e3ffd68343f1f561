"""GPU telemetry against a server: the emulator's modelled GPU read through the DCGM reader the sampler uses
(healthy against --fault degraded-power), and the sampler inside a real run (real Ray, a real emulator)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from httpcalls import request
from loadgen.config import TargetConfig, parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.emulator.args import parse_args
from loadgen.emulator.launch import EmulatorThread
from loadgen.emulator.server import Emulator
from loadgen.results import analysis
from loadgen.servers.telemetry import dcgm
from loadgen.servers.telemetry.readings import GpuReading, TelemetryUnavailable

SCALE = 10.0   # the emulator runs the modelled GB10 ten times faster
BODY = {"text": "def f(x):\n    return x\n", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}


def read(url: str) -> GpuReading:
    async def once() -> GpuReading:
        reader = dcgm.DcgmReader(f"{url}/emulator/dcgm/metrics", None)
        try:
            await reader.open()
            return (await reader.read())[0]
        finally:
            await reader.close()
    return asyncio.run(once())


def loaded(emu: EmulatorThread, streams: int = 4) -> list[threading.Thread]:
    """`streams` requests of 400 tokens in flight (each its own thread); join them to wait."""
    threads = [threading.Thread(target=request, args=(emu.port, "POST", "/generate", BODY)) for _ in range(streams)]
    for t in threads:
        t.start()
    return threads


def under_load(*flags: str) -> tuple[GpuReading, GpuReading, float, int]:
    """Two readings 1 s apart while 4 streams decode; the wall seconds between them; tokens generated in them."""
    with EmulatorThread(["--speculative-algorithm", "NEXTN", "--time-scale", str(SCALE), *flags]) as emu:
        threads = loaded(emu)
        time.sleep(0.5)
        t0, tokens0, first = time.monotonic(), emu.call(lambda: emu.emu.engine.counters.generation_tokens_total), \
            read(emu.url)
        time.sleep(1.0)
        t1, tokens1, second = time.monotonic(), emu.call(lambda: emu.emu.engine.counters.generation_tokens_total), \
            read(emu.url)
        for t in threads:
            t.join()
        return first, second, t1 - t0, tokens1 - tokens0


def test_the_modelled_gpu_under_load_healthy_and_in_degraded_power():
    first, healthy, wall_s, tokens = under_load()
    _, degraded, _, slow_tokens = under_load("--fault", "degraded-power", "--degraded-power-factor", "3")
    # full clock and no reason while it works; the trap: a third of the clock, the software power cap
    assert (healthy.sm_clock_mhz, healthy.sm_clock_max_mhz, healthy.clock_reasons) == (2405, 2405, [])
    assert (degraded.sm_clock_mhz, degraded.clock_reasons) == (round(2405 / 3), ["sw_power_cap"])
    # capped at max / factor (a mean over the last second: lower when a loaded host delays the emulator's loop)
    assert 15 < degraded.power_w <= 140 / 3 + 0.01 < healthy.power_w <= 140
    # busy most of the second (not all of it on a loaded machine: the emulator's loop then lags between forwards)
    assert healthy.utilization_pct > 50 and healthy.gpu_uuid.startswith("GPU-")
    # a third of the speed: the same forward takes three times as long (the cost model's own time, which no load
    # on this machine changes; the tokens each produced in the same wall second say the same, loosely)
    healthy_emu, degraded_emu = (Emulator(parse_args(["--model-path", "m", "--speculative-algorithm", "NEXTN", *f]))
                                 for f in ([], ["--fault", "degraded-power"]))
    batch = [300] * 4
    assert degraded_emu.cost.decode(batch).seconds == pytest.approx(3 * healthy_emu.cost.decode(batch).seconds)
    assert slow_tokens < tokens
    # the energy counter counts modelled time: it grows power x wall x time scale (the power is steady)
    assert healthy.energy_j > first.energy_j
    assert (healthy.energy_j - first.energy_j) / (wall_s * SCALE) == pytest.approx(healthy.power_w, rel=0.25)
    assert degraded.power_violation_s > 0 and healthy.power_violation_s == 0


def test_an_idle_modelled_gpu_says_idle_and_its_counter_grows_at_idle_power():
    with EmulatorThread(["--time-scale", str(SCALE)]) as emu:
        t0 = time.monotonic()
        a = read(emu.url)
        t1 = time.monotonic()
        time.sleep(0.5)
        t2 = time.monotonic()
        b = read(emu.url)
        t3 = time.monotonic()
    assert (b.sm_clock_mhz, b.power_w, b.clock_reasons, b.utilization_pct) == (208, 15.0, ["idle"], 0)
    # 15 W of modelled time between the two reads, whenever exactly each was taken
    assert 15.0 * SCALE * (t2 - t1) * 0.99 <= b.energy_j - a.energy_j <= 15.0 * SCALE * (t3 - t0) * 1.01 + 0.01


def test_a_hardware_profile_without_a_gpu_serves_no_exporter():
    with EmulatorThread(["--hardware", "zero"]) as emu:
        assert request(emu.port, "GET", "/emulator/dcgm/metrics")[0] == 404
        with pytest.raises(TelemetryUnavailable, match="answered HTTP 404"):
            read(emu.url)


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
