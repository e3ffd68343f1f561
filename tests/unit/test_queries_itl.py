"""step_latency's token-weighted itl_ms (a weighted quantile over frames, views.sql) against the plain definition:
every frame expanded into one sample per token it carries, and DuckDB's own quantile_cont over those samples."""

from __future__ import annotations

import random

import pytest

from loadgen.results.analysis import open_results
from sqlfixtures import Results

# The brute force: what step_latency computed before it stopped expanding frames (SGLang bench_serving's ITL).
EXPANDED = """
SELECT run_id, step_id, target, count(*) AS n, avg(gap_ns / 1e6 / tokens) AS mean,
       quantile_cont(gap_ns / 1e6 / tokens, [0.5, 0.9, 0.99]) AS q, max(gap_ns / 1e6 / tokens) AS max
FROM measured_frames, range(tokens) AS t(i)
WHERE gap_ns IS NOT NULL AND tokens > 0
GROUP BY run_id, step_id, target
"""
FRAME_GAPS = """
SELECT run_id, step_id, target, count(*) AS n, avg(gap_ns / 1e6) AS mean,
       quantile_cont(gap_ns / 1e6, [0.5, 0.9, 0.99]) AS q, max(gap_ns / 1e6) AS max
FROM measured_frames WHERE gap_ns IS NOT NULL
GROUP BY run_id, step_id, target
"""


def by_step(con, sql: str) -> dict[tuple, tuple]:
    return {tuple(r[:3]): tuple(r[3:]) for r in con.execute(sql).fetchall()}


def latency(con, metric: str) -> dict[tuple, tuple]:
    return by_step(con, f"SELECT run_id, step_id, target, n, mean, q, max FROM step_latency WHERE metric = '{metric}'")


def random_steps(r: Results, rng: random.Random) -> None:
    """Steps of different shapes: many frames with 1-8 tokens (speculative decoding), unknown (NULL) and 0
    token counts among them, gaps of 0 (frames read together), ties, and outliers far above the mean."""
    r.run("r")
    for step, (requests, max_tokens, gaps) in enumerate([
            (60, 8, [0.0, 3.0, 7.5, 20.0, 35.0, 80.0]),      # coarse values: many ties across frames
            (40, 3, None),                                   # continuous values
            (25, 1, None),                                   # one token a frame: weighted = unweighted
            (30, 6, [0.0, 0.0, 0.0, 12.0, 5000.0])]):       # mostly zero gaps, one far outlier value
        target = f"t{step}"
        r.step("r", step, target, target_index=step, window_ms=(0, 100_000))
        for k in range(requests):
            t, frames = 100.0 + k, []
            for _ in range(rng.randint(1, 30)):
                t += rng.choice(gaps) if gaps else rng.uniform(0.5, 60.0)
                tokens = rng.choice([None, 0]) if rng.random() < 0.05 else rng.randint(1, max_tokens)
                frames.append((t, tokens))
            status = "ok" if rng.random() < 0.9 else "stream_broken"
            r.request("r", step, target, f"{step}-{k}", sent_ms=100 + k, frames=frames, status=status,
                      completion_tokens=None)


def assert_same(got: dict[tuple, tuple], want: dict[tuple, tuple]) -> None:
    assert got.keys() == want.keys() and want
    for key, (n, mean, q, high) in want.items():
        g_n, g_mean, g_q, g_high = got[key]
        assert (g_n, g_high) == (n, high), key
        assert g_mean == pytest.approx(mean, rel=1e-12, abs=1e-12), key
        assert g_q == pytest.approx(q, rel=1e-12, abs=1e-12), key


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_weighted_itl_equals_the_expanded_samples(tmp_path, seed):
    r = Results()
    random_steps(r, random.Random(seed))
    con = open_results(r.write(tmp_path))
    expanded = by_step(con, EXPANDED)
    assert max(n for n, *_ in expanded.values()) > 1000          # enough samples for the percentiles to spread
    assert_same(latency(con, "itl_ms"), expanded)
    assert_same(latency(con, "itl_frame_ms"), by_step(con, FRAME_GAPS))


def test_weighted_itl_small_cases_by_hand(tmp_path):
    """n = 1, n = 2 (p50 between the two), all values equal, and a step whose frames never say their tokens."""
    r = Results()
    r.run("r")
    for step in range(4):
        r.step("r", step, f"t{step}", target_index=step)
    r.request("r", 0, "t0", "a", sent_ms=1000, frames=[(1100, 1), (1130, 1)])                 # one sample: 30
    r.request("r", 1, "t1", "b", sent_ms=1000, frames=[(1100, 1), (1140, 2)])                 # 20, 20
    r.request("r", 1, "t1", "c", sent_ms=1000, frames=[(1100, 3), (1110, 1), (1111, None)])  # 10 (gap of 1: unknown)
    r.request("r", 2, "t2", "d", sent_ms=1000, frames=[(1100, 2), (1150, 5), (1200, 5)])      # 10 x 10
    r.request("r", 3, "t3", "e", sent_ms=1000, frames=[(1100, None), (1150, None)], completion_tokens=None)
    con = open_results(r.write(tmp_path))
    rows = latency(con, "itl_ms")
    assert rows[("r", 0, "t0")] == (1, 30.0, [30.0, 30.0, 30.0], 30.0)
    n, mean, q, high = rows[("r", 1, "t1")]                      # samples 10, 20, 20
    assert (n, high) == (3, 20.0) and mean == pytest.approx(50 / 3)
    assert q == pytest.approx([20.0, 20.0, 20.0])
    assert rows[("r", 2, "t2")] == (10, 10.0, [10.0, 10.0, 10.0], 10.0)
    assert ("r", 3, "t3") not in rows                           # no known tokens: no itl_ms row
    assert_same(rows, by_step(con, EXPANDED))
