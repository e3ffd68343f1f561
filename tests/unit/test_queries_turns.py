"""by_turn and prefix_cache on hand-built folders whose answers are worked out by hand, workload_check's cache flag
ignoring planned reuse, and a folder of schema 5 (no session_id, turn or shared_prefix) still querying."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadgen.results import analysis
from sqlfixtures import Results


def _folder(root: Path, old: bool = False) -> Path:
    """Run `new`: two sessions of two turns, a single request with a shared context, one plain request; run `old`
    (schema 5, when asked): plain requests only, its file without the schema-6 columns."""
    r = Results()
    r.run("new")
    r.step("new", 0, "t")
    turn = dict(sent_ms=1100, spec_verify_ct=2)
    # session a: turn 1 (100 prompt tokens, 20 cached = its shared context), turn 2 (140, 130 cached)
    r.request("new", 0, "t", "a1", frames=[(1150, 4)], session_id="a", turn=1, shared_prefix="c#0",
              prompt_tokens=100, cached_tokens=20, **turn)
    r.request("new", 0, "t", "a2", frames=[(1400, 6)], session_id="a", turn=2, shared_prefix="c#0",
              prompt_tokens=140, cached_tokens=130, **dict(turn, sent_ms=1380))
    # session b: turn 1 misses (0 cached), turn 2 (160, 150 cached)
    r.request("new", 0, "t", "b1", frames=[(1250, 4)], session_id="b", turn=1, shared_prefix="c#1",
              prompt_tokens=120, cached_tokens=0, **turn)
    r.request("new", 0, "t", "b2", frames=[(1500, 6)], session_id="b", turn=2, shared_prefix="c#1",
              prompt_tokens=160, cached_tokens=150, **dict(turn, sent_ms=1460))
    # a single request with a shared context (hit), and a plain one whose 6 cached tokens are unplanned reuse
    r.request("new", 0, "t", "s1", frames=[(1130, 2)], shared_prefix="c#0", prompt_tokens=50, cached_tokens=40,
              **turn)
    r.request("new", 0, "t", "p1", frames=[(1200, 2)], prompt_tokens=60, cached_tokens=6, **turn)
    if old:
        r.run("old", schema_version=5)
        r.step("old", 0, "t")
        r.request("old", 0, "t", "o1", frames=[(1200, 2)], prompt_tokens=60, cached_tokens=0, **turn)
    r.write(root)
    if old:
        path = root / "requests" / "run_id=old" / "part-0-0.parquet"
        pq.write_table(pq.read_table(path).drop_columns(["session_id", "turn", "shared_prefix"]), path)
    return root


@pytest.mark.parametrize("old", [False, True])
def test_by_turn_prefix_cache_and_workload_check(tmp_path, old):
    con = analysis.open_results(_folder(tmp_path, old))
    by_turn = {r["turn"]: r for r in analysis.run_query(con, "by_turn").to_pylist()}
    assert sorted(by_turn) == [1, 2] and all(r["run_id"] == "new" for r in by_turn.values())
    one, two = by_turn[1], by_turn[2]
    assert (one["requests"], one["sessions"], one["prompt_tokens"], one["cached_tokens"]) == (2, 2, 110.0, 10.0)
    assert one["cached_pct"] == round(100 * 20 / 220, 1) and one["hit_pct"] == 50.0
    assert two["cached_pct"] == round(100 * 280 / 300, 1) and two["hit_pct"] == 100.0
    assert one["accept_len"] == 2.0 and two["accept_len"] == 3.0          # 8 / 4 and 12 / 4
    assert one["ttft_p50_ms"] == 100.0 and two["ttft_p50_ms"] == 30.0       # (50, 150) and (20, 40)
    [prefix] = analysis.run_query(con, "prefix_cache").to_pylist()
    # single requests and first turns: a1 (hit, 50 ms), b1 (miss, 150 ms), s1 (hit, 30 ms)
    assert (prefix["source"], prefix["requests"], prefix["prefixes"]) == ("c", 3, 2)
    assert prefix["cached_pct"] == round(100 * 60 / 270, 1) and prefix["hit_pct"] == round(200 / 3, 1)
    assert (prefix["ttft_hit_p50_ms"], prefix["ttft_miss_p50_ms"]) == (40.0, 150.0)
    checks = {r["run_id"]: r for r in analysis.run_query(con, "workload_check").to_pylist()}
    assert (checks["new"]["prompt_tokens"], checks["new"]["cached_tokens"]) == (60, 6)   # p1 only: unplanned
    assert checks["new"]["flags"] == "prompt cache hits"                                  # 10% > 5%
    if old:
        assert checks["old"]["cached_tokens"] == 0 and checks["old"]["flags"] is None
