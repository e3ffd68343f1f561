"""Per-step metrics of queries/*.sql against hand-built folders whose answers are worked out here by hand."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadgen.results.analysis import open_results, run_query
from sqlfixtures import Results


def query(root: Path, name: str, run_ids: list[str] | None = None, **params) -> list[dict]:
    return run_query(open_results(root, run_ids), name, params).to_pylist()


def one_step(**step) -> Results:
    """A run 'r' with step 1 on target 't', window [1000 ms, 2000 ms)."""
    r = Results()
    r.run("r")
    r.step("r", 1, "t", **step)
    return r


def test_acceptance_token_weighted_and_mean_over_measured_ok_only(tmp_path):
    r = one_step()
    r.request("r", 1, "t", "a", sent_ms=1100, frames=[(1200, 4), (1300, 6)], spec_verify_ct=4)    # 10/4
    r.request("r", 1, "t", "b", sent_ms=1100, frames=[(1200, 20)], spec_verify_ct=5)              # 20/5
    r.request("r", 1, "t", "c", sent_ms=1100, frames=[(1200, 6)], spec_verify_ct=3)               # 6/3
    r.request("r", 1, "t", "warm", sent_ms=500, frames=[(600, 50)], spec_verify_ct=1, phase="warmup")
    r.request("r", 1, "t", "broken", sent_ms=1100, frames=[(1200, 50)], spec_verify_ct=1, status="stream_broken")
    r.request("r", 1, "t", "nospec", sent_ms=1100, frames=[(1200, 9)], spec_verify_ct=None)
    r.request("r", 1, "t", "zero", sent_ms=1100, frames=[(1200, 9)], spec_verify_ct=0)
    [row] = query(r.write(tmp_path), "acceptance_by_concurrency")
    assert row["ok_requests"] == 5 and row["spec_requests"] == 3
    assert row["accept_len"] == 3.0                          # (10 + 20 + 6) / (4 + 5 + 3)
    assert row["accept_len_mean"] == round((2.5 + 4 + 2) / 3, 3)
    assert row["emulated"] is True


def test_acceptance_is_null_without_spec_keys_and_without_usage(tmp_path):
    r = Results()
    r.run("r")
    r.step("r", 1, "none", algorithm="NONE", target_index=0)
    r.request("r", 1, "none", "a", sent_ms=1100, frames=[(1200, 1), (1300, 1)])
    r.step("r", 1, "nousage", target_index=1)
    r.request("r", 1, "nousage", "b", sent_ms=1100, frames=[(1200, None)], completion_tokens=None,
              spec_verify_ct=None)
    rows = {x["target"]: x for x in query(r.write(tmp_path), "acceptance_by_concurrency")}
    assert rows["none"]["spec_requests"] == 0 and rows["none"]["accept_len"] is None
    assert rows["nousage"]["ok_requests"] == 1 and rows["nousage"]["accept_len"] is None


def test_acceptance_by_kind_splits_code_and_prose(tmp_path):
    r = one_step()
    r.request("r", 1, "t", "c1", sent_ms=1100, frames=[(1200, 2), (1300, 6)], spec_verify_ct=2, prompt_kind="code")
    r.request("r", 1, "t", "p1", sent_ms=1100, frames=[(1200, 3)], spec_verify_ct=3, prompt_kind="prose")
    r.request("r", 1, "t", "p2", sent_ms=1100, frames=[(1200, 9)], spec_verify_ct=3, prompt_kind="prose")
    rows = {x["prompt_kind"]: x for x in query(r.write(tmp_path), "acceptance_by_kind")}
    assert set(rows) == {"(all)", "code", "prose"}
    assert rows["code"]["accept_len"] == 4.0 and rows["code"]["tokens_per_frame"] == 4.0   # 8/2, 8 tokens/2 frames
    assert rows["prose"]["accept_len"] == 2.0 and rows["prose"]["accept_len_mean"] == 2.0  # 12/6; mean(1, 3)
    assert rows["(all)"]["accept_len"] == 2.5                                             # 20/8
    assert rows["(all)"]["tokens_per_frame"] == 5.0                                       # 20 tokens / 4 frames


def test_acceptance_by_position_buckets_frames_by_their_last_token(tmp_path):
    r = one_step()
    # cum_tokens 1, 21, 41, 61: last-token positions 1, 21 -> 1-32; 41, 61 -> 33-64
    r.request("r", 1, "t", "a", sent_ms=1100, frames=[(1200, 1), (1210, 20), (1220, 20), (1230, 20)],
              spec_verify_ct=4)
    r.request("r", 1, "t", "b", sent_ms=1100, frames=[(1200, 5)], spec_verify_ct=1)
    r.request("r", 1, "t", "f", sent_ms=1100, frames=[(1200, 50)], status="timeout")
    root = r.write(tmp_path)
    rows = [(x["positions"], x["requests"], x["frames"], x["tokens_per_frame"])
            for x in query(root, "acceptance_by_position")]
    assert rows == [("1-32", 2, 3, round(26 / 3, 3)), ("33-64", 1, 2, 20.0)]
    rows16 = [x["positions"] for x in query(root, "acceptance_by_position", position_bucket=16)]
    assert rows16 == ["1-16", "17-32", "33-48", "49-64"]


def test_acceptance_sources_side_by_side_with_disagreement(tmp_path):
    r = one_step()
    r.request("r", 1, "t", "a", sent_ms=1100, frames=[(1200, 10), (1300, 20)], spec_verify_ct=10,
              spec_accept_length=3.0)
    r.request("r", 1, "t", "b", sent_ms=1100, frames=[(1200, 40)], spec_verify_ct=10, spec_accept_length=4.5)
    r.server_sample("r", 1, "t", "avg_spec_accept_length", 0.0, t_ms=900, labels='{"when":"before"}')
    r.server_sample("r", 1, "t", "avg_spec_accept_length", 3.85, t_ms=3000, labels='{"when":"after"}')
    [row] = query(r.write(tmp_path), "acceptance_sources")
    assert row["accept_len"] == 3.5                      # 70 / 20
    assert row["tokens_per_frame"] == round(70 / 3, 3)   # 3 frames
    assert row["server_final"] == 3.75 and row["server_info_after"] == 3.85
    assert row["proxy_diff_pct"] == round(100 * (70 / 3 / 3.5 - 1), 1)
    assert row["server_final_diff_pct"] == round(100 * (3.75 / 3.5 - 1), 1)
    assert row["server_info_diff_pct"] == 10.0


def test_throughput_counts_frames_inside_the_window_of_any_request(tmp_path):
    r = one_step()
    r.request("r", 1, "t", "ok", sent_ms=1050, frames=[(1000, 2), (1500, 3), (2000, 4)])   # 2000 is outside
    r.request("r", 1, "t", "warm", sent_ms=800, frames=[(900, 5), (1200, 1)], phase="warmup")
    r.request("r", 1, "t", "broke", sent_ms=1100, frames=[(1300, 2)], status="stream_broken")
    r.request("r", 1, "t", "drain", sent_ms=1990, frames=[(1999, 7), (2500, 9)], phase="drain", status="cancelled")
    r.request("r", 1, "t", "ok2", sent_ms=1600, frames=[(1700, 1)])
    [row] = query(r.write(tmp_path), "throughput_by_concurrency")
    assert row["window_s"] == 1.0
    assert row["tok_s"] == 2 + 3 + 1 + 2 + 7 + 1          # every status, arrival inside [1000, 2000)
    assert row["tok_s_ok"] == 2 + 3 + 1 + 1
    assert row["req_s"] == 2.0                           # measured ok: ok, ok2
    assert row["window_frames"] == 6 and row["frames_unknown_tokens"] == 0
    # decode tok/s of 'ok': (9 - 1) tokens over 1000 ms -> 8; 'ok2' has 1 token: no TPOT
    assert row["decode_tok_s_p50"] == 8.0


def test_throughput_is_null_when_the_server_never_said_how_many_tokens(tmp_path):
    r = one_step()
    r.request("r", 1, "t", "a", sent_ms=1100, frames=[(1200, None), (1300, None)], completion_tokens=None)
    [row] = query(r.write(tmp_path), "throughput_by_concurrency")
    assert row["tok_s"] is None and row["frames_unknown_tokens"] == 2 and row["decode_tok_s_p50"] is None


def test_latency_percentiles_of_measured_ok_requests(tmp_path):
    r = one_step()
    r.request("r", 1, "t", "a", sent_ms=1000, frames=[(1100, 1), (1150, 2), (1250, 4)], done_ms=1300)
    r.request("r", 1, "t", "b", sent_ms=1200, frames=[(1400, 1), (1420, 1)])
    r.request("r", 1, "t", "failed", sent_ms=1000, frames=[(1900, 1), (1999, 1)], status="stream_broken")
    r.request("r", 1, "t", "warm", sent_ms=900, frames=[(1950, 1), (1990, 1)], phase="warmup")
    rows = {x["metric"]: x for x in query(r.write(tmp_path), "latency_by_concurrency")}
    assert list(rows) == ["ttft_ms", "itl_ms", "itl_frame_ms", "tpot_ms", "decode_tok_s", "e2e_ms"]
    ttft = rows["ttft_ms"]                               # samples 100, 200
    assert (ttft["n"], ttft["p50"], ttft["p90"], ttft["p99"], ttft["max"]) == (2, 150, 190, 199, 200)
    itl = rows["itl_frame_ms"]                           # gaps 50, 100 (a) and 20 (b)
    assert (itl["n"], itl["mean"], itl["p50"], itl["max"]) == (3, round(170 / 3, 2), 50, 100)
    per_token = rows["itl_ms"]     # token-weighted: 25, 25 (a's 2nd frame), 25 x 4 (a's 3rd), 20 (b's 2nd)
    assert (per_token["n"], per_token["mean"], per_token["p50"], per_token["max"]) == (7, round(170 / 7, 2), 25, 25)
    # its mean is the token-weighted TPOT: a's 150 ms over 6 tokens and b's 20 ms over 1, pooled
    tpot = rows["tpot_ms"]                               # a: 150 ms / 6, b: 20 ms / 1
    assert (tpot["p50"], tpot["max"]) == (22.5, 25)
    assert rows["decode_tok_s"]["max"] == 50 and rows["decode_tok_s"]["n"] == 2   # 1000/20, 1000/25
    assert rows["e2e_ms"]["max"] == 300                  # a: done at 1300, sent at 1000


def test_itl_ms_is_sglang_bench_serving_itl_and_itl_frame_ms_is_vllm_bench_serve_itl(tmp_path):
    """The peers' ITL computed as their clients do, over the same streams: SGLang's bench_serving (/generate)
    extends its list with gap / new tokens, once per new token; vLLM's bench serve appends one gap per chunk.
    Frames carry 1-5 tokens, as under speculative decoding."""
    import random
    import statistics
    rng = random.Random(7)
    r = one_step()
    sglang, vllm = [], []
    for k in range(40):
        t, frames = 1000.0 + k, []
        for _ in range(rng.randint(2, 12)):
            t += rng.choice([3.0, 20.0, 35.0, 80.0])
            frames.append((t, rng.randint(1, 5)))
        r.request("r", 1, "t", f"q{k}", sent_ms=1000 + k, frames=frames)
        for (t0, _), (t1, tokens) in zip(frames, frames[1:]):
            sglang.extend([(t1 - t0) / tokens] * tokens)
            vllm.append(t1 - t0)
    rows = {x["metric"]: x for x in query(r.write(tmp_path), "latency_by_concurrency")}

    def percentile(xs: list[float], q: float) -> float:   # numpy's default (linear), as both peers use
        xs = sorted(xs)
        pos = q * (len(xs) - 1)
        lo = int(pos)
        return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)
    for metric, samples in (("itl_ms", sglang), ("itl_frame_ms", vllm)):
        row = rows[metric]
        assert row["n"] == len(samples)
        assert row["mean"] == pytest.approx(statistics.fmean(samples), abs=0.006)
        for col, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            assert row[col] == pytest.approx(percentile(samples, q), abs=0.006), (metric, col)


def test_latency_without_usage_keeps_frame_gaps_only(tmp_path):
    r = one_step()
    r.request("r", 1, "t", "a", sent_ms=1000, frames=[(1100, None), (1130, None)], completion_tokens=None)
    rows = {x["metric"]: x for x in query(r.write(tmp_path), "latency_by_concurrency")}
    assert set(rows) == {"ttft_ms", "itl_frame_ms", "e2e_ms"}
    assert rows["itl_frame_ms"]["p50"] == 30


def test_errors_by_class_per_step_and_phase(tmp_path):
    r = one_step()
    for i in range(3):
        r.request("r", 1, "t", f"ok{i}", sent_ms=1100, frames=[(1200, 1)])
    r.request("r", 1, "t", "to", sent_ms=1100, frames=[], status="timeout", error="no frame for 30 s")
    r.request("r", 1, "t", "w", sent_ms=500, frames=[(600, 1)], phase="warmup")
    for i in range(2):
        r.request("r", 1, "t", f"d{i}", sent_ms=1990, frames=[], phase="drain", status="cancelled")
    rows = {x["status"]: x for x in query(r.write(tmp_path), "errors_by_class")}
    assert list(rows) == ["ok", "timeout", "cancelled"]
    assert (rows["ok"]["requests"], rows["ok"]["measured"], rows["ok"]["warmup"]) == (4, 3, 1)
    assert rows["ok"]["pct_of_measured"] == 75.0 and rows["timeout"]["pct_of_measured"] == 25.0
    assert rows["timeout"]["example_error"] == "no frame for 30 s"
    assert (rows["cancelled"]["drain"], rows["cancelled"]["pct_of_measured"]) == (2, 0.0)


def test_client_health_verdict_per_step(tmp_path):
    r = Results()
    r.run("r")
    for step in (1, 2, 3, 4, 5):
        r.step("r", step, "t", concurrency=4, window_ms=(step * 10_000, step * 10_000 + 5000))
    for i in range(20):                                  # step 1: healthy, all samples at target
        r.client_sample("r", 1, t_ms=10_000 + i * 250, in_flight=4, target_in_flight=4)
    for i in range(20):                                  # step 2: lagging loop, in flight short half the time
        r.client_sample("r", 2, t_ms=20_000 + i * 250, loop_lag_ms=50.0, in_flight=4 - i % 2, target_in_flight=4)
    r.client_sample("r", 3, t_ms=29_000, loop_lag_ms=500.0)   # step 3: only a sample outside its window
    for i in range(20):                                  # step 4: data sat in sockets (frames read together)
        r.client_sample("r", 4, t_ms=40_000 + i * 250, read_delay_max_ms=25.0, in_flight=4, target_in_flight=4)
    for i in range(20):                                  # step 5: no kernel stamps on this platform
        r.client_sample("r", 5, t_ms=50_000 + i * 250, read_delay_max_ms=None, in_flight=4, target_in_flight=4)
    r.request("r", 4, "t", "a", sent_ms=40_000,
              frames=[(40_100, 1), (40_105, 1), (40_105, 1), (40_110, 1), (40_115, 1)])
    r.request("r", 4, "t", "b", sent_ms=40_000, frames=[(40_100, 1), (40_200, 1), (40_200, 1), (40_200, 1)])
    r.request("r", 4, "t", "c", sent_ms=40_000, frames=[(40_100, 1), (40_100, 1)], status="timeout")  # not ok
    r.request("r", 5, "t", "d", sent_ms=50_000, frames=[(50_100, 1), (50_100.001, 1)])
    r.request("r", 5, "t", "e", sent_ms=50_000, frames=[(50_100, 1)], resent=True)   # after the kept-alive race
    r.request("r", 5, "t", "f", sent_ms=50_000, frames=[(50_100, 1)], resent=False, phase="drain")
    rows = {x["step_id"]: x for x in query(r.write(tmp_path), "client_health")}
    assert [rows[k]["resent"] for k in (1, 4, 5)] == [0, 0, 1]
    assert rows[1]["verdict"] == "ok" and rows[1]["distorted"] is False and rows[1]["in_flight_share"] == 1.0
    assert rows[1]["read_together_pct"] is None                       # no frames
    assert rows[4]["read_together_pct"] == round(100 * 3 / 7, 2)      # 3 of 7 gaps are 0 (a: 1 of 4, b: 2 of 3)
    assert rows[5]["read_together_pct"] == 0.0                        # 1 us apart: two reads
    assert rows[2]["distorted"] is True and rows[2]["in_flight_share"] == 0.5
    assert rows[2]["verdict"] == ("suspect: loop lag p99 50.0 ms > 10 ms; "
                                  "in flight at target in 50% of samples < 95%")
    assert rows[3]["samples"] == 0 and rows[3]["distorted"] is None and rows[3]["verdict"].startswith("unknown")
    assert (rows[4]["verdict"], rows[4]["read_delay_max_ms"]) == (
        "suspect: socket read delay p99 25.0 ms > 10 ms", 25.0)
    assert rows[5]["verdict"] == "ok" and rows[5]["read_delay_p99_ms"] is None
    relaxed = {x["step_id"]: x for x in query(tmp_path, "client_health", max_loop_lag_ms=60,
                                              min_in_flight_share=0.5)}
    assert relaxed[2]["verdict"] == "ok"


def test_client_health_ignores_the_counted_runs_tail_but_not_a_client_that_falls_short(tmp_path):
    """--requests N: after a worker's last send its in-flight count can only fall from C to 0, and before its
    C-th send its slots are still starting; neither is the client's doing. A dip between them still is."""
    r = Results()
    r.run("r")
    for step in (1, 2):
        r.step("r", step, "t", concurrency=4, window_ms=(step * 10_000, step * 10_000 + 5000))
        base = step * 10_000
        sends = [base + 100] * 4 + [base + 500 * k for k in range(1, 7)]   # C at once, then one a 0.5 s
        for i, t in enumerate(sends):
            r.request("r", step, "t", f"{step}-{i}", sent_ms=t, frames=[(t + 50, 1)])
        for i in range(20):   # samples every 0.25 s; the last send is at +3.0 s, then 3, 2, 1, 0 in flight
            t = base + i * 250
            falling = max(4 - (i - 12), 0) if t > base + 3000 else 4
            short = step == 2 and i in (4, 5, 6)   # step 2: the client had only 2 in flight for 0.75 s
            r.client_sample("r", step, t_ms=t, in_flight=2 if short else (0 if i == 0 else falling),
                            target_in_flight=4)
    rows = {x["step_id"]: x for x in query(r.write(tmp_path), "client_health")}
    assert (rows[1]["verdict"], rows[1]["distorted"], rows[1]["in_flight_share"]) == ("ok", False, 1.0)
    assert rows[2]["distorted"] is True and rows[2]["verdict"] == (
        "suspect: in flight at target in 75% of samples < 95%")   # 9 of the 12 samples from +0.25 to +3.0 s


def test_runs_lists_each_run_with_its_series_and_levels(tmp_path):
    r = Results()
    r.run("old", started_ms=0)
    r.run("new", started_ms=100_000)
    for run in ("old", "new"):
        for c in (1, 4):
            r.step(run, c, "mtp", target_index=0, algorithm="NEXTN", concurrency=c)
            r.step(run, c, "dflash", target_index=1, algorithm="DFLASH", concurrency=c, repeat=0)
            r.step(run, c + 10, "dflash", target_index=1, algorithm="DFLASH", concurrency=c, repeat=1)
    root = r.write(tmp_path)
    rows = query(root, "runs")
    assert [x["run_id"] for x in rows] == ["old", "new"]
    assert rows[0]["series"] == "mtp=NEXTN/8, dflash=DFLASH/8"
    assert (rows[0]["steps"], rows[0]["concurrency"], rows[0]["repeats"], rows[0]["window_s"]) == (6, [1, 4], 2, 1.0)
    assert [x["run_id"] for x in query(root, "runs", run_ids=["new"])] == ["new"]


def test_results_of_an_older_schema_without_a_newer_column_still_query(tmp_path):
    """A results folder keeps runs of earlier loadgen versions: schema 1 had no client_samples.read_delay_max_ms."""
    import pyarrow.parquet as pq
    r = Results()
    for run in ("v1", "v2"):
        r.run(run)
        r.step(run, 1, "t", concurrency=4, window_ms=(10_000, 15_000))
        for i in range(4):
            r.client_sample(run, 1, t_ms=10_000 + i * 1000, read_delay_max_ms=30.0, in_flight=4, target_in_flight=4)
    root = r.write(tmp_path)
    old = root / "client_samples" / "run_id=v1" / "part-0-0.parquet"
    pq.write_table(pq.read_table(old).drop_columns(["read_delay_max_ms"]), old)
    rows = {x["run_id"]: x for x in query(root, "client_health")}
    assert rows["v1"]["verdict"] == "ok" and rows["v1"]["read_delay_max_ms"] is None
    assert rows["v2"]["verdict"].startswith("suspect: socket read delay")
    newer = root / "client_samples" / "run_id=v2" / "part-0-0.parquet"
    pq.write_table(pq.read_table(newer).drop_columns(["read_delay_max_ms"]), newer)   # only schema-1 files left
    assert {x["run_id"]: x["verdict"] for x in query(root, "client_health")} == {"v1": "ok", "v2": "ok"}


@pytest.mark.parametrize("runs", [("old", "new"), ("new", "old"), ("old",)])
def test_resent_reads_null_in_schema_5_folders_and_client_health_still_counts(tmp_path, runs):
    """Schema 6 added requests.resent: a folder holding a schema-5 run (its file has no such column) queries,
    with NULL for the old rows, whichever file comes first."""
    r = Results()
    for run_id in runs:
        r.run(run_id, schema_version=5 if run_id == "old" else 6)
        r.step(run_id, 0, "t")
        r.client_sample(run_id, 0, t_ms=1500)
        r.request(run_id, 0, "t", f"{run_id}-a", sent_ms=1100, frames=[(1200, 1)],
                  **({"resent": True} if run_id == "new" else {}))
    r.write(tmp_path)
    if "old" in runs:
        path = tmp_path / "requests" / "run_id=old" / "part-0-0.parquet"
        pq.write_table(pq.read_table(path).drop_columns(["resent"]), path)
    con = open_results(tmp_path)
    want = {"old": None, "new": True} if "new" in runs else {"old": None}
    assert dict(con.execute("SELECT run_id, resent FROM requests").fetchall()) == want
    health = {row["run_id"]: row["resent"] for row in query(tmp_path, "client_health")}
    assert health == ({"old": 0, "new": 1} if "new" in runs else {"old": 0})


def test_fleet_nodes_flags_a_node_off_the_fleet_median_by_tok_s_or_acceptance(tmp_path):
    """Hand-made nodes (window 1 s, one request each: tok/s = its tokens, acceptance = tokens / verify steps).
    mtp: tok/s 100, 110, 50, the median 100: spark2 is +10 % (inside outlier_pct 15), spark3 -50 %.
    eagle: tok/s 100, 100, 96 (-4 %), acceptance 2.0, 2.0, 3.0: spark3 is +50 % on acceptance alone.
    none: two nodes cannot say which one is off (NULL)."""
    r = Results()
    r.run("f")
    nodes = {"mtp": {"spark1": (100, 50), "spark2": (110, 50), "spark3": (50, 25)},
             "eagle": {"spark1": (100, 50), "spark2": (100, 50), "spark3": (96, 32)},
             "none": {"spark1": (100, 50), "spark2": (60, 30)}}
    for configuration, tokens in nodes.items():
        for i, (node, (n, verify)) in enumerate(tokens.items()):
            target = f"{node}.{configuration}"
            r.step("f", 1, target, target_index=i, node=node)
            r.request("f", 1, target, target, sent_ms=1000, frames=[(1500, n)], spec_verify_ct=verify)
    rows = {(x["configuration"], x["node"]): x for x in query(r.write(tmp_path), "fleet_nodes")}
    assert {k: (x["tok_s"], x["tok_s_vs_fleet_pct"], x["outlier"]) for k, x in rows.items() if k[0] == "mtp"} == {
        ("mtp", "spark1"): (100.0, 0.0, False), ("mtp", "spark2"): (110.0, 10.0, False),
        ("mtp", "spark3"): (50.0, -50.0, True)}
    assert [(x["accept_len_vs_fleet_pct"], x["outlier"]) for k, x in sorted(rows.items()) if k[0] == "eagle"] == [
        (0.0, False), (0.0, False), (50.0, True)]
    assert {x["peers"] for x in rows.values()} == {3, 2}
    assert [x["outlier"] for k, x in rows.items() if k[0] == "none"] == [None, None]
    assert [x["outlier"] for x in query(tmp_path, "fleet_nodes", outlier_pct=60)] == [False] * 6 + [None] * 2
