"""`loadgen plan`'s parts against ground truth in virtual time (docs/planning.md): the routed fleet's own counts,
the modelled GPU's power bounds, the capacity search against every level next to its answer, and bad input, one
line each before anything is planned. The twins are hidden profiles' truth files (no fit: fast)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from loadgen.campaigns.plan import RATE_STEPS, capacity, largest_passing, make_plan, one_user_rate, protocol, seed_for
from loadgen.campaigns.plan_command import parse_urls, plan_text, read_costs
from loadgen.campaigns.plan_fleet import Demand, run_fleet
from loadgen.cli import main
from loadgen.config.cost import Prices
from loadgen.errors import ConfigError
from loadgen.results.slo import Slo
from loadgen.twin.model import FitError
from loadgen.twin.vtime import Protocol
from plankit import PROMPTS, truth_configuration

SLO = Slo(ttft_ms=400, tpot_ms=40)
TOKENS = PROMPTS["max_new_tokens"]


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plan")
    return {name: truth_configuration(name, seed, alg, folder)
            for name, seed, alg in (("mtp-a", 3, "mtp"), ("dflash2-b", 4, "dflash2"), ("mtp-c", 5, "mtp"))}


def test_largest_passing_is_exact_for_every_capacity():
    for top in (1, 7, 64):
        for cap in range(0, top + 1):
            asked: list[int] = []

            def passes(users: int, capacity: int = cap, seen: list[int] = asked) -> bool:
                seen.append(users)
                return users <= capacity

            assert largest_passing(passes, top) == cap
            assert len(asked) <= 2 * math.ceil(math.log2(top + 1)) + 1


def test_least_outstanding_keeps_every_node_at_its_share_and_round_robin_does_not(configs):
    """Closed-loop users resend at once: least-outstanding never puts more than ceil(N / k) on a node; round-robin
    deals requests in turn whatever the nodes hold, so a node drifts above its share."""
    c = configs["mtp-a"]
    nodes = [(c.twin, c.prompts, 1.0)] * 3
    lor, rr = (run_fleet(nodes, Demand(40), TOKENS, router, Protocol(5.0, 30.0, 200, 1e6), [SLO], 1)[0]
               for router in ("least-outstanding", "round-robin"))
    assert lor.peak_outstanding == math.ceil(40 / 3)
    assert rr.peak_outstanding > math.ceil(40 / 3)
    assert lor.requests >= 200 and rr.requests >= 200


def test_energy_is_between_idle_and_max_power_and_tokens_per_joule_follows(configs):
    c = configs["dflash2-b"]
    hw = c.twin.hardware
    [level] = run_fleet([(c.twin, c.prompts, 1.0)] * 2, Demand(16), TOKENS, "least-outstanding",
                        Protocol(5.0, 30.0, 200, 1e6), [SLO], 2)
    for joules in level.node_energy_j:
        assert joules is not None
        assert hw.idle_power_w * level.window_s < joules < hw.max_power_w * level.window_s
    assert level.tokens_per_joule == pytest.approx(level.tokens / level.energy_j)   # type: ignore[operator]


def test_capacity_is_the_last_level_that_passes(configs):
    c = configs["mtp-a"]
    cap = capacity(c, SLO, TOKENS, 128)
    assert cap.low <= cap.point <= cap.high and cap.point > 1
    # the capacity's own seeds: a level near the line is one draw of it
    judged = [run_fleet([(c.twin, c.prompts, 1.0)], Demand(u), TOKENS, "least-outstanding", protocol(Demand(u)),
                        [SLO], seed_for(c.name))[0] for u in (cap.point, cap.point + 1)]
    assert cap.level is not None and cap.level.passed
    assert judged[0].passed and not judged[1].passed


def test_plan_sizes_each_configuration_routed_and_names_the_cheapest(configs):
    plan = make_plan(list(configs.values()), Demand(100), SLO, "round-robin", 20, TOKENS, 128)
    for p in plan.configs:
        f = p.fleet
        assert f.level is not None and f.level.passed
        assert f.fewer is None or not f.fewer.passed    # one node fewer misses the SLO's low-end lines
        assert f.naive == math.ceil(100 / p.capacity.low)
    assert plan.best is min(plan.configs, key=lambda p: p.fleet.nodes)
    text = plan_text(plan)
    first = text.splitlines()[1]
    assert first.startswith(f"  {plan.best.fleet.nodes} x {plan.best.config.name}: 100 users at TTFT p90")
    for p in plan.configs:
        if p is not plan.best:
            assert f"{p.config.name} needs {p.fleet.nodes}" in first
        if p.fleet.nodes > p.fleet.naive:   # ceil(N / capacity) was wrong: said, with the failing fleet's figures
            assert f"{p.config.name}: ceil(100 / {p.capacity.low:.0f}) = {p.fleet.naive} nodes is too few" in text


def test_a_cheaper_mix_is_found_and_confirmed_routed(configs, tmp_path):
    """A fast node (about 24 users) at 1.8 an hour and a slow one (about 12) at 1.0: 70 users need 6 slow nodes
    (6.0) or 3-4 fast ones (5.4-7.2), while 2 fast + 2 slow hold them for 5.6, routed by capacity (weighted: under
    least-outstanding every node holds N / k whatever its speed)."""
    fast = dataclasses.replace(configs["mtp-c"], prices=Prices(node_hour=1.8))
    slow = dataclasses.replace(configs["mtp-a"], prices=Prices(node_hour=1.0))
    plan = make_plan([fast, slow], Demand(70), SLO, "weighted", 20, TOKENS, 128)
    assert plan.mix is not None and plan.best is not None
    mix, cost = plan.mix
    assert mix.level is not None and mix.level.passed
    assert plan.best.cost_per_hour is not None and cost < plan.best.cost_per_hour
    assert set(mix.counts) == {fast.name, slow.name}
    assert "A mix is cheaper" in plan_text(plan)


def test_no_level_meets_the_slo(configs):
    with pytest.raises(ConfigError, match="below one user on every configuration"):
        make_plan(list(configs.values()), Demand(10), Slo(tpot_ms=1), "least-outstanding", 20, TOKENS, 64)


def test_a_demand_beyond_max_nodes(configs):
    with pytest.raises(ConfigError, match=r"beyond --max-nodes 2 of every configuration"):
        make_plan(list(configs.values()), Demand(1000), SLO, "least-outstanding", 2, TOKENS, 128)


def test_twins_of_different_models_are_not_planned_together(configs):
    a = configs["mtp-a"]
    other = dataclasses.replace(a, name="other", twin=dataclasses.replace(
        a.twin, model=dataclasses.replace(a.twin.model, name="another-model")))
    with pytest.raises(ConfigError, match="twins of different models"):
        make_plan([a, other], Demand(10), SLO, "least-outstanding", 4, TOKENS, 64)
    mixed = dataclasses.replace(a, name="mixed", twin=dataclasses.replace(
        a.twin, source={**a.twin.source, "prompts": {"max_new_tokens": 512}}))
    with pytest.raises(ConfigError, match="twins of different prompt mixes"):
        make_plan([a, mixed], Demand(10), SLO, "least-outstanding", 4, TOKENS, 64)


def test_a_twin_over_its_error_limit_is_planned_and_said_so(configs):
    a = configs["mtp-a"]
    rough = dataclasses.replace(a, twin=dataclasses.replace(a.twin, error=FitError(
        {"tok_s": 4.0}, {"tok_s": 22.0}, "tok_s at C=16: +22.0%", {"tok_s": 0.2})))
    plan = make_plan([rough], Demand(30), SLO, "least-outstanding", 8, TOKENS, 64)
    assert plan.best is not None and plan.best.fleet.level is not None
    assert any("planned, over 15%" in n and "tok_s MAPE 22%" in n for n in plan.notes)


def test_costs_per_configuration_and_bad_names():
    prices = read_costs(["node_hour=2.1,energy_kwh=0.3", "mtp:node_hour=3.9"], ["mtp", "dflash2"])
    assert prices[""] == Prices(2.1, 0.3) and prices["mtp"] == Prices(3.9, 0.3)
    with pytest.raises(ConfigError, match="'h100' is not a configuration planned"):
        read_costs(["h100:node_hour=3"], ["mtp"])
    with pytest.raises(ConfigError, match="node_hours"):
        read_costs(["node_hours=3"], ["mtp"])


def test_confirm_urls_name_a_planned_configuration():
    assert parse_urls(["mtp=http://127.0.0.1:30000"], ["mtp", "dflash2"]) == {"mtp": "http://127.0.0.1:30000"}
    for bad in ("h100=http://127.0.0.1:1", "http://127.0.0.1:1", "mtp="):
        with pytest.raises(ConfigError, match="is not NAME=URL of a configuration planned"):
            parse_urls([bad], ["mtp", "dflash2"])


def test_cli_prints_the_plan_and_one_line_for_bad_input(configs, tmp_path, capsys):
    files = []
    for name in ("mtp-a", "mtp-c"):
        path = tmp_path / f"{name}.toml"
        configs[name].twin.save(path)
        files += ["--twin", str(path)]
    config = tmp_path / "exp.toml"
    config.write_text(f"[prompts]\nseed = 7\nmax_new_tokens = {TOKENS}\nignore_eos = true\n"
                      "input_tokens = { min = 128, max = 512 }\n[load]\nconcurrency = [1]\n"
                      "[[targets]]\nname = 'x'\nurl = 'http://127.0.0.1:1'\n")
    assert main(["plan", *files, "--users", "60", "--slo", "ttft_ms=400,tpot_ms=40", "--config", str(config),
                 "--cost", "node_hour=2"]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED plan for 60 concurrent users at TTFT <= 400 ms and TPOT <= 40 ms" in out
    assert main(["plan", *files, "--users", "60", "--slo", "ttft_ms=1,tpot_ms=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "below one user on every configuration" in err[0]


def test_requests_at_a_rate_arrive_whatever_the_fleet_holds(configs):
    """Open loop: the window's arrivals are the Poisson process's (rate x window, within 4 sigma of the seeded
    draw), not one per finished request; past one node's capacity the node's queue grows with no user bound."""
    c = configs["mtp-a"]
    one = one_user_rate(c, TOKENS)
    for rate, seed in ((4 * one, 1), (40 * one, 2)):
        demand = Demand(rate, rate=True)
        [level] = run_fleet([(c.twin, c.prompts, 1.0)] * 2, demand, TOKENS, "least-outstanding", protocol(demand),
                            [SLO], seed)
        window_s = level.window_s / c.twin.time_scale
        expected = rate * window_s
        assert abs(level.requests - expected) <= 4 * math.sqrt(expected) + 1, (rate, level.requests, expected)
    assert level.peak_outstanding > 40, level   # a closed loop of 40 users never holds more than 40


def test_a_rate_capacity_is_the_last_step_that_passes_and_sizes_the_fleet(configs):
    """The capacity in requests/s is searched in steps of one user's rate / RATE_STEPS; the step above it fails
    on the capacity's own seed. The plan for a rate is sized like a plan for users: ceil(rate / low end) first,
    then routed, and the words say requests/s."""
    c = configs["mtp-a"]
    cap = capacity(c, SLO, TOKENS, 128, rate=True)
    step = one_user_rate(c, TOKENS) / RATE_STEPS
    assert cap.point > 0 and cap.low <= cap.point <= cap.high and cap.demand.rate
    above = Demand(cap.point + step, rate=True)
    [fails] = run_fleet([(c.twin, c.prompts, 1.0)], above, TOKENS, "least-outstanding", protocol(above), [SLO],
                        seed_for(c.name))
    assert cap.level is not None and cap.level.passed and not fails.passed
    users = capacity(c, SLO, TOKENS, 128)
    assert cap.point < users.point * one_user_rate(c, TOKENS)   # open arrivals bunch: less than N users' rate
    demand = Demand(6 * cap.low, rate=True)
    plan = make_plan([c], demand, SLO, "least-outstanding", 20, TOKENS, 128)
    [p] = plan.configs
    assert p.fleet.naive == 6 and p.fleet.level is not None and p.fleet.level.passed
    assert p.fleet.fewer is None or not p.fleet.fewer.passed
    text = plan_text(plan)
    assert text.startswith(f"PREDICTED plan for {demand.number()} requests/s at ")
    assert f"{p.fleet.nodes} x mtp-a: {demand.number()} req/s at TTFT p90" in text


def test_a_traces_peak_rate_and_bad_demands(tmp_path, capsys, configs):
    trace = tmp_path / "t.jsonl"
    times = [0.0, 1.0, 2.0, 2.5, 2.6, 2.7, 10.0]    # the busiest second holds 2.0 .. 2.7: 4 rows
    trace.write_text("".join(f'{{"timestamp": {1000 * t:.0f}, "input_length": 64, "output_length": 8}}\n'
                             for t in times))
    from loadgen.prompts.traces import read_trace
    assert read_trace(trace, None, "--trace").peak_rate(1.0) == 4.0
    assert read_trace(trace, None, "--trace").peak_rate(100.0) == pytest.approx(7 / 10.0)
    path = tmp_path / "mtp-a.toml"
    configs["mtp-a"].twin.save(path)
    for flags, words in ((["--rate", "0"], "--rate: must be > 0 requests/s"),
                         (["--trace", str(trace), "--speedup", "-1"], "--speedup: must be > 0"),
                         (["--trace", str(tmp_path / "none.jsonl")], "--trace")):
        assert main(["plan", "--twin", str(path), *flags, "--slo", "ttft_ms=400"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
