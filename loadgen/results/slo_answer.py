"""The capacity answer in words: one line per run with an SLO, from queries/capacity.sql.

`at TTFT <= 2 s for 90% of requests: mtp 16 users (15-17), dflash2 12 users (11-13): mtp serves 33% more`
"""

from __future__ import annotations

import json

import duckdb

from loadgen.results import analysis
from loadgen.results.slo import Slo


def capacity_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The answer of every run on `con` that has an SLO, then one line per target with its evidence."""
    rows = analysis.run_query(con, "capacity").to_pylist()
    slos = dict(con.execute("SELECT run_id, slo FROM runs WHERE slo IS NOT NULL").fetchall())
    lines = []
    for run_id in sorted({r["run_id"] for r in rows}):
        mine = [r for r in rows if r["run_id"] == run_id]
        targets = [r for r in mine if r["node"] != "(fleet)"]
        slo = Slo(**json.loads(slos[run_id])).describe() if run_id in slos else "the SLO given with --set"
        headline = f"at {slo}: " + ", ".join(f"{r['target']} {_amount(r)}" for r in targets)
        versus = _comparison(targets)
        lines.append(headline + (f": {versus}" if versus else ""))
        lines += [f"  {r['target']}: {_evidence(r)}" for r in targets]
        lines += [f"  fleet {r['target']}: {_amount(r)} over {r['note']}" for r in mine if r["node"] == "(fleet)"]
    return lines


def _unit(row: dict, value: float) -> str:
    if row["mode"] in ("open", "trace"):   # a trace replay's level is its mean rate
        return f"{value:g} req/s"
    return f"{value:g} user" + ("s" if value != 1 else "")


def _amount(row: dict) -> str:
    """`12 users (11-13)`: the capacity and its interval; a bound when no level passed or none failed."""
    capacity, low, high = row["capacity"], row["capacity_low"], row["capacity_high"]
    if capacity is None:
        return f"below {_unit(row, row['first_fail'])} (every level failed)"
    if high is None:   # no level failed (a fleet row: on some node)
        return f"at least {_unit(row, capacity)} (no level failed)"
    if low == capacity == high:
        return _unit(row, capacity)
    low_text = "?" if low is None else f"{low:g}"
    return f"{_unit(row, capacity)} ({low_text}-{high:g})"


def _comparison(targets: list[dict]) -> str:
    """`mtp serves 33% more than dflash2`, or why the difference is not clear."""
    known = [r for r in targets if r["capacity"] is not None]
    if len(known) < 2:
        return ""
    best = max(known, key=lambda r: r["capacity"])
    others = [r for r in known if r is not best]
    runner_up = max(others, key=lambda r: r["capacity"])
    if runner_up["capacity"] == best["capacity"]:
        return f"{best['target']} and {runner_up['target']} serve the same"
    more = 100 * (best["capacity"] / runner_up["capacity"] - 1)
    text = f"{best['target']} serves {more:.0f}% more than {runner_up['target']}"
    low, high = best["capacity_low"], runner_up["capacity_high"]
    if low is None or high is None or low <= high:
        text += " (their intervals overlap: not a clear difference)"
    return text


def _evidence(row: dict) -> str:
    """What the capacity level delivers and what the answer cost."""
    parts = []
    if row["capacity"] is not None:
        parts.append(f"at {_unit(row, row['capacity'])}: {row['tok_s']:g} tok/s in all, "
                     f"{row['user_tok_s']:g} tok/s per user" if row["tok_s"] is not None and
                     row["user_tok_s"] is not None else f"at {_unit(row, row['capacity'])}")
        if row["accept_len"] is not None:
            parts.append(f"acceptance length {row['accept_len']:g}")
    parts.append(f"{row['levels_probed']} levels in {row['steps']} steps, {row['step_s']:g} s")
    if row["note"]:
        parts.append(row["note"])
    if row["emulated"]:
        parts.append("EMULATED")
    if row.get("predicted"):
        parts.append("PREDICTED")
    return "; ".join(parts)
