"""Helpers for the fault tests: a fixed-count run against an emulator, its rows, and the emulator's own log."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from loadgen.config import parse_experiment
from loadgen.driver.runner import RunResult, run_experiment
from loadgen.results import analysis

EMU = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--time-scale", "50")


def truth(url: str) -> list[dict]:
    """Every request the emulator received, with the fault it injected (`fault`: null or a record)."""
    return ledger(url)["requests"]


def ledger(url: str) -> dict:
    """The emulator's /emulator/requests: `requests` (as `truth`) and `keepalive_closed` (the requests it closed
    unanswered under --fault-keepalive-requests)."""
    with urllib.request.urlopen(f"{url}/emulator/requests", timeout=10) as resp:
        return json.load(resp)


def run(url: str, results: Path, log: list[str] | None = None, concurrency=(8,), requests: int = 40,
        max_tokens: int = 24, **load) -> RunResult:
    exp = parse_experiment({
        "run": {"name": "faults"},
        "load": {"concurrency": list(concurrency), "requests": requests, **load},
        "prompts": {"seed": 1, "max_new_tokens": max_tokens},
        "targets": [{"name": "emu", "url": url}],
    }, Path("."))
    return run_experiment(exp, str(results), log=(log.append if log is not None else lambda *a: None))


def rows(result: RunResult, sql: str = "SELECT * FROM requests") -> list[dict]:
    con = analysis.open_results(result.results_dir, [result.run_id])
    return con.sql(sql).to_arrow_table().to_pylist()
