"""`load.mode = "open"`: the open-loop keys of [load] (the rates, the arrival process, the in-flight cap); the
worker's side of the schedule is loadgen.client.arrivals."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from loadgen.errors import ConfigError
from loadgen.keys import REQUIRED, Bounds, Choice, Key

ARRIVALS = ("constant", "poisson", "gamma")
# [load]'s open-loop keys (mode = "open"; max_in_flight applies to a trace too)
OPEN_KEYS = (
    Key("rates", list, REQUIRED, "the rates to sweep, requests/s per target, e.g. [0.5, 1, 2]",
        shown="required in open mode"),
    Key("arrival", str, "poisson", "the arrival process; gamma's shape is burstiness",
        Choice(ARRIVALS, "arrival process")),
    Key("burstiness", float, 1.0, "gamma shape: 1 = Poisson, below 1 burstier, above 1 smoother",
        Bounds(0, above=True, what="a gamma shape"), "1 = Poisson, below 1 burstier, above 1 smoother"),
    Key("seed", int, 0, "seeds the arrival times"),
    Key("max_in_flight", int, 1024, "per target: arrivals beyond it wait for a free slot and are sent late",
        Bounds(1), "the most requests in flight per target; arrivals beyond it are sent late"),
)


@dataclass(frozen=True)
class OpenLoopConfig:
    """`load.mode = "open"`: the rates to sweep (requests/s per target) and the arrival process."""

    rates: tuple[float, ...]
    arrival: str            # constant | poisson | gamma
    burstiness: float       # gamma shape
    seed: int
    max_in_flight: int      # per target: arrivals beyond it wait for a free slot and are sent late



def parse_open_loop(t: Any, mode: str, searching: bool = False) -> OpenLoopConfig | None:
    """The open-loop keys of [load] (`t` is config's table reader); None in closed mode, where they are errors.
    A capacity search chooses its own rates, so `rates` is then left out."""
    if mode != "open":
        for name in (k.name for k in OPEN_KEYS):
            if name in t.data and not (mode == "trace" and name == "max_in_flight"):
                raise ConfigError(f"load.{name}", "only applies to open-loop load",
                                  'set load.mode = "open" (and rates), or remove it')
        return None
    if "concurrency" in t.data:
        raise ConfigError("load.concurrency", "open-loop load has rates, not concurrency levels",
                          "remove concurrency and list load.rates (requests/s per target), or use mode = \"closed\"")
    if searching and "rates" in t.data:
        raise ConfigError("load.rates", "a capacity search chooses its own rates",
                          "remove rates and bound the search with search_min / search_max")
    rates = t.read("rates", [] if searching else REQUIRED)
    if not rates and not searching:
        raise ConfigError("load.rates", "is empty", "list the rates to sweep in requests/s, e.g. [0.5, 1, 2]")
    for i, r in enumerate(rates):
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise ConfigError(f"load.rates[{i}]", f"must be a number of requests/s > 0, got {r!r}",
                              "e.g. rates = [0.5, 1, 2]")
    if len(set(rates)) != len(rates) and "ramp" not in t.data:   # a ramp may come back down
        raise ConfigError("load.rates", "has a rate twice", "use `repeats` to run a rate again")
    arrival = t.read("arrival")
    if "burstiness" in t.data and arrival != "gamma":
        raise ConfigError("load.burstiness", f"only applies to arrival = \"gamma\" (arrival is {arrival!r})",
                          'set arrival = "gamma" or remove burstiness')
    burstiness, seed, cap = t.read("burstiness"), t.read("seed"), t.read("max_in_flight")
    return OpenLoopConfig(tuple(float(r) for r in rates), arrival, burstiness, seed, cap)
