"""A node off its own twin, in words (docs/twin.md, "A twin that watches its node"): one sentence per target whose
measured level fell off the twin it watches (`watch_twin`) by more than the twin's band (queries/twin_drift.sql);
none for a healthy one. The answer, the report and `loadgen plan --confirm` print these sentences.
"""

from __future__ import annotations

from typing import Any

import duckdb

from loadgen.results import analysis


def drift_rows(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """queries/twin_drift.sql's rows over the selected runs (empty when no target watches a twin)."""
    return analysis.run_query(con, "twin_drift").to_pylist()


def drift_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per (run, target) with a drifting level: its worst tok/s level, else its worst TPOT level."""
    worst: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if not r["drift"]:
            continue
        key = (r["run_id"], r["target"])
        best = worst.get(key)
        rank = (r["metric"] == "tok_s", abs(r["off_pct"]))
        if best is None or rank > (best["metric"] == "tok_s", abs(best["off_pct"])):
            worst[key] = r
    return [sentence(r) for r in worst.values()]


def sentence(r: dict[str, Any]) -> str:
    """`spark2 serves 18% below its twin of 2026-12-01 at C = 8, beyond its 20% band: the box or the server
    changed` (a twin_drift row)."""
    off, when = r["off_pct"], r["twin_date"]
    if r["metric"] == "tok_s":
        what = f"serves {abs(off):.0f}% {'below' if off < 0 else 'above'} its twin of {when}"
    else:
        what = f"decodes {abs(off):.0f}% {'slower' if off > 0 else 'faster'} (TPOT p50) than its twin of {when}"
    return (f"{node_label(r['target'], r['node'])} {what} at C = {r['concurrency']}, beyond its "
            f"{r['band_pct']:.0f}% band: the box or the server changed")


def refit_hint(rows: list[dict[str, Any]], results_dir: str) -> list[str]:
    """The command that refits each drifting target's twin from its run, one line each."""
    seen: dict[tuple[str, str], str] = {}
    for r in rows:
        if r["drift"]:
            seen.setdefault((r["run_id"], r["target"]), r["twin_file"])
    return [f"loadgen twin refit {twin} --results {results_dir} --run {run} --target {target}"
            for (run, target), twin in seen.items()]


def node_label(target: str, node: str | None) -> str:
    """The node by its name: a fleet's `<node>.<configuration>` target as `node (configuration)`, a target on a
    named node as `target on node`, else the target."""
    if not node or node in ("local", target):
        return target
    if target.startswith(node + "."):
        return f"{node} ({target[len(node) + 1:]})"
    return f"{target} on {node}"
