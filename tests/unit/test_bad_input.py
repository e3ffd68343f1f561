"""Bad input beyond the experiment file (tests/unit/test_config.py has 49 of those): CLI flags, results folders,
query run ids, prompt files. Each is refused before any load with a message naming the key/value and the fix."""

from __future__ import annotations

import errno
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen import cli
from loadgen.config import parse_experiment
from loadgen.errors import ConfigError, LoadgenError
from loadgen.results import schema
from loadgen.results.analysis import open_results
from loadgen.results.sink import ResultsWriter, SinkError, check_writable
from sqlfixtures import Results


@pytest.mark.parametrize("url,problem", [
    ("127.0.0.1:30000", "not an http://host:port URL"),
    ("https://127.0.0.1:30000", "not an http://host:port URL"),
    ("http://127.0.0.1:99999", "bad port"),
    ("http://127.0.0.1:30000/generate", "has a path"),
])
def test_bad_run_urls(url, problem, capsys, tmp_path):
    code = cli.main(["run", "--url", url, "--concurrency", "1", "--requests", "1", "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--url" in err and problem in err and "fix:" in err, err


def test_missing_prompt_file_names_the_key_and_path(tmp_path):
    with pytest.raises(ConfigError) as exc:
        parse_experiment({"load": {"concurrency": [1]},
                          "prompts": {"sources": [{"format": "jsonl", "path": "nope/prompts.jsonl"}]},
                          "targets": [{"name": "a", "url": "http://127.0.0.1:1"}]}, tmp_path)
    assert exc.value.key == "prompts.sources[0].path" and "nope/prompts.jsonl" in str(exc.value) and exc.value.fix


def test_missing_config_file(capsys, tmp_path):
    code = cli.main(["capacity", "--config", str(tmp_path / "missing.toml")])
    err = capsys.readouterr().err
    assert code == 2 and "--config" in err and "missing.toml" in err and "fix:" in err


def test_config_that_is_not_toml(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[load\nconcurrency = [1]\n")
    code = cli.main(["capacity", "--config", str(bad)])
    assert code == 2 and "not valid TOML" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_unwritable_results_folder_refused_up_front(where, tmp_path):
    if where == "under-a-file":
        (tmp_path / "f").write_text("x")
        target = tmp_path / "f" / "results"
    else:
        target = Path("/proc/loadgen-results")      # read-only even for root
    with pytest.raises(SinkError) as exc:
        check_writable(target)
    assert str(target) in str(exc.value) and "fix:" in str(exc.value)


def test_disk_full_mid_run_keeps_what_was_written(tmp_path, monkeypatch):
    """ENOSPC while rolling a part file: no partial file is visible, the rows are kept in memory, the error
    says what to do, and once space is back the next flush writes them; earlier files are untouched."""
    writer = ResultsWriter(str(tmp_path), "r1")
    batch = schema.batch_from_rows("steps", [{"run_id": "r1", "step_id": 0, "target": "t"}])
    writer.write("steps", batch)
    writer.flush()
    before = sorted(tmp_path.rglob("*.parquet"))
    real = pq.write_table

    def full(table, where, **kw):
        Path(where).write_bytes(b"PAR1 half a file")   # what a full disk leaves behind
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(pq, "write_table", full)
    writer.write("steps", schema.batch_from_rows("steps", [{"run_id": "r1", "step_id": 1, "target": "t"}]))
    with pytest.raises(SinkError) as exc:
        writer.flush()
    assert "No space left" in str(exc.value) and "fix:" in str(exc.value)
    assert sorted(tmp_path.rglob("*.parquet")) == before and not list(tmp_path.rglob(".*.tmp"))
    monkeypatch.setattr(pq, "write_table", real)
    assert writer.flush()["steps"] == 2
    steps = pa.concat_tables(pq.read_table(p) for p in tmp_path.glob("steps/*/*.parquet"))
    assert sorted(steps["step_id"].to_pylist()) == [0, 1]


def test_a_steps_row_reaches_disk_only_after_the_rows_it_stands_for(tmp_path, monkeypatch):
    """The disk fills while a step's rows are flushed: its steps row (resume keeps a step by it) must not be
    on disk without its requests, and the run row of a run's end comes after both."""
    writer = ResultsWriter(str(tmp_path), "r1")
    real, written = pq.write_table, []

    def full_at_requests(table, where, **kw):
        if "requests" in str(where):
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(Path(where).parts[-3])
        real(table, where, **kw)
    monkeypatch.setattr(pq, "write_table", full_at_requests)
    for name in ("runs", "steps", "requests", "frames", "client_samples"):   # the order a step's end sends them
        writer.write(name, schema.batch_from_rows(name, [{"run_id": "r1", "step_id": 0}]))
    with pytest.raises(SinkError):
        writer.flush()
    assert "steps" not in written and "runs" not in written
    monkeypatch.setattr(pq, "write_table", lambda table, where, **kw: (written.append(Path(where).parts[-3]),
                                                                         real(table, where, **kw)))
    written.clear()
    writer.flush()
    assert written[-2:] == ["steps", "runs"] and "requests" in written


@pytest.fixture
def folder(tmp_path) -> Path:
    res = Results()
    res.run("r1")
    res.step("r1", 0, "t")
    return res.write(tmp_path)


@pytest.mark.parametrize("run_id", ["nope", "r1' OR '1'='1", "../r1", "r1; DROP TABLE runs"])
def test_run_ids_that_do_not_exist(run_id, folder, capsys):
    code = cli.main(["query", "runs", "--results", str(folder), "--run", run_id])
    err = capsys.readouterr().err
    assert code == 2 and run_id in err and "r1" in err and "loadgen query runs" in err, err


def test_results_folder_from_a_newer_schema(folder, capsys):
    runs = next(folder.glob("runs/*/*.parquet"))
    t = pq.read_table(runs)
    pq.write_table(t.set_column(t.schema.get_field_index("schema_version"), "schema_version",
                                pa.array([schema.SCHEMA_VERSION + 1] * t.num_rows, pa.int32())), runs)
    code = cli.main(["query", "runs", "--results", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "newer" in err and "upgrade loadgen" in err


def test_not_a_results_folder(tmp_path, capsys):
    code = cli.main(["report", "--results", str(tmp_path)])
    assert code == 2 and "not a loadgen results folder" in capsys.readouterr().err


def test_unknown_query_name(folder, capsys):
    code = cli.main(["query", "no_such_query", "--results", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "no_such_query" in err and "available:" in err


def test_open_results_refuses_before_reading_anything_else(folder):
    with pytest.raises(LoadgenError, match="not in"):
        open_results(folder, ["r1", "r2"])
