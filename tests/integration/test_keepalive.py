"""The kept-alive race, end to end: a server that closes a kept-alive connection just as a request goes out on it
never read that request, and loadgen sends it again, once, on a new connection (loadgen.client.http_stream,
docs/client.md). The emulator forces the race on every reuse past N requests (--fault-keepalive-requests) and
counts each request it dropped that way: the ground truth for the `resent` column and client_health's count.
A failure after the server started answering (a mid-stream close) stays a failure."""

from __future__ import annotations

from collections import Counter

import pytest

from faultkit import EMU, ledger, rows, run
from loadgen.results import analysis

REQUESTS = 60


@pytest.mark.parametrize("mode", ["fin", "rst"])
def test_every_request_dropped_unread_is_resent_once_and_ok(ray_local, emulator_factory, tmp_path, mode):
    with emulator_factory(*EMU, "--fault-keepalive-requests", "3", "--fault-close-mode", mode) as url:
        result = run(url, tmp_path, concurrency=(4,), requests=REQUESTS)
        seen = ledger(url)
    got = rows(result)
    assert result.status == "complete" and Counter(r["status"] for r in got) == {"ok": REQUESTS}
    resent = sum(r["resent"] for r in got)
    assert resent == seen["keepalive_closed"] > 0   # each drop was resent, nothing else was
    rids = [t["rid"] for t in seen["requests"]]     # the server read each request exactly once
    assert sorted(rids) == sorted(r["request_id"] for r in got) and len(set(rids)) == REQUESTS
    con = analysis.open_results(result.results_dir, [result.run_id])
    [health] = analysis.run_query(con, "client_health", {}).to_pylist()
    assert health["resent"] == resent


def test_a_failure_after_the_server_started_answering_is_not_resent(ray_local, emulator_factory, tmp_path):
    """Mid-stream closes (after 2 frames) on a share of the requests, and the keep-alive drops on every reuse
    past 2: the closed streams are stream_broken and never resent, the dropped requests are resent and ok."""
    with emulator_factory(*EMU, "--fault-keepalive-requests", "2", "--fault-close-after", "2",
                          "--fault-rate", "0.3", "--fault-seed", "5") as url:
        result = run(url, tmp_path, concurrency=(4,), requests=REQUESTS)
        seen = ledger(url)
    got = {r["request_id"]: r for r in rows(result)}
    closed = {t["rid"] for t in seen["requests"] if t["fault"] and t["fault"]["applied"]}
    assert closed and all(got[rid]["status"] == "stream_broken" and "mid-stream" in got[rid]["error"]
                          for rid in closed)
    assert {r["status"] for rid, r in got.items() if rid not in closed} == {"ok"}
    assert sum(r["resent"] for r in got.values()) == seen["keepalive_closed"] > 0
    assert len(seen["requests"]) == REQUESTS   # a mid-stream close was never sent twice
