"""Conversations and a shared context against a real llama.cpp `llama-server` (one slot, the build of
.ci/build-llama-server.sh): its own counts are the truth. Each request's prompt tokens it evaluated (its log's
"prompt eval ... tokens") are the prompt tokens minus the cached ones loadgen recorded (`timings.cache_n`); a later
turn finds the previous turn's prompt and the model's own answer in the cache (the answer as far as the server's
tokenizer splits its text as the model generated it); the next session's first turn finds the shared context; and
the cache shows in the server's prompt time and in loadgen's TTFT."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from llamaserver import LlamaServer, server_log_timings, without_draft_probe
from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis

TURNS, SESSIONS, ANSWER = 3, 2, 12


@pytest.fixture(scope="module")
def run(ray_local, llama_server_bin, tmp_path_factory):
    binary, model = llama_server_bin
    with LlamaServer(binary, model, tmp_path_factory.mktemp("llama") / "server.log", parallel=1) as llama:
        exp = parse_experiment({
            "run": {"name": "llama-convo"},
            "load": {"concurrency": [1], "requests": TURNS * SESSIONS, "request_timeout_s": 600.0,
                     "realtime_priority": False},
            "prompts": {"seed": 2, "max_new_tokens": ANSWER, "ignore_eos": True,
                        "sources": [{"kind": "conversation", "turns": TURNS, "tasks": ["prose"],
                                     "shared_prefix_tokens": 200}]},
            "targets": [{"name": "llama", "url": llama.url}],
        }, Path("."))
        outcome = run_experiment(exp, str(tmp_path_factory.mktemp("results")), log=lambda *a: None)
        logged = server_log_timings(llama.tail_bytes().decode("utf-8", "replace"))
    assert outcome.status == "complete", outcome.reason
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    logged = without_draft_probe(logged, con)
    cur = con.execute("SELECT * FROM requests ORDER BY t_sent_ns")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    return rows, logged, con


def test_cached_tokens_are_the_servers_own(run):
    rows, logged, _ = run
    assert [r["status"] for r in rows] == ["ok"] * TURNS * SESSIONS
    assert len(logged) == len(rows)                        # one slot: the server's tasks in the requests' order
    for row, server in zip(rows, logged):
        assert server["prompt_n"] == row["prompt_tokens"] - row["cached_tokens"], (row["request_id"], server)
        assert server["gen_n"] == row["completion_tokens"] == ANSWER


def test_a_later_turn_finds_the_history_and_the_models_own_answer_cached(run):
    rows, _, _ = run
    sessions = defaultdict(list)
    for r in rows:
        sessions[r["session_id"]].append(r)
    assert len(sessions) == SESSIONS and all([t["turn"] for t in s] == [1, 2, 3] for s in sessions.values())
    answer_shares = []
    for turns in sessions.values():
        for before, now in zip(turns, turns[1:]):
            assert now["cached_tokens"] >= before["prompt_tokens"] - 1, (before, now)   # the whole history
            assert now["prompt_tokens"] > before["prompt_tokens"] + before["completion_tokens"]   # and a new message
            answer_shares.append((now["cached_tokens"] - before["prompt_tokens"]) / before["completion_tokens"])
    # The answer's tokens are cached up to where re-tokenizing the text it sent splits differently from how the model
    # generated it (a tokenizer need not reproduce a generated split): to its end but for the token where it meets
    # the next message, in most turns.
    assert statistics.median(answer_shares) >= (ANSWER - 1) / ANSWER, answer_shares
    first, second = (s[0] for s in sessions.values())
    assert first["cached_tokens"] == 0 and first["shared_prefix"] == second["shared_prefix"] == "conversation[prose]#0"
    assert second["cached_tokens"] >= 150          # the shared context (~200 tokens at ~4 characters a token)


def test_the_cache_shows_in_prompt_time_and_ttft(run):
    rows, logged, con = run
    cold = rows[0]
    hits = [(r, s) for r, s in zip(rows, logged) if r["turn"] > 1]
    cold_ms = logged[0]["prompt_ms"]
    assert statistics.median(s["prompt_ms"] for _, s in hits) < 0.5 * cold_ms
    ttft = {r["request_id"]: (r["t_first_token_ns"] - r["t_sent_ns"]) / 1e6 for r in rows}
    assert statistics.median(ttft[r["request_id"]] for r, _ in hits) < ttft[cold["request_id"]]
    by_turn = {r["turn"]: r for r in analysis.run_query(con, "by_turn").to_pylist()}
    assert by_turn[2]["cached_pct"] > 80 and by_turn[3]["cached_pct"] > 80 and by_turn[1]["cached_pct"] < 60
