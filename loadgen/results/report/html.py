"""The documents: one self-contained HTML page (plots embedded as base64 PNG, no script, no CDN) and a Markdown
summary. The page answers first, in words (the verdict), then shows the plots that back it, then the query
results as tables, collapsed when long.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from loadgen.results.report.data import Report, Rows, level_text, pct
from loadgen.results.report.findings import comparison_pairs, verdict
from loadgen.results.report.plots import plots

SECTIONS = (
    ("compare_algorithms", "Baseline vs others per level"),
    ("crossover", "Where the faster series changes"),
    ("confounders", "Server settings that differ between compared series"),
    ("capacity", "Capacity at the SLO"),
    ("goodput", "Goodput and SLO verdict per step"),
    ("repeats", "Spread over repeats"),
    ("acceptance_sources", "Acceptance length: SQL, frame proxy and the server's own figures"),
    ("acceptance_by_kind", "Acceptance length by prompt kind"),
    ("by_turn", "Conversations by turn: TTFT, acceptance and prefix-cache hits"),
    ("prefix_cache", "Shared contexts: prefix-cache hits and TTFT"),
    ("throughput_by_concurrency", "Throughput per step"),
    ("latency_by_concurrency", "Latency per step (ms; decode_tok_s in tok/s)"),
    ("errors_by_class", "Requests by outcome class"),
    ("client_health", "Client health: could the load generator have distorted the numbers?"),
    ("fleet_nodes", "Nodes vs fleet median"),
    ("twin_drift", "Nodes vs their own twins (drift)"),
    ("gpu_by_step", "GPU per step: clock, power, throttling, energy"),
    ("energy", "Tokens per joule"),
    ("cost", "Cost per million output tokens, at the run's [cost] prices"),
    ("hardware", "Nodes and GPUs"),
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
             + (" <span class='badge'>PREDICTED</span>" if report.predicted else "") + "</h1>",
             f"<p class='sub'>{html.escape(_run_line(report))}</p>",
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
    hardware = _hardware_line(report)
    return " | ".join(items) + (f" | {hardware}" if hardware else "")


def _hardware_line(report: Report) -> str:
    """Per node: GPU, driver, CUDA, OS, host and loadgen version (queries/hardware.sql), for the run line."""
    items = []
    for r in report.data["hardware"]:
        if r["unavailable"]:
            items.append(f"{r['node']}: no GPU telemetry ({r['unavailable']})")
            continue
        cuda = f", CUDA {r['cuda_version']}" if r["cuda_version"] else ""
        items.append(f"{r['node']}: {r['gpu_name']}, driver {r['driver_version']}{cuda}, {r['os']} "
                     f"(host {r['host']}), loadgen {r['loadgen_version']}")
    return "; ".join(dict.fromkeys(items))


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
        f"<tr><td>{level_text(r)}</td><td>{_fmt(r['baseline_tok_s'])}</td><td>{_fmt(r['tok_s'])}</td>"
        f"<td>{pct(r['tok_s_change_pct'])}</td><td>{_fmt(r['baseline_accept_len'])}</td>"
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
    """A column name with its unit spelled out: tok_s -> tok/s, *_ms -> (ms), *pct -> (%)."""
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
            lines.append(f"| {level_text(r)} | {_fmt(r['baseline_tok_s'])} | {_fmt(r['tok_s'])} | {change} | "
                         f"{_fmt(r['baseline_accept_len'])} | {_fmt(r['accept_len'])} | "
                         f"{_signal_text(r['signal'])} |")
    return "\n".join(lines) + "\n"
