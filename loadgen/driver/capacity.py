"""The body of the Ray job entry points (jobs/capacity.py, jobs/fleet.py): validate, run, print the answer."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

if not sys.stdout.isatty():
    # A log (`ray job logs`, a file, CI), not a terminal: what Ray forwards from the actors (their warnings and
    # errors; the workers print no progress, the driver shows it) comes without colour codes and without folding
    # similar lines of different actors into `[repeated Nx]`. Ray reads both when it is imported (below).
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")

from loadgen import __version__  # noqa: E402
from loadgen.config import load_experiment  # noqa: E402
from loadgen.driver import ray_setup, reach, stop
from loadgen.driver.resume import load_resume  # noqa: E402
from loadgen.driver.runner import RunResult, run_experiment  # noqa: E402
from loadgen.errors import ConfigError, LoadgenError, user_message  # noqa: E402
from loadgen.results import analysis, answer
from loadgen.results.folder import JOB_RESULTS, results_folder  # noqa: E402
from loadgen.results.sink import check_writable  # noqa: E402
from loadgen.results.slo import parse_slo_flag  # noqa: E402
from loadgen.twin.predict import run_predicted, twin_targets  # noqa: E402

log = functools.partial(print, flush=True)

CAPACITY_QUERIES: tuple[str, ...] = ()   # the answer (loadgen/results/answer.py) is the capacity job's output
FLEET_QUERIES = ("fleet_nodes", "fleet_capacity")


def run_capacity(config_path: str, results: str | None, ray_address: str | None,
                 queries: tuple[str, ...] = CAPACITY_QUERIES, fleet: bool = False, slo: str | None = None,
                 resume: str | None = None, started: float | None = None) -> int:
    """Run an experiment file end to end and print the answer and `queries`; exit code 0 only if every step
    completed. `slo`: the --slo flag (`ttft_ms=2000,tpot_ms=100`), over the file's [slo]. `resume`: a run id
    to continue (docs/failures.md), checked against the experiment before Ray starts. `started`
    (time.monotonic() when the job began): the last line says the wall time since."""
    # every config error surfaces here, before Ray or any load
    exp = load_experiment(config_path, parse_slo_flag(slo) if slo else None)
    if fleet and exp.fleet is None:
        raise ConfigError("fleet", "this experiment has no [fleet] table", "use python -m jobs.capacity for it")
    folder = results_folder(results or exp.results)
    check_writable(folder)               # before Ray starts, like the config
    if twin_targets(exp):                # twins run in virtual time: no Ray, no server (docs/twin.md)
        if resume:
            raise ConfigError("--resume", "a predicted run is not resumed", "run it again: it takes seconds")
        return _answer(str(folder), run_predicted(exp, folder, log=log), "complete", "", queries, started)
    state = load_resume(folder, resume, exp) if resume else None
    reach.check_targets(exp)             # a url the driver can tell is down: one line, no Ray
    stop.check()                         # a stop signal before Ray starts: there is no run to record
    log(f"loadgen {__version__}: results go to {folder}")
    ray_setup.connect(ray_address)

    def report(result: RunResult) -> None:
        """The summary files and the answer, then what the job adds: the run's last part (runner)."""
        _answer(result.results_dir, result.run_id, result.status, result.reason, queries, started)
    result = run_experiment(exp, str(folder), log=log, resume=state, report=report,
                            terminal=sys.stdout if sys.stdout.isatty() else None)
    return 0 if result.status == "complete" else 1


def _answer(results_dir: str, run_id: str, status: str, reason: str, queries: tuple[str, ...],
            started: float | None = None) -> int:
    con = analysis.open_results(results_dir, [run_id])
    log(f"run {run_id}: {status}{' - ' + reason if reason else ''}")
    found = answer.findings(con)
    answer.write_summary(con, results_dir, run_id, status, found)
    log(answer.answer_text(con, results_dir, run_id, found))   # the answer first, then what the job adds
    for query in queries:
        log(f"\n{query}:\n" + analysis.render(analysis.run_query(con, query), "table"))
    summary = answer.summary_dir(results_dir, run_id).relative_to(results_dir)
    wall = "" if started is None else f"; wall time {time.monotonic() - started:.1f} s"
    log(f"results: {results_dir}  (summary.md, summary.json in {summary}{wall})")
    return 0 if status == "complete" else 1


def job_main(prog: str, doc: str, queries: tuple[str, ...], fleet: bool) -> None:
    """Parse the entry point's flags and run. A user error is one line on stderr (exit 2), a stop (`ray job
    stop`, Ctrl-C) one line `run stopped` (exit 128 + the signal: 143, 130); the wall time is printed only for a
    run that started."""
    stop.install()   # the job's own: Ray's start-up, the run and the answer (jobs/*.py: from before the imports)
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument("--config", required=True, help="experiment TOML file")
    parser.add_argument("--results", help="results folder (default: run.results in the file, else ./results; "
                        f"under `ray job submit`: {JOB_RESULTS} on the driver's node)")
    parser.add_argument("--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    parser.add_argument("--slo", metavar="LINES", help="the SLO, over the file's [slo]: e.g. "
                        "ttft_ms=2000,tpot_ms=100,attainment=0.9 (docs/capacity-search.md)")
    parser.add_argument("--resume", metavar="RUN_ID", help="continue this stopped run with the same experiment: "
                        "its finished steps are kept, the rest run (docs/failures.md)")
    parser.add_argument("--version", action="version", version=f"loadgen {__version__}")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        code = run_capacity(args.config, args.results, args.ray_address, queries, fleet, args.slo, args.resume,
                            started)
    except LoadgenError as exc:
        print(f"error: {user_message(exc)}", file=sys.stderr, flush=True)
        sys.exit(2)
    except stop.Stopped as exc:   # SIGTERM from `ray job stop`, or Ctrl-C (loadgen.driver.stop)
        print(exc.message(resumable=True), file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)
    sys.exit(code)
