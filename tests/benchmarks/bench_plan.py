"""Fleet plans against the truth (docs/planning.md), two tables:

    python tests/benchmarks/bench_plan.py [--users 60 150 300] [--rates 10 30] [--routers least-outstanding round-robin]

Three emulated node types, each a hidden hardware and acceptance profile (tests/twinkit.py, seeds 3, 4, 5; the first
about half as fast as the last), measured together over HTTP at C = 1, 4, 16 and fitted. For every demand and router:
1. the plan per node type (capacity per node with its interval, ceil(N / low end), the routed plan) against the
   truth: the hidden profiles themselves in virtual time (the emulator's own model without HTTP), the fewest nodes
   whose fleet meets the SLO routed the same way, and the attainment of the truth's fleet one node smaller;
2. where ceil(N / capacity) is wrong: the truth's own capacity per node, its ceil, and the truth's routed need.
Not collected by pytest (no test_ prefix). Slow on a shared machine (three fits, then seconds per fleet).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import conftest  # noqa: E402  (the tests' Ray token auth, set before Ray is imported)

# isort: split
import ray  # noqa: E402

from loadgen.campaigns.plan import capacity, make_plan  # noqa: E402
from loadgen.campaigns.plan_command import plan_text  # noqa: E402
from loadgen.campaigns.plan_fleet import Demand  # noqa: E402
from loadgen.results.slo import Slo  # noqa: E402
from plankit import NODES, PROMPTS, fitted_fleet, truth_size  # noqa: E402

SLO = Slo(ttft_ms=400, tpot_ms=40)
TOKENS = PROMPTS["max_new_tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[60, 150, 300])
    parser.add_argument("--rates", type=float, nargs="+", default=[10.0, 30.0], help="requests/s (open loop)")
    parser.add_argument("--routers", nargs="+", default=["least-outstanding", "round-robin"])
    parser.add_argument("--max-nodes", type=int, default=64)
    args = parser.parse_args()
    conftest.start_local_ray()
    folder = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    fitted, truth = fitted_fleet(NODES, folder)
    ray.shutdown()
    demands = [Demand(u) for u in args.users] + [Demand(r, rate=True) for r in args.rates]
    truth_cap = {(n, rate): capacity(c, SLO, TOKENS, 256, rate).point for n, c in truth.items() for rate in (0, 1)}
    plan_rows, naive_rows = [], []
    for router in args.routers:
        for demand in demands:
            plan = make_plan(fitted, demand, SLO, router, args.max_nodes, TOKENS, 256)
            n = f"{demand.number()} {demand.unit}"
            for p in plan.configs:
                name, cap = p.config.name, truth_cap[(p.config.name, demand.rate)]
                k, level, fewer = truth_size(truth[name], demand, SLO, router, p.fleet.nodes or 1, args.max_nodes)
                plan_rows.append((name, n, router, p.capacity.interval(), demand.number(cap), p.fleet.naive,
                                  p.fleet.nodes, k, p.fleet.nodes - k, f"{100 * level.attainment:.1f}%",
                                  f"{100 * fewer.attainment:.1f}%" if fewer else "-"))
                naive = math.ceil(demand.amount / cap - 1e-9)
                naive_rows.append((name, n, router, demand.number(cap), naive, k, "wrong" if naive != k else "right"))
            print(f"\n{router}, {n}:\n" + "\n".join(plan_text(plan).splitlines()[1:]), flush=True)
    print(f"\nSLO: {SLO.describe()}; truth: the hidden profiles in virtual time, routed the same way")
    _table(("node type", "N", "router", "twin capacity (interval)", "truth capacity", "ceil(N/low)", "planned",
            "truth", "planned - truth", "truth at truth", "truth one fewer"), plan_rows)
    print("\nceil(N / capacity) by the truth's own capacity against the truth's routed need:")
    _table(("node type", "N", "router", "truth capacity", "ceil(N/capacity)", "truth routed", "naive"), naive_rows)


def _table(head: tuple[str, ...], rows: list[tuple]) -> None:
    cells = [tuple(str(v) for v in row) for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(head)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |")


if __name__ == "__main__":
    main()
