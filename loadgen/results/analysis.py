"""DuckDB over a results folder: the views of queries/views.sql and the named queries beside it.

The .sql files are the product (users run them from the duckdb CLI); this module only sets the DuckDB
variables they read (`results`, `run_ids`, query parameters), runs them, and renders the result. The SQL is
package data, `loadgen/results/queries` (a link to the top-level queries/ in a checkout, the files in a wheel).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import duckdb
import pyarrow as pa

from loadgen.errors import LoadgenError
from loadgen.results.schema import SCHEMA_VERSION
from loadgen.results.slo import Verdict

# Installed as files (a wheel, a checkout), never a zip: the queries are read as paths.
QUERIES_DIR = Path(str(resources.files("loadgen.results") / "queries"))

# Parameters a query reads as DuckDB variables (SET VARIABLE name = value), with what they mean.
PARAMS: dict[str, str] = {
    "baseline": "comparison baseline, a target name or algorithm (default: the first target's series)",
    "position_bucket": "acceptance_by_position bucket width in tokens (default 32)",
    "conc_a": "concurrency_pair: first concurrency (default 8)",
    "conc_b": "concurrency_pair: second concurrency (default 16)",
    "run_a": "compare_runs: the 'before' run id (default: the earliest selected run)",
    "run_b": "compare_runs: the 'after' run id (default: the latest selected run)",
    "max_loop_lag_ms": "client_health: p99 event-loop lag above this delays requests (default 10)",
    "max_read_delay_ms": "client_health: p99 socket read delay above this merges frames (default 10)",
    "max_cpu_percent": "client_health: p90 worker CPU above this means a saturated client (default 90)",
    "min_in_flight_share": "client_health: share of samples at target in-flight below this fails (default 0.95)",
    "outlier_pct": "fleet_nodes: % off the fleet median that flags a node (default 15)",
    "clock_drop_pct": "confounders: SM clock median this % below its peers' names a node (default 10)",
    "throttled_max_pct": "confounders: a window throttled more than this % of the time names a node (default 5)",
    "slo_ttft_ms": "SLO line: time to first token in ms (default: the run's [slo])",
    "slo_tpot_ms": "SLO line: time per output token after the first, in ms (default: the run's [slo])",
    "slo_e2e_s": "SLO line: send to last byte in s (default: the run's [slo])",
    "slo_attainment": "SLO: share of measured requests that must meet every line (default: the run's, else 0.9)",
    "slo_false_verdict": "SLO: judge each level by the sequential test at this error rate (default: the run's window)",
    "slo_miss_correlation": "SLO: the sequential test's largest lag-1 correlation of misses (default: the run's, "
                            "else 0.7)",
    "slo_max_error_rate": "SLO: share of measured requests that may fail (default: the run's, else 0.01)",
    "predicted_run": "twin_error: only this predicted run (default: every predicted run selected)",
    "measured_run": "twin_error: only this measured run (default: every measured run selected)",
    "twin_limit_pct": "twin_error: a metric's MAPE above this % is flagged over_limit (default 15)",
}

Format = Literal["table", "csv", "json"]


def list_queries() -> list[str]:
    """Names of the runnable queries (file stems in queries/, without the views file)."""
    return sorted(p.stem for p in QUERIES_DIR.glob("*.sql") if p.stem != "views")


def query_descriptions() -> dict[str, str]:
    """Each runnable query's one-line description, from its file's header: `-- <name>: <what it answers>`,
    to the end of that first sentence (it may wrap onto the next `--` lines)."""
    return {name: describe_query(QUERIES_DIR / f"{name}.sql") for name in list_queries()}


def describe_query(path: Path) -> str:
    words = []
    for line in path.read_text().splitlines():
        text = line.removeprefix("--").strip()
        if not line.startswith("--") or not text:
            break
        words.append(text)
    head = " ".join(words)
    name, colon, rest = head.partition(": ")
    if name != path.stem or not colon:
        raise LoadgenError(f"{path} does not start with its header; fix: make its first line "
                           f"`-- {path.stem}: <what it answers>.`")
    end = re.search(r"(?<!\.)[.?](\s|$)", rest)   # the first sentence's end (not an ellipsis)
    return rest[:end.start() + 1] if end else rest


def open_results(results_dir: str | Path, run_ids: list[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the views over `results_dir`, limited to `run_ids` if given.

    Fails early, with the fix, on a folder that is not a results folder, run ids it does not hold, or a
    schema version newer than this loadgen understands.
    """
    root = Path(results_dir)
    if not (root / "runs").is_dir():
        raise LoadgenError(
            f"{root} is not a loadgen results folder (no runs/ inside); pass the folder the job wrote "
            "with --results (default ./results)")
    # Every query orders its output explicitly, so DuckDB need not keep scan order (faster windows/sorts).
    con = duckdb.connect(config={"preserve_insertion_order": False})
    _run(con, "SET VARIABLE results = ?", [str(root)])
    _run(con, _views_sql())
    found = _run(con, "SELECT run_id, schema_version FROM runs")
    newest = max((v for _, v in found if v is not None), default=SCHEMA_VERSION)
    if len({v for _, v in found}) > 1:   # files of different versions: the requests view matches columns by name
        _run(con, "SET VARIABLE mixed_schemas = true")
    if newest > SCHEMA_VERSION:
        raise LoadgenError(
            f"{root} holds results of schema version {newest}, newer than this loadgen's {SCHEMA_VERSION}; "
            "upgrade loadgen to read them")
    if run_ids:
        missing = sorted(set(run_ids) - {r for r, _ in found})
        if missing:
            known = ", ".join(sorted({r for r, _ in found})) or "none"
            raise LoadgenError(
                f"run id(s) {', '.join(missing)} not in {root}; runs there: {known} "
                "(list them with `loadgen query runs`)")
        _run(con, "SET VARIABLE run_ids = ?", [list(run_ids)])
    return con


@functools.cache
def _views_sql() -> str:
    """views.sql with every view's binding deferred to its first use: a connection then opens without binding
    the views no query of it reads (the file itself stays as the duckdb CLI 1.5, which lacks the option, reads it)."""
    return _VIEW.sub(r"\g<0> WITH (DEFER_BINDING)", (QUERIES_DIR / "views.sql").read_text())


_VIEW = re.compile(r"^CREATE OR REPLACE VIEW \w+(?= AS\b)", re.MULTILINE)


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """`NAME=VALUE` strings from the command line -> parameters; numbers become numbers."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise LoadgenError(f"--set {pair!r}: expected NAME=VALUE, e.g. --set outlier_pct=10")
        try:
            params[key] = int(text)
        except ValueError:
            try:
                params[key] = float(text)
            except ValueError:
                params[key] = text
    return params


def run_query(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> pa.Table:
    """Run queries/<name>.sql on a connection from open_results, after setting its parameters."""
    if name not in list_queries():
        raise LoadgenError(f"unknown query {name!r}; available: {', '.join(list_queries())}")
    for key, value in (params or {}).items():
        if key not in PARAMS:
            raise LoadgenError(f"unknown query parameter {key!r}; known: {', '.join(PARAMS)}")
        _run(con, f"SET VARIABLE {key} = ?", [value])
    _check_baseline(con)
    return con.sql((QUERIES_DIR / f"{name}.sql").read_text()).to_arrow_table()


def level_verdicts(results_dir: str | Path, run_id: str, targets: list[str]) -> dict[str, dict[float, Verdict]]:
    """Each target's SLO verdict per load level so far (queries/views.sql `level_slo`), for a plan that chooses
    its next step from finished ones."""
    con = open_results(results_dir, [run_id])
    verdicts: dict[str, dict[float, Verdict]] = {t: {} for t in targets}
    rows = _run(con, "SELECT target, level, verdict = 'pass', clear, steps FROM level_slo "
                     "WHERE list_contains(?, target) AND verdict IS NOT NULL", [targets])
    for target, level, passed, clear, steps in rows:
        verdicts[target][float(level)] = Verdict(passed, clear, steps)
    con.close()
    return verdicts


def _run(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[tuple]:
    """Execute and finish the result (DuckDB 2 refuses new work while a result is open)."""
    return con.execute(sql, params).fetchall()


def _check_baseline(con: duckdb.DuckDBPyConnection) -> None:
    """A baseline that names nothing would silently empty every comparison: refuse it instead."""
    [(baseline,)] = _run(con, "SELECT getvariable('baseline')")
    if baseline is None:
        return
    names = {v for row in _run(con, "SELECT DISTINCT target, algorithm FROM steps") for v in row}
    if baseline not in names:
        raise LoadgenError(
            f"baseline {baseline!r} is neither a target nor an algorithm of the selected runs; "
            f"choose one of: {', '.join(sorted(n for n in names if n))}")


def render(table: pa.Table, fmt: Format = "table") -> str:
    """Text of a query result: an aligned table, CSV, or JSON (a list of objects keyed by column name)."""
    rows = table.to_pylist()
    if fmt == "json":
        return json.dumps([{k: _json_value(v) for k, v in r.items()} for r in rows], indent=1, default=str)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(table.column_names)
        writer.writerows([["" if v is None else _cell(v) for v in r.values()] for r in rows])
        return out.getvalue()
    if fmt == "table":
        return _aligned(table.column_names, [[_cell(v) for v in r.values()] for r in rows])
    raise LoadgenError(f"unknown format {fmt!r}; use table, csv or json")


def _json_value(value: Any) -> Any:
    """JSON has no NaN/inf: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e6 else f"{value:.6g}"
    return str(value)


def _aligned(header: list[str], cells: list[list[str]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    numeric = [all(_is_number(r[i]) for r in cells) and bool(cells) for i in range(len(header))]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)).rstrip()

    lines = [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in cells]
    lines.append(f"({len(cells)} row{'s' if len(cells) != 1 else ''})")
    return "\n".join(lines) + "\n"


def _is_number(text: str) -> bool:
    if text == "NULL":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True
