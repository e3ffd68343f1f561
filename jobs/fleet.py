"""Fleet test: the same workload on every node of a fleet, a server configuration at a time.

    python -m jobs.fleet --config jobs/experiments/draft-budget-sweep.toml [--results DIR]
    ray job submit --working-dir . -- python -m jobs.fleet --config jobs/experiments/draft-budget-sweep.toml

The experiment's [fleet] table names the fleet file (nodes) and the launch profiles to sweep; see
infra/README.md. Prints each node against the fleet median and the fleet's summed capacity.
"""

from loadgen.driver import stop

if __name__ == "__main__":
    stop.install()   # first: a stop signal during the slow imports (Ray's) is noted and acted on, no traceback
    from loadgen.driver.capacity import FLEET_QUERIES, job_main
    job_main("python -m jobs.fleet", __doc__, FLEET_QUERIES, fleet=True)
