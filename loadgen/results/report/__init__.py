"""`loadgen report`: one self-contained HTML file and a Markdown summary of a results folder.

The parts, each with one job: data (run the queries, label the series), findings (the verdict in words),
figure and plots (matplotlib, imported only when plotting), html (the page and the Markdown summary).
"""

from __future__ import annotations

from pathlib import Path

from loadgen.results.report.data import load_report
from loadgen.results.report.html import markdown_summary, render_html


def write_report(results_dir: str | Path, run_ids: list[str] | None, html_path: str | Path,
                 markdown_path: str | Path | None = None) -> None:
    """Run the report's queries over the results folder and write the HTML (and Markdown) files."""
    report = load_report(results_dir, run_ids)
    Path(html_path).write_text(render_html(report))
    if markdown_path is not None:
        Path(markdown_path).write_text(markdown_summary(report))

