"""Fleet test: the same workload on every node of a fleet, a server configuration at a time.

    python -m jobs.fleet --config jobs/experiments/draft-budget-sweep.toml [--results DIR]
    ray job submit --working-dir . -- python -m jobs.fleet --config jobs/experiments/draft-budget-sweep.toml

The experiment's [fleet] table names the fleet file (nodes) and the launch profiles to sweep; see
infra/README.md. Prints each node against the fleet median and the fleet's summed capacity.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

from loadgen.errors import ConfigError, LoadgenError

log = functools.partial(print, flush=True)


def run_fleet(config: str, results: str | None, ray_address: str | None) -> int:
    from loadgen import analysis, ray_setup
    from loadgen.config import load_experiment
    from loadgen.runner import run_experiment
    exp = load_experiment(config)   # the fleet file and every profile are validated here, before Ray
    if exp.fleet is None:
        raise ConfigError("fleet", "this experiment has no [fleet] table", "use python -m jobs.capacity for it")
    ray_setup.connect(ray_address)
    result = run_experiment(exp, results or exp.results or "results", log=log)
    con = analysis.open_results(result.results_dir, [result.run_id])
    log(f"\nrun {result.run_id}: {result.status}{' - ' + result.reason if result.reason else ''}")
    for query in ("fleet_nodes", "fleet_capacity"):
        log(f"\n{query}:\n" + analysis.render(analysis.run_query(con, query), "table"))
    log(f"results: {result.results_dir}  (loadgen query fleet_nodes --results {result.results_dir})")
    return 0 if result.status == "complete" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="experiment TOML file with a [fleet] table")
    parser.add_argument("--results", help="results folder (default: run.results in the file, else ./results)")
    parser.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    args = parser.parse_args(argv)
    try:
        return run_fleet(args.config, args.results, args.ray_address)
    except LoadgenError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"wall time {time.monotonic() - started:.1f} s", flush=True)
    sys.exit(code)
