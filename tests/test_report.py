"""loadgen.report: a self-contained HTML report, legible plots, and the Markdown summary."""

from __future__ import annotations

import base64
import re

import pytest

pytest.importorskip("matplotlib")

from loadgen.report import line_plot, markdown_summary, write_report  # noqa: E402
from loadgen.analysis import open_results, run_query  # noqa: E402
from test_queries_compare import DFLASH, MTP, add_series  # noqa: E402
from sqlfixtures import Results  # noqa: E402


@pytest.fixture
def report_folder(tmp_path):
    r = Results()
    r.run("seed")
    add_series(r, "seed", "mtp", 0, "NEXTN", MTP)
    add_series(r, "seed", "dflash", 1, "DFLASH", DFLASH)
    return r.write(tmp_path / "results")


def test_throughput_plot_png(report_folder, tmp_path):
    rows = run_query(open_results(report_folder), "repeats").to_pylist()
    png = line_plot(rows, "tok_s_median", "Throughput vs concurrency", "output tok/s (aggregate)",
                    group=lambda r: f"{r['target']} (emulated)", yerr=("tok_s_min", "tok_s_max"))
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    (tmp_path / "throughput.png").write_bytes(png)        # kept for eyeballing with pytest --basetemp


def test_html_report_is_self_contained(report_folder, tmp_path):
    html_path, md_path = tmp_path / "report.html", tmp_path / "summary.md"
    write_report(report_folder, None, html_path, md_path)
    text = html_path.read_text()
    assert "loadgen report (emulated)" in text
    assert not re.search(r"(src|href)=['\"]https?:", text)          # nothing fetched from a CDN
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)
    assert len(images) == 6 and all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert "212.35" in text and "-12.9" in text                     # comparison table present
    md = md_path.read_text()
    assert "| 1 | 20.9 | 28.4 | +35.9% |" in md
    assert "| 16 | 243.9 | 212.35 | -12.9% | 2 | 4 | yes |" in md
    assert "dflash" in md and "mtp wins from C=16" in md and "(emulated)" in md


def test_markdown_says_when_there_is_no_crossover():
    data = {"runs": [], "compare_algorithms": [{"run_id": "r", "baseline_target": "a", "baseline_algorithm": "X",
                                                "target": "b", "algorithm": "Y", "concurrency": 1, "rate": None,
                                                "baseline_tok_s": 1.0, "tok_s": 2.0, "tok_s_change_pct": 100.0,
                                                "baseline_accept_len": None, "accept_len": None, "signal": None,
                                                "emulated": False}],
            "crossover": [], "client_health": []}
    md = markdown_summary(data)
    assert "| 1 | 1 | 2 | +100.0% |  |  | n/a (no repeats) |" in md and "no crossover" in md
    assert "(emulated)" not in md
