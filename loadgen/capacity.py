"""The body of the Ray job entry points (jobs/capacity.py, jobs/fleet.py): validate, run, print the answer."""

from __future__ import annotations

import argparse
import functools
import sys
import time

from loadgen import analysis, ray_setup
from loadgen.config import load_experiment
from loadgen.errors import ConfigError, LoadgenError
from loadgen.runner import run_experiment

log = functools.partial(print, flush=True)

CAPACITY_QUERIES = ("compare_algorithms",)
FLEET_QUERIES = ("fleet_nodes", "fleet_capacity")


def run_capacity(config_path: str, results: str | None, ray_address: str | None,
                 queries: tuple[str, ...] = CAPACITY_QUERIES, fleet: bool = False) -> int:
    """Run an experiment file end to end and print `queries`; exit code 0 only if every step completed."""
    exp = load_experiment(config_path)   # every config error surfaces here, before Ray or any load
    if fleet and exp.fleet is None:
        raise ConfigError("fleet", "this experiment has no [fleet] table", "use python -m jobs.capacity for it")
    ray_setup.connect(ray_address)
    result = run_experiment(exp, results or exp.results or "results", log=log)
    con = analysis.open_results(result.results_dir, [result.run_id])
    log(f"\nrun {result.run_id}: {result.status}{' - ' + result.reason if result.reason else ''}")
    for query in queries:
        log(f"\n{query}:\n" + analysis.render(analysis.run_query(con, query), "table"))
    log(f"results: {result.results_dir}  (loadgen query {queries[0]} --results {result.results_dir})")
    return 0 if result.status == "complete" else 1


def job_main(prog: str, doc: str, queries: tuple[str, ...], fleet: bool) -> None:
    """Parse the entry point's flags, run, print errors as one line (exit 2) and the wall time."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument("--config", required=True, help="experiment TOML file")
    parser.add_argument("--results", help="results folder (default: run.results in the file, else ./results)")
    parser.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        code = run_capacity(args.config, args.results, args.ray_address, queries, fleet)
    except LoadgenError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        code = 2
    print(f"wall time {time.monotonic() - started:.1f} s", flush=True)
    sys.exit(code)
