"""The GPU telemetry's part of the answer in words (docs/telemetry.md): the hardware that makes a comparison unfair
(queries/confounders.sql's hardware rows), and tokens per joule against the baseline (queries/energy.sql).

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
