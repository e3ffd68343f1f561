"""Capacity test: a concurrency sweep on one or more targets.

    python -m jobs.capacity --config jobs/experiments/seed-sweep.toml [--results DIR]
    ray job submit --working-dir . -- python -m jobs.capacity --config jobs/experiments/seed-sweep.toml
"""

from __future__ import annotations

import argparse
import sys
import time

from loadgen.errors import LoadgenError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="experiment TOML file")
    parser.add_argument("--results", help="results folder (default: run.results in the file, else ./results)")
    parser.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    args = parser.parse_args(argv)
    try:
        from loadgen.capacity import run_capacity
        return run_capacity(args.config, args.results, args.ray_address)
    except LoadgenError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"wall time {time.monotonic() - started:.1f} s", flush=True)
    sys.exit(code)
