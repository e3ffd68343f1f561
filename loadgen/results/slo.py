"""Service-level objectives: per-request lines plus the share of requests that must meet them.

The SLO is data, judged in SQL (queries/views.sql `step_slo`, `level_slo`): this module only reads it from the
experiment file or `--slo`, checks it, and says how many requests a clear call needs. A run saves its SLO in
`runs.slo`, so an old run can be judged again against another one (`loadgen query goodput --set slo_ttft_ms=..`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from loadgen.errors import ConfigError
from loadgen.keys import Bounds, Key, Keys, StrictTable

# z of the two-sided 95% Wilson score interval that SQL puts around each attainment (views.sql `wilson_*`).
WILSON_Z = 1.96
LINES = ("ttft_ms", "tpot_ms", "e2e_s")
_LINE, _SHARE = Bounds(0, above=True), Bounds(0, 1, above=True, what="a share")
SLO = Keys("slo", "What an acceptable experience is (or `--slo ttft_ms=2000,tpot_ms=100`): at least one "
           "per-request line; each step passes or fails it (docs/capacity-search.md).", (
    Key("ttft_ms", float, None, "per request: time to first token, ms", _LINE),
    Key("tpot_ms", float, None, "per request: mean time per output token after the first, ms", _LINE),
    Key("min_decode_tok_s", float, None, "tpot_ms said as a rate: tpot_ms = 1000 / min_decode_tok_s", _LINE),
    Key("e2e_s", float, None, "per request: send to last byte, s", _LINE),
    Key("attainment", float, 0.9, "share of measured requests that must meet every line", _SHARE, "e.g. 0.9 for 90%"),
    Key("max_error_rate", float, 0.01, "share of measured requests that may fail (http error, timeout, ...)", _SHARE,
        "e.g. 0.01 for 1%"),
))


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None     # per request: time to first token
    tpot_ms: float | None = None     # per request: mean time per output token after the first
    e2e_s: float | None = None       # per request: send to last byte
    attainment: float = 0.9          # share of measured requests that must meet every line
    max_error_rate: float = 0.01     # share of measured requests that may fail (http error, timeout, ...)
    false_verdict: float | None = None  # [load] window = "sequential": the sequential test's error rate
    miss_correlation: float | None = None  # and the misses' lag-1 correlation it holds to (None: the rule's default)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def describe(self) -> str:
        """`TTFT <= 2 s and TPOT <= 100 ms for 90% of requests`: the SLO in the words of the answer."""
        lines = []
        if self.ttft_ms is not None:
            lines.append(f"TTFT <= {_duration(self.ttft_ms / 1e3)}")
        if self.tpot_ms is not None:
            lines.append(f"TPOT <= {_duration(self.tpot_ms / 1e3)}")
        if self.e2e_s is not None:
            lines.append(f"e2e <= {_duration(self.e2e_s)}")
        return f"{' and '.join(lines)} for {self.attainment:.0%} of requests"

    def met(self, ttft_ms: float | None, tpot_ms: float | None, e2e_s: float | None) -> bool:
        """An ok request meets the SLO when each figure is at or under its line (a line not set, or a figure
        undefined, is met): views.sql `step_slo`'s rule, for the live figures (loadgen.client.livestats)."""
        pairs = ((ttft_ms, self.ttft_ms), (tpot_ms, self.tpot_ms), (e2e_s, self.e2e_s))
        return all(line is None or value is None or value <= line for value, line in pairs)

    def requests_for_clear_pass(self) -> int:
        """The fewest measured requests whose attainment interval can clear the threshold: with every request
        meeting the SLO the Wilson lower bound is n / (n + z^2), so n >= z^2 * a / (1 - a) (35 for a = 0.9)."""
        if self.attainment >= 1.0:
            return 1 << 30
        return max(1, math.ceil(WILSON_Z ** 2 * self.attainment / (1 - self.attainment) - 1e-9))


def _duration(seconds: float) -> str:
    return f"{seconds:g} s" if seconds >= 1 else f"{seconds * 1e3:g} ms"


def parse_slo(raw: dict[str, Any], key: str = "slo") -> Slo:
    """An [slo] table (or the pairs of `--slo`); at least one per-request line. min_decode_tok_s is the same
    line as tpot_ms, said as a rate (tpot_ms = 1000 / min_decode_tok_s)."""
    t = StrictTable(raw, key, SLO)
    values = {name: t.read(name) for name in SLO.names}
    t.done()
    rate = values.pop("min_decode_tok_s")
    if rate is not None:
        if values["tpot_ms"] is not None:
            raise ConfigError(f"{key}.min_decode_tok_s", "says the same as tpot_ms", "give one of the two")
        values["tpot_ms"] = 1000.0 / rate
    if all(values[line] is None for line in LINES):
        raise ConfigError(key, "has no per-request line", "set at least one of ttft_ms, tpot_ms (or "
                          "min_decode_tok_s), e2e_s, e.g. ttft_ms = 2000")
    return Slo(**values)


def parse_slo_flag(text: str) -> dict[str, float]:
    """`ttft_ms=2000,tpot_ms=100` (the `--slo` flag) -> the pairs of an [slo] table, checked by parse_slo."""
    pairs: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = item.partition("=")
        try:
            pairs[name.strip()] = float(value)
        except ValueError:
            raise ConfigError("--slo", f"{item!r} is not NAME=NUMBER", "e.g. --slo ttft_ms=2000,tpot_ms=100") from None
    return pairs


@dataclass(frozen=True)
class Verdict:
    """One level's SLO call, pooled over its runs (SQL: level_slo)."""

    passed: bool
    clear: bool               # the attainment interval does not straddle the threshold
    runs: int
