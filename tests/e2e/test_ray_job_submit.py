"""`ray job submit` against a `ray start --head` cluster on loopback runs the capacity job end to end."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import duckdb
import pytest

from conftest import ray_head, small_job_toml, submit_job

REPO = Path(__file__).parents[2]
EXPERIMENT = small_job_toml("submitted", "2")


@pytest.fixture(scope="module")
def head():
    """One `ray start --head` cluster for this module's jobs."""
    ray_dir = tempfile.mkdtemp(prefix="lgr-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    with ray_head(ray_dir) as address:
        yield address


def test_ray_job_submit_runs_the_capacity_job(head, tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text(EXPERIMENT)
    results = tmp_path / "results"
    job = submit_job(head, ["python3", "-m", "jobs.capacity", "--config", str(config), "--results", str(results)])
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert "emulated" in job.stdout and "succeeded" in job.stdout
    glob = f"{results}/requests/*/*.parquet"
    ok, measured = duckdb.sql(f"SELECT count(*) FILTER (status = 'ok'), count(*) FILTER (phase = 'measure') "
                              f"FROM read_parquet('{glob}')").fetchall()[0]
    assert ok > 0 and measured > 0
    status = duckdb.sql(f"SELECT status FROM read_parquet('{results}/runs/*/*.parquet') "
                        "ORDER BY finished_at_ns DESC NULLS LAST LIMIT 1").fetchall()
    assert status == [("complete",)]


def test_results_of_a_submitted_job_outlive_its_working_dir(head, tmp_path):
    """Without --results, a job's results go to ~/loadgen-results on the driver's node (here HOME is set for
    the job), not under the job's temporary working directory; the path is printed absolute at the start and
    the end. The log has no Ray error line, and the drain's cut requests are not worded as failures."""
    config = tmp_path / "exp.toml"
    config.write_text(EXPERIMENT)
    home = tmp_path / "home"
    home.mkdir()
    job = submit_job(head, ["python3", "-m", "jobs.capacity", "--config", str(config)],
                     options=("--runtime-env-json", json.dumps({"env_vars": {"HOME": str(home)}})))
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    results = home / "loadgen-results"
    started = re.search(r"results go to (\S+)", job.stdout)
    ended = re.search(r"^results: (\S+)", job.stdout, re.M)
    assert started and ended, job.stdout[-3000:]
    assert Path(started.group(1)) == Path(ended.group(1)) == results
    [(status, version, commit)] = duckdb.sql(
        f"SELECT status, loadgen_version, git_commit FROM read_parquet('{results}/runs/*/*.parquet') "
        "ORDER BY finished_at_ns DESC NULLS LAST LIMIT 1").fetchall()
    assert status == "complete" and version
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{results}/requests/*/*.parquet') "
                      "WHERE status = 'ok'").fetchall()[0][0] > 0
    log = job.stdout + job.stderr
    assert "ERROR" not in log and "core_worker.cc" not in log, log[-3000:]
    assert re.search(r"done in [0-9.]+ s: \d+ cut at step end \(drain\), \d+ ok", log), log[-3000:]
    assert " cancelled" not in log
    # one voice: the workers print nothing (Ray would forward it as `(LoadWorker pid=...)`); the driver, in a log,
    # says the step's start and its summary as plain lines, no redraws or colour codes (the `ray job submit`
    # client colours its own lines)
    assert "LoadWorker" not in log and ".w0" not in log, log[-3000:]
    steps = [line for line in log.splitlines() if line.startswith("[step 1/1]")]
    assert len(steps) == 2 and not [line for line in steps if "\x1b[" in line or "\r" in line], log[-3000:]
    assert steps[0] == "[step 1/1] C=2 targets mtp repeat 0: warm-up 0.5 s, measure 2 s", steps
