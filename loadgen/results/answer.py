"""The job's answer, words first: a headline per comparison, a table that fits 120 columns, and the command for
the full tables; the same as summary.json and summary.md beside the run's Parquet tables (for CI and dashboards
that do not run DuckDB).

Every figure comes from the views over a connection of `analysis.open_results` (queries/views.sql: `comparison`
for tok/s, acceptance, % change and signal; `measured` for the request counts), so the words say exactly what
`loadgen query compare_algorithms` shows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb

from loadgen.results import analysis
from loadgen.results.drift import drift_lines, drift_rows, refit_hint  # a node off its own twin
from loadgen.results.gpu_answer import cost_lines, energy_lines, hardware_lines  # GPU telemetry, when the run has it
from loadgen.results.slo_answer import capacity_lines  # the capacity at the SLO, when the run has one
from loadgen.values import WIDTH, fitted

NAME_WIDTH = 12    # a series name in a column header is cut to this

_LEVELS = """
WITH n AS (
    SELECT m.run_id, m.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, count(*) AS n
    FROM measured m JOIN step_info s USING (run_id, step_id, target)
    GROUP BY ALL
)
SELECT c.run_id, c.baseline_target, c.target, c.concurrency, c.rate,
       coalesce(nb.n, 0) AS baseline_n, coalesce(no.n, 0) AS n,
       round(c.baseline_tok_s, 2) AS baseline_tok_s, round(c.baseline_accept_len, 3) AS baseline_accept_len,
       round(c.tok_s, 2) AS tok_s, round(c.accept_len, 3) AS accept_len,
       round(c.tok_s_change_pct, 1) AS tok_s_change_pct,   -- rounded as compare_algorithms shows them
       least(c.repeats, c.baseline_repeats) AS repeats, c.signal, c.any_emulated AS emulated
FROM comparison c
LEFT JOIN n nb ON nb.run_id = c.run_id AND nb.target = c.baseline_target
              AND nb.algorithm IS NOT DISTINCT FROM c.baseline_algorithm
              AND nb.draft_tokens IS NOT DISTINCT FROM c.baseline_draft_tokens
              AND nb.concurrency IS NOT DISTINCT FROM c.concurrency AND nb.rate IS NOT DISTINCT FROM c.rate
LEFT JOIN n no ON no.run_id = c.run_id AND no.target = c.target
              AND no.algorithm IS NOT DISTINCT FROM c.algorithm
              AND no.draft_tokens IS NOT DISTINCT FROM c.draft_tokens
              AND no.concurrency IS NOT DISTINCT FROM c.concurrency AND no.rate IS NOT DISTINCT FROM c.rate
WHERE NOT c.is_baseline
ORDER BY c.run_id, c.baseline_target, c.target, c.algorithm, c.draft_tokens, c.concurrency, c.rate
"""


@dataclass
class Level:
    """One load level of a comparison: the baseline and the other series side by side."""

    level: str                 # "C=8" or "rate=2/s"
    value: float               # the concurrency or rate, for "between 8 and 16"
    baseline_n: int            # measured requests (all repeats)
    n: int
    baseline_tok_s: float | None
    baseline_accept_len: float | None
    tok_s: float | None
    accept_len: float | None
    change_pct: float | None   # tok/s of the other series vs the baseline's
    repeats: int
    signal: bool | None        # None: unknown (one repeat); False: inside the spread over repeats
    emulated: bool             # a series ran on loadgen's emulator: the numbers are its model's


@dataclass
class Comparison:
    run_id: str
    baseline: str
    other: str
    headline: str
    levels: list[Level]


def comparisons(con: duckdb.DuckDBPyConnection) -> list[Comparison]:
    """Every (baseline, other series) pair of the selected runs, with its headline."""
    cursor = con.execute(_LEVELS)
    names = [d[0] for d in cursor.description]
    pairs: dict[tuple[str, str, str], list[Level]] = {}
    for row in cursor.fetchall():
        r = dict(zip(names, row))
        is_rate = r["concurrency"] is None
        value = r["rate"] if is_rate else r["concurrency"]
        pairs.setdefault((r["run_id"], r["baseline_target"], r["target"]), []).append(Level(
            f"rate={value:g}/s" if is_rate else f"C={value}", value, r["baseline_n"], r["n"], r["baseline_tok_s"],
            r["baseline_accept_len"], r["tok_s"], r["accept_len"], r["tok_s_change_pct"], r["repeats"],
            r["signal"], bool(r["emulated"])))
    return [Comparison(run, base, other, headline(base, other, levels), levels)
            for (run, base, other), levels in pairs.items()]


CLOSE_PCT = 3.0   # loadgen.twin.crossover.CLEAR_PCT: with one repeat each, a smaller difference is not called


def headline(baseline: str, other: str, levels: list[Level]) -> str:
    """`dflash2 ahead up to C=8 (+12..+33%), mtp ahead from C=16 (-2..-11%); crossover between 8 and 16; noise:
    unknown, 1 repeat`. Percentages are the other series' tok/s vs the baseline's. A level is called for the side
    ahead only when the difference is a signal (outside the spread over repeats) or, with one repeat, at least
    CLOSE_PCT; an exact tie (0.0%) reads "no difference", the rest "too close to call"."""
    measured = [lv for lv in levels if lv.change_pct is not None]
    if not measured:
        return "no level with both series measured"
    ties = [lv for lv in measured if lv.change_pct == 0]
    close = [lv for lv in measured if lv.change_pct and not _called(lv)]
    runs: list[list[Level]] = []
    for lv in (lv for lv in measured if _called(lv)):
        if runs and (_change(runs[-1][-1]) > 0) == (_change(lv) > 0):
            runs[-1].append(lv)
        else:
            runs.append([lv])
    parts = []
    for i, run in enumerate(runs):
        leader = other if _change(run[0]) > 0 else baseline
        if len(levels) == 1:   # a search runs each target at its own levels: two may share only one
            where = f"at {run[0].level}, the only level both were measured at"
        elif len(run) == len(levels):
            where = f"at every level ({_range(run)})"
        elif i == 0 and run[0] is levels[0] and len(runs) > 1:
            where = f"up to {run[-1].level}"
        elif i == len(runs) - 1 and run[-1] is levels[-1] and len(runs) > 1:
            where = f"from {run[0].level}"
        else:
            where = f"at {_range(run)}"
        parts.append(f"{leader} ahead {where} ({_span([_change(lv) for lv in run])})")
    if ties:
        parts.append(f"no difference at {_where(ties, levels)}")
    if close:   # inside the spread over repeats is said by the noise part; a one-repeat difference is sized here
        within = (f" (within {max(abs(_change(lv)) for lv in close):.1f}%)"
                  if all(lv.signal is None for lv in close) else "")
        parts.append(f"too close to call at {_where(close, levels)}{within}")
    text = ", ".join(parts)
    crossings = [f"{_bare(before[-1])} and {_bare(after[0])}" for before, after in zip(runs, runs[1:])]
    if crossings:
        text += "; crossover between " + ", ".join(crossings)
    return text + "; noise: " + _noise(measured)


def _called(level: Level) -> bool:
    """A difference the answer names a side for: a signal, or with unknown noise one of at least CLOSE_PCT."""
    if not level.change_pct:
        return False
    return level.signal is True or (level.signal is None and abs(level.change_pct) >= CLOSE_PCT)


def _change(level: Level) -> float:
    """A level's change_pct (only levels whose change is set reach the headline's words)."""
    assert level.change_pct is not None
    return level.change_pct


def _bare(level: Level) -> str:
    return f"{level.value:g}"


def _range(run: list[Level]) -> str:
    """`C=1..32`, or `C=8` for one level."""
    return run[0].level + (f"..{_bare(run[-1])}" if len(run) > 1 else "")


def _where(chosen: list[Level], levels: list[Level]) -> str:
    """The chosen levels as ranges of neighbours in `levels`: `C=2..4, C=16`."""
    groups: list[list[Level]] = []
    for lv in chosen:
        if groups and levels.index(groups[-1][-1]) + 1 == levels.index(lv):
            groups[-1].append(lv)
        else:
            groups.append([lv])
    return ", ".join(_range(g) for g in groups)


def _span(changes: list[float]) -> str:
    """+12..+33% (or one value), ordered by size."""
    low, high = sorted((min(changes, key=abs), max(changes, key=abs)), key=abs)
    return f"{low:+.0f}%" if round(low) == round(high) else f"{low:+.0f}..{high:+.0f}%"


def _noise(levels: list[Level]) -> str:
    repeats = min(lv.repeats for lv in levels)
    if repeats < 2:
        return f"unknown, {repeats} repeat (set load.repeats = 2 or more to see the spread)"
    inside = [lv.level for lv in levels if lv.signal is False]
    if not inside:
        return f"every difference is outside the spread over {repeats} repeats"
    return f"inside the spread over {repeats} repeats at {', '.join(inside)} (no signal there)"


def table(comparison: Comparison) -> str:
    """The comparison's levels as a fixed-width table of at most WIDTH columns."""
    base, other = comparison.baseline[:NAME_WIDTH], comparison.other[:NAME_WIDTH]
    header = ["level", "n", f"{base} tok/s", f"{base} acc", f"{other} tok/s", f"{other} acc", "change", "signal"]
    rows = [_cells(lv) for lv in comparison.levels]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line[:WIDTH].rstrip() for line in lines)


def _cells(lv: Level) -> list[str]:
    return [lv.level, f"{lv.baseline_n}/{lv.n}", _num(lv.baseline_tok_s, 1), _num(lv.baseline_accept_len, 2),
            _num(lv.tok_s, 1), _num(lv.accept_len, 2), "" if lv.change_pct is None else f"{lv.change_pct:+.1f}%",
            {True: "yes", False: "no (noise)", None: "unknown"}[lv.signal]]


def _num(value: float | None, places: int) -> str:
    return "" if value is None else f"{value:.{places}f}"


TWIN_LIMIT_PCT = 15.0   # loadgen.twin.model.LIMIT_PCT: a twin above it says so


def predicted_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """PREDICTED, and per twin target the error of the fit it came from (views.sql twin_sources), in one line;
    one more when that error is over TWIN_LIMIT_PCT."""
    rows = con.execute("SELECT target, source_run, source_target, in_sample_mape_pct, loo_mape_pct, max_mape_pct, "
                       "worst, what_if FROM twin_sources WHERE run_id = ? ORDER BY target", [run_id]).fetchall()
    lines = []
    for target, source_run, source_target, in_sample, loo, most, worst, what_if in rows:
        change = f", what-if {what_if}" if what_if else ""
        error = ("fit error unknown" if in_sample is None else
                 f"its fit's error: in-sample MAPE {in_sample:.1f}%, leave-one-level-out {loo:.1f}%")
        lines.append(f"  (PREDICTED: {target} by the twin of {source_target} in run {source_run}{change}; {error})")
        if most is not None and most > TWIN_LIMIT_PCT:
            lines.append(f"  twin {target}: error over {TWIN_LIMIT_PCT:g}% (a metric's MAPE {most:.0f}%; worst: "
                         f"{worst}): its predictions are rough, measure before you decide")
    return lines


def fleet_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """A node off its fleet's median (queries/fleet_nodes.sql `outlier`), one sentence each, the farthest off
    first: `spark3 is off the fleet (mtp): tok/s -22..-24% vs the fleet median of 4 nodes at C=1, C=8, C=16`."""
    off: dict[tuple[str, str], list[dict]] = {}
    for r in analysis.run_query(con, "fleet_nodes").to_pylist():
        if r["outlier"]:
            off.setdefault((r["node"], r["configuration"]), []).append(r)
    farthest = sorted(off.items(), key=lambda item: -max(abs(r["tok_s_vs_fleet_pct"] or 0) for r in item[1]))
    lines = []
    for (node, configuration), rows in farthest:
        levels = ", ".join(f"C={r['concurrency']}" if r["rate"] is None else f"rate={r['rate']:g}/s" for r in rows)
        accept = [r["accept_len_vs_fleet_pct"] for r in rows if round(r["accept_len_vs_fleet_pct"] or 0)]
        lines.append(f"{node} is off the fleet ({configuration}): tok/s "
                     f"{_span([r['tok_s_vs_fleet_pct'] for r in rows])}"
                     + (f", acceptance {_span(accept)}" if accept else "")
                     + f" vs the fleet median of {rows[0]['peers']} nodes at {levels}")
    return lines


def reasoning_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Per target whose requests thought (queries/reasoning.sql): the thinking against the answer, level by level:
    `mtp thinks 40 tokens before a 56-token answer: C=2 TTFT 88 ms, answer 646 ms, tokens/frame 1.84 thinking vs
    2.09 answering`."""
    levels: dict[tuple[str, str], list[str]] = {}
    sizes: dict[tuple[str, str], tuple[float, float]] = {}
    for r in analysis.run_query(con, "reasoning").to_pylist():
        key = (r["run_id"], r["target"])
        sizes.setdefault(key, (r["reasoning_tokens"], r["answer_tokens"]))
        level = f"C={r['concurrency']}" if r["concurrency"] is not None else f"{r['rate']:g} req/s"
        accept = (f", tokens/frame {r['think_accept_len']:.2f} thinking vs {r['answer_accept_len']:.2f} answering"
                  if r["think_accept_len"] is not None and r["answer_accept_len"] is not None else "")
        levels.setdefault(key, []).append(f"{level} TTFT {r['ttft_p50_ms']:.0f} ms, answer "
                                          f"{r['answer_p50_ms']:.0f} ms{accept}"
                                          if r["answer_p50_ms"] is not None else f"{level} no answer came")
    return [f"{target} thinks {sizes[(run, target)][0]:.0f} tokens before a {sizes[(run, target)][1]:.0f}-token "
            f"answer: {'; '.join(found)}" for (run, target), found in levels.items()]


@dataclass
class Findings:
    """What a run's answer and its summary files say, each query run once."""

    comparisons: list[Comparison]
    drift_rows: list[dict]       # each level against the target's twin (queries/twin_drift.sql)
    fleet: list[str]             # a node off its fleet's median
    drift: list[str]             # a node off its own twin
    hardware: list[str]
    capacity: list[str]
    energy: list[str]
    cost: list[str]
    reasoning: list[str]


def findings(con: duckdb.DuckDBPyConnection) -> Findings:
    """Every figure of the answer, from the views of `con`."""
    drift = drift_rows(con)
    return Findings(comparisons(con), drift, fleet_lines(con), drift_lines(drift), hardware_lines(con),
                    capacity_lines(con), energy_lines(con), cost_lines(analysis.run_query(con, "cost").to_pylist()),
                    reasoning_lines(con))


def answer_text(con: duckdb.DuckDBPyConnection, results_dir: str, run_id: str,
                found: Findings | None = None) -> str:
    """What the job prints after a run: headlines, then a table per comparison, then the command for the rest
    (the summary files' folder is the job's last line). `found`: the run's findings, when already gathered."""
    found = found or findings(con)
    words = found.fleet + found.drift   # a node off its fleet, or off its own twin, first
    words += [f"{c.other} vs {c.baseline}: {c.headline}" for c in found.comparisons] or [
        "one series only: nothing to compare (add a second target to compare algorithms)"]
    words += found.hardware + found.capacity + [f"energy: {line}" for line in found.energy]
    words += found.cost + found.reasoning
    if any(lv.emulated for c in found.comparisons for lv in c.levels):
        words.append("(emulated: these are the emulator's modelled numbers, not a GPU's; loadgen/emulator/README.md)")
    lines = ["", "answer:"] + [fitted(f"  {line}") for line in words]
    lines += [fitted(line) for line in predicted_lines(con, run_id)]
    for c in found.comparisons:
        lines += ["", fitted(f"{c.other} vs {c.baseline} (n = measured requests, {c.baseline}/{c.other}; "
                             "acc = acceptance length; change = tok/s vs the baseline):"), table(c)]
    # the command on a line of its own, whole, to be copied (the results folder is the user's: any length)
    if refits := refit_hint(found.drift_rows, results_dir):
        lines += ["", "refit a drifted twin from this run (loadgen twin refit; docs/twin.md):"]
        lines += [f"  {command}" for command in refits]
    lines += ["", "full tables (latency_by_concurrency and the rest: loadgen query --list):",
              f"  loadgen query compare_algorithms --results {results_dir} --run {run_id}"]
    return "\n".join(lines)


def summary_dir(results_dir: str, run_id: str) -> Path:
    """Where a run's summary files go: beside its Parquet tables, in the same run_id= layout."""
    return Path(results_dir) / "summary" / f"run_id={run_id}"


def write_summary(con: duckdb.DuckDBPyConnection, results_dir: str, run_id: str, status: str,
                  found: Findings | None = None) -> Path:
    """summary.json (the headline tables as data) and summary.md (the same as text) for one run. `found`: the
    run's findings, when already gathered."""
    f = found or findings(con)
    folder = summary_dir(results_dir, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    data = {"run_id": run_id, "status": status, "fleet": f.fleet, "drift": f.drift, "capacity": f.capacity,
            "hardware": f.hardware, "energy": f.energy, "cost": f.cost, "reasoning": f.reasoning,
            "comparisons": [asdict(c) for c in f.comparisons]}
    (folder / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
    md = [f"# {run_id} ({status})", ""] + [f"- **{line}**" for line in f.fleet + f.drift]
    md += [f"- **{c.other} vs {c.baseline}**: {c.headline}" for c in f.comparisons] + [
        f"- **{line}**" for line in f.hardware] + [f"- {line}" for line in f.capacity] + [
        f"- energy: {line}" for line in f.energy] + [f"- {line}" for line in f.cost + f.reasoning]
    for c in f.comparisons:
        md += ["", f"## {c.other} vs {c.baseline}", "", _markdown(c)]
    (folder / "summary.md").write_text("\n".join(md) + "\n")
    return folder


def _markdown(c: Comparison) -> str:
    head = ["level", f"n ({c.baseline}/{c.other})", f"{c.baseline} tok/s", f"{c.baseline} acc", f"{c.other} tok/s",
            f"{c.other} acc", "change", "signal"]
    rows = [_cells(lv) for lv in c.levels]
    return "\n".join("| " + " | ".join(r) + " |" for r in [head, ["---"] * len(head), *rows])
