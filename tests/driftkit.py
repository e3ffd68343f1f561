"""A twin that watches its node (docs/twin.md): an emulated node measured and fitted, then a measured run of nodes
that watch that twin (`watch_twin`), one of them possibly stuck in a low-power state (`--fault degraded-power`).

Used by tests/integration/test_drift.py and tests/benchmarks/bench_drift.py.
"""

from __future__ import annotations

from pathlib import Path

from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis, answer
from loadgen.twin.fit import fit_twin
from loadgen.twin.observe import read_source
from plankit import PROMPTS
from twinkit import measure

LEVELS = [2, 8]          # fitted and checked at these levels
WINDOW = {"warmup_s": 2.0, "measure_s": 4.0, "min_measured_requests": 16, "drain_timeout_s": 120.0}


def fitted_twin(url: str, folder: Path) -> Path:
    """The emulator at `url` measured at LEVELS and fitted; the twin file."""
    results = folder / "source"
    run_id = measure(url, LEVELS, results, PROMPTS, requests=16)
    twin = folder / "node.toml"
    fit_twin(read_source(results, run_id, None)).save(twin)
    return twin


def watched_run(urls: dict[str, str], twin: Path, results: Path, name: str = "drift") -> tuple[str, str]:
    """One measured run of `urls` (node name -> url), every node watching `twin`; its run id and answer text."""
    exp = parse_experiment({
        "run": {"name": name}, "load": {"concurrency": LEVELS, **WINDOW}, "prompts": PROMPTS,
        "targets": [{"name": node, "url": url, "node": node, "watch_twin": str(twin)} for node, url in urls.items()]},
        Path("."))
    outcome = run_experiment(exp, str(results), log=lambda *a: None)
    assert outcome.status == "complete", outcome.reason
    con = analysis.open_results(results, [outcome.run_id])
    text = answer.answer_text(con, str(results), outcome.run_id)
    con.close()
    return outcome.run_id, text


def drifted(results: Path, run_id: str) -> dict[str, bool]:
    """Per node of the run: fleet_nodes' drift at any level."""
    con = analysis.open_results(results, [run_id])
    out: dict[str, bool] = {}
    for r in analysis.run_query(con, "fleet_nodes").to_pylist():
        out[r["node"]] = out.get(r["node"], False) or bool(r["drift"])
    con.close()
    return out
