"""Sequential windows against fixed ones (docs/capacity-search.md), on emulators whose capacity is known
(--max-running-requests K at a TTFT line, tests/integration/test_capacity_search.py's setup):

    python tests/benchmarks/bench_sequential.py [--runs 6] [--k 3]

A grid over every level 1..2K+2 once (35 requests a level, a clear call's), then `--runs` capacity searches
(1..16) with fixed windows and as many with sequential ones (false_verdict 0.05; at the default miss_correlation
0.7, and at 0: independent outcomes), each on a fresh run. Prints
each way's server-seconds (views.sql step_s, summed) as a share of the grid's, and the false-verdict rate: the
share of levels whose clear call disagrees with
the truth (pass up to K, fail above), and the share of searches whose capacity is not K.
Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import conftest  # noqa: E402,F401  (the tests' Ray token auth, set before Ray is imported)

# isort: split
import ray  # noqa: E402

from loadgen.config import parse_experiment  # noqa: E402
from loadgen.driver.runner import run_experiment  # noqa: E402
from loadgen.emulator.launch import EmulatorProcess  # noqa: E402
from loadgen.results import analysis  # noqa: E402

PROMPTS = {"seed": 5, "max_new_tokens": 128,
           "sources": [{"format": "jsonl", "path": str(Path(__file__).parents[1] / "data/short-prompts.jsonl")}]}
SLO = {"ttft_ms": 200, "attainment": 0.9}


def _run(url: str, load: dict, results: Path, seed: int) -> tuple[float, float | None, list[tuple]]:
    """(server-seconds, capacity, [(level, verdict, clear)]) of one run."""
    exp = parse_experiment({"run": {"name": "bench-seq"}, "slo": SLO,
                            "load": {"warmup_s": 0.5, "measure_s": 1.0, "drain_timeout_s": 30.0, **load},
                            "prompts": {**PROMPTS, "seed": seed}, "targets": [{"name": "k", "url": url}]}, Path("."))
    outcome = run_experiment(exp, str(results), log=lambda *a: None)
    con = analysis.open_results(results, [outcome.run_id])
    [(seconds,)] = con.execute("SELECT sum(step_s) FROM step_info").fetchall()
    levels = con.execute("SELECT level, verdict, clear FROM level_slo ORDER BY level").fetchall()
    [row] = analysis.run_query(con, "capacity").to_pylist()
    con.close()
    return float(seconds), row["capacity"], levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    k = args.k
    flags = ["--model-path", "m", "--max-running-requests", str(k), "--time-scale", "10", "--seed", "1"]
    with tempfile.TemporaryDirectory(prefix="bench-seq-") as tmp, EmulatorProcess(flags) as emu:
        # the grid holds at every level what a fixed window's clear call needs (35 requests at 90%)
        grid_s, _, _ = _run(emu.url, {"concurrency": list(range(1, 2 * k + 3)), "min_measured_requests": 35,
                                      "max_measure_s": 120.0}, Path(tmp) / "grid", 1)
        print(f"K = {k}, SLO TTFT <= 200 ms for 90%; grid 1..{2 * k + 2}: {grid_s:.1f} server-s")
        print(f"  {'windows':10s} {'runs':>4s} {'server-s (median)':>18s} {'vs grid':>8s} {'capacity = K':>12s} "
              f"{'false clear calls':>18s} {'unclear':>8s}")
        ways = (("fixed", {}), ("sequential", {"window": "sequential", "false_verdict": 0.05}),
                ("seq rho=0", {"window": "sequential", "false_verdict": 0.05, "miss_correlation": 0.0}))
        for label, extra in ways:
            seconds, right, wrong, calls, unclear = [], 0, 0, 0, 0
            for i in range(args.runs):
                s, capacity, levels = _run(emu.url, {"search": "capacity", "search_min": 1, "search_max": 16,
                                                     **extra}, Path(tmp) / f"{label.replace(' ', '-')}-{i}", 10 + i)
                seconds.append(s)
                right += capacity == k
                for level, verdict, clear in levels:
                    if clear:
                        calls += 1
                        wrong += (verdict == "pass") != (level <= k)
                    else:
                        unclear += 1
                print(f"    {label} run {i}: {s:.1f} s, capacity {capacity}", flush=True)
            median = statistics.median(seconds)
            print(f"  {label:10s} {args.runs:4d} {median:18.1f} {100 * median / grid_s:7.0f}% "
                  f"{right:>5d} of {args.runs:<4d} {wrong:>7d} of {calls:<8d} {unclear:>8d}", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
