"""The main job's whole output in one voice: no Ray start-up warning, every line within 120 columns, and an A/A run
(two emulators of the same profile and seed) named once in a headline that judges every level both measured."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.config.cost import Prices
from loadgen.results import analysis

REPO = Path(__file__).parents[2]

EMULATOR = """
[targets.emulator]
model-path = "Qwen/Qwen3.8-27B-NVFP4"
speculative-algorithm = "NEXTN"
speculative-num-steps = 3
speculative-eagle-topk = 1
speculative-num-draft-tokens = 4
seed = 1
"""

AA = f"""
[run]
name = "a-a"

[load]
concurrency = [2, 4]
warmup_s = 1.0
measure_s = 4.0
schedule = "together"

[prompts]
seed = 1
max_new_tokens = 24
ignore_eos = true

[cost]
node_hour = 2.10
energy_kwh = 0.30

[[targets]]
name = "box-a-with-a-name-long-enough-to-wrap-its-line"
{EMULATOR}
[[targets]]
name = "box-b-with-a-name-long-enough-to-wrap-its-line"
{EMULATOR}
"""


def test_an_a_a_job_speaks_once_in_lines_of_120_columns_without_ray_warnings(tmp_path):
    config, results = tmp_path / "aa.toml", tmp_path / "results"
    config.write_text(AA)
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}   # as a user runs it: Ray's default mode
    job = subprocess.run([sys.executable, "-m", "jobs.capacity", "--config", str(config), "--results", str(results)],
                         cwd=REPO, capture_output=True, text=True, timeout=300, env=dict(env, RAY_ADDRESS=""))
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    output = job.stdout + job.stderr
    assert "Token authentication" not in output and "WARNING" not in output, output
    wide = [line for line in output.splitlines() if len(line) > 120 and str(results) not in line]
    assert not wide, wide   # a line holding the results folder is a path or a command: kept whole
    # the same server twice: one line for both targets, wrapped at a space, its continuation indented
    assert re.search(r"^targets box-a-\S+ \(http://127\.0\.0\.1:\d+\),\n    box-b-\S+ \(http://127\.0\.0\.1:\d+\): "
                     r"SGLang", job.stdout, re.M), job.stdout
    lines = job.stdout.splitlines()
    start = lines.index("answer:") + 1
    head = " ".join(line.strip() for line in lines[start:start + 2])   # the headline, wrapped onto two lines
    names = "box-b-with-a-name-long-enough-to-wrap-its-line vs box-a-with-a-name-long-enough-to-wrap-its-line: "
    assert head.startswith(names) and head.count(" vs ") == 1, head   # said once
    # both measured at both levels: the headline judges them (an exact tie, a difference under the one-repeat band,
    # or, on a loaded machine, a lead: one repeat cannot tell), never "no level with both series measured"
    rows = [line.split() for line in lines if re.match(r"C=[24] ", line)]
    assert [row[0] for row in rows] == ["C=2", "C=4"] and all(int(n) > 0 for row in rows
                                                               for n in row[1].split("/")), rows
    assert re.search(r"(no difference|too close to call|ahead) at C=", head) and "no level" not in head, head
    # the cost at the file's prices: each level's window seconds from the steps rows, the GPU's joules, the tokens
    con = analysis.open_results(results)
    costs = analysis.run_query(con, "cost").to_pylist()
    steps = [dict(zip(("target", "concurrency", "t_measure_start_ns", "t_measure_end_ns"), row)) for row in
             con.execute("SELECT target, concurrency, t_measure_start_ns, t_measure_end_ns FROM steps").fetchall()]
    assert len(costs) == 4 and all(r["energy_j"] > 0 and r["tokens"] > 0 for r in costs), costs
    for r in costs:
        [step] = [s for s in steps if s["target"] == r["target"] and s["concurrency"] == r["concurrency"]]
        assert r["window_s"] == pytest.approx((step["t_measure_end_ns"] - step["t_measure_start_ns"]) / 1e9, abs=1e-3)
        assert r["cost_per_m_tokens"] == pytest.approx(
            Prices(2.10, 0.30).per_million_tokens(r["window_s"], r["energy_j"], r["tokens"]), rel=1e-3)
    cheapest = min(r["cost_per_m_tokens"] for r in costs)
    assert f"{cheapest:.3g} at C=" in next(line for line in lines if line.startswith("  cost per M output tokens"))
