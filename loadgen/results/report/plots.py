"""The report's plots, each a function of the Report that returns a Plot (title, caption, PNG) or None when
its data is empty: throughput, change vs baseline, the search's probes, nodes vs the fleet, per-user vs
aggregate throughput, latency percentiles, acceptance by prompt kind and along the output, TTFT and acceptance by
conversation turn, errors.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING, Literal

from loadgen.results.report.data import SMALL_SAMPLE, Report, Rows, SeriesKey, level, level_text, pct
from loadgen.results.report.figure import (
    by_series,
    level_axis,
    png,
    pyplot,
    series_legend,
    shade,
    small_multiples,
    style_legend,
)

if TYPE_CHECKING:   # matplotlib is an optional extra (loadgen[report]), imported when a report is drawn
    from matplotlib.axes import Axes

ERROR_COLOURS = {"http_error": "#d62728", "timeout": "#ff7f0e", "stream_broken": "#9467bd",
                 "server_abort": "#8c564b", "malformed_frame": "#e377c2", "client_error": "#7f7f7f",
                 "cancelled": "#bcbd22", "lost": "#17becf"}


@dataclass
class Plot:
    title: str
    caption: str
    png: bytes


def throughput_plot(report: Report) -> Plot | None:
    """Median aggregate tok/s per level, min-max band over repeats, the crossover shaded."""
    rows = report.data["repeats"]
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    series = by_series(rows)
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
        lo, hi = c["previous_concurrency"] or c["previous_rate"], level(c)
        ax.axvspan(lo, hi, color="#888", alpha=0.12, linewidth=0)
        ax.text((lo * hi) ** 0.5 if c["concurrency"] is not None else (lo + hi) / 2, 0.97,
                "lead changes", transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8)
    level_axis(ax, rows)
    ax.set_ylabel("aggregate output tok/s")
    ax.set_ylim(bottom=0)
    series_legend(report, ax, series)
    caption = ("Aggregate output tokens per second (frames inside the window / window). "
               + ("Bands: min to max over repeats. " if repeated else "One repeat per level: no spread band. ")
               + ("Grey: where the faster series changes." if report.data["crossover"] else ""))
    return Plot("Throughput", caption, png(fig))


def change_plot(report: Report) -> Plot | None:
    """% change of aggregate tok/s vs the baseline per level, with the zero line and the noise band."""
    rows = [r for r in report.data["repeats"] if r["tok_s_change_pct"] is not None]
    if not rows:
        return None
    base = {(r["run_id"], level(r)): r for r in report.data["repeats"] if r["tok_s_change_pct"] is None}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    ax.axhline(0, color="black", linewidth=1)
    series = by_series(rows)
    banded = False
    for key, levels in series.items():
        xs = sorted(levels)
        first = [levels[x][0] for x in xs]
        ys = [r["tok_s_change_pct"] for r in first]
        ax.plot(xs, ys, marker="o", color=report.colours[key])
        for x, y in zip(xs, ys):
            ax.annotate(pct(y), (x, y), textcoords="offset points", xytext=(0, 6 if y >= 0 else -12),
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
    level_axis(ax, rows)
    baselines = {report.label(r) for r in base.values()}
    ax.set_ylabel(f"aggregate tok/s vs {baselines.pop() if len(baselines) == 1 else 'baseline'} (%)")
    ax.margins(y=0.15)
    series_legend(report, ax, series)
    caption = ("Change of aggregate tok/s against the baseline at the same level; above zero = faster. "
               + ("Band: the range the change takes over repeats (a band crossing zero is not a signal)."
                  if banded else "With one repeat per level there is no noise band: small changes may be noise."))
    return Plot("Change vs baseline", caption, png(fig))


def pareto_plot(report: Report) -> Plot | None:
    """Per-user tok/s against aggregate tok/s, one point per level, SLO line when a TPOT SLO is set."""
    rows = report.data["pareto"] or [
        {**r, "user_tok_s": r["decode_tok_s_p50"]} for r in report.data["throughput_by_concurrency"]
        if r["decode_tok_s_p50"] is not None and r["tok_s"] is not None]
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    series = by_series(rows)
    for key, levels in series.items():
        xs = sorted(levels)
        pts = [(median(r["tok_s"] for r in levels[x]), median(r["user_tok_s"] for r in levels[x])) for x in xs]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=report.colours[key])
        for x, (px, py) in zip(xs, pts):
            ax.annotate(level_text(levels[x][0]), (px, py), textcoords="offset points", xytext=(4, 3),
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
    series_legend(report, ax, series)
    caption = ("Each point is a load level: right = more tokens for the fleet, up = faster for each user. "
               "Up and to the right is better; a capacity planner picks the rightmost point "
               + ("above the SLO line." if "tpot_ms" in report.slo else "whose per-user speed is still acceptable.")
               + (" Circled: on the Pareto frontier." if report.data["pareto"] else ""))
    return Plot("Per-user vs aggregate throughput", caption, png(fig))


LATENCY_METRICS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("itl_ms", "ITL, token-weighted (ms)"))
# (column, line style, samples it needs)
PERCENTILES: tuple[tuple[str, Literal["-", ":"], int], ...] = (("p50", "-", 2), ("p99", ":", 100))


def latency_plot(report: Report) -> Plot | None:
    """TTFT, TPOT (and token-weighted ITL when recorded) percentiles per level; small samples hollow."""
    rows = report.data["latency_by_concurrency"]
    metrics = [(m, label) for m, label in LATENCY_METRICS if any(r["metric"] == m for r in rows)]
    if not metrics:
        return None
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.4), squeeze=False)
    keys: dict[SeriesKey, None] = {}
    for ax, (metric, label) in zip(axes[0], metrics):
        metric_rows = [r for r in rows if r["metric"] == metric]
        for i, (key, levels) in enumerate(by_series(metric_rows).items()):
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
        level_axis(ax, metric_rows)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(label)
    series_legend(report, fig, keys)
    fig.legend(handles=[Line2D([], [], color="#444", linestyle=s, label=c) for c, s, _ in PERCENTILES],
               loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, fontsize="small")
    caption = ("Percentiles per level (log scale): solid p50, dotted p99. TTFT = first output - sent; "
               "TPOT = (last token - first token) / (tokens - 1) per request"
               + ("; ITL token-weighted as in SGLang's bench_serving" if any(m == "itl_ms" for m, _ in metrics)
                  else "") + ". Hollow points: fewer samples than the percentile needs (p99: 100); "
               f"n is written where a step measured fewer than {SMALL_SAMPLE} requests.")
    return Plot("Latency", caption, png(fig))


KIND_STYLES = ("-", "--", ":", "-.")
KIND_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")   # with the styles, tells up to 8 kinds (task families) apart


def acceptance_plot(report: Report) -> Plot | None:
    """Acceptance length per level, one panel per series, one line per prompt kind."""
    rows = [r for r in report.data["acceptance_by_kind"] if r["accept_len"] is not None]
    if not rows:
        return None
    kinds = list(dict.fromkeys(r["prompt_kind"] for r in rows))

    styles = list(zip(kinds, KIND_STYLES * 3, KIND_MARKERS * 2))

    def draw(ax: Axes, key: SeriesKey, srows: Rows) -> None:
        for kind, style, marker in styles:
            levels = by_series([r for r in srows if r["prompt_kind"] == kind])[key]
            xs = sorted(levels)
            ax.plot(xs, [median(r["accept_len"] for r in levels[x]) for x in xs], linestyle=style, marker=marker,
                    markersize=3, color=report.colours.get(key), linewidth=2 if kind == "(all)" else 1.2)
        level_axis(ax, srows)

    fig = small_multiples(report, rows, draw, "tokens per verify step")
    style_legend(fig, [(kind, {"linestyle": style, "marker": marker, "markersize": 3,
                               "linewidth": 2 if kind == "(all)" else 1.2}) for kind, style, marker in styles])
    return Plot("Acceptance length by prompt kind", "Acceptance length = completion tokens / verify steps "
                "(SGLang's definition, bonus token included), per prompt kind; '(all)' is the whole step.",
                png(fig))


def _turn_plot(report: Report, metric: str, ylabel: str, title: str, caption: str) -> Plot | None:
    """A conversation metric by turn (queries/by_turn.sql), one panel per series, one line per level (darker =
    more load); None when the run has no conversations."""
    rows = [r for r in report.data["by_turn"] if r[metric] is not None]
    if not rows:
        return None
    levels = sorted({level(r) for r in rows})

    def draw(ax: Axes, key: SeriesKey, srows: Rows) -> None:
        by_level = by_series(srows)[key]
        for x in sorted(by_level):
            turns: dict[int, list[float]] = defaultdict(list)
            for r in by_level[x]:
                turns[r["turn"]].append(r[metric])
            xs = sorted(turns)
            ax.plot(xs, [median(turns[t]) for t in xs], marker="o", markersize=3, color=report.colours.get(key),
                    linewidth=1.2, alpha=shade(levels.index(x), len(levels)))
        ax.set_xlabel("turn")
        ax.set_xticks(sorted({r["turn"] for r in srows}))

    fig = small_multiples(report, rows, draw, ylabel)
    names = {level(r): level_text(r) for r in rows}
    style_legend(fig, [(names[x], {"alpha": shade(i, len(levels)), "linewidth": 1.2}) for i, x in enumerate(levels)])
    return Plot(title, caption, png(fig))


def turn_ttft_plot(report: Report) -> Plot | None:
    return _turn_plot(report, "ttft_p50_ms", "median TTFT (ms)", "Time to first token by conversation turn",
                      "Each turn's prompt is the history so far; the share of it the server served from its prefix "
                      "cache is in the table 'Conversations by turn' (cached_pct).")


def turn_acceptance_plot(report: Report) -> Plot | None:
    return _turn_plot(report, "accept_len", "tokens per verify step", "Acceptance length by conversation turn",
                      "Acceptance length = completion tokens / verify steps of each turn's requests.")


def position_plot(report: Report) -> Plot | None:
    """Tokens per frame along the output, one panel per series, one line per level (darker = more load)."""
    rows = [r for r in report.data["acceptance_by_position"] if r["tokens_per_frame"] is not None]
    if not rows:
        return None

    def draw(ax: Axes, key: SeriesKey, srows: Rows) -> None:
        levels = by_series(srows)[key]
        for i, x in enumerate(sorted(levels)):
            buckets = defaultdict(list)
            for r in levels[x]:
                buckets[int(r["positions"].split("-")[0])].append(r["tokens_per_frame"])
            xs = sorted(buckets)
            ax.plot(xs, [median(buckets[b]) for b in xs], color=report.colours.get(key), linewidth=1.2,
                    alpha=shade(i, len(levels)))
        ax.set_xlabel("output position (first token of the bucket)")

    fig = small_multiples(report, rows, draw, "tokens per frame")
    levels = sorted({level(r) for r in rows})
    names = {level(r): level_text(r) for r in rows}
    style_legend(fig, [(names[x], {"alpha": shade(i, len(levels)), "linewidth": 1.2})
                        for i, x in enumerate(levels)])
    return Plot("Acceptance along the output", "Tokens per streamed frame by position in the output: a client-side "
                "proxy of acceptance, exact only when the server streams every verify step.", png(fig))


def errors_plot(report: Report) -> Plot | None:
    """Measured requests that did not finish ok, as counts by class per level; None when there are none."""
    rows = [r for r in report.data["errors_by_class"] if r["status"] != "ok" and r["measured"]]
    if not rows:
        return None
    classes = list(dict.fromkeys(r["status"] for r in rows))

    def draw(ax: Axes, key: SeriesKey, srows: Rows) -> None:
        levels = by_series(srows)[key]
        xs = sorted(levels)
        bottom = [0] * len(xs)
        for cls in classes:
            counts = [sum(r["measured"] for r in levels[x] if r["status"] == cls) for x in xs]
            ax.bar([str(level_text(levels[x][0])) for x in xs], counts, bottom=bottom, label=cls,
                   color=ERROR_COLOURS.get(cls, "#333"))
            bottom = [b + c for b, c in zip(bottom, counts)]
        ax.legend(fontsize="x-small")

    fig = small_multiples(report, rows, draw, "failed measured requests")
    return Plot("Errors", "Measured requests that did not finish ok, by outcome class (requests.status).", png(fig))


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
        ax.plot(xs, [level(r) for r in srows], color=report.colours.get(key, "#333"), linewidth=1)
        for x, r in zip(xs, srows):
            ax.scatter([x], [level(r)], s=40, zorder=3, color=colours.get(r["verdict"], "#999"))
            ax.annotate(r["probe"][:18], (x, level(r)), textcoords="offset points", xytext=(4, 4), fontsize=6)
        cap = capacity.get((key[0], key[1]))
        if cap is not None:
            ax.axhline(cap, color="#2ca02c", linestyle="--", linewidth=1)
        ax.set_xlabel("probe (in the order it ran)")
        ax.set_xticks(xs)
        ax.set_yscale("log", base=2)
        levels = sorted({level(r) for r in srows})
        ax.set_yticks(levels, [f"{v:g}" for v in levels])
        ax.minorticks_off()

    open_loop = any(r.get("concurrency") is None for r in rows)
    fig = small_multiples(report, rows, draw, "rate probed (req/s)" if open_loop else "concurrency probed",
                           sharey=False)
    return Plot("Capacity search", "Each probe of the search: green passed the SLO, red failed, grey not judged; "
                "the dashed line is the capacity found.", png(fig))


def fleet_plot(report: Report) -> Plot | None:
    """Every node's tok/s against the fleet median per level, one panel per configuration."""
    rows = [r for r in report.data["fleet_nodes"] if r["peers"] > 1 and r["tok_s_vs_fleet_pct"] is not None]
    if not rows:
        return None
    plt = pyplot()
    configs = list(dict.fromkeys(r["configuration"] for r in rows))
    fig, axes = plt.subplots(1, len(configs), figsize=(4.2 * len(configs), 3.2), squeeze=False, sharey=True)
    for ax, config in zip(axes[0], configs):
        crow = [r for r in rows if r["configuration"] == config]
        ax.axhline(0, color="black", linewidth=1)
        ax.axhspan(-15, 15, color="#888", alpha=0.1, linewidth=0)
        for key, levels in by_series(crow).items():
            xs = sorted(levels)
            ax.plot(xs, [levels[x][0]["tok_s_vs_fleet_pct"] for x in xs], marker="o",
                    color=report.colours.get(key), label=levels[xs[0]][0]["node"])
        level_axis(ax, crow)
        ax.set_title(config, fontsize=9)
        ax.legend(fontsize="x-small")
    axes[0][0].set_ylabel("tok/s vs fleet median (%)")
    fig.tight_layout()
    return Plot("Nodes vs fleet median", "Each node's aggregate tok/s against the median of its peers at the "
                "same configuration and level; grey: within 15% (fleet_nodes' default outlier threshold).", png(fig))


PLOTS = (throughput_plot, change_plot, probes_plot, fleet_plot, pareto_plot, latency_plot, acceptance_plot,
         turn_ttft_plot, turn_acceptance_plot, position_plot, errors_plot)


def plots(report: Report) -> list[Plot]:
    """Every plot that has something to show, in page order."""
    return [p for p in (make(report) for make in PLOTS) if p is not None]
