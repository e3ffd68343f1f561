"""Live metrics through Ray's metrics: a `ray start --head` cluster on loopback with a known metrics export port
runs the capacity job against an emulator; its Prometheus endpoint, scraped while the job runs, serves loadgen's
series, whose values agree with the run's own rows (requests done = its requests rows, tok/s within the run's own
range, TTFT quantiles within its TTFTs, SLO attainment its own, GPU power the emulator's modelled board)."""

from __future__ import annotations

import json
import tempfile
import threading
import urllib.request

import duckdb
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ray_head, small_job_toml, submit_job
from loadgen.servers.ports import free_port

EXPERIMENT = small_job_toml("live", "3", max_new_tokens=48, measure_s=10.0,
                            extra="time-scale = 4\n[slo]\nttft_ms = 400\n")


def scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    """loadgen's samples on the endpoint: name -> [(labels, value)]."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "loadgen_" in s.name:
                found.setdefault(s.name, []).append((s.labels, s.value))
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The job, its Prometheus endpoint scraped every second while `ray job submit` waits on it: (scrapes,
    results folder). Ray reports a process's metrics every second here (metrics_report_interval_ms), so the
    driver's last export reaches the endpoint before the job ends."""
    tmp = tmp_path_factory.mktemp("live")
    config = tmp / "exp.toml"
    config.write_text(EXPERIMENT)
    results = tmp / "results"
    port = free_port()
    ray_dir = tempfile.mkdtemp(prefix="lgm-", dir="/tmp")   # short: Ray's socket paths must fit in 107 bytes
    with ray_head(ray_dir, f"--metrics-export-port={port}",
                  f"--system-config={json.dumps({'metrics_report_interval_ms': 1000})}") as head:
        jobs: list = []
        submit = threading.Thread(target=lambda: jobs.append(submit_job(
            head, ["python3", "-m", "jobs.capacity", "--config", str(config), "--results", str(results)],
            timeout_s=400)))
        submit.start()
        scrapes = []
        while submit.is_alive():
            scrapes.append(scrape(port))
            submit.join(1.0)
        [job] = jobs
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        yield scrapes, results


def _last(scrapes: list, name: str) -> list[tuple[dict, float]]:
    """The last scrape that holds `name`'s series."""
    held = [s[name] for s in scrapes if name in s]
    assert held, f"{name} never served; served: {sorted({n for s in scrapes for n in s})}"
    return held[-1]


@pytest.mark.timeout(600)
def test_requests_done_is_the_runs_own_count_of_rows(run):
    scrapes, results = run
    rows = duckdb.sql(f"SELECT count(*), count(*) FILTER (status NOT IN ('ok', 'cancelled')) "
                      f"FROM read_parquet('{results}/requests/*/*.parquet')").fetchall()[0]
    [(labels, done)] = _last(scrapes, "ray_loadgen_requests_done_total")
    assert (labels["target"], labels["step"], labels["level"]) == ("mtp", "0", "C=3")
    assert done == rows[0] > 20
    failed = [s["ray_loadgen_requests_failed_total"] for s in scrapes if "ray_loadgen_requests_failed_total" in s]
    assert sum(v for _, v in (failed or [[]])[-1]) == rows[1]   # a counter never increased is not served
    during = [s["ray_loadgen_requests_done_total"][0][1] for s in scrapes if "ray_loadgen_requests_done_total" in s]
    assert during == sorted(during) and during[0] < done      # served while the run went on, and growing


def test_tok_s_ttft_slo_and_gpu_are_the_runs_own(run):
    scrapes, results = run
    glob = f"{results}/requests/*/*.parquet"
    t0, t1, tokens, ttft_lo, ttft_hi, met, measured = duckdb.sql(
        f"SELECT min(t_sent_ns), max(t_done_ns), sum(completion_tokens), "
        f"min((t_first_token_ns - t_sent_ns) / 1e6), max((t_first_token_ns - t_sent_ns) / 1e6), "
        f"count(*) FILTER (phase = 'measure' AND status = 'ok' AND (t_first_token_ns - t_sent_ns) / 1e6 <= 400), "
        f"count(*) FILTER (phase = 'measure' AND status <> 'cancelled') FROM read_parquet('{glob}')").fetchall()[0]
    rate = tokens / ((t1 - t0) / 1e9)
    tok_s = [v for s in scrapes for _, v in s.get("ray_loadgen_output_tokens_per_second", [])]
    assert tok_s and all(0 <= v <= 1.5 * rate for v in tok_s) and max(tok_s) >= 0.5 * rate   # 0 before the first
    ttft = {labels["quantile"]: v for labels, v in _last(scrapes, "ray_loadgen_ttft_ms")}
    assert set(ttft) == {"0.5", "0.9", "0.99"} and ttft_lo <= ttft["0.5"] <= ttft["0.9"] <= ttft["0.99"] <= ttft_hi
    assert {labels["quantile"] for labels, _ in _last(scrapes, "ray_loadgen_itl_ms")} == {"0.5", "0.9", "0.99"}
    [(_, attainment)] = _last(scrapes, "ray_loadgen_slo_attainment")
    assert attainment == pytest.approx(met / measured)
    power = _last(scrapes, "ray_loadgen_gpu_power_watts")
    clock = _last(scrapes, "ray_loadgen_gpu_sm_clock_mhz")
    assert power and all(0 < v < 2000 for _, v in power) and all(100 < v < 4000 for _, v in clock)
