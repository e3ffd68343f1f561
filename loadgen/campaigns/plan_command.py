"""`loadgen plan`: its inputs read and checked (twins, workload, prices), and the plan in words, then its table
(cli.py holds the flags; plan.py the planning)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from loadgen.campaigns.plan import ConfigPlan, Configuration, Plan, make_plan
from loadgen.campaigns.plan_fleet import Demand, FleetLevel
from loadgen.config import load_experiment
from loadgen.config.cost import Prices, read_prices
from loadgen.errors import ConfigError
from loadgen.prompts.config import parse_prompts_config
from loadgen.prompts.traces import read_trace
from loadgen.results.slo import parse_slo, parse_slo_flag
from loadgen.twin.model import load_twin
from loadgen.twin.predict import twin_prompts


def plan_command(args: argparse.Namespace) -> int:
    demand = read_demand(args)
    if args.max_nodes < 1:
        raise ConfigError("--max-nodes", f"must be >= 1, got {args.max_nodes}", "e.g. --max-nodes 16")
    slo = parse_slo(parse_slo_flag(args.slo), "--slo")
    twins = [(Path(p).stem, load_twin(p, "--twin"), str(Path(p).resolve())) for p in args.twin]
    names = [n for n, _, _ in twins]
    if len(set(names)) < len(names):
        raise ConfigError("--twin", f"two twin files share a name ({', '.join(names)})",
                          "name each configuration's file after it: mtp.toml, dflash2-b6.toml")
    prices = read_costs(args.cost or [], names)
    urls = parse_urls(args.confirm or [], names)
    experiment = (load_experiment(args.config).raw if args.config
                  else {"prompts": dict(twins[0][1].source.get("prompts") or {})})
    workload = parse_prompts_config(dict(experiment.get("prompts", {})))
    configs = [Configuration(name, twin, twin_prompts(twin, workload)[1], prices.get(name, prices[""]), path)
               for name, twin, path in twins]
    plan = make_plan(configs, demand, slo, args.router, args.max_nodes, workload.max_new_tokens,
                     args.search_max, log=lambda line: print(f"  {line}", flush=True))
    print(plan_text(plan), flush=True)
    if not urls:
        return 0
    from loadgen.driver.capacity import results_folder  # first: it sets Ray's log options before Ray is imported
    # isort: split
    from loadgen.campaigns.plan_confirm import confirm
    from loadgen.driver import ray_setup, stop
    stop.install()   # a stop signal from here on stops the confirming run cleanly
    ray_setup.connect(args.ray_address)
    confirmed = confirm(plan, urls, experiment, results_folder(args.results), log=lambda line: print(line, flush=True))
    print("\nCONFIRMED by one measured node per configuration (docs/planning.md):")
    for c in confirmed:
        print(f"  {c.words()}")
        print("\n".join(f"  {line}" for line in c.errors))
    return 0 if all(c.holds for c in confirmed) else 1


def read_demand(args: argparse.Namespace) -> Demand:
    """--users N, --rate R, or --trace FILE (its peak rate over --peak-window, x --speedup)."""
    if args.users is not None:
        if args.users < 1:
            raise ConfigError("--users", f"must be >= 1, got {args.users}", "e.g. --users 300")
        return Demand(args.users)
    if args.rate is not None:
        if not args.rate > 0:
            raise ConfigError("--rate", f"must be > 0 requests/s, got {args.rate:g}", "e.g. --rate 12.5")
        return Demand(args.rate, rate=True)
    for flag, value in (("--peak-window", args.peak_window), ("--speedup", args.speedup)):
        if not value > 0:
            raise ConfigError(flag, f"must be > 0, got {value:g}", f"e.g. {flag} {60 if 'window' in flag else 2}")
    trace = read_trace(Path(args.trace), None, "--trace")
    peak = trace.peak_rate(args.peak_window) * args.speedup
    if not peak > 0:
        raise ConfigError("--trace", f"{args.trace} has no arrival rate (one row, or all at one instant)",
                          "plan from a trace of many rows over time, or give --rate")
    print(f"  demand: the peak of {args.trace}, {peak:.3g} requests/s over its busiest {args.peak_window:g} s"
          + (f" (x{args.speedup:g})" if args.speedup != 1 else ""), flush=True)
    return Demand(peak, rate=True)


def parse_urls(values: list[str], names: list[str]) -> dict[str, str]:
    """`--confirm NAME=URL`, one per configuration to confirm."""
    urls = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or name not in names or not url:
            raise ConfigError("--confirm", f"{value!r} is not NAME=URL of a configuration planned "
                              f"({', '.join(names)})", "e.g. --confirm mtp=http://spark1:30000")
        urls[name] = url
    return urls


def read_costs(values: list[str], names: list[str]) -> dict[str, Prices]:
    """`--cost node_hour=2.1,energy_kwh=0.3` (every configuration) and `--cost NAME:node_hour=3.9` (one); the
    prices of configuration NAME are under NAME, the default under ''."""
    tables: dict[str, dict[str, float]] = {"": {}}
    for value in values:
        name, sep, pairs = value.rpartition(":")
        if sep and name not in names:
            raise ConfigError("--cost", f"{name!r} is not a configuration planned ({', '.join(names)})",
                              "name it after its twin file's stem, e.g. --cost mtp:node_hour=2.1")
        table = tables.setdefault(name, dict(tables[""]))
        for item in filter(None, (p.strip() for p in pairs.split(","))):
            key, _, number = item.partition("=")
            try:
                table[key.strip()] = float(number)
            except ValueError:
                raise ConfigError("--cost", f"{item!r} is not NAME=NUMBER",
                                  "e.g. --cost node_hour=2.1,energy_kwh=0.3") from None
    default = tables.pop("")
    return {"": read_prices(default, "--cost"),
            **{n: read_prices({**default, **t}, f"--cost {n}") for n, t in tables.items()}}


def _ms(ms: float) -> str:
    return f"{ms / 1e3:.2g} s" if ms >= 1000 else f"{ms:.0f} ms"


def _at(level: FleetLevel) -> str:
    return f"TTFT p90 {_ms(level.ttft_p90_ms)}, TPOT p50 {_ms(level.tpot_p50_ms)}"


def _needs(p: ConfigPlan, max_nodes: int) -> str:
    if p.capacity.point == 0:
        return f"{p.config.name} serves below one user"
    if p.fleet.level is None:
        return f"{p.config.name} needs more than {max_nodes}"
    return f"{p.config.name} needs {p.fleet.nodes}"


def plan_text(plan: Plan) -> str:
    """The plan in words first (the cheapest fleet, what the others need, a cheaper mix, where ceil(demand /
    capacity) is wrong), then one row per configuration."""
    demand = plan.demand
    lines = [f"PREDICTED plan for {demand.words()} at {plan.slo.describe()}, routed {plan.router}:"]
    best = plan.best
    if best is None or best.fleet.level is None:
        lines.append(f"  no configuration meets it within --max-nodes {plan.max_nodes}: "
                     + "; ".join(_needs(p, plan.max_nodes) for p in plan.configs))
    else:
        others = [_needs(p, plan.max_nodes) for p in plan.configs if p is not best]
        lines.append(f"  {best.fleet.words()}: {demand.number()} {demand.unit} at {_at(best.fleet.level)}"
                     + "".join(f"; {o}" for o in others) + ".")
    if plan.mix is not None:
        mix, cost = plan.mix
        assert mix.level is not None and best is not None
        lines.append(f"  A mix is cheaper: {mix.words()} at {cost:.4g} an hour ({_at(mix.level)}) against "
                     f"{_cost(best)} for {best.fleet.words()}.")
    for p in plan.configs:
        f = p.fleet
        if f.naive is not None and f.level is not None and f.nodes != f.naive:
            naive = f"ceil({demand.number()} / {demand.number(p.capacity.low)}) = {f.naive}"
            if f.nodes > f.naive and f.fewer is not None:
                lines.append(f"  {p.config.name}: {naive} nodes is too few routed {plan.router}: {f.nodes} "
                             f"({f.naive} nodes: {_at(f.fewer)}, {100 * f.fewer.attainment:.1f}% within; a node "
                             f"held up to {f.fewer.peak_outstanding} requests against a capacity of "
                             f"{demand.number(p.capacity.low)} {demand.unit})")
            else:
                lines.append(f"  {p.config.name}: {naive} nodes is more than routed {plan.router} needs: {f.nodes}")
    lines += [f"  {n}" for n in plan.notes]
    lines.append("")
    lines.append(f"(by twins, in virtual time; docs/planning.md. ceil: {demand.unit} / the capacity's low end, and / "
                 "its point in brackets; nodes: routed)")
    lines.append(f"{'configuration':18s} {demand.unit + '/node (interval)':>22s} {'ceil':>9s} {'nodes':>6s} "
                 f"{'TTFT p90':>9s} {'TPOT p50':>9s} {'tok/J':>7s} {'cost/M tok':>11s} {'cost/h':>8s}  twin error")
    for p in plan.configs:
        lvl = p.fleet.level
        err = p.config.twin.error
        lines.append(
            f"{p.config.name:18s} {p.capacity.interval():>22s} "
            f"{_ceils(demand, p):>9s} {(str(p.fleet.nodes) if lvl else f'>{plan.max_nodes}'):>6s} "
            f"{_ms(lvl.ttft_p90_ms) if lvl else '-':>9s} {_ms(lvl.tpot_p50_ms) if lvl else '-':>9s} "
            f"{_num(lvl.tokens_per_joule if lvl else None, '.3g'):>7s} {_num(p.cost_per_m, '.4g'):>11s} "
            f"{_num(p.cost_per_hour, '.4g'):>8s}  {err.describe() if err else 'none recorded'}")
    return "\n".join(lines)


def _ceils(demand: Demand, p: ConfigPlan) -> str:
    """ceil(demand / low end), and ceil(demand / point) when it differs."""
    if not p.capacity.point:
        return "-"
    at_point = math.ceil(demand.amount / p.capacity.point - 1e-9)
    return _num(p.fleet.naive) + (f" ({at_point})" if at_point != p.fleet.naive else "")


def _cost(p: ConfigPlan) -> str:
    return f"{p.cost_per_hour:.4g} an hour" if p.cost_per_hour is not None else f"{p.fleet.nodes} nodes"


def _num(value: float | None, spec: str = "d") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)
