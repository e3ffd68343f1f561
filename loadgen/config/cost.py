"""Prices: `[cost] node_hour` and `energy_kwh` (currency-neutral), and what a million output tokens costs at them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.config.tables import StrictTable

JOULES_PER_KWH = 3.6e6


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
    table = StrictTable(data, key)
    prices = Prices(node_hour=table.positive("node_hour", 0.0, allow_zero=True),
                    energy_kwh=table.positive("energy_kwh", 0.0, allow_zero=True))
    table.done()
    return prices
