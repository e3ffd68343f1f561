"""The capacity job's body: validate, run on Ray, print the comparison the user came for."""

from __future__ import annotations

import functools

from loadgen import analysis, ray_setup
from loadgen.config import load_experiment
from loadgen.runner import run_experiment

log = functools.partial(print, flush=True)


def run_capacity(config_path: str, results: str | None, ray_address: str | None) -> int:
    """Run an experiment file end to end; exit code 0 only if every step completed."""
    exp = load_experiment(config_path)   # every config error surfaces here, before Ray or any load
    ray_setup.connect(ray_address)
    result = run_experiment(exp, results or exp.results or "results", log=log)
    con = analysis.open_results(result.results_dir, [result.run_id])
    log(f"\nrun {result.run_id}: {result.status}{' - ' + result.reason if result.reason else ''}")
    log(analysis.render(analysis.run_query(con, "compare_algorithms"), "table"))
    log(f"results: {result.results_dir}  (loadgen query NAME --results {result.results_dir})")
    return 0 if result.status == "complete" else 1
