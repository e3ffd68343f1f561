"""Prices: `[cost] node_hour` and `energy_kwh` (currency-neutral), and what a million output tokens costs at them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.keys import Bounds, Key, Keys, StrictTable

JOULES_PER_KWH = 3.6e6
COST = Keys("cost", "Prices, currency-neutral: the answer's cost per million output tokens; a [targets.cost] sets "
            "one target's, key by key over these (a price of 0 is free, not missing).", (
    Key("node_hour", float, 0.0, "an hour of a node (node time = the steps' measurement windows)", Bounds(0)),
    Key("energy_kwh", float, 0.0, "a kWh of the GPU's energy (joules from gpu_samples; docs/telemetry.md)",
        Bounds(0)),
))


@dataclass(frozen=True)
class Prices:
    """What an hour of a node and a kWh of its GPU's energy cost; 0 where not given."""

    node_hour: float = 0.0
    energy_kwh: float = 0.0

    def per_million_tokens(self, node_seconds: float, energy_j: float | None, output_tokens: int) -> float | None:
        """Cost of `output_tokens` that took `node_seconds` of a node and `energy_j` of its GPU's energy
        (None: unmeasured, priced only when energy has no price); None when no token was made."""
        if output_tokens <= 0 or (energy_j is None and self.energy_kwh > 0):
            return None
        energy_cost = (energy_j or 0.0) / JOULES_PER_KWH * self.energy_kwh
        return (node_seconds / 3600 * self.node_hour + energy_cost) / output_tokens * 1e6


def read_prices(data: Any, key: str = "cost") -> Prices:
    """A `[cost]` table: both keys optional, each a finite number >= 0 (a price of 0 is free, not missing)."""
    table = StrictTable(data, key, COST)
    prices = Prices(node_hour=table.read("node_hour"), energy_kwh=table.read("energy_kwh"))
    table.done()
    return prices
