"""A fleet plan against ground truth it never saw (docs/planning.md): three emulated node types, each running a hidden
hardware and acceptance profile (tests/twinkit.py; one node type about half as fast as the fastest), measured
together over HTTP (one run) at C = 1, 4, 16 and fitted; the plan for N users per configuration, then the truth: the
hidden profiles themselves in virtual time (the emulator's own model without HTTP, as test_twin's truth), as a fleet
of k nodes at the same N users through the same router.

A plan's error is its twin's error plus the planner's, and the test holds each to its own bar: the twin's capacity
within 15% of the truth's (a twin's own error limit; two users on a small node, as the truth's own capacity moves by
one with its virtual-time seed), and the plan within one node of the truth's fewest nodes beyond what that capacity
error costs (ceil(N / twin's capacity) against ceil(N / truth's)), its interval's width (a plan is sized by the
interval's low end) and its TTFT p90's held-out error as a share of the nodes (a routed node's load moves around the
mean, so a plan rests on the twin's TTFT tail, which the capacity's point does not show: a dflash2 twin of exactly
the truth's 15 users a node, its TTFT p90 23% high at C = 4 left out, planned 13 nodes for 150 users against 10). 6
s windows measure a capacity to about one user: the same dflash2 server fitted 14, 15 and 16 users a node in
repeated runs against a truth of 15, and at 14 it plans 12 nodes for 150 users where the truth needs exactly 10 (one
node the twin's error, one the routing headroom a 14-user twin needs).
A twin over 15% by its own error (a fit from levels measured while this 2-core machine is busy: slow-mtp's TTFT p90
at C = 1 once 52% off) is planned and said so, and its plan is not short of the truth by more than a node (its
interval is wide: sized by the low end, it leans to more nodes).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tomli_w

from loadgen.campaigns.plan import Capacity, capacity, make_plan
from loadgen.campaigns.plan_command import plan_text
from loadgen.campaigns.plan_fleet import Demand
from loadgen.cli import main
from loadgen.results.slo import Slo
from plankit import NODES, PROMPTS, fitted_fleet, truth_size
from twinkit import hidden_profile

pytestmark = pytest.mark.timeout(900)   # the module fits three twins from measured runs first
SLO = Slo(ttft_ms=400, tpot_ms=40)
SEARCH_MAX = 128


@pytest.fixture(scope="module")
def fleet(ray_local, tmp_path_factory):
    return fitted_fleet(NODES, tmp_path_factory.mktemp("plan-fleet"))


@pytest.fixture(scope="module")
def truth_capacity(fleet) -> dict[str, Capacity]:
    """Each hidden profile's own capacity at the SLO (the truth's twin, the same search as the plan's)."""
    _, truth = fleet
    return {name: capacity(config, SLO, PROMPTS["max_new_tokens"], SEARCH_MAX) for name, config in truth.items()}


@pytest.mark.parametrize("users,router", [(60, "least-outstanding"), (150, "least-outstanding"),
                                          (60, "round-robin")])
def test_plan_is_within_one_node_of_the_truth(fleet, truth_capacity, users, router):
    fitted, truth = fleet
    plan = make_plan(fitted, Demand(users), SLO, router, 40, PROMPTS["max_new_tokens"], SEARCH_MAX)
    print(plan_text(plan))
    for p in plan.configs:
        assert p.fleet.level is not None, f"{p.config.name}: no fleet planned"
        k, level, fewer = truth_size(truth[p.config.name], Demand(users), SLO, router, p.fleet.nodes)
        true_capacity = truth_capacity[p.config.name].point
        print(f"{p.config.name}: planned {p.fleet.nodes} ({p.capacity.describe()}), truth {k} ({true_capacity:g} "
              f"users a node, {level.ttft_p90_ms:.0f} ms TTFT p90; one fewer: "
              f"{100 * fewer.attainment if fewer else 100:.0f}% within)")
        assert fewer is None or not fewer.passed
        rough = p.config.twin.error is not None and p.config.twin.error.over_limit() is not None
        if rough:   # a fit over 15% (a noisy measurement on a busy machine): planned, said so, and not short
            assert any(n.startswith(f"twin {p.config.name} (planned, over 15%)") for n in plan.notes)
            assert p.fleet.nodes >= k - 1, f"{p.config.name}: planned {p.fleet.nodes} nodes, the truth needs {k}"
            continue
        assert abs(p.capacity.point - true_capacity) <= max(0.15 * true_capacity, 2), (
            f"{p.config.name}: the twin's capacity {p.capacity.describe()} is over 15% (and two users) off the "
            f"truth's {true_capacity:g}")
        fit_nodes = math.ceil(users / p.capacity.point) - math.ceil(users / true_capacity)
        width = math.ceil(users / p.capacity.low) - math.ceil(users / p.capacity.point)
        tail = p.config.twin.error.spread.get("ttft_p90_ms", 0.0) if p.config.twin.error else 0.0
        tail_nodes = math.ceil(k * (math.exp(tail) - 1))   # a routed node's TTFT p90, as far off as the twin's
        assert -1 + min(0, fit_nodes) - tail_nodes <= p.fleet.nodes - k <= 1 + max(0, fit_nodes) + width + tail_nodes, (
            f"{p.config.name}: planned {p.fleet.nodes} nodes ({p.capacity.describe()}), the truth needs {k} "
            f"({true_capacity:g} users a node): off by more than the twin's capacity and TTFT p90 errors cost")


def _experiment_file(folder: Path) -> Path:
    """The workload and a short measured window for --confirm (the same prompts the twins were fitted on)."""
    path = folder / "confirm.toml"
    path.write_text(tomli_w.dumps({
        "run": {"name": "plan-confirm"}, "prompts": PROMPTS, "slo": {"ttft_ms": SLO.ttft_ms, "tpot_ms": SLO.tpot_ms},
        "load": {"concurrency": [1], "warmup_s": 2.0, "measure_s": 6.0, "min_measured_requests": 40},
        "targets": [{"name": "unused", "url": "http://127.0.0.1:9"}]}))
    return path


def test_confirm_holds_on_the_node_and_not_on_a_degraded_one(fleet, emulator_factory, tmp_path, capsys):
    """--confirm measures one node at the plan's load per node and one above: the hidden fast node meets the SLO
    there (its truth serves about 24 users, the plan puts 20 on it); the same node stuck in a low-power state
    (--fault degraded-power: a third of its speed) misses it, the command says the plan does not hold and names
    the node off its own twin (drift); the healthy node is not named."""
    fitted, _ = fleet
    files = [arg for c in fitted for arg in ("--twin", c.twin_file)]
    config = _experiment_file(tmp_path)
    name, seed, algorithm = NODES[2]
    hidden = hidden_profile(seed, tmp_path / "hidden", algorithm)
    for fault, code, words in (((), 0, "the plan holds: one node met the SLO at its planned 20 users"),
                               (("--fault", "degraded-power"), 1, "the plan does NOT hold")):
        drifted = bool(fault)   # the degraded node is named off its own twin; the healthy one is not
        with emulator_factory(*hidden.flags, *fault) as url:
            assert main(["plan", *files, "--users", "60", "--slo", "ttft_ms=400,tpot_ms=40", "--config", str(config),
                         "--confirm", f"{name}={url}", "--results", str(tmp_path / "results")]) == code
        out = capsys.readouterr().out
        with capsys.disabled():   # shown with -s, and kept out of the next iteration's capture
            print(out)
        assert f"{name}: {words}" in out
        errors = [line for line in out.splitlines() if f"{name} vs run plan-confirm-{name}-" in line]
        assert len(errors) == 5 and len({line.split(":")[0] for line in errors}) == 1   # this run's, per metric
        assert (f"DRIFT: {name} serves" in out) == drifted
