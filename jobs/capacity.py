"""Capacity test: a concurrency (or rate) sweep on one or more targets.

    python -m jobs.capacity --config jobs/experiments/seed-sweep.toml [--results DIR]
    ray job submit --working-dir . -- python -m jobs.capacity --config jobs/experiments/seed-sweep.toml
"""

from loadgen.driver import stop

if __name__ == "__main__":
    stop.install()   # first: a stop signal during the slow imports (Ray's) is noted and acted on, no traceback
    from loadgen.driver.capacity import CAPACITY_QUERIES, job_main
    job_main("python -m jobs.capacity", __doc__, CAPACITY_QUERIES, fleet=False)
