"""A results folder that fills up or becomes read-only in the middle of a run, on a real small filesystem (a
tmpfs mounted inside the test): the run stops with one line naming the problem and the fix, every file
written before stays readable by DuckDB, and nothing half-written is visible to the views."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from faultkit import EMU
from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.errors import LoadgenError
from loadgen.results import analysis
from loadgen.results.sink import MIN_FREE_BYTES, SinkError

REPO = Path(__file__).parents[2]
SIZE_MB = (MIN_FREE_BYTES >> 20) + 16    # just over what a run needs to be allowed to start


@pytest.fixture
def small_fs(tmp_path):
    """A tmpfs of SIZE_MB mounted at tmp_path/fs for this test only (root and mount(8) needed)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _after_step_files(results: Path, steps: int, fault) -> threading.Thread:
    """Once `steps` steps' rows are in files, inject `fault`. Rows, not files: every sink incarnation writes an
    empty file of each table first (a count of files would fire early if the sink actor were ever restarted)."""
    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rows = sum(pq.read_metadata(p).num_rows for p in results.glob("steps/run_id=*/part-*.parquet"))
            if rows >= steps:
                fault()
                return
            time.sleep(0.05)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _fill(folder: Path) -> None:
    """Write zeros until the filesystem says it is full."""
    with open(folder / "filler", "wb") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _check_folder(results: Path) -> dict[str, int]:
    """Every Parquet file reads on its own and through the views; no temporary file is matched by them.
    Returns rows per table."""
    for p in results.rglob("*.parquet"):
        pq.read_table(p)                      # whole and readable, each one
    visible = {Path(f) for (f,) in duckdb.sql(f"SELECT file FROM glob('{results}/*/run_id=*/*.parquet')").fetchall()}
    assert not [p for p in visible if p.name.startswith(".") or not p.name.startswith("part-")]
    con = analysis.open_results(str(results))
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("runs", "steps", "requests", "frames")}


EXPERIMENT = """
[run]
name = "{name}"
[load]
concurrency = [2]
repeats = 6
requests = 8
[prompts]
max_new_tokens = 16
[[targets]]
name = "emu"
url = "{url}"
"""


def test_disk_full_mid_run_stops_the_job_with_one_line(small_fs, emulator_factory, tmp_path):
    """The capacity job, as a user runs it: the tmpfs fills after the first step's files are written."""
    results = small_fs / "results"
    with emulator_factory(*EMU) as url:
        config = tmp_path / "full.toml"
        config.write_text(EXPERIMENT.format(name="full", url=url))
        filler = _after_step_files(results, 1, lambda: _fill(small_fs))
        job = subprocess.run([sys.executable, "-m", "jobs.capacity", "--config", str(config), "--results",
                              str(results)], capture_output=True, text=True, timeout=300, cwd=REPO)
        filler.join(5)
    errors = [line for line in job.stderr.splitlines() if line.startswith("error:")]
    assert job.returncode == 2, job.stdout[-2000:] + job.stderr[-3000:]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "fix:" in errors[0], job.stderr[-3000:]
    assert "Traceback" not in job.stderr and "Traceback" not in job.stdout
    steps_done = job.stdout.count("] done in")
    rows = _check_folder(results)
    files = {str(f.relative_to(results)): pq.read_metadata(f).num_rows for f in results.rglob("*.parquet")}
    assert 1 <= rows["steps"] <= steps_done < 6 and rows["runs"] == 1, (rows, files, job.stdout[-2000:])
    print(f"disk full: {steps_done} steps done, kept {rows}; {errors[0]}")
    assert rows["requests"] >= 8 * rows["steps"] and rows["frames"] > 0
    (small_fs / "filler").unlink()


def test_folder_made_read_only_mid_run(small_fs, ray_local, emulator_factory, tmp_path):
    """The filesystem is remounted read-only after two steps: the run raises SinkError (EROFS) and the files
    of those two steps are all there and readable."""
    results = small_fs / "results"

    def read_only() -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    with emulator_factory(*EMU) as url:
        exp = parse_experiment(__import__("tomllib").loads(EXPERIMENT.format(name="ro", url=url)), tmp_path)
        fault = _after_step_files(results, 2, read_only)
        lines: list[str] = []
        with pytest.raises(LoadgenError) as exc:
            run_experiment(exp, str(results), log=lines.append)
        fault.join(5)
    assert isinstance(exc.value, SinkError) and "\n" not in str(exc.value)
    assert "Read-only file system" in str(exc.value) and "fix:" in str(exc.value)
    rows = _check_folder(results)
    assert 2 <= rows["steps"] < 6 and rows["requests"] >= 16
    print(f"read-only: kept {rows}; {exc.value}")
    assert os.statvfs(small_fs).f_flag & os.ST_RDONLY


def test_a_server_whose_log_disk_is_full_keeps_running(tmp_path):
    """The pump between a launched server's output and its log, writing to /dev/full (every write: ENOSPC):
    it keeps draining, so a server printing 4 MiB (64 x a pipe's buffer) is neither blocked nor killed."""
    from loadgen.servers.process import _copy_masked
    server = subprocess.Popen([sys.executable, "-c", "import sys\nfor _ in range(4096): print('x' * 1023)\n"
                               "print('done', file=sys.stderr)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pump = threading.Thread(target=_copy_masked, args=(server.stdout, open("/dev/full", "ab"), []), daemon=True)
    pump.start()
    assert server.wait(30) == 0 and server.stderr.read() == b"done\n"
    pump.join(10)
    assert not pump.is_alive()
