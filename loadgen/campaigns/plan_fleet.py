"""A demand over k twin nodes, routed as the user's router routes it, in the twins' virtual time: N closed-loop
users, or requests arriving at a rate (open loop).

Each node is its twin's engine (the emulator's scheduler and cost model on the twin's numbers, loadgen/twin/); a
user sends a request, waits for its last token and sends the next at once, as a closed-loop worker does; requests
at a rate arrive as a Poisson process (seeded) whatever the fleet holds, as an open-loop worker sends them. The router
picks a node per request: `round-robin` (the n-th request to node n mod k, whatever the nodes hold) or
`least-outstanding` (the node with the fewest requests in flight, ties in turn) or `weighted` (the fewest in flight
per unit of the node's weight, its planned capacity: what a mixed fleet of fast and slow nodes needs, since
closed-loop users resent at once keep every node at N / k under least-outstanding, whatever its speed). The window
follows a measured step's (users started over the warm-up, a window held open until enough requests were sent in it,
a drain until they finished), and a level is judged per request as views.sql's step_slo judges a measured one: the
share of the window's requests that met every line of the SLO against its attainment (the point share, no Wilson
interval: a simulated level holds hundreds of requests).

Energy is the twin's modelled GPU's (loadgen/emulator/gpu.py): each forward draws its roofline power, the GPU idles
between forwards; joules over the window, in the modelled hardware's time (virtual seconds x time_scale).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from loadgen.emulator.costmodel import Forward
from loadgen.emulator.engine import Engine
from loadgen.emulator.gpu import GpuModel, window_joules
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.simulate import SimPrompt, SimRequest
from loadgen.results.slo import Slo
from loadgen.twin.model import Twin
from loadgen.twin.vtime import Protocol

ROUTERS = ("least-outstanding", "round-robin", "weighted")


@dataclass(frozen=True)
class Demand:
    """What a fleet must serve: `amount` concurrent users (closed loop), or with `rate`, `amount` requests/s
    arriving whatever the fleet holds (open loop: a request rate, or a trace's peak)."""

    amount: float
    rate: bool = False

    @property
    def unit(self) -> str:
        return "req/s" if self.rate else "users"

    def number(self, amount: float | None = None) -> str:
        """An amount of this demand's kind: users whole, a rate to three figures."""
        value = self.amount if amount is None else amount
        return f"{value:.3g}" if self.rate else f"{value:.0f}"

    def words(self) -> str:
        return f"{self.number()} requests/s" if self.rate else f"{self.number()} concurrent users"


@dataclass(frozen=True)
class FleetLevel:
    """One routed level of a fleet: its figures over the window, and its verdict against one SLO."""

    nodes: int
    demand: float              # users, or requests/s (Demand.amount)
    requests: int              # requests sent in the window that finished
    tok_s: float               # the fleet's output tokens per virtual second, inside the window
    ttft_p90_ms: float
    tpot_p50_ms: float
    attainment: float          # share of the window's requests that met every line of the SLO
    passed: bool
    node_energy_j: tuple[float | None, ...]   # each node's modelled joules over the window (None: no power model)
    window_s: float            # the window in the modelled hardware's seconds (virtual seconds x time_scale)
    tokens: int                # output tokens inside the window
    peak_outstanding: int      # the most requests any one node held at once (routing's unevenness)

    @property
    def energy_j(self) -> float | None:
        """The fleet's modelled joules over the window; None when a node's twin has no power model."""
        return None if None in self.node_energy_j else sum(e for e in self.node_energy_j if e is not None)

    @property
    def tokens_per_joule(self) -> float | None:
        return self.tokens / self.energy_j if self.energy_j else None


@dataclass
class _Node:
    twin: Twin
    prompts: Sequence[SimPrompt]
    weight: float
    engine: Engine
    gpu: GpuModel | None
    step: tuple | None = None
    until: float = math.inf
    outstanding: int = 0
    peak: int = 0
    forwards: list[tuple[float, Forward]] = field(default_factory=list)   # each forward's start, in order


def run_fleet(nodes: Sequence[tuple[Twin, Sequence[SimPrompt], float]], demand: Demand, max_new_tokens: int,
              router: str, protocol: Protocol, slos: Sequence[Slo], seed: int) -> list[FleetLevel]:
    """`demand` over `nodes` (each a twin, its prompts as that twin counts them, and its weight for the weighted
    router), routed by `router`, judged against each SLO of `slos` (one simulation, several verdicts: a capacity
    and its interval)."""
    if router not in ROUTERS:
        raise ValueError(f"router {router!r} is not one of {ROUTERS}")
    fleet = []
    for i, (twin, prompts, weight) in enumerate(nodes):
        engine = twin.engine(seed + 7919 * i)
        engine.text = False   # no output text: nothing reads it here
        gpu = GpuModel(twin.hardware, twin.time_scale) if twin.hardware.max_power_w > 0 else None
        fleet.append(_Node(twin, prompts, weight if router == "weighted" else 1.0, engine, gpu))
    users = 0 if demand.rate else round(demand.amount)
    window = protocol.window(users)
    t, turn, in_window = 0.0, 0, 0
    measure_end: float | None = None
    sent: list[tuple[SimRequest, int]] = []   # every request and its node
    live: dict[str, tuple[SimRequest, int]] = {}
    arrivals = (_poisson(demand.amount, seed) if demand.rate else
                iter([u * window.measure_start / users for u in range(users)]))
    t_arrival, next_user = next(arrivals, math.inf), 0

    def route() -> int:
        nonlocal turn
        turn += 1
        if router == "round-robin":
            return (turn - 1) % len(fleet)
        return min(range(len(fleet)), key=lambda i: (fleet[i].outstanding / fleet[i].weight, (i - turn) % len(fleet)))

    def send(user: int) -> int:
        nonlocal in_window
        i, n = route(), len(sent)
        node = fleet[i]
        p = node.prompts[n % len(node.prompts)]
        rec = SimRequest(n, user, p.kind, p.prompt_tokens, t)
        req = EmuRequest(id=str(n), rid=None, kind=p.kind, route="sim", prompt_tokens=p.prompt_tokens,
                         max_new_tokens=max_new_tokens, ignore_eos=True, stream_interval=1)
        sent.append((rec, i))
        live[req.id] = (rec, i)
        node.outstanding += 1
        node.peak = max(node.peak, node.outstanding)
        if window.measure_start <= t and measure_end is None:
            in_window += 1
        node.engine.submit(req)
        return i

    def start(i: int) -> None:
        """Node i starts its next forward now, unless it is busy or has nothing to run."""
        node = fleet[i]
        if node.step is not None:
            return
        node.step = node.engine.plan_step()
        if node.step is None:
            return
        node.until = t + node.step[2]
        if node.gpu is not None:
            node.forwards.append((t, node.engine.last_forward))

    while True:
        i = min(range(len(fleet)), key=lambda j: fleet[j].until)
        if t_arrival == math.inf and fleet[i].until == math.inf:
            raise RuntimeError("fleet stalled: nothing runnable")
        if t_arrival <= fleet[i].until:
            t = t_arrival
            start(send(next_user))
            t_arrival, next_user = next(arrivals, math.inf), next_user + 1
            continue
        node = fleet[i]
        t = node.until
        assert node.step is not None
        kind, batch, _ = node.step
        node.step, node.until = None, math.inf
        before = [len(r.output_ids) for r in batch]
        node.engine.complete_step(kind, batch)
        finished = []
        for req, b in zip(batch, before):
            n = len(req.output_ids) - b
            if n <= 0:
                continue
            rec, _ = live[req.id]
            rec.first = t if rec.first is None else rec.first
            rec.last = t
            rec.frames.append((t, n))
            if req.done:
                rec.done, rec.completion_tokens, rec.spec_verify_ct = t, req.completion_tokens, req.spec_verify_ct
                del live[req.id]
                node.outstanding -= 1
                finished.append(rec.slot)
        node.engine.ledger.clear()
        start(i)                     # the next forward starts before the replacements land, as over HTTP
        for user in finished if not demand.rate else ():   # a closed-loop user sends its next request at once
            start(send(user))
        if measure_end is None and (t >= window.max_end or (t >= window.min_end and in_window >= window.min_measured)):
            measure_end = t
        if measure_end is not None and (t >= measure_end + window.drain_s or all(
                r.done is not None for r, _ in sent if window.measure_start <= r.sent < measure_end)):
            break
    assert measure_end is not None
    return [_judge(fleet, sent, window.measure_start, measure_end, demand.amount, slo) for slo in slos]


def _poisson(rate: float, seed: int) -> Iterator[float]:
    """Arrival instants of a Poisson process at `rate` per second, from 0."""
    rng = np.random.default_rng(seed)
    t = 0.0
    while True:
        t += float(rng.exponential(1 / rate))
        yield t


def _judge(fleet: list[_Node], sent: list[tuple[SimRequest, int]], t0: float, t1: float, demand: float,
           slo: Slo) -> FleetLevel:
    """views.sql's figures over the window [t0, t1): tokens of frames inside it; latencies of the requests sent
    inside it; each request meets the SLO when every line holds."""
    tokens = sum(n for r, _ in sent for ft, n in r.frames if t0 <= ft < t1)
    done = [r for r, _ in sent if t0 <= r.sent < t1 and r.done is not None and r.first is not None]
    ttft = np.array([r.first - r.sent for r in done])   # type: ignore[operator]
    tpot = np.array([(r.last - r.first) / (r.completion_tokens - 1) if r.completion_tokens > 1 else 0.0  # type: ignore[operator]
                     for r in done])
    e2e = np.array([r.done - r.sent for r in done])   # type: ignore[operator]
    ok = np.ones(len(done), dtype=bool)
    for line, values, unit in ((slo.ttft_ms, ttft, 1e3), (slo.tpot_ms, tpot, 1e3), (slo.e2e_s, e2e, 1.0)):
        if line is not None:
            ok &= values * unit <= line
    attainment = float(ok.mean()) if len(done) else 0.0
    window = t1 - t0
    energy = tuple(None if n.gpu is None else window_joules(n.gpu, n.forwards, t0, t1) for n in fleet)
    return FleetLevel(
        nodes=len(fleet), demand=demand, requests=len(done), tok_s=tokens / window if window > 0 else 0.0,
        ttft_p90_ms=1e3 * float(np.quantile(ttft, 0.9)) if len(done) else math.inf,
        tpot_p50_ms=1e3 * float(np.quantile(tpot, 0.5)) if len(done) else math.inf,
        attainment=attainment, passed=bool(done) and attainment >= slo.attainment, node_energy_j=energy,
        window_s=window * fleet[0].twin.time_scale, tokens=tokens,
        peak_outstanding=max(n.peak for n in fleet))
