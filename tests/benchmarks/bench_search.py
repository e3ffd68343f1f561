"""Time to answer: the capacity search vs a grid 1, 2, 4, ..., 64 plus the bisection a person would then run by
hand, on emulators whose capacity is known (--max-running-requests K, a TTFT line that a queued request misses).

    python tests/benchmarks/bench_search.py [--k 6 12] [--max 64]

Both methods judge each level by the same SLO with the same number of measured requests (a clear call at the
SLO's attainment), against the same emulator, in the same process. Step-seconds are each step's start to end
(warm-up, window and drain): what the hardware was busy with. Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import ray

from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.emulator.launch import EmulatorProcess
from loadgen.results import analysis
from loadgen.results.slo import Slo

SLO = {"ttft_ms": 200, "attainment": 0.8}
LOAD = {"warmup_s": 0.5, "measure_s": 1.0, "drain_timeout_s": 60.0}


def _run(url: str, load: dict, results: Path) -> tuple[list[dict], list[dict]]:
    """Run one experiment; its steps' (level, verdict, seconds) and its capacity rows."""
    exp = parse_experiment({"run": {"name": "bench"}, "load": {**LOAD, **load}, "slo": SLO,
                            "prompts": {"seed": 5, "max_new_tokens": 128},
                            "targets": [{"name": "t", "url": url}]}, Path("."))
    outcome = run_experiment(exp, str(results), log=lambda *a: None)
    con = analysis.open_results(results, [outcome.run_id])
    seconds = dict(con.execute("SELECT step_id, step_s FROM step_info").fetchall())
    goodput = analysis.run_query(con, "goodput").to_pylist()
    return ([{"level": g["concurrency"], "verdict": g["verdict"], "step_s": seconds[g["step_id"]]} for g in goodput],
            analysis.run_query(con, "capacity").to_pylist())


def grid_then_bisect(url: str, top: int, folder: Path) -> tuple[list[dict], int | None]:
    """The grid 1, 2, 4, ..., top; then one level at a time between its last pass and first fail."""
    n = Slo(**SLO).requests_for_clear_pass()
    levels = [2 ** i for i in range(top.bit_length()) if 2 ** i <= top]
    steps, [row] = _run(url, {"concurrency": levels, "min_measured_requests": n}, folder / "grid")
    passed, failed = row["capacity"], row["first_fail"]
    while passed is not None and failed is not None and failed - passed > 1:
        middle = int((passed + failed) // 2)
        more, _ = _run(url, {"concurrency": [middle], "min_measured_requests": n}, folder / f"by-hand-{middle}")
        steps += more
        passed, failed = (middle, failed) if more[0]["verdict"] == "pass" else (passed, middle)
    return steps, passed


def _levels(steps: list[dict]) -> str:
    """`C=8 fail 6.1 s, ...`: where the step-seconds went."""
    return ", ".join(f"C={s['level']} {s['verdict']} {s['step_s']:.1f} s" for s in steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[2, 4], help="--max-running-requests of the emulator "
                        "(a queued request must wait longer than the TTFT line: about 1.3 s / K, so K <= 4)")
    parser.add_argument("--max", type=int, default=64, help="the grid's and the search's highest level")
    args = parser.parse_args()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"{'K':>3}  {'method':<22} {'steps':>5} {'step-s':>7}  capacity")
    for k in args.k:
        flags = ["--model-path", "m", "--max-running-requests", str(k), "--time-scale", "10", "--seed", str(k)]
        with EmulatorProcess(flags) as emu, tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            searched, [row] = _run(emu.url, {"search": "capacity", "search_min": 1, "search_max": args.max},
                                   folder / "search")
            grid, by_hand = grid_then_bisect(emu.url, args.max, folder)
            cost = {name: sum(s["step_s"] for s in steps) for name, steps in (("search", searched), ("grid", grid))}
            print(f"{k:>3}  {'search':<22} {len(searched):>5} {cost['search']:>7.1f}  {row['capacity']:g}  "
                  + _levels(searched))
            print(f"{k:>3}  {'grid + bisect by hand':<22} {len(grid):>5} {cost['grid']:>7.1f}  {by_hand}  "
                  + _levels(grid))
            print(f"{k:>3}  search / grid: {cost['search'] / cost['grid']:.2f} of the step-seconds, "
                  f"{len(searched) / len(grid):.2f} of the steps; same answer: {row['capacity'] == by_hand}")
    ray.shutdown()


if __name__ == "__main__":
    main()
