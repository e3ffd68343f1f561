"""A fleet plan from twins (docs/planning.md): per configuration, the capacity of one node at the SLO with its
interval, the nodes the demand needs routed as the user's router routes it, tokens per joule and cost; then the
cheapest plan that meets the SLO, and a mixed fleet where a mix is cheaper than any single configuration.

Everything here is a prediction in the twins' virtual time (plan_fleet.py): nothing is sent to a server.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loadgen.campaigns.plan_fleet import Demand, FleetLevel, run_fleet
from loadgen.config.cost import Prices
from loadgen.emulator.simulate import SimPrompt
from loadgen.errors import ConfigError
from loadgen.results.slo import Slo
from loadgen.twin.model import LIMIT_PCT, Twin
from loadgen.twin.seed import scaled_slo, twin_spread
from loadgen.twin.vtime import Protocol

WARMUP_S = 5.0            # a planned level's window, as `loadgen twin predict --twin`'s
MEASURE_S = 30.0
MIN_REQUESTS = 200        # at least this many requests in a level's window, and PER_USER per user:
PER_USER = 4              # every user's requests over a few lifetimes, so a router's unevenness shows
RATE_STEPS = 8            # a rate's capacity is searched in steps of one user's request rate / RATE_STEPS


@dataclass(frozen=True)
class Configuration:
    """One configuration to plan: a twin (one per configuration and node type), its prompts as that twin counts
    them, and its node's prices."""

    name: str
    twin: Twin
    prompts: Sequence[SimPrompt]
    prices: Prices = Prices()
    twin_file: str = ""           # where the twin was read from (a confirmation predicts its levels from it)


@dataclass(frozen=True)
class Capacity:
    """The demand one node serves at the SLO (users, or requests/s): the twin's point, and the interval its own
    error allows (low: the SLO's lines tightened by the twin's leave-one-level-out error, high: loosened;
    docs/twin.md)."""

    demand: Demand                # its kind, and the amount one node serves (the point)
    low: float
    high: float
    level: FleetLevel | None      # the node at the point (its power and tokens), None when the point is 0

    @property
    def point(self) -> float:
        return self.demand.amount

    def interval(self) -> str:
        return f"{self.demand.number()} ({self.demand.number(self.low)}-{self.demand.number(self.high)})"

    def describe(self) -> str:
        return f"{self.interval()} {self.demand.unit} a node"


@dataclass(frozen=True)
class Fleet:
    """A fleet for the demand, routed: nodes per configuration, the routed level that met the SLO's low-end lines
    (None: not within --max-nodes), and the level with one node fewer (which failed them)."""

    counts: dict[str, int]
    level: FleetLevel | None
    fewer: FleetLevel | None
    naive: int | None             # ceil(demand / capacity's low end): the plan without routing

    @property
    def nodes(self) -> int:
        return sum(self.counts.values())

    def words(self) -> str:
        return " + ".join(f"{n} x {name}" for name, n in self.counts.items() if n)


@dataclass(frozen=True)
class ConfigPlan:
    config: Configuration
    capacity: Capacity
    fleet: Fleet
    cost_per_m: float | None      # cost per million output tokens of the planned fleet (config/cost.py)
    cost_per_hour: float | None


@dataclass(frozen=True)
class Plan:
    demand: Demand
    slo: Slo
    router: str
    max_nodes: int
    configs: list[ConfigPlan]
    best: ConfigPlan | None
    mix: tuple[Fleet, float] | None = None     # a mixed fleet cheaper than `best`, with its cost an hour
    notes: list[str] = field(default_factory=list)


def check_together(configs: Sequence[Configuration]) -> list[str]:
    """ConfigError when the twins cannot be planned together; the notes of twins planned with a warning."""
    first = configs[0]
    for c in configs[1:]:
        for what, a, b, fix in (
                ("models", first.twin.model.name, c.twin.model.name, "plan each model on its own"),
                ("prompt mixes", first.twin.source.get("prompts"), c.twin.source.get("prompts"),
                 "fit every twin from runs of the same [prompts]"),
                ("time scales", first.twin.time_scale, c.twin.time_scale,
                 "plan twins measured at one --time-scale together")):
            if a != b:
                raise ConfigError("--twin", f"{first.name} and {c.name} are twins of different {what} ({a} vs {b}): "
                                  "their capacities answer different questions", fix)
    notes = []
    for c in configs:
        if c.twin.error is not None and (line := c.twin.error.over_limit()) is not None:
            notes.append(f"twin {c.name} (planned, over {LIMIT_PCT:g}%): {line}")
    return notes


def protocol(demand: Demand) -> Protocol:
    users = 0 if demand.rate else round(demand.amount)
    return Protocol(WARMUP_S, MEASURE_S, max(MIN_REQUESTS, PER_USER * users), 1e6)


def seed_for(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def largest_passing(passes: Callable[[int], bool], top: int) -> int:
    """The largest level in 1..top that passes, assuming a level passes when a higher one does: doubling from 1,
    then bisection (0 when 1 fails)."""
    if not passes(1):
        return 0
    good, bad = 1, None
    while bad is None and good < top:
        nxt = min(2 * good, top)
        good, bad = (nxt, None) if passes(nxt) else (good, nxt)
    if bad is None:
        return good
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if passes(mid) else (good, mid)
    return good


def capacity(config: Configuration, slo: Slo, max_new_tokens: int, search_max: int, rate: bool = False
             ) -> Capacity:
    """One node's capacity at the SLO, in users (or with `rate`, requests/s in steps of one user's rate /
    RATE_STEPS, up to search_max users' worth), and at the SLO's lines moved by the twin's error each way (seed.py's
    interval); every level simulated once and judged against the three."""
    spread = twin_spread(config.twin)
    slos = [slo, scaled_slo(slo, spread, 1), scaled_slo(slo, spread, -1)]
    unit, top = 1.0, search_max
    if rate:
        unit, top = one_user_rate(config, max_new_tokens) / RATE_STEPS, search_max * RATE_STEPS
    levels: dict[int, list[FleetLevel]] = {}

    def judged(n: int) -> list[FleetLevel]:
        if n not in levels:
            demand = Demand(n * unit, rate)
            levels[n] = run_fleet([(config.twin, config.prompts, 1.0)], demand, max_new_tokens, "least-outstanding",
                                  protocol(demand), slos, seed_for(config.name))
        return levels[n]

    def largest(k: int) -> int:
        return largest_passing(lambda n: judged(n)[k].passed, top)

    point, low, high = largest(0), largest(1), largest(2)
    return Capacity(Demand(point * unit, rate), min(low, point) * unit, max(high, point) * unit,
                    judged(point)[0] if point else None)


def one_user_rate(config: Configuration, max_new_tokens: int) -> float:
    """Requests/s one closed-loop user sends to one node of `config` (its twin's): the unit of a rate's search."""
    one = Demand(1)
    [level] = run_fleet([(config.twin, config.prompts, 1.0)], one, max_new_tokens, "least-outstanding",
                        protocol(one), [Slo()], seed_for(config.name))
    return level.requests / (level.window_s / config.twin.time_scale)


def fleet_for(configs: Sequence[tuple[Configuration, int]], demand: Demand, slo: Slo, router: str,
              max_new_tokens: int, weights: Sequence[float] = ()) -> FleetLevel:
    """`demand` routed over the nodes of `configs` (each configuration and its count; each configuration's weight
    for the weighted router, 1 when not given), judged against `slo`."""
    nodes = [(c.twin, c.prompts, weights[i] if weights else 1.0) for i, (c, n) in enumerate(configs) for _ in range(n)]
    seed = seed_for("+".join(f"{c.name}x{n}" for c, n in configs))
    [level] = run_fleet(nodes, demand, max_new_tokens, router, protocol(demand), [slo], seed)
    return level


def size(config: Configuration, cap: Capacity, demand: Demand, slo: Slo, router: str, max_nodes: int,
         max_new_tokens: int) -> Fleet:
    """The fewest nodes whose routed fleet meets the SLO's low-end lines (the lines tightened by the twin's error:
    the fleet is sized by the interval's low end), starting from ceil(demand / capacity's low end)."""
    tight = scaled_slo(slo, twin_spread(config.twin), 1)
    naive = math.ceil(demand.amount / cap.low - 1e-9) if cap.low else None
    if naive is None or naive > max_nodes:
        return Fleet({config.name: 0}, None, None, naive)
    runs: dict[int, FleetLevel] = {}

    def routed(k: int) -> FleetLevel:
        if k not in runs:
            runs[k] = fleet_for([(config, k)], demand, tight, router, max_new_tokens)
        return runs[k]

    k = naive
    while routed(k).passed and k > 1 and routed(k - 1).passed:
        k -= 1
    while not routed(k).passed and k < max_nodes:
        k += 1
    if not routed(k).passed:
        return Fleet({config.name: 0}, None, None, naive)
    return Fleet({config.name: k}, routed(k), routed(k - 1) if k > 1 else None, naive)


def fleet_cost(groups: Sequence[tuple[Configuration, int]], level: FleetLevel) -> tuple[float | None, float | None]:
    """(cost per million output tokens, cost per hour) of a routed fleet: each group's node-hours and modelled
    energy at its own prices (Prices.per_million_tokens, summed over the groups); None when unpriced."""
    if level.tokens <= 0 or not any(c.prices.node_hour or c.prices.energy_kwh for c, _ in groups):
        return None, None
    per_m, node = 0.0, 0
    for c, n in groups:
        energy = level.node_energy_j[node:node + n]
        joules = None if None in energy else sum(e for e in energy if e is not None)
        part = c.prices.per_million_tokens(n * level.window_s, joules, level.tokens)
        if part is None:
            return None, None
        per_m += part
        node += n
    return per_m, per_m * level.tokens / level.window_s * 3600 / 1e6


def make_plan(configs: Sequence[Configuration], demand: Demand, slo: Slo, router: str, max_nodes: int,
              max_new_tokens: int, search_max: int, log: Callable[[str], None] = lambda _: None) -> Plan:
    """The plan for `demand` at `slo` over `configs`; ConfigError when no configuration can serve one user (or
    the least rate searched) at the SLO, or the demand is beyond --max-nodes of every configuration."""
    notes = check_together(configs)
    caps = []
    for c in configs:
        caps.append(capacity(c, slo, max_new_tokens, search_max, demand.rate))
        log(f"{c.name}: {caps[-1].describe()} at the SLO (the twin's error: "
            f"TTFT {100 * twin_spread(c.twin)[0]:.0f}%, TPOT {100 * twin_spread(c.twin)[1]:.0f}%)")
    if all(cap.point == 0 for cap in caps):
        least = "one user" if not demand.rate else f"1/{RATE_STEPS} of one user's request rate"
        raise ConfigError("--slo", f"{slo.describe()} is below {least} on every configuration "
                          f"({', '.join(c.name for c in configs)}: {least} alone misses it)",
                          "loosen the SLO, or plan other configurations")
    most = max(zip(configs, caps), key=lambda p: p[1].low)
    if demand.amount > max_nodes * most[1].low:
        raise ConfigError(_flag(demand), f"{demand.words()} are beyond --max-nodes {max_nodes} of every "
                          f"configuration (at most {max_nodes} x {demand.number(most[1].low)} = "
                          f"{demand.number(max_nodes * most[1].low)} {demand.unit}, {most[0].name} at its "
                          "capacity's low end)", "raise --max-nodes, or plan a smaller demand")
    plans = []
    for c, cap in zip(configs, caps):
        fleet = size(c, cap, demand, slo, router, max_nodes, max_new_tokens)
        per_m, per_hour = fleet_cost([(c, fleet.nodes)], fleet.level) if fleet.level else (None, None)
        plans.append(ConfigPlan(c, cap, fleet, per_m, per_hour))
        log(f"{c.name}: {fleet.nodes or 'no fleet within --max-nodes'} nodes routed {router} "
            f"(ceil(demand / low end) = {fleet.naive})")
    sized = [p for p in plans if p.fleet.level is not None]
    best = min(sized, key=_rank) if sized else None
    mix = _cheaper_mix(configs, caps, best, demand, slo, router, max_nodes, max_new_tokens) if best else None
    return Plan(demand, slo, router, max_nodes, plans, best, mix, notes)


def _flag(demand: Demand) -> str:
    return "--rate" if demand.rate else "--users"


def _rank(p: ConfigPlan) -> tuple[float, float]:
    """Cheapest first: the cost an hour when priced, else the node count; more tokens per joule breaks a tie."""
    assert p.fleet.level is not None
    tpj = p.fleet.level.tokens_per_joule or 0.0
    return (p.cost_per_hour if p.cost_per_hour is not None else float(p.fleet.nodes), -tpj)


def _hourly(config: Configuration, cap: Capacity) -> float:
    """One node's cost an hour at its capacity (its price, and its modelled power there); the node count's unit
    (1) when unpriced."""
    if not (config.prices.node_hour or config.prices.energy_kwh):
        return 1.0
    watts = (cap.level.energy_j or 0.0) / cap.level.window_s if cap.level else 0.0
    return config.prices.node_hour + watts / 1000 * config.prices.energy_kwh


def _cheaper_mix(configs: Sequence[Configuration], caps: Sequence[Capacity], best: ConfigPlan, demand: Demand,
                 slo: Slo, router: str, max_nodes: int, max_new_tokens: int) -> tuple[Fleet, float] | None:
    """The cheapest two-configuration fleet whose capacities' low ends hold the demand, when it is cheaper than the
    best single configuration's; confirmed routed (the SLO's lines tightened by the larger of the two twins'
    errors), else None."""
    best_cost = best.cost_per_hour if best.cost_per_hour is not None else float(best.fleet.nodes)
    options = []
    for (a, ca), (b, cb) in itertools.combinations(zip(configs, caps), 2):
        for x in range(1, max_nodes):
            for y in range(1, max_nodes - x + 1):
                if x * ca.low + y * cb.low >= demand.amount:
                    options.append((x * _hourly(a, ca) + y * _hourly(b, cb), ((a, x), (b, y)),
                                    (max(1e-9, ca.low), max(1e-9, cb.low))))
                    break   # more of b costs more
    for estimate, groups, weights in sorted(options, key=lambda o: o[0]):
        if estimate >= best_cost:
            return None
        spread = max(twin_spread(c.twin) for c, _ in groups)
        level = fleet_for(groups, demand, scaled_slo(slo, spread, 1), router, max_new_tokens, weights)
        if not level.passed:
            continue
        per_m, per_hour = fleet_cost(groups, level)
        cost = per_hour if per_hour is not None else float(sum(n for _, n in groups))
        if cost < best_cost:
            return Fleet({c.name: n for c, n in groups}, level, None, None), cost
    return None
