"""The drift check over repeated runs (docs/twin.md, "A twin that watches its node"):

    python tests/benchmarks/bench_drift.py [--repeats 5]

One emulated node (hidden profile seed 5, tests/twinkit.py) measured at C = 2, 8 and fitted once; then `--repeats`
measured runs of two nodes of that profile that both watch the twin, the second under `--fault degraded-power`. Per
run: whether each node is named off its twin (fleet_nodes' drift), and each node's tok/s against its twin per level.
Prints the false alarms on the healthy node and the detections of the degraded one. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import conftest  # noqa: E402  (the tests' Ray token auth, set before Ray is imported)

# isort: split
import ray  # noqa: E402

from driftkit import drifted, fitted_twin, watched_run  # noqa: E402
from loadgen.emulator.launch import EmulatorProcess  # noqa: E402
from loadgen.results import analysis  # noqa: E402
from twinkit import hidden_profile  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    conftest.start_local_ray()
    folder = Path(tempfile.mkdtemp(prefix="bench-drift-"))
    hidden = hidden_profile(5, folder / "hidden", "mtp")
    alarms = detections = 0
    with EmulatorProcess(hidden.flags) as healthy, \
            EmulatorProcess([*hidden.flags, "--fault", "degraded-power"]) as degraded:
        started = time.monotonic()
        twin = fitted_twin(healthy.url, folder)
        print(f"twin fitted in {time.monotonic() - started:.0f} s: {twin}", flush=True)
        for i in range(args.repeats):
            results = folder / "results"
            run_id, _ = watched_run({"spark1": healthy.url, "spark2": degraded.url}, twin, results, f"drift{i}")
            named = drifted(results, run_id)
            alarms += named["spark1"]
            detections += named["spark2"]
            con = analysis.open_results(results, [run_id])
            offs = [f"{r['target']} C={r['concurrency']} {r['metric']} {r['off_pct']:+.1f}% (band {r['band_pct']:.0f}%)"
                    for r in analysis.run_query(con, "twin_drift").to_pylist()]
            con.close()
            print(f"run {i + 1}: named {sorted(n for n, d in named.items() if d)}; " + "; ".join(offs), flush=True)
    ray.shutdown()
    print(f"\n{args.repeats} runs: false alarms on the healthy node {alarms}/{args.repeats}, "
          f"detections of the degraded node {detections}/{args.repeats}")


if __name__ == "__main__":
    main()
