"""The fault matrix against the emulator's fault injection: every request the server saw has exactly one row,
classified as the server's own log says it should be, with the server's status and message; partial streams
keep their frames; a hung server never hangs the job; the error budget stops a run with its rows intact."""

from __future__ import annotations

from collections import Counter

import pytest

from faultkit import EMU, rows, run, truth

MAX_TOKENS = 24
STALL_TIMEOUT_S = 1.0


def expected_status(t: dict) -> str:
    """What a correct client concludes from the server's record of what it did to the request."""
    f = t["fault"]
    if f is None or not f["applied"]:
        return "ok"
    if f["type"] == "no_done":   # a complete stream that only lacks [DONE] is fine; a truncated one is not
        return "ok" if t["finish_reason"] in ("stop", "length") else "stream_broken"
    if f["type"] == "stall":
        return "timeout" if f["ms"] / 1e3 > STALL_TIMEOUT_S else "ok"
    return {"close": "stream_broken", "http": "http_error", "malformed": "malformed_frame",
            "abort": "server_abort", "slow_first_token": "ok"}[f["type"]]


MATRIX = {
    # close fin, http 503, stall past the stall timeout, malformed, abort, truncated no-done: one of them each
    "mixed": ("--fault-close-after", "3", "--fault-http", "503", "--fault-stall-ms", "3000", "--fault-malformed",
              "--fault-abort", "--fault-no-done", "--fault-frame", "3", "--fault-rate", "0.6", "--fault-seed", "7"),
    # RST instead of FIN, 429, complete streams without [DONE], a short stall and a slow first token (both ok)
    "benign-and-rst": ("--fault-close-after", "2", "--fault-close-mode", "rst", "--fault-http", "429",
                       "--fault-no-done", "--fault-frame", "1000000", "--fault-slow-first-token-ms", "300",
                       "--fault-rate", "0.6", "--fault-seed", "3"),
    "stall-short": ("--fault-stall-ms", "300", "--fault-frame", "3", "--fault-rate", "0.5", "--fault-seed", "2"),
}


@pytest.fixture(scope="module", params=sorted(MATRIX))
def faulted_run(request, ray_local, emulator_factory, tmp_path_factory):
    with emulator_factory(*EMU, *MATRIX[request.param]) as url:
        result = run(url, tmp_path_factory.mktemp("results"), requests=48, max_tokens=MAX_TOKENS,
                     stall_timeout_s=STALL_TIMEOUT_S)
        yield request.param, result, truth(url)


def test_one_row_per_request_the_server_saw_and_no_retries(faulted_run):
    _, result, seen = faulted_run
    got = rows(result)
    rids = [t["rid"] for t in seen]
    assert len(rids) == len(set(rids)) == 48          # each measured request reached the server exactly once
    assert sorted(r["request_id"] for r in got) == sorted(rids)


def test_classification_counts_equal_the_servers_log(faulted_run):
    name, result, seen = faulted_run
    got = {r["request_id"]: r for r in rows(result)}
    want = {t["rid"]: expected_status(t) for t in seen}
    wrong = [(t, got[t["rid"]]["status"], got[t["rid"]]["error"])
             for t in seen if got[t["rid"]]["status"] != want[t["rid"]]]
    assert not wrong, wrong
    assert Counter(r["status"] for r in got.values()) == Counter(want.values())
    faulted = Counter(t["fault"]["type"] for t in seen if t["fault"] and t["fault"]["applied"])
    assert len(faulted) >= (6 if name == "mixed" else 4 if name == "benign-and-rst" else 1), faulted
    # never `ok` for a request the server says it broke
    broken = {t["rid"] for t in seen if expected_status(t) != "ok"}
    assert not [rid for rid in broken if got[rid]["status"] == "ok"]


def test_server_status_and_message_are_kept(faulted_run):
    _, result, seen = faulted_run
    got = {r["request_id"]: r for r in rows(result)}
    for t in seen:
        f, r = t["fault"], got[t["rid"]]
        if not f or not f["applied"]:
            continue
        if f["type"] == "http":
            assert r["http_status"] == f["status"] and t["id"] in r["error"], r
        if f["type"] == "abort":   # SGLang's abort message and status code, from finish_reason
            assert r["http_status"] == 503 and t["id"] in r["error"] and r["finish_reason"] == "abort", r
        if f["type"] == "stall" and f["ms"] / 1e3 > STALL_TIMEOUT_S:
            assert "stall timeout" in r["error"]
        if f["type"] == "close":
            assert "mid-stream" in r["error"] or "before a response" in r["error"], r


def test_partial_streams_keep_their_frames_and_timings(faulted_run):
    name, result, seen = faulted_run
    frames = {r["request_id"]: r for r in rows(result, "SELECT request_id, count(*) AS n, sum(tokens) AS tokens "
                                               "FROM frames GROUP BY request_id")}
    got = {r["request_id"]: r for r in rows(result)}
    checked = 0
    for t in seen:
        r, f = got[t["rid"]], t["fault"]
        if r["status"] in ("stream_broken", "server_abort", "timeout") and f and f["at"] >= 2:
            # the frames that arrived before the fault are kept, with their timing; the server may have
            # generated more than it sent, and a RST may discard what the kernel had not yet handed over
            kept = frames[t["rid"]]
            assert r["num_frames"] == kept["n"] and r["completion_tokens"] == kept["tokens"], r
            assert 0 < kept["tokens"] <= t["completion_tokens"], (r, t)
            if f.get("mode") != "rst":
                assert kept["n"] >= min(f["at"], 3) - (f["type"] == "abort"), (r, t)
            assert r["t_sent_ns"] < r["t_first_token_ns"] <= r["t_last_token_ns"] <= r["t_done_ns"]
            checked += 1
    assert checked or name == "stall-short"   # a short stall breaks nothing


def test_failed_tokens_reported_separately(faulted_run):
    name, result, seen = faulted_run
    from loadgen.results import analysis
    con = analysis.open_results(result.results_dir, [result.run_id])
    table = {r["status"]: r for r in analysis.run_query(con, "failed_partial_tokens").to_pylist()}
    server: Counter = Counter()
    client: Counter = Counter()
    for r in rows(result):
        client[r["status"]] += r["completion_tokens"] or 0
    status_of = {r["request_id"]: r["status"] for r in rows(result)}
    for t in seen:
        server[status_of[t["rid"]]] += t["completion_tokens"]
    assert set(table) == {s for s in client if s != "ok"}
    for status, row in table.items():
        assert row["delivered_tokens"] == client[status] <= server[status], (status, row)
        if name == "mixed" and status == "server_abort":   # the abort frame carries the final count
            assert row["delivered_tokens"] == server[status], (status, row)
    assert sum(r["delivered_tokens"] for r in table.values()) > 0 or name == "stall-short"


def _step_s(result) -> float:
    """The run's one step, start to end, from its own row: what a timeout bounds (bring-up is not; on a busy
    machine building the prompt pool alone took 18 s)."""
    [step] = rows(result, "SELECT (t_end_ns - t_start_ns) / 1e9 AS s FROM steps")
    return step["s"]


def test_hung_server_never_hangs_the_job(ray_local, emulator_factory, tmp_path):
    """Every stream stalls for 10 minutes: the stall timeout cuts each, the step ends on time, the log says so."""
    log: list[str] = []
    with emulator_factory(*EMU, "--fault-stall-ms", "600000", "--fault-rate", "1", "--fault-frame", "2") as url:
        result = run(url, tmp_path, log, concurrency=(4,), requests=8, stall_timeout_s=1.0)
    assert _step_s(result) < 20   # two rounds of 1 s stall timeouts, not the 10-minute stall (bring-up not counted)
    assert Counter(r["status"] for r in rows(result)) == {"timeout": 8}
    assert any("done in" in line and "8 timeout" in line for line in log), log


def test_total_timeout_cuts_a_slow_but_live_stream(ray_local, emulator_factory, tmp_path):
    """Frames keep coming (no stall), but the request takes longer than request_timeout_s."""
    log: list[str] = []
    with emulator_factory("--model-path", "m", "--speculative-algorithm", "NONE", "--time-scale", "1") as url:
        result = run(url, tmp_path, log, concurrency=(2,), requests=2, max_tokens=4000, stall_timeout_s=1.0,
                     request_timeout_s=2.0)
    got = rows(result)
    assert _step_s(result) < 20 and [r["status"] for r in got] == ["timeout", "timeout"]   # not 4000 tokens' time
    assert all("request timeout" in r["error"] and r["num_frames"] > 5 for r in got), got


def test_error_budget_stops_the_run_with_its_rows_intact(ray_local, emulator_factory, tmp_path):
    log: list[str] = []
    with emulator_factory(*EMU, "--fault-http", "503", "--fault-rate", "1") as url:
        result = run(url, tmp_path, log, concurrency=(4, 8), requests=20000, error_budget=5)
        seen = truth(url)
    assert result.status == "incomplete" and "error budget exceeded" in result.reason, result
    got = rows(result)
    by_rid = {r["request_id"]: r for r in got}
    assert len(seen) < 20000 and len(by_rid) == len(got) and {t["rid"] for t in seen} <= set(by_rid)
    statuses = Counter(by_rid[t["rid"]]["status"] for t in seen)   # in flight when the budget ran out: cut
    assert set(statuses) <= {"http_error", "cancelled"} and statuses["http_error"] > 5, statuses
    # the only rows the server never saw: requests cut while connecting when the budget stopped the step
    assert {r["status"] for rid, r in by_rid.items() if rid not in {t["rid"] for t in seen}} <= {"cancelled"}
    [step] = rows(result, "SELECT status, status_reason FROM steps")   # the second level never ran
    assert step["status"] == "incomplete" and "http_error" in step["status_reason"]
    [run_row] = rows(result, "SELECT status, status_reason FROM runs")
    assert run_row["status"] == "incomplete" and "error budget exceeded" in run_row["status_reason"]


def test_no_error_budget_means_errors_never_stop_the_run(ray_local, emulator_factory, tmp_path):
    with emulator_factory(*EMU, "--fault-http", "503", "--fault-rate", "1") as url:
        result = run(url, tmp_path, concurrency=(2, 4), requests=20)
    assert result.status == "complete", result
    assert Counter(r["status"] for r in rows(result)) == {"http_error": 40}
