"""The GPU telemetry's part of the answer in words (docs/telemetry.md): the hardware that makes a comparison unfair
(queries/confounders.sql's hardware rows), tokens per joule against the baseline (queries/energy.sql), and what a
million output tokens cost at the run's prices (queries/cost.sql).

`spark2 ran at 780 MHz median vs 2,405 on spark1 (software power cap 92% of the window): its numbers are not
comparable`; `dflash2 serves 1.16x the tokens per joule of mtp at C=1, 1.06x at C=8`.
"""

from __future__ import annotations

import duckdb

from loadgen.results import analysis


def hardware_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One sentence per node (or target) whose GPU ran slow, throttled or on other hardware than its peers'."""
    rows = analysis.run_query(con, "confounders").to_pylist()
    return list(dict.fromkeys(r["note"] for r in rows if r["note"]))


def energy_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Per series compared with the baseline: its tokens per joule as a multiple of the baseline's, per level:
    `dflash2/mtp tokens per joule: C=1 1.52x, C=32 0.90x`."""
    pairs: dict[tuple[str, str, str], list[str]] = {}
    for r in analysis.run_query(con, "energy").to_pylist():
        if r["tok_per_j_ratio"] is None:
            continue
        level = f"C={r['concurrency']}" if r["concurrency"] is not None else f"{r['rate']:g} req/s"
        pairs.setdefault((r["run_id"], r["target"], r["baseline_target"]), []).append(
            f"{level} {r['tok_per_j_ratio']:.2f}x")
    return [f"{other}/{base} tokens per joule: {', '.join(levels)}"   # six levels on one line
            for (_, other, base), levels in pairs.items()]


def cost_lines(rows: list[dict]) -> list[str]:
    """Each target at its cheapest load level (rows of queries/cost.sql), in one line: `cost per M output tokens,
    each at its cheapest level: dflash2 0.41 at C=8, mtp 0.47 at C=16`."""
    cheapest: dict[tuple[str, str], dict] = {}
    for r in rows:
        best = cheapest.get((r["run_id"], r["target"]))
        if r["cost_per_m_tokens"] is not None and (best is None or r["cost_per_m_tokens"] < best["cost_per_m_tokens"]):
            cheapest[(r["run_id"], r["target"])] = r
    runs: dict[str, list[dict]] = {}
    for r in sorted(cheapest.values(), key=lambda r: r["cost_per_m_tokens"]):
        runs.setdefault(r["run_id"], []).append(r)
    return ["cost per M output tokens, each at its cheapest level: " + ", ".join(
        f"{r['target']} {r['cost_per_m_tokens']:.3g} at "
        + (f"C={r['concurrency']}" if r["rate"] is None else f"{r['rate']:g} req/s") for r in found)
        for found in runs.values()]
