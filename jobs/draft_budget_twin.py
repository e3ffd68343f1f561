"""The field report's next experiment, twin first: does a lower DFlash2 draft budget move its crossover with MTP?

    python -m jobs.draft_budget_twin --config jobs/experiments/draft-budget-twin.toml [--results DIR]

Measures MTP and DFlash2 (budget 8) at three levels, fits a twin of each, predicts budgets 4 and 6 (and 8) at every
level, then confirms each budget's crossover with the twin-seeded search; prints where the crossover moves,
predicted and measured (loadgen/campaigns/budget.py, docs/twin.md).
"""

import argparse
import functools
import sys
import time

from loadgen.campaigns.budget import run_job
from loadgen.errors import LoadgenError, user_message

log = functools.partial(print, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m jobs.draft_budget_twin", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the job's TOML file (an experiment with a [job] table)")
    parser.add_argument("--results", help="results folder (default: run.results in the file, else ./results)")
    parser.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        code = run_job(args.config, args.results, args.ray_address, log=log)
    except LoadgenError as exc:
        print(f"error: {user_message(exc)}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt as exc:
        print(f"run stopped ({str(exc) or 'interrupted'}); what was measured is kept", file=sys.stderr, flush=True)
        sys.exit(130)
    log(f"wall time {time.monotonic() - started:.1f} s")
    sys.exit(code)


if __name__ == "__main__":
    main()
