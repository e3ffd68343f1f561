"""`ray job submit` against a `ray start --head` cluster on loopback runs the capacity job end to end."""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb

from conftest import ray_head, submit_job

REPO = Path(__file__).parents[1]
EXPERIMENT = """
[run]
name = "submitted"
[load]
concurrency = [2]
warmup_s = 0.5
measure_s = 2.0
[prompts]
max_new_tokens = 16
ignore_eos = true
[[targets]]
name = "mtp"
[targets.emulator]
model-path = "m"
speculative-algorithm = "NEXTN"
speculative-num-steps = 3
speculative-eagle-topk = 1
speculative-num-draft-tokens = 4
"""


def test_ray_job_submit_runs_the_capacity_job(tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text(EXPERIMENT)
    results = tmp_path / "results"
    ray_dir = tempfile.mkdtemp(prefix="lgr-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    with ray_head(ray_dir) as address:
        job = submit_job(address, ["python3", "-m", "jobs.capacity", "--config", str(config),
                                   "--results", str(results)])
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert "emulated" in job.stdout and "succeeded" in job.stdout
    glob = f"{results}/requests/*/*.parquet"
    ok, measured = duckdb.sql(f"SELECT count(*) FILTER (status = 'ok'), count(*) FILTER (phase = 'measure') "
                              f"FROM read_parquet('{glob}')").fetchall()[0]
    assert ok > 0 and measured > 0
    status = duckdb.sql(f"SELECT status FROM read_parquet('{results}/runs/*/*.parquet') "
                        "ORDER BY finished_at_ns DESC NULLS LAST LIMIT 1").fetchall()
    assert status == [("complete",)]
