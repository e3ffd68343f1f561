"""The report's data: every query it shows, run once over a results folder, plus what the page needs to label
them (short run names, one colour per series, the SLO judged against, the steps that did not complete).

Every number comes from the queries in queries/ (via loadgen.results.analysis), so the report and
`loadgen query` never disagree. The small helpers at the end name a row's load level the same way in the
findings, the plots and the tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from loadgen.errors import LoadgenError
from loadgen.results.analysis import list_queries, open_results, run_query

Rows = list[dict[str, Any]]
SeriesKey = tuple[str, str, str | None, int | None]   # run_id, target, algorithm, draft_tokens

QUERIES = ("runs", "compare_algorithms", "crossover", "repeats", "confounders", "acceptance_by_kind",
           "acceptance_by_position", "acceptance_sources", "throughput_by_concurrency", "latency_by_concurrency",
           "errors_by_class", "client_health", "fleet_nodes", "twin_drift", "hardware", "gpu_by_step", "energy", "cost",
           "by_turn", "prefix_cache")
# The SLO layer (capacity at an SLO, the search's probes, the Pareto frontier): used when queries/ has it.
SLO_QUERIES = ("goodput", "capacity", "pareto")
SLO_NAMES = ("ttft_ms", "tpot_ms", "e2e_s", "attainment", "max_error_rate")

SMALL_SAMPLE = 30          # measured ok requests below which a step's percentiles are marked as small-sample
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


@dataclass
class Report:
    """Query results plus what the page needs to label them: runs shown, series colours, the SLO."""

    data: dict[str, Rows]
    slo: dict[str, float]
    incomplete_steps: Rows
    with_server_info: set[tuple[str, str]]   # (run_id, target) whose steps recorded /get_server_info
    emulators: list[tuple[str, float]]       # each emulated (hardware profile, time scale) the runs' steps name

    def __post_init__(self) -> None:
        self.multi_run = len(self.data["runs"]) > 1
        self.run_labels = _run_labels(self.data["runs"])
        keys = [series_key(r) for r in self.data["repeats"] + self.data["throughput_by_concurrency"]]
        self.colours = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(dict.fromkeys(keys))}

    def label(self, row: dict) -> str:
        """'target (ALGORITHM/draft)', with the short run label when several runs are shown."""
        text = f"{row['target']} ({row.get('algorithm') or 'no spec'}"
        text += f"/{row['draft_tokens']})" if row.get("draft_tokens") is not None else ")"
        return f"{text} [{self.run_labels[row['run_id']]}]" if self.multi_run else text

    def colour(self, row: dict) -> str:
        """The series' colour; rows without draft_tokens (compare_algorithms) match on run, target, algorithm."""
        if series_key(row) in self.colours:
            return self.colours[series_key(row)]
        return next((c for k, c in self.colours.items() if k[:3] == series_key(row)[:3]), "#333333")

    @property
    def emulated(self) -> bool:
        return any(r.get("emulated") for r in self.data["runs"])

    @property
    def predicted(self) -> bool:
        return any(r.get("predicted") for r in self.data["runs"])


def load_report(results_dir: str | Path, run_ids: list[str] | None = None) -> Report:
    """Every query the report shows, the SLO it was judged against, and the steps that did not complete."""
    con = open_results(results_dir, run_ids)
    available = set(list_queries())
    data = {name: run_query(con, name).to_pylist() if name in available else [] for name in QUERIES + SLO_QUERIES}
    if not data["runs"]:
        raise LoadgenError(f"no runs in {results_dir}; run `python -m jobs.capacity` first or check --run")
    data["repeats"] = [_spread_unknown(r) if r["repeats"] < 2 else r for r in data["repeats"]]
    slo = _slo(con)
    if not slo:                  # without SLO lines every ok request "meets" it: nothing to show
        data["goodput"] = data["capacity"] = []
    if not any(r["peers"] > 1 or r["drift"] is not None for r in data["fleet_nodes"]):   # no fleet, no twin
        data["fleet_nodes"] = []
    incomplete = con.execute(
        "SELECT run_id, step_id, target, concurrency, rate, step_status FROM step_info "
        "WHERE step_status IS DISTINCT FROM 'complete' ORDER BY run_id, step_id, target").fetchall()
    with_info = set(con.execute("SELECT DISTINCT run_id, target FROM steps WHERE server_info IS NOT NULL")
                    .fetchall())
    emulators = con.execute(
        "SELECT DISTINCT server_info->>'$.emulator.hardware', coalesce((server_info->>'$.emulator.time_scale')::DOUBLE,"
        " 1) FROM steps WHERE server_info->>'$.emulator.hardware' IS NOT NULL ORDER BY ALL").fetchall()
    return Report(data, slo,
                  [dict(zip(("run_id", "step_id", "target", "concurrency", "rate", "step_status"), r))
                   for r in incomplete], with_info, emulators)


def _spread_unknown(row: dict) -> dict:
    """One repeat has no spread: shown as unknown (blank), not as a spread of 0 that reads as 'no noise'."""
    return {**row, "spread_pct": None, "tok_s_min": None, "tok_s_max": None, "accept_len_min": None,
            "accept_len_max": None}


def _slo(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    """The SLO the goodput/capacity queries judge by (views.sql run_slo: the run's [slo] or slo_* variables),
    of the first run that set a line; {} when none did or these results predate SLOs."""
    if not con.execute("SELECT 1 FROM duckdb_views() WHERE view_name = 'run_slo'").fetchall():
        return {}
    rows = con.execute(f"SELECT {', '.join(SLO_NAMES)} FROM run_slo WHERE coalesce(ttft_ms, tpot_ms, e2e_s) "
                       "IS NOT NULL ORDER BY run_id LIMIT 1").fetchall()
    return {n: v for n, v in zip(SLO_NAMES, rows[0]) if v is not None} if rows else {}


def series_key(row: dict) -> SeriesKey:
    """What makes a series: run, target, algorithm, draft tokens (one colour each)."""
    return row["run_id"], row["target"], row.get("algorithm"), row.get("draft_tokens")


def _run_labels(runs: Rows) -> dict[str, str]:
    """Short run labels: the run's name, plus its start time when two runs share a name."""
    names = [r["name"] or r["run_id"] for r in runs]
    return {r["run_id"]: (n if names.count(n) == 1 or r["started_at"] is None
                          else f"{n} {r['started_at']:%m-%d %H:%M}") for r, n in zip(runs, names)}


def level(row: dict) -> float:
    """The row's load level: its concurrency (closed loop) or its rate in req/s (open loop)."""
    return row["concurrency"] if row.get("concurrency") is not None else row["rate"]


def level_text(row: dict) -> str:
    """The load level in words: C=8 or 2.5 req/s."""
    return f"C={row['concurrency']}" if row.get("concurrency") is not None else f"{row['rate']:g} req/s"


def pct(value: float | None) -> str:
    """A signed change in percent with a true minus sign; blank when unknown."""
    return "" if value is None else f"{value:+.1f}%".replace("-", "\u2212")

