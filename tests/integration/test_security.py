"""Secrets stay out of results, logs and job metadata; traffic goes only to the configured target; names
and ids that reach a path or SQL are refused or bound, never spliced in."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from faultkit import EMU, truth
from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.emulator.launch import EmulatorThread
from loadgen.errors import ConfigError, LoadgenError
from loadgen.results import analysis

SECRET = "sk-loadgen-test-5e3f1c9a7b"


def _every_text(results: Path) -> str:
    """Every string cell of every table, plus every non-Parquet file (logs), as one text."""
    con = duckdb.connect()
    out = []
    for table_dir in results.iterdir():
        files = list(table_dir.rglob("*.parquet"))
        if files:
            rel = con.sql(f"SELECT * FROM read_parquet('{table_dir}/*/*.parquet', union_by_name=true)")
            out += [json.dumps(row, default=str) for row in rel.fetchall()]
    out += [p.read_text(errors="replace") for p in results.rglob("*") if p.is_file() and p.suffix != ".parquet"]
    return "\n".join(out)


def test_api_key_from_a_file_is_used_and_never_written(ray_local, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(SECRET + "\n")
    log: list[str] = []
    with EmulatorThread([*EMU, "--api-key", SECRET]) as emu:
        url = f"http://127.0.0.1:{emu.port}"
        exp = parse_experiment({"run": {"name": "sec"}, "load": {"concurrency": [2], "requests": 6},
                                "prompts": {"max_new_tokens": 8},
                                "targets": [{"name": "emu", "url": url, "api_key_file": str(key_file)}]}, tmp_path)
        result = run_experiment(exp, str(tmp_path / "results"), log=log.append)
    con = analysis.open_results(result.results_dir, [result.run_id])
    statuses = [s for (s,) in con.execute("SELECT status FROM requests").fetchall()]
    assert result.status == "complete" and statuses == ["ok"] * 6  # the key was sent: the server accepted
    text = _every_text(tmp_path / "results")
    assert str(key_file) in text                                   # the config names where the key is ...
    assert SECRET not in text and SECRET not in "\n".join(log)     # ... never the key itself


def test_a_key_in_the_config_itself_is_refused(tmp_path):
    with pytest.raises(ConfigError) as exc:
        parse_experiment({"load": {"concurrency": [1]},
                          "targets": [{"name": "a", "url": "http://127.0.0.1:1", "api_key": SECRET}]}, tmp_path)
    assert exc.value.key == "targets[0].api_key" and "api_key_env" in exc.value.fix and SECRET not in str(exc.value)


def test_traffic_goes_only_to_the_target(ray_local, emulator_factory, tmp_path):
    """Every request row is one the configured server received (no other endpoint was used for load)."""
    with emulator_factory(*EMU) as url:
        exp = parse_experiment({"run": {"name": "only"}, "load": {"concurrency": [2], "requests": 6},
                                "prompts": {"max_new_tokens": 8}, "targets": [{"name": "emu", "url": url}]}, tmp_path)
        result = run_experiment(exp, str(tmp_path / "r"), log=lambda *a: None)
        seen = {t["rid"] for t in truth(url)}
    con = analysis.open_results(result.results_dir, [result.run_id])
    assert {r for (r,) in con.execute("SELECT request_id FROM requests").fetchall()} == seen
    [(target_urls,)] = con.execute("SELECT list(DISTINCT target) FROM requests").fetchall()
    assert target_urls == ["emu"]


@pytest.mark.parametrize("name", ["../../etc/x", "a/b", "a b", "x'; DROP TABLE runs; --", ".hidden", "", "é"])
def test_unsafe_run_and_target_names_are_refused(name, tmp_path):
    for data, key in (({"run": {"name": name}, "load": {"concurrency": [1]},
                        "targets": [{"name": "a", "url": "http://127.0.0.1:1"}]}, "run.name"),
                      ({"load": {"concurrency": [1]}, "targets": [{"name": name, "url": "http://127.0.0.1:1"}]},
                       "targets[0].name")):
        with pytest.raises(ConfigError) as exc:
            parse_experiment(data, tmp_path)
        assert exc.value.key == key and "letters, digits" in exc.value.fix


def test_run_ids_reach_sql_as_bound_values(tmp_path):
    from sqlfixtures import Results
    res = Results()
    res.run("r1")
    res.run("r2")
    res.step("r1", 0, "t")
    res.step("r2", 0, "t")
    folder = res.write(tmp_path)
    with pytest.raises(LoadgenError, match="not in"):   # an injection attempt is just an unknown id
        analysis.open_results(folder, ["r1' OR '1'='1"])
    con = analysis.open_results(folder, ["r1"])
    assert con.execute("SELECT DISTINCT run_id FROM steps").fetchall() == [("r1",)]
