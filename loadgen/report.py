"""`loadgen report`: one self-contained HTML file (plots embedded as base64 PNG, no CDN) and a Markdown summary.

Every number comes from the queries in queries/ (via loadgen.analysis), so the report and `loadgen query` never
disagree. matplotlib is the optional extra `loadgen[report]` and is imported only when plotting.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from loadgen.analysis import open_results, run_query
from loadgen.errors import LoadgenError

Rows = list[dict[str, Any]]


def write_report(results_dir: str | Path, run_ids: list[str] | None, html_path: str | Path,
                 markdown_path: str | Path | None = None) -> None:
    """Run the report's queries over the results folder and write the HTML (and Markdown) files."""
    con = open_results(results_dir, run_ids)
    data = {name: run_query(con, name).to_pylist() for name in (
        "runs", "compare_algorithms", "crossover", "repeats", "concurrency_pair", "acceptance_by_kind",
        "acceptance_sources", "throughput_by_concurrency", "latency_by_concurrency", "errors_by_class",
        "client_health")}
    if not data["runs"]:
        raise LoadgenError(f"no runs in {results_dir}; run `python -m jobs.capacity` first or check --run")
    multi_run = len(data["runs"]) > 1
    Path(html_path).write_text(_html(data, multi_run))
    if markdown_path is not None:
        Path(markdown_path).write_text(markdown_summary(data))


# ---- plots -------------------------------------------------------------------------------------------------

def series_label(row: dict, multi_run: bool = False) -> str:
    """'target (ALGORITHM/draft)', with the run when several runs are shown, and '(emulated)' when it is."""
    label = f"{row['target']} ({row.get('algorithm') or '?'}"
    label += f"/{row['draft_tokens']})" if row.get("draft_tokens") is not None else ")"
    if multi_run:
        label += f" [{row['run_id']}]"
    return label + (" (emulated)" if row.get("emulated") else "")


def _level(row: dict) -> float:
    return row["concurrency"] if row.get("concurrency") is not None else row["rate"]


def line_plot(rows: Rows, y: str, title: str, ylabel: str, *, group: Callable[[dict], str],
              yerr: tuple[str, str] | None = None) -> bytes:
    """PNG of y vs concurrency (or rate), one line per group; the median where a level has several rows.
    yerr=(low column, high column) draws the range, e.g. min/max over repeats."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, dict[float, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.get(y) is not None:
            lines[group(row)][_level(row)].append(row)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for name, levels in sorted(lines.items()):
        xs = sorted(levels)
        ys = [median(r[y] for r in levels[x]) for x in xs]
        if yerr:
            lo = [y_ - min(r[yerr[0]] for r in levels[x]) for x, y_ in zip(xs, ys)]
            hi = [max(r[yerr[1]] for r in levels[x]) - y_ for x, y_ in zip(xs, ys)]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=name)
        else:
            ax.plot(xs, ys, marker="o", label=name)
    open_loop = any(r.get("concurrency") is None for r in rows)
    ax.set_xlabel("request rate (req/s)" if open_loop else "concurrency (requests in flight)")
    if not open_loop:
        ax.set_xscale("log", base=2)
        ticks = sorted({x for levels in lines.values() for x in levels})
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.minorticks_off()
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if lines:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def plots(data: dict[str, Rows], multi_run: bool) -> list[tuple[str, bytes]]:
    """(caption, PNG) of every plot of the report."""
    label = lambda r: series_label(r, multi_run)  # noqa: E731
    by_kind = lambda r: f"{series_label(r, multi_run)} {r['prompt_kind']}"  # noqa: E731
    latency = data["latency_by_concurrency"]
    errors = _error_rates(data["errors_by_class"])
    return [
        ("Aggregate output throughput (median over repeats, bars: min-max)",
         line_plot(data["repeats"], "tok_s_median", "Throughput vs concurrency", "output tok/s (aggregate)",
                   group=label, yerr=("tok_s_min", "tok_s_max"))),
        ("Acceptance length by prompt kind",
         line_plot(data["acceptance_by_kind"], "accept_len", "Acceptance length vs concurrency",
                   "tokens per verify step", group=by_kind)),
        ("TTFT p50", line_plot([r for r in latency if r["metric"] == "ttft_ms"], "p50", "TTFT vs concurrency",
                               "time to first token, p50 (ms)", group=label)),
        ("ITL per token p50", line_plot([r for r in latency if r["metric"] == "itl_token_ms"], "p50",
                                        "Inter-token latency vs concurrency", "ITL per token, p50 (ms)",
                                        group=label)),
        ("Per-request decode rate p50",
         line_plot(data["throughput_by_concurrency"], "decode_tok_s_p50", "Per-request decode rate vs concurrency",
                   "per-request tok/s, p50 (1 / TPOT)", group=label)),
        ("Measured requests not ok", line_plot(errors, "error_pct", "Error rate vs concurrency",
                                               "measured requests not ok (%)", group=label)),
    ]


def _error_rates(errors: Rows) -> Rows:
    """One row per step: % of measured requests whose status is not ok."""
    steps: dict[tuple, dict] = {}
    for row in errors:
        key = (row["run_id"], row["step_id"], row["target"])
        step = steps.setdefault(key, {**row, "measured_total": 0, "measured_ok": 0})
        step["measured_total"] += row["measured"]
        step["measured_ok"] += row["measured"] if row["status"] == "ok" else 0
    return [{**s, "error_pct": 100 * (1 - s["measured_ok"] / s["measured_total"])}
            for s in steps.values() if s["measured_total"]]


# ---- documents ---------------------------------------------------------------------------------------------

SECTIONS = [
    ("compare_algorithms", "Baseline vs others per concurrency (aggregate tok/s and acceptance length)"),
    ("crossover", "Crossover: where the winner changes (no rows: no crossover)"),
    ("repeats", "Spread over repeats, and whether a difference is a signal"),
    ("concurrency_pair", "C=8 vs C=16 (p50 and mean)"),
    ("acceptance_sources", "Acceptance length: SQL, frame proxy and the server's own figures"),
    ("acceptance_by_kind", "Acceptance length by prompt kind"),
    ("throughput_by_concurrency", "Throughput per step"),
    ("latency_by_concurrency", "Latency per step"),
    ("errors_by_class", "Requests by outcome class"),
    ("client_health", "Client health: could the load generator have distorted the numbers?"),
    ("runs", "Runs"),
]


def _html(data: dict[str, Rows], multi_run: bool) -> str:
    emulated = any(r.get("emulated") for r in data["runs"])
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>loadgen report</title><style>",
             "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
             "font-size:12px;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             "th{background:#eee}.warn{background:#fff3cd;padding:.5em;border:1px solid #e0c060}"
             "img{max-width:100%}</style></head><body>",
             "<h1>loadgen report" + (" (emulated)" if emulated else "") + "</h1>"]
    if emulated:
        parts.append("<p class='warn'>Results marked emulated come from loadgen's SGLang emulator: "
                     "a cost model, not a GPU.</p>")
    parts.extend(f"<p class='warn'>{html.escape(w)}</p>" for w in _warnings(data))
    parts.append("<h2>Plots</h2>")
    for caption, png in plots(data, multi_run):
        parts.append(f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,"
                     f"{base64.b64encode(png).decode()}'><figcaption>{html.escape(caption)}</figcaption></figure>")
    for name, title in SECTIONS:
        parts.append(f"<h2>{html.escape(title)}</h2>{_html_table(data[name])}")
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_table(rows: Rows) -> str:
    if not rows:
        return "<p>(no rows)</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


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


def _warnings(data: dict[str, Rows]) -> list[str]:
    """Facts a reader must see before trusting the tables."""
    suspect = [r for r in data["client_health"] if r["distorted"]]
    return [f"step {r['step_id']} of run {r['run_id']} (C={r['concurrency']}): {r['verdict']}" for r in suspect]


def markdown_summary(data: dict[str, Rows]) -> str:
    """The comparison in the field report's format (A, B, change), crossover, acceptance and warnings."""
    emulated = any(r.get("emulated") for r in data["runs"])
    lines = ["## loadgen results" + (" (emulated)" if emulated else ""), ""]
    for run in data["runs"]:
        lines.append(f"- run `{run['run_id']}`: {run['series']}, concurrency {_fmt(run['concurrency'])}, "
                     f"up to {run['repeats']} repeat(s), window {run['window_s']} s")
    pairs: dict[tuple, Rows] = defaultdict(list)
    for row in data["compare_algorithms"]:
        pairs[(row["run_id"], row["baseline_target"], row["baseline_algorithm"], row["target"],
               row["algorithm"])].append(row)
    for (run, base, base_alg, other, alg), rows in pairs.items():
        tag = " (emulated)" if any(r["emulated"] for r in rows) else ""
        lines += ["", f"### {base} ({base_alg}) vs {other} ({alg}), run `{run}`{tag}", "",
                  f"| concurrency | {base_alg} tok/s | {alg} tok/s | change | {base_alg} accept | "
                  f"{alg} accept | signal |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            change = "" if r["tok_s_change_pct"] is None else f"{r['tok_s_change_pct']:+.1f}%"
            signal = {None: "n/a (no repeats)", True: "yes", False: "no (inside spread)"}[r["signal"]]
            lines.append(f"| {_fmt(_level(r))} | {_fmt(r['baseline_tok_s'])} | {_fmt(r['tok_s'])} | {change} | "
                         f"{_fmt(r['baseline_accept_len'])} | {_fmt(r['accept_len'])} | {signal} |")
    lines.append("")
    for c in data["crossover"]:
        lines.append(f"- crossover in run `{c['run_id']}`: {c['winner']} wins from C={_fmt(c['concurrency'])} "
                     f"(C={_fmt(c['previous_concurrency'])}: {c['previous_tok_s_change_pct']:+.1f}%, "
                     f"C={_fmt(c['concurrency'])}: {c['tok_s_change_pct']:+.1f}%)")
    if not data["crossover"] and data["compare_algorithms"]:
        lines.append("- no crossover: the same side wins at every concurrency")
    lines.extend(f"- warning: {w}" for w in _warnings(data))
    return "\n".join(lines) + "\n"
