"""The matplotlib plumbing every report plot shares: pyplot loaded on demand (matplotlib is the optional extra
`loadgen[report]`), a figure as PNG bytes, a load-level axis, series legends, and small multiples (one panel
per series).
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING

from loadgen.results.report.data import Report, Rows, SeriesKey, level, series_key

if TYPE_CHECKING:   # matplotlib is an optional extra (loadgen[report]), imported when a report is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Draw = Callable[["Axes", SeriesKey, Rows], None]     # fills one panel of small_multiples


def pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.spines.top": False,
                         "axes.spines.right": False, "legend.frameon": False})
    return plt


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    pyplot().close(fig)
    return buf.getvalue()


def level_axis(ax: Axes, rows: Rows) -> None:
    """Concurrency on a log2 axis with the levels as ticks; rate on a linear axis."""
    open_loop = any(r.get("concurrency") is None for r in rows)
    ax.set_xlabel("request rate (req/s)" if open_loop else "concurrency (requests in flight)")
    if not open_loop and rows:
        ax.set_xscale("log", base=2)
        ticks = sorted({level(r) for r in rows})
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.minorticks_off()
    ax.grid(True, alpha=0.3)


def by_series(rows: Rows) -> dict[SeriesKey, dict[float, Rows]]:
    """rows grouped by series, then by load level (several rows where a level was repeated)."""
    out: dict[SeriesKey, dict[float, Rows]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[series_key(r)][level(r)].append(r)
    return out


def series_legend(report: Report, where: Axes | Figure, keys: Iterable[SeriesKey]) -> None:
    """A legend of the series' colours above an Axes or a Figure (never over the data)."""
    from matplotlib.lines import Line2D

    order = list(report.colours)
    handles = [Line2D([], [], color=report.colours.get(k, "#333"), marker="o",
                      label=report.label(dict(zip(("run_id", "target", "algorithm", "draft_tokens"), k))))
               for k in sorted(keys, key=lambda k: order.index(k) if k in order else len(order))]
    where.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(handles), 3),
                 fontsize="small")


def small_multiples(report: Report, rows: Rows, draw: Draw, ylabel: str, sharey: bool = True) -> Figure:
    """One panel per series (titled in its colour); draw(ax, key, rows of the series) fills a panel."""
    plt = pyplot()
    series: dict[SeriesKey, Rows] = defaultdict(list)
    for r in rows:
        series[series_key(r)].append(r)
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


def style_legend(fig: Figure, styles: list[tuple[str, dict]]) -> None:
    """A grey legend above the panels for what distinguishes lines inside each panel (kind, level)."""
    from matplotlib.lines import Line2D

    fig.legend(handles=[Line2D([], [], color="#333", label=name, **style) for name, style in styles],
               loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(styles), 6), fontsize="small")


def shade(i: int, n: int) -> float:
    """Line opacity of the i-th of n load levels: darker = more load."""
    return 0.3 + 0.7 * (i + 1) / n
