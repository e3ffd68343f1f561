"""`loadgen report`: one self-contained HTML file (plots embedded as base64 PNG, no script, no CDN) and a
Markdown summary.

The page answers first, in words (the verdict: who is faster at which load, where the lead changes and what
is not known, capacity at the SLO, unequal server settings, warnings), then shows the plots that back it, then
the query results as tables, collapsed when long. Every number comes from the queries in queries/ (via
loadgen.results.analysis), so the report and `loadgen query` never disagree. matplotlib is the optional extra
`loadgen[report]` and is imported only when plotting.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from statistics import median
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import duckdb

from loadgen.results.analysis import list_queries, open_results, run_query
from loadgen.errors import LoadgenError

if TYPE_CHECKING:   # matplotlib is an optional extra (loadgen[report]), imported when a report is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Rows = list[dict[str, Any]]
SeriesKey = tuple[str, str, str | None, int | None]   # run_id, target, algorithm, draft_tokens
Draw = Callable[["Axes", SeriesKey, Rows], None]     # fills one panel of _small_multiples

QUERIES = ("runs", "compare_algorithms", "crossover", "repeats", "confounders", "acceptance_by_kind",
           "acceptance_by_position", "acceptance_sources", "throughput_by_concurrency", "latency_by_concurrency",
           "errors_by_class", "client_health", "fleet_nodes")
# The SLO layer (capacity at an SLO, the search's probes, the Pareto frontier): used when queries/ has it.
SLO_QUERIES = ("goodput", "capacity", "pareto")
SLO_NAMES = ("ttft_ms", "tpot_ms", "e2e_s", "attainment", "max_error_rate")

SMALL_SAMPLE = 30          # measured ok requests below which a step's percentiles are marked as small-sample
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
ERROR_COLOURS = {"http_error": "#d62728", "timeout": "#ff7f0e", "stream_broken": "#9467bd",
                 "server_abort": "#8c564b", "malformed_frame": "#e377c2", "client_error": "#7f7f7f",
                 "cancelled": "#bcbd22", "lost": "#17becf"}


@dataclass
class Report:
    """Query results plus what the page needs to label them: runs shown, series colours, the SLO."""

    data: dict[str, Rows]
    slo: dict[str, float]
    incomplete_steps: Rows
    with_server_info: set[tuple[str, str]]   # (run_id, target) whose steps recorded /get_server_info

    def __post_init__(self) -> None:
        self.multi_run = len(self.data["runs"]) > 1
        self.run_labels = _run_labels(self.data["runs"])
        keys = [_key(r) for r in self.data["repeats"] + self.data["throughput_by_concurrency"]]
        self.colours = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(dict.fromkeys(keys))}

    def label(self, row: dict) -> str:
        """'target (ALGORITHM/draft)', with the short run label when several runs are shown."""
        text = f"{row['target']} ({row.get('algorithm') or 'no spec'}"
        text += f"/{row['draft_tokens']})" if row.get("draft_tokens") is not None else ")"
        return f"{text} [{self.run_labels[row['run_id']]}]" if self.multi_run else text

    def colour(self, row: dict) -> str:
        """The series' colour; rows without draft_tokens (compare_algorithms) match on run, target, algorithm."""
        if _key(row) in self.colours:
            return self.colours[_key(row)]
        return next((c for k, c in self.colours.items() if k[:3] == _key(row)[:3]), "#333333")

    @property
    def emulated(self) -> bool:
        return any(r.get("emulated") for r in self.data["runs"])

    @property
    def predicted(self) -> bool:
        return any(r.get("predicted") for r in self.data["runs"])


def write_report(results_dir: str | Path, run_ids: list[str] | None, html_path: str | Path,
                 markdown_path: str | Path | None = None) -> None:
    """Run the report's queries over the results folder and write the HTML (and Markdown) files."""
    report = load_report(results_dir, run_ids)
    Path(html_path).write_text(render_html(report))
    if markdown_path is not None:
        Path(markdown_path).write_text(markdown_summary(report))


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
    if not any(r["peers"] > 1 for r in data["fleet_nodes"]):     # one node per configuration: no fleet
        data["fleet_nodes"] = []
    incomplete = con.execute(
        "SELECT run_id, step_id, target, concurrency, rate, step_status FROM step_info "
        "WHERE step_status IS DISTINCT FROM 'complete' ORDER BY run_id, step_id, target").fetchall()
    with_info = set(con.execute("SELECT DISTINCT run_id, target FROM steps WHERE server_info IS NOT NULL")
                    .fetchall())
    return Report(data, slo,
                  [dict(zip(("run_id", "step_id", "target", "concurrency", "rate", "step_status"), r))
                   for r in incomplete], with_info)


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


def _key(row: dict) -> SeriesKey:
    return row["run_id"], row["target"], row.get("algorithm"), row.get("draft_tokens")


def _run_labels(runs: Rows) -> dict[str, str]:
    """Short run labels: the run's name, plus its start time when two runs share a name."""
    names = [r["name"] or r["run_id"] for r in runs]
    return {r["run_id"]: (n if names.count(n) == 1 or r["started_at"] is None
                          else f"{n} {r['started_at']:%m-%d %H:%M}") for r, n in zip(runs, names)}


def _level(row: dict) -> float:
    return row["concurrency"] if row.get("concurrency") is not None else row["rate"]


def _level_text(row: dict) -> str:
    return f"C={row['concurrency']}" if row.get("concurrency") is not None else f"{row['rate']:g} req/s"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%".replace("-", "\u2212")


# ---- the verdict -------------------------------------------------------------------------------------------

@dataclass
class Finding:
    """One point of the verdict: kind is answer | capacity | conditions | like | warning; lead: its headline."""

    kind: str
    text: str
    lead: str = ""

    def plain(self) -> str:
        return f"{self.lead} {self.text}".strip()


def verdict(report: Report) -> list[Finding]:
    """The answer in words: per comparison who is faster where, the crossover and what is not known;
    capacity at the SLO; server settings that differ; warnings a reader must see before trusting it."""
    return (_comparison_findings(report) + _capacity_findings(report) + _fleet_findings(report)
            + _confounder_findings(report) + _warnings(report))


def comparison_pairs(report: Report) -> dict[tuple, Rows]:
    """compare_algorithms rows per (run, baseline series, other series), in level order."""
    pairs: dict[tuple, Rows] = defaultdict(list)
    for row in report.data["compare_algorithms"]:
        pairs[(row["run_id"], row["baseline_target"], row["baseline_algorithm"], row["target"],
               row["algorithm"])].append(row)
    return pairs


def _comparison_findings(report: Report) -> list[Finding]:
    findings = []
    crossings = defaultdict(list)
    for c in report.data["crossover"]:
        crossings[(c["run_id"], c["baseline_target"], c["baseline_algorithm"], c["target"], c["algorithm"])].append(c)
    for pair, rows in comparison_pairs(report).items():
        other, base = report.label(rows[0]), f"{rows[0]['baseline_target']} ({rows[0]['baseline_algorithm']})"
        known = [r for r in rows if r["tok_s_change_pct"] is not None]
        if not known:
            continue
        stretches = _sign_stretches([r for r in known if r["tok_s_change_pct"] != 0])
        lead = f"{other} vs {base}: " + (_order_text(stretches) if stretches else "equal at every level") + "."
        text = f"Aggregate tok/s {rows[0]['target']} vs {rows[0]['baseline_target']}: " + "; ".join(
            f"{_pct(r['tok_s_change_pct'])} at {_level_text(r)}" for r in known) + "."
        flips = [f"{_level_text(_previous(c))} and {_level_text(c)}" for c in crossings[pair]]
        if flips:
            text += " The faster series changes between " + ", between ".join(flips) + "."
        repeats = min(min(r["repeats"], r["baseline_repeats"]) for r in rows)
        if len(flips) > 1 and repeats < 2:
            text += " A lead that changes back and forth is more likely noise than a trend."
        closest = min(known, key=lambda r: abs(r["tok_s_change_pct"]))
        if repeats < 2:
            text += (" Each level ran once, so the noise is unknown: whether a difference as small as "
                     f"{_pct(closest['tok_s_change_pct'])} ({_level_text(closest)}) is real cannot be told "
                     "(set load.repeats to 3 or more).")
        else:
            inside = [_level_text(r) for r in known if r["signal"] is False]
            text += (f" With {repeats} repeats, the difference is outside the spread at every level." if not inside
                     else f" With {repeats} repeats, the difference is inside the spread (not a signal) at "
                          f"{', '.join(inside)}.")
        findings.append(Finding("answer", text, lead))
    return findings


def _previous(crossing: dict) -> dict:
    """The last level before a crossover, as a row _level_text can name."""
    return {"concurrency": crossing["previous_concurrency"], "rate": crossing["previous_rate"]}


def _sign_stretches(rows: Rows) -> list[Rows]:
    """Consecutive levels where the other series is on the same side of the baseline."""
    stretches: list[Rows] = []
    for row in rows:
        if stretches and (row["tok_s_change_pct"] > 0) == (stretches[-1][-1]["tok_s_change_pct"] > 0):
            stretches[-1].append(row)
        else:
            stretches.append([row])
    return stretches


def _order_text(stretches: list[Rows]) -> str:
    """'faster at every level' | 'faster up to C=8, slower from C=16' | 'no consistent order: ...'."""
    def word(rows: Rows) -> str:
        return "faster" if rows[0]["tok_s_change_pct"] > 0 else "slower"

    if len(stretches) == 1:
        return f"{word(stretches[0])} at every level"
    if len(stretches) == 2:
        first, last = stretches
        return f"{word(first)} up to {_level_text(first[-1])}, {word(last)} from {_level_text(last[0])}"
    sides = {w: ", ".join(_level_text(r) for s in stretches if word(s) == w for r in s) for w in ("faster", "slower")}
    return f"no consistent order (faster at {sides['faster']}; slower at {sides['slower']})"


def slo_text(slo: dict[str, float]) -> str:
    lines = [f"TTFT \u2264 {slo['ttft_ms']:g} ms" if "ttft_ms" in slo else "",
             f"TPOT \u2264 {slo['tpot_ms']:g} ms" if "tpot_ms" in slo else "",
             f"e2e \u2264 {slo['e2e_s']:g} s" if "e2e_s" in slo else ""]
    text = ", ".join(line for line in lines if line)
    if "attainment" in slo:
        text += f" for {100 * slo['attainment']:g}% of requests"
    if "max_error_rate" in slo:
        text += f", errors \u2264 {100 * slo['max_error_rate']:g}%"
    return text


def _load_level(v: float, open_loop: bool) -> str:
    """A load level in a capacity finding: a rate in req/s (open loop) or C=<concurrency> (closed loop)."""
    return f"{v:g} req/s" if open_loop else f"C={v:g}"


def _capacity_findings(report: Report) -> list[Finding]:
    if not report.slo:
        return [Finding("capacity", "No SLO set, so no capacity is judged (add an [slo] table to the experiment "
                                    "file: TTFT, TPOT, e2e thresholds and the share of requests that must meet them).")]
    findings = []
    for c in report.data["capacity"]:
        fmt = partial(_load_level, open_loop=c.get("mode") == "open")
        if c["capacity"] is None:
            text = f"{report.label(c)}: no load level met the SLO"
            text += f" (failed from {fmt(c['first_fail'])})" if c.get("first_fail") is not None else ""
        else:
            text = f"{report.label(c)}: capacity {fmt(c['capacity'])} at the SLO"
            if c.get("capacity_low") is not None and c.get("capacity_high") is not None:
                text += f" (between {fmt(c['capacity_low'])} and {fmt(c['capacity_high'])} given the noise)"
            if c.get("tok_s") is not None:
                text += f", {c['tok_s']:.0f} tok/s aggregate"
            if c.get("user_tok_s") is not None:
                text += f", {c['user_tok_s']:.1f} tok/s per user"
        if c.get("note"):
            text += f"; {c['note']}"
        findings.append(Finding("capacity", text + "."))
    head = f"SLO: {slo_text(report.slo)}."
    return [Finding("capacity", head)] + (findings or [Finding("capacity", "No capacity rows for this SLO.")])


def _fleet_findings(report: Report) -> list[Finding]:
    """Fleet runs: the nodes fleet_nodes flags as off their peers' median, or that none is."""
    rows = report.data["fleet_nodes"]
    if not rows:
        return []
    off: dict[tuple[str, str], Rows] = defaultdict(list)
    for r in rows:
        if r["outlier"]:
            off[(r["node"], r["configuration"])].append(r)
    if not off:
        return [Finding("like", "every node is within the outlier threshold of its peers' median (fleet_nodes).",
                        "Fleet:")]
    findings = []
    for (node, config), nrows in off.items():
        changes = ", ".join(f"{_pct(r['tok_s_vs_fleet_pct'])} at {_level_text(r)}" for r in nrows)
        findings.append(Finding("warning", f"aggregate tok/s {changes} against the median of its peers "
                                "(flagged by fleet_nodes).", f"Node {node} is off the fleet in {config}:"))
    return findings


def _confounder_findings(report: Report) -> list[Finding]:
    diffs: dict[tuple, Rows] = defaultdict(list)
    for row in report.data["confounders"]:
        diffs[(row["run_id"], f"{row['baseline_target']} ({row['baseline_algorithm']})",
               f"{row['target']} ({row['algorithm']})")].append(row)
    findings = []
    for (_run, base, other), rows in diffs.items():
        items = []
        for r in rows:
            change = f" ({_pct(r['change_pct'])})" if r["change_pct"] is not None else ""
            name = SETTING_NAMES.get(r["setting"], r["setting"])
            items.append(f"{name}: {_short(r['value'])} vs {_short(r['baseline_value'])}{change}")
        findings.append(Finding("conditions", "; ".join(items) + ". Part of the difference may come from "
                                "these settings, not from speculative decoding.",
                                f"Unequal conditions, {other} vs {base}:"))
    unrecorded = sorted({t for run, base, _, other, _ in comparison_pairs(report) for t in (base, other)
                         if (run, t) not in report.with_server_info})
    if unrecorded:
        findings.append(Finding("conditions", f"{', '.join(unrecorded)} recorded no server settings "
                                "(not SGLang's /get_server_info), so unequal conditions cannot be ruled out.",
                                "Server settings unknown:"))
    elif comparison_pairs(report) and not findings:
        findings.append(Finding("like", "no recorded server setting (KV pool, memory fraction, flags, "
                                "version, model) differs between the compared series besides the speculative "
                                "ones.", "Like for like:"))
    return findings


SETTING_NAMES = {"max_total_num_tokens": "KV pool (max_total_num_tokens, tokens)",
                 "mem_fraction_static": "memory fraction (mem_fraction_static)", "version": "server version",
                 "model_path": "model (model_path)"}


def _span(values: list) -> str:
    return f"{values[0]}" if len(values) == 1 else f"{values[0]} to {values[-1]}"


def _short(value: str, limit: int = 40) -> str:
    return value if len(value) <= limit else value[:limit - 1] + "\u2026"


def _warnings(report: Report) -> list[Finding]:
    data, found = report.data, []
    if report.emulated:
        found.append("Emulated: these numbers come from loadgen's SGLang emulator, a cost model of a GB10, "
                     "not a GPU.")
    if report.predicted:
        found.append("Predicted: these numbers are a twin's prediction in virtual time, not a measurement "
                     "(docs/twin.md); `loadgen query twin_error` puts them beside measured steps where both exist.")
    for r in data["client_health"]:
        if r["distorted"]:
            found.append(f"Client health flagged {report.run_labels[r['run_id']]} step {r['step_id']} "
                         f"({_level_text(r)}): {r['verdict']}; its numbers may be the client's, not the server's.")
    unknown = [r for r in data["client_health"] if r["distorted"] is None]
    if unknown:
        found.append(f"Client health unknown for {len(unknown)} step(s) (no client samples in the window).")
    small = [r for r in data["latency_by_concurrency"] if r["metric"] == "ttft_ms" and r["n"] < SMALL_SAMPLE]
    if small:
        steps = len([r for r in data["latency_by_concurrency"] if r["metric"] == "ttft_ms"])
        found.append(f"Small samples: {len(small)} of {steps} steps measured fewer than {SMALL_SAMPLE} requests "
                     f"(n = {_span(sorted({r['n'] for r in small}))}): their latency "
                     "percentiles rest on few requests (n is written beside them in the plots; p99 is then "
                     "about the maximum).")
    for s in report.incomplete_steps:
        found.append(f"Step {s['step_id']} of {report.run_labels[s['run_id']]} ({s['target']}, {_level_text(s)}) "
                     f"is {s['step_status']}: its numbers may be partial.")
    for r in data["runs"]:
        if r["status"] != "complete":
            found.append(f"Run {report.run_labels[r['run_id']]} is {r['status']}.")
    failed = [r for r in data["errors_by_class"] if r["status"] != "ok" and r["measured"]]
    if failed:
        by_class: dict[str, int] = defaultdict(int)
        for r in failed:
            by_class[r["status"]] += r["measured"]
        found.append("Measured requests failed: " + ", ".join(f"{n} {c}" for c, n in by_class.items()) + ".")
    return [Finding("warning", w) for w in found]


# ---- plots -------------------------------------------------------------------------------------------------

@dataclass
class Plot:
    title: str
    caption: str
    png: bytes


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.spines.top": False,
                         "axes.spines.right": False, "legend.frameon": False})
    return plt


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    _pyplot().close(fig)
    return buf.getvalue()


def _level_axis(ax: Axes, rows: Rows) -> None:
    """Concurrency on a log2 axis with the levels as ticks; rate on a linear axis."""
    open_loop = any(r.get("concurrency") is None for r in rows)
    ax.set_xlabel("request rate (req/s)" if open_loop else "concurrency (requests in flight)")
    if not open_loop and rows:
        ax.set_xscale("log", base=2)
        ticks = sorted({_level(r) for r in rows})
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.minorticks_off()
    ax.grid(True, alpha=0.3)


def _by_series(rows: Rows) -> dict[SeriesKey, dict[float, Rows]]:
    """rows grouped by series, then by load level (several rows where a level was repeated)."""
    out: dict[SeriesKey, dict[float, Rows]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[_key(r)][_level(r)].append(r)
    return out


def _series_legend(report: Report, where: Axes | Figure, keys: Iterable[SeriesKey]) -> None:
    """A legend of the series' colours above an Axes or a Figure (never over the data)."""
    from matplotlib.lines import Line2D

    order = list(report.colours)
    handles = [Line2D([], [], color=report.colours.get(k, "#333"), marker="o",
                      label=report.label(dict(zip(("run_id", "target", "algorithm", "draft_tokens"), k))))
               for k in sorted(keys, key=lambda k: order.index(k) if k in order else len(order))]
    where.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(handles), 3),
                 fontsize="small")


def throughput_plot(report: Report) -> Plot | None:
    """Median aggregate tok/s per level, min-max band over repeats, the crossover shaded."""
    rows = report.data["repeats"]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    series = _by_series(rows)
    repeated = False
    for key, levels in series.items():
        xs = sorted(levels)
        first = [levels[x][0] for x in xs]
        ax.plot(xs, [r["tok_s_median"] for r in first], marker="o", color=report.colours[key])
        if any(r["repeats"] > 1 for r in first):
            repeated = True
            ax.fill_between(xs, [r["tok_s_min"] or r["tok_s_median"] for r in first],
                            [r["tok_s_max"] or r["tok_s_median"] for r in first],
                            color=report.colours[key], alpha=0.15, linewidth=0)
    for c in report.data["crossover"]:
        lo, hi = c["previous_concurrency"] or c["previous_rate"], _level(c)
        ax.axvspan(lo, hi, color="#888", alpha=0.12, linewidth=0)
        ax.text((lo * hi) ** 0.5 if c["concurrency"] is not None else (lo + hi) / 2, 0.97,
                "lead changes", transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8)
    _level_axis(ax, rows)
    ax.set_ylabel("aggregate output tok/s")
    ax.set_ylim(bottom=0)
    _series_legend(report, ax, series)
    caption = ("Aggregate output tokens per second (frames inside the window / window). "
               + ("Bands: min to max over repeats. " if repeated else "One repeat per level: no spread band. ")
               + ("Grey: where the faster series changes." if report.data["crossover"] else ""))
    return Plot("Throughput", caption, _png(fig))


def change_plot(report: Report) -> Plot | None:
    """% change of aggregate tok/s vs the baseline per level, with the zero line and the noise band."""
    rows = [r for r in report.data["repeats"] if r["tok_s_change_pct"] is not None]
    if not rows:
        return None
    base = {(r["run_id"], _level(r)): r for r in report.data["repeats"] if r["tok_s_change_pct"] is None}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    ax.axhline(0, color="black", linewidth=1)
    series = _by_series(rows)
    banded = False
    for key, levels in series.items():
        xs = sorted(levels)
        first = [levels[x][0] for x in xs]
        ys = [r["tok_s_change_pct"] for r in first]
        ax.plot(xs, ys, marker="o", color=report.colours[key])
        for x, y in zip(xs, ys):
            ax.annotate(_pct(y), (x, y), textcoords="offset points", xytext=(0, 6 if y >= 0 else -12),
                        ha="center", fontsize=7, color=report.colours[key])
        pairs = [(r, base.get((r["run_id"], x))) for r, x in zip(first, xs)]
        repeated = [(r, b) for r, b in pairs if b and r["repeats"] > 1 and b["repeats"] > 1]
        if len(repeated) == len(pairs):   # every level has repeats on both sides: a band
            banded = True
            ax.fill_between(xs, [100 * (r["tok_s_min"] / b["tok_s_max"] - 1) for r, b in repeated],
                            [100 * (r["tok_s_max"] / b["tok_s_min"] - 1) for r, b in repeated],
                            color=report.colours[key], alpha=0.15, linewidth=0)
    if not banded:
        ax.text(0.02, 0.03, "noise unknown: one repeat per level", transform=ax.transAxes, fontsize=8,
                color="#a00")
    _level_axis(ax, rows)
    baselines = {report.label(r) for r in base.values()}
    ax.set_ylabel(f"aggregate tok/s vs {baselines.pop() if len(baselines) == 1 else 'baseline'} (%)")
    ax.margins(y=0.15)
    _series_legend(report, ax, series)
    caption = ("Change of aggregate tok/s against the baseline at the same level; above zero = faster. "
               + ("Band: the range the change takes over repeats (a band crossing zero is not a signal)."
                  if banded else "With one repeat per level there is no noise band: small changes may be noise."))
    return Plot("Change vs baseline", caption, _png(fig))


def pareto_plot(report: Report) -> Plot | None:
    """Per-user tok/s against aggregate tok/s, one point per level, SLO line when a TPOT SLO is set."""
    rows = report.data["pareto"] or [
        {**r, "user_tok_s": r["decode_tok_s_p50"]} for r in report.data["throughput_by_concurrency"]
        if r["decode_tok_s_p50"] is not None and r["tok_s"] is not None]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    series = _by_series(rows)
    for key, levels in series.items():
        xs = sorted(levels)
        pts = [(median(r["tok_s"] for r in levels[x]), median(r["user_tok_s"] for r in levels[x])) for x in xs]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=report.colours[key])
        for x, (px, py) in zip(xs, pts):
            ax.annotate(_level_text(levels[x][0]), (px, py), textcoords="offset points", xytext=(4, 3),
                        fontsize=7, color=report.colours[key])
        frontier = [p for x, p in zip(xs, pts) if any(r.get("on_frontier") for r in levels[x])]
        if frontier:
            ax.scatter(*zip(*frontier), s=90, facecolors="none", edgecolors=report.colours[key], linewidths=1.5)
    if "tpot_ms" in report.slo:
        ax.axhline(1000 / report.slo["tpot_ms"], color="#a00", linestyle="--", linewidth=1)
        ax.text(0.99, 1000 / report.slo["tpot_ms"], f"SLO: TPOT \u2264 {report.slo['tpot_ms']:g} ms",
                transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=8, color="#a00")
    ax.set_xlabel("aggregate output tok/s (the server's yield)")
    ax.set_ylabel("per-user tok/s, median (1 / TPOT)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    _series_legend(report, ax, series)
    caption = ("Each point is a load level: right = more tokens for the fleet, up = faster for each user. "
               "Up and to the right is better; a capacity planner picks the rightmost point "
               + ("above the SLO line." if "tpot_ms" in report.slo else "whose per-user speed is still acceptable.")
               + (" Circled: on the Pareto frontier." if report.data["pareto"] else ""))
    return Plot("Per-user vs aggregate throughput", caption, _png(fig))


LATENCY_METRICS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("itl_ms", "ITL, token-weighted (ms)"))
# (column, line style, samples it needs)
PERCENTILES: tuple[tuple[str, Literal["-", ":"], int], ...] = (("p50", "-", 2), ("p99", ":", 100))


def latency_plot(report: Report) -> Plot | None:
    """TTFT, TPOT (and token-weighted ITL when recorded) percentiles per level; small samples hollow."""
    rows = report.data["latency_by_concurrency"]
    metrics = [(m, label) for m, label in LATENCY_METRICS if any(r["metric"] == m for r in rows)]
    if not metrics:
        return None
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.4), squeeze=False)
    keys: dict[SeriesKey, None] = {}
    for ax, (metric, label) in zip(axes[0], metrics):
        metric_rows = [r for r in rows if r["metric"] == metric]
        for i, (key, levels) in enumerate(_by_series(metric_rows).items()):
            keys[key] = None
            xs = sorted(levels)
            n = [sum(r["n"] for r in levels[x]) for x in xs]
            for col, style, needs in PERCENTILES:
                ys = [median(r[col] for r in levels[x]) for x in xs]
                ax.plot(xs, ys, linestyle=style, color=report.colours[key], linewidth=1.3)
                ok = [(x, y) for x, y, k in zip(xs, ys, n) if k >= needs]
                thin = [(x, y) for x, y, k in zip(xs, ys, n) if k < needs]
                if ok:
                    ax.scatter(*zip(*ok), s=14, color=report.colours[key], zorder=3)
                if thin:
                    ax.scatter(*zip(*thin), s=22, facecolors="white", edgecolors=report.colours[key], zorder=3)
            if metric == metrics[0][0]:
                for x, k in zip(xs, n):
                    if k < SMALL_SAMPLE:
                        y = median(r["p50"] for r in levels[x])
                        ax.annotate(f"n={k}", (x, y), textcoords="offset points", xytext=(3, -10 - 8 * i),
                                    fontsize=7, color=report.colours[key])
        _level_axis(ax, metric_rows)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(label)
    _series_legend(report, fig, keys)
    fig.legend(handles=[Line2D([], [], color="#444", linestyle=s, label=c) for c, s, _ in PERCENTILES],
               loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, fontsize="small")
    caption = ("Percentiles per level (log scale): solid p50, dotted p99. TTFT = first output - sent; "
               "TPOT = (last token - first token) / (tokens - 1) per request"
               + ("; ITL token-weighted as in SGLang's bench_serving" if any(m == "itl_ms" for m, _ in metrics)
                  else "") + ". Hollow points: fewer samples than the percentile needs (p99: 100); "
               f"n is written where a step measured fewer than {SMALL_SAMPLE} requests.")
    return Plot("Latency", caption, _png(fig))


KIND_STYLES = ("-", "--", ":", "-.")


def _small_multiples(report: Report, rows: Rows, draw: Draw, ylabel: str, sharey: bool = True) -> Figure:
    """One panel per series (titled in its colour); draw(ax, key, rows of the series) fills a panel."""
    plt = _pyplot()
    series: dict[SeriesKey, Rows] = defaultdict(list)
    for r in rows:
        series[_key(r)].append(r)
    cols = min(3, len(series))
    nrows = -(-len(series) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.9 * cols, 2.9 * nrows), squeeze=False, sharey=sharey)
    for ax, (key, srows) in zip(axes.flat, series.items()):
        draw(ax, key, srows)
        ax.set_title(report.label(srows[0]), color=report.colours.get(key, "#333"), fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(series):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    fig.tight_layout()
    return fig


def _style_legend(fig: Figure, styles: list[tuple[str, dict]]) -> None:
    """A grey legend above the panels for what distinguishes lines inside each panel (kind, level)."""
    from matplotlib.lines import Line2D

    fig.legend(handles=[Line2D([], [], color="#333", label=name, **style) for name, style in styles],
               loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(styles), 6), fontsize="small")


def _shade(i: int, n: int) -> float:
    """Line opacity of the i-th of n load levels: darker = more load."""
    return 0.3 + 0.7 * (i + 1) / n


def acceptance_plot(report: Report) -> Plot | None:
    """Acceptance length per level, one panel per series, one line per prompt kind."""
    rows = [r for r in report.data["acceptance_by_kind"] if r["accept_len"] is not None]
    if not rows:
        return None
    kinds = list(dict.fromkeys(r["prompt_kind"] for r in rows))

    def draw(ax: Axes, key: SeriesKey, srows: Rows) -> None:
        for kind, style in zip(kinds, KIND_STYLES * 3):
            levels = _by_series([r for r in srows if r["prompt_kind"] == kind])[key]
            xs = sorted(levels)
            ax.plot(xs, [median(r["accept_len"] for r in levels[x]) for x in xs], linestyle=style, marker="o",
                    markersize=3, color=report.colours.get(key), linewidth=2 if kind == "(all)" else 1.2)
        _level_axis(ax, srows)

    fig = _small_multiples(report, rows, draw, "tokens per verify step")
    _style_legend(fig, [(kind, {"linestyle": style, "linewidth": 2 if kind == "(all)" else 1.2})
                        for kind, style in zip(kinds, KIND_STYLES * 3)])
    return Plot("Acceptance length by prompt kind", "Acceptance length = completion tokens / verify steps "
                "(SGLang's definition, bonus token included), per prompt kind; '(all)' is the whole step.",
                _png(fig))


def position_plot(report: Report) -> Plot | None:
    """Tokens per frame along the output, one panel per series, one line per level (darker = more load)."""
    rows = [r for r in report.data["acceptance_by_position"] if r["tokens_per_frame"] is not None]
    if not rows:
        return None

    def draw(ax: Axes, key: SeriesKey, srows: Rows) -> None:
        levels = _by_series(srows)[key]
        for i, x in enumerate(sorted(levels)):
            buckets = defaultdict(list)
            for r in levels[x]:
                buckets[int(r["positions"].split("-")[0])].append(r["tokens_per_frame"])
            xs = sorted(buckets)
            ax.plot(xs, [median(buckets[b]) for b in xs], color=report.colours.get(key), linewidth=1.2,
                    alpha=_shade(i, len(levels)))
        ax.set_xlabel("output position (first token of the bucket)")

    fig = _small_multiples(report, rows, draw, "tokens per frame")
    levels = sorted({_level(r) for r in rows})
    names = {_level(r): _level_text(r) for r in rows}
    _style_legend(fig, [(names[x], {"alpha": _shade(i, len(levels)), "linewidth": 1.2})
                        for i, x in enumerate(levels)])
    return Plot("Acceptance along the output", "Tokens per streamed frame by position in the output: a client-side "
                "proxy of acceptance, exact only when the server streams every verify step.", _png(fig))


def errors_plot(report: Report) -> Plot | None:
    """Measured requests that did not finish ok, as counts by class per level; None when there are none."""
    rows = [r for r in report.data["errors_by_class"] if r["status"] != "ok" and r["measured"]]
    if not rows:
        return None
    classes = list(dict.fromkeys(r["status"] for r in rows))

    def draw(ax: Axes, key: SeriesKey, srows: Rows) -> None:
        levels = _by_series(srows)[key]
        xs = sorted(levels)
        bottom = [0] * len(xs)
        for cls in classes:
            counts = [sum(r["measured"] for r in levels[x] if r["status"] == cls) for x in xs]
            ax.bar([str(_level_text(levels[x][0])) for x in xs], counts, bottom=bottom, label=cls,
                   color=ERROR_COLOURS.get(cls, "#333"))
            bottom = [b + c for b, c in zip(bottom, counts)]
        ax.legend(fontsize="x-small")

    fig = _small_multiples(report, rows, draw, "failed measured requests")
    return Plot("Errors", "Measured requests that did not finish ok, by outcome class (requests.status).", _png(fig))


def probes_plot(report: Report) -> Plot | None:
    """The capacity search's probes in the order they ran: the level each probed and whether it passed."""
    rows = [r for r in report.data["goodput"] if r.get("probe") is not None]
    if not rows:
        return None
    capacity = {(c["run_id"], c["target"]): c["capacity"] for c in report.data["capacity"]}
    colours = {"pass": "#2ca02c", "fail": "#d62728"}

    def draw(ax: Axes, key: SeriesKey, srows: Rows) -> None:
        srows = sorted(srows, key=lambda r: r["step_id"])
        xs = list(range(1, len(srows) + 1))
        ax.plot(xs, [_level(r) for r in srows], color=report.colours.get(key, "#333"), linewidth=1)
        for x, r in zip(xs, srows):
            ax.scatter([x], [_level(r)], s=40, zorder=3, color=colours.get(r["verdict"], "#999"))
            ax.annotate(r["probe"][:18], (x, _level(r)), textcoords="offset points", xytext=(4, 4), fontsize=6)
        cap = capacity.get((key[0], key[1]))
        if cap is not None:
            ax.axhline(cap, color="#2ca02c", linestyle="--", linewidth=1)
        ax.set_xlabel("probe (in the order it ran)")
        ax.set_xticks(xs)
        ax.set_yscale("log", base=2)
        levels = sorted({_level(r) for r in srows})
        ax.set_yticks(levels, [f"{v:g}" for v in levels])
        ax.minorticks_off()

    open_loop = any(r.get("concurrency") is None for r in rows)
    fig = _small_multiples(report, rows, draw, "rate probed (req/s)" if open_loop else "concurrency probed",
                           sharey=False)
    return Plot("Capacity search", "Each probe of the search: green passed the SLO, red failed, grey not judged; "
                "the dashed line is the capacity found.", _png(fig))


def fleet_plot(report: Report) -> Plot | None:
    """Every node's tok/s against the fleet median per level, one panel per configuration."""
    rows = [r for r in report.data["fleet_nodes"] if r["peers"] > 1 and r["tok_s_vs_fleet_pct"] is not None]
    if not rows:
        return None
    plt = _pyplot()
    configs = list(dict.fromkeys(r["configuration"] for r in rows))
    fig, axes = plt.subplots(1, len(configs), figsize=(4.2 * len(configs), 3.2), squeeze=False, sharey=True)
    for ax, config in zip(axes[0], configs):
        crow = [r for r in rows if r["configuration"] == config]
        ax.axhline(0, color="black", linewidth=1)
        ax.axhspan(-15, 15, color="#888", alpha=0.1, linewidth=0)
        for key, levels in _by_series(crow).items():
            xs = sorted(levels)
            ax.plot(xs, [levels[x][0]["tok_s_vs_fleet_pct"] for x in xs], marker="o",
                    color=report.colours.get(key), label=levels[xs[0]][0]["node"])
        _level_axis(ax, crow)
        ax.set_title(config, fontsize=9)
        ax.legend(fontsize="x-small")
    axes[0][0].set_ylabel("tok/s vs fleet median (%)")
    fig.tight_layout()
    return Plot("Nodes vs fleet median", "Each node's aggregate tok/s against the median of its peers at the "
                "same configuration and level; grey: within 15% (fleet_nodes' default outlier threshold).", _png(fig))


PLOTS = (throughput_plot, change_plot, probes_plot, fleet_plot, pareto_plot, latency_plot, acceptance_plot,
         position_plot, errors_plot)


def plots(report: Report) -> list[Plot]:
    """Every plot that has something to show, in page order."""
    return [p for p in (make(report) for make in PLOTS) if p is not None]


# ---- documents ---------------------------------------------------------------------------------------------

SECTIONS = (
    ("compare_algorithms", "Baseline vs others per level"),
    ("crossover", "Where the faster series changes"),
    ("confounders", "Server settings that differ between compared series"),
    ("capacity", "Capacity at the SLO"),
    ("goodput", "Goodput and SLO verdict per step"),
    ("repeats", "Spread over repeats"),
    ("acceptance_sources", "Acceptance length: SQL, frame proxy and the server's own figures"),
    ("acceptance_by_kind", "Acceptance length by prompt kind"),
    ("throughput_by_concurrency", "Throughput per step"),
    ("latency_by_concurrency", "Latency per step (ms; decode_tok_s in tok/s)"),
    ("errors_by_class", "Requests by outcome class"),
    ("client_health", "Client health: could the load generator have distorted the numbers?"),
    ("fleet_nodes", "Nodes vs fleet median"),
    ("runs", "Runs"),
)
OPEN_ROWS = 8         # tables longer than this start collapsed

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;max-width:1280px;padding:0 1em;
color:#222;line-height:1.4}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.5em;border-bottom:1px solid #ddd}
.sub{color:#555;margin:0 0 1em}
.verdict{border:2px solid #1f77b4;border-radius:6px;padding:.6em 1.2em;background:#f5f9fd}
.verdict h2{border:none;margin:.2em 0}.verdict ul{margin:.3em 0;padding-left:1.2em}.verdict li{margin:.25em 0}
li.warning{color:#7a4b00}li.conditions{color:#8a1c1c}li.like{color:#1d6b1d}
.badge{background:#b00;color:#fff;border-radius:3px;padding:0 .4em;font-size:.7em;vertical-align:middle}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:1em}
figure{margin:0}figure.wide{grid-column:1/-1}img{max-width:100%}
figcaption{font-size:.85em;color:#444}
table{border-collapse:collapse;font-size:12px;margin:.5em 0 1em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}td.t{text-align:left}
th{background:#eee;position:sticky;top:0}details{margin:.4em 0}summary{cursor:pointer;font-weight:600}
.scroll{overflow-x:auto}.swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.3em}
"""


def render_html(report: Report) -> str:
    """The page: title, verdict with the per-level comparison, plots, then the tables."""
    runs = report.data["runs"]
    title = "loadgen report: " + ", ".join(report.run_labels[r["run_id"]] for r in runs)
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(title)}" + (" <span class='badge'>EMULATED</span>" if report.emulated else "")
             + (" <span class='badge'>PREDICTED</span>" if report.predicted else "") + "</h1>", f"<p class='sub'>{html.escape(_run_line(report))}</p>",
             "<section class='verdict'><h2>Verdict</h2><ul>"]
    for f in verdict(report):
        lead = f"<b>{html.escape(f.lead)}</b> " if f.lead else ""
        parts.append(f"<li class='{f.kind}'>{lead}{html.escape(f.text)}</li>")
    parts.append("</ul>")
    for rows in comparison_pairs(report).values():
        parts.append(_comparison_table(report, rows))
    parts.append("</section><h2>Plots</h2><div class='plots'>")
    for p in plots(report):
        wide = " class='wide'" if p.title in ("Latency", "Acceptance length by prompt kind",
                                              "Acceptance along the output", "Nodes vs fleet median") else ""
        parts.append(f"<figure{wide}><img alt='{html.escape(p.title)}' src='data:image/png;base64,"
                     f"{base64.b64encode(p.png).decode()}'><figcaption><b>{html.escape(p.title)}.</b> "
                     f"{html.escape(p.caption)}</figcaption></figure>")
    parts.append("</div><h2>Tables</h2>")
    for name, heading in SECTIONS:
        rows = report.data[name]
        if rows:
            parts.append(_details(heading, _html_table(report, rows), len(rows)))
    parts.append("</body></html>")
    return "\n".join(parts)


def _run_line(report: Report) -> str:
    items = []
    for r in report.data["runs"]:
        levels = r["concurrency"] or r["rate"] or []
        unit = "C" if r["concurrency"] else "req/s"
        items.append(f"{report.run_labels[r['run_id']]} ({r['run_id']}): {r['series']}; {unit} "
                     f"{', '.join(f'{v:g}' for v in levels)}; {r['repeats']} repeat(s) of {_fmt(r['window_s'])} s "
                     f"windows; {r['status']}")
    return " | ".join(items)


def _comparison_table(report: Report, rows: Rows) -> str:
    """The per-level answer: both series' tok/s and acceptance, the change, and whether it is a signal."""
    r0 = rows[0]
    base = _swatch(report.colour({**r0, "target": r0["baseline_target"], "algorithm": r0["baseline_algorithm"]}),
                   r0["baseline_target"])
    other = _swatch(report.colour(r0), r0["target"])
    change = f"{html.escape(r0['target'])} vs {html.escape(r0['baseline_target'])}"
    head = (f"<tr><th>level</th><th>{base} tok/s</th><th>{other} tok/s</th><th>{change}</th>"
            f"<th>{base} accept len</th><th>{other} accept len</th><th>signal</th></tr>")
    body = "".join(
        f"<tr><td>{_level_text(r)}</td><td>{_fmt(r['baseline_tok_s'])}</td><td>{_fmt(r['tok_s'])}</td>"
        f"<td>{_pct(r['tok_s_change_pct'])}</td><td>{_fmt(r['baseline_accept_len'])}</td>"
        f"<td>{_fmt(r['accept_len'])}</td><td class='t'>{_signal_text(r['signal'])}</td></tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def _swatch(colour: str, name: str) -> str:
    return f"<span class='swatch' style='background:{colour}'></span>{html.escape(name)}"


def _signal_text(signal: bool | None) -> str:
    return {None: "unknown (1 repeat)", True: "yes", False: "no (inside spread)"}[signal]


def _details(heading: str, table: str, n: int) -> str:
    opened = " open" if n <= OPEN_ROWS else ""
    return (f"<details{opened}><summary>{html.escape(heading)} ({n} row{'s' if n != 1 else ''})</summary>"
            f"<div class='scroll'>{table}</div></details>")


def table_columns(report: Report, rows: Rows) -> list[str]:
    """Columns worth showing: none that is NULL in every row; no run id when one run is shown (the title
    names it); no emulated or predicted flag when every row says the same (the badge does)."""
    cols = [c for c in rows[0] if any(r[c] is not None for r in rows)]
    if not report.multi_run:
        cols = [c for c in cols if c != "run_id"]
    for flag in ("emulated", "predicted"):
        if flag in cols and len({r[flag] for r in rows}) == 1:
            cols.remove(flag)
    return cols


def header(col: str) -> str:
    """A column name with its unit spelled out: tok_s -> tok/s, *_ms -> (ms), *_pct -> (%)."""
    text = col.replace("tok_s", "tok/s").replace("req_s", "req/s")
    for suffix, unit in (("_ms", " (ms)"), ("_pct", " (%)"), ("_s", " (s)")):
        if text.endswith(suffix):
            text = text[: -len(suffix)] + unit
    return text.replace("_", " ").replace("run id", "run")


def _html_table(report: Report, rows: Rows) -> str:
    cols = table_columns(report, rows)
    head = "".join(f"<th>{html.escape(header(c))}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            value = report.run_labels.get(r[c], r[c]) if c == "run_id" else r[c]
            cls = " class='t'" if isinstance(value, str) else ""
            cells.append(f"<td{cls}>{html.escape(_fmt(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return " / ".join(_fmt(v) for v in value)
    return str(value)


def markdown_summary(report: Report) -> str:
    """The verdict as bullets, then per comparison the field report's table (A, B, change, signal)."""
    lines = ["## loadgen results" + (" (emulated)" if report.emulated else "")
             + (" (PREDICTED)" if report.predicted else ""), ""]
    for r in report.data["runs"]:
        lines.append(f"- run `{r['run_id']}`: {r['series']}, levels {_fmt(r['concurrency'] or r['rate'])}, "
                     f"{r['repeats']} repeat(s), window {r['window_s']} s, {r['status']}")
    lines += ["", "### Verdict", ""] + [f"- {f.plain()}" for f in verdict(report)]
    for rows in comparison_pairs(report).values():
        r0 = rows[0]
        base_alg, alg = r0["baseline_algorithm"], r0["algorithm"]
        lines += ["", f"### {r0['baseline_target']} ({base_alg}) vs {r0['target']} ({alg}), run `{r0['run_id']}`",
                  "", f"| level | {base_alg} tok/s | {alg} tok/s | change | {base_alg} accept | {alg} accept | "
                      "signal |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            change = "" if r["tok_s_change_pct"] is None else f"{r['tok_s_change_pct']:+.1f}%"
            lines.append(f"| {_level_text(r)} | {_fmt(r['baseline_tok_s'])} | {_fmt(r['tok_s'])} | {change} | "
                         f"{_fmt(r['baseline_accept_len'])} | {_fmt(r['accept_len'])} | "
                         f"{_signal_text(r['signal'])} |")
    return "\n".join(lines) + "\n"
