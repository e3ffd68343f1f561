"""Trace replay's send times: how late each request left the client (t_sent - t_scheduled: the row's timestamp /
speedup after the step's start) and how late its head reached the server (the emulator's `t_arrived_ns`), per
speedup, optionally with a CPU burner busy on one core.

    python tests/benchmarks/bench_trace_replay.py [--trace PATH] [--speedups 1 10 100] [--seconds 60] [--burn]

Each replay takes the trace's rows that fit in `--seconds` at its speedup (from the trace's start), against an
emulator that answers at once (`--hardware zero`, every 16th token streamed: a server that is never the
bottleneck, so what is measured is the client's timing). The goal (issue 27): p99 within 2 ms of the trace's
times. The machine's load average is printed with each line: on a shared machine it decides the tail. Not
collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import urllib.request
from pathlib import Path

import ray

from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.emulator.launch import EmulatorProcess
from loadgen.results import analysis

REPO = Path(__file__).parents[2]
EXCERPT = REPO / "jobs/experiments/traces/azure-llm-conv-2023-excerpt.csv"
EMULATOR = ["--model-path", "m", "--hardware", "zero", "--stream-interval", "16"]


def _burn() -> None:
    """Keep core 0 busy (a CPU-bound neighbour)."""
    os.sched_setaffinity(0, {0})
    while True:
        pass


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    xs = sorted(values)
    return statistics.median(xs), xs[min(len(xs) - 1, int(0.99 * len(xs)))], xs[-1]


def replay(url: str, trace: Path, speedup: float, seconds: float, folder: Path) -> dict:
    """One replay; its rows, rate and the lateness quantiles in ms, client side and server side."""
    exp = parse_experiment({
        "run": {"name": "bench-trace"},
        "load": {"mode": "trace", "drain_timeout_s": 120.0,
                 "trace": {"path": str(trace), "speedup": speedup, "duration_s": seconds * speedup}},
        "prompts": {"seed": 1}, "targets": [{"name": "emu", "url": url}]}, REPO)
    outcome = run_experiment(exp, str(folder), log=lambda *a: None)
    with urllib.request.urlopen(f"{url}/emulator/requests") as resp:
        arrived = {r["rid"]: r["t_arrived_ns"] for r in json.load(resp)["requests"] if r["rid"]}
    con = analysis.open_results(folder, [outcome.run_id])
    rows = con.sql("SELECT request_id, t_scheduled_ns, t_sent_ns FROM requests WHERE phase = 'measure'").fetchall()
    [(rate, in_flight)] = con.sql("SELECT max(s.rate), max(c.in_flight) FROM steps s, client_samples c").fetchall()
    return {"rows": len(rows), "rate": rate, "in_flight": in_flight,
            "client": _quantiles([(sent - planned) / 1e6 for _, planned, sent in rows]),
            "server": _quantiles([(arrived[rid] - planned) / 1e6 for rid, planned, _ in rows])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=EXCERPT, help="a trace file (default: the shipped excerpt)")
    parser.add_argument("--speedups", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    parser.add_argument("--seconds", type=float, default=60.0, help="each replay's length at most")
    parser.add_argument("--burn", action="store_true", help="also replay with a CPU burner busy on core 0")
    args = parser.parse_args()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"{'speedup':>7} {'burner':>6} {'rows':>5} {'req/s':>7} {'in flight':>9}  "
          f"{'client p50/p99/max ms':>24}  {'server p50/p99/max ms':>24}  load avg")
    with EmulatorProcess(EMULATOR) as emu, tempfile.TemporaryDirectory() as tmp:
        for burn in [False, True] if args.burn else [False]:
            burner = multiprocessing.Process(target=_burn, daemon=True) if burn else None
            if burner:
                burner.start()
            try:
                for speedup in args.speedups:
                    r = replay(emu.url, args.trace, speedup, args.seconds, Path(tmp) / f"{speedup:g}-{burn}")
                    client, server = ("/".join(f"{v:.2f}" for v in r[k]) for k in ("client", "server"))
                    print(f"{speedup:>7g} {'yes' if burn else 'no':>6} {r['rows']:>5} {r['rate']:>7.1f} "
                          f"{r['in_flight']:>9}  {client:>24}  {server:>24}  "
                          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
            finally:
                if burner:
                    burner.terminate()
                    burner.join()
    ray.shutdown()


if __name__ == "__main__":
    main()
