"""Conversations and shared contexts against the emulator, which records what it was sent (GET /emulator/requests):
every later turn is the previous prompt with the server's whole answer and the next message appended, the cached
tokens loadgen records are the ones the server reported, a closed-loop level counts users (sessions in flight) and
an open-loop rate counts session arrivals."""

from __future__ import annotations

import json
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.prompts.conversation import transcript_turn
from loadgen.prompts.mix import PromptMix
from loadgen.prompts.shared_prefix import CLOSING
from loadgen.results import analysis

USERS = 3
PROMPTS = {"seed": 4, "max_new_tokens": 16, "ignore_eos": True,
           "sources": [{"kind": "conversation", "turns": {"min": 2, "max": 4},
                        "think_time_s": {"min": 0.05, "max": 0.3}, "tasks": ["code", "prose", "math"],
                        "shared_prefix_tokens": 128, "prefixes": 2}]}
EMULATOR = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "4",
            "--time-scale", "20")


def _truth(url: str) -> dict[str, dict]:
    with urllib.request.urlopen(f"{url}/emulator/requests") as resp:
        return {r["rid"]: r for r in json.load(resp)["requests"]}


def _rows(outcome, sql: str) -> list[dict]:
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _run(ray_local, emulator_factory, tmp_path_factory, load: dict):
    with emulator_factory(*EMULATOR) as url:
        exp = parse_experiment({"run": {"name": "convo"}, "load": load, "prompts": PROMPTS,
                                "targets": [{"name": "mtp", "url": url}]}, Path("."))
        outcome = run_experiment(exp, str(tmp_path_factory.mktemp("results")), log=lambda *a: None)
        return outcome, _truth(url), exp


@pytest.fixture(scope="module")
def closed(ray_local, emulator_factory, tmp_path_factory):
    return _run(ray_local, emulator_factory, tmp_path_factory,
                {"concurrency": [USERS], "requests": 40, "realtime_priority": False})


def _sessions(outcome) -> dict[str, list[dict]]:
    sessions = defaultdict(list)
    for r in _rows(outcome, "SELECT * FROM requests ORDER BY session_id, turn"):
        sessions[r["session_id"]].append(r)
    return sessions


def test_every_turn_is_the_history_with_the_servers_answer_and_the_next_message(closed):
    outcome, truth, exp = closed
    assert outcome.status == "complete", outcome.reason
    openings = {p.prompt_id: p for p in PromptMix(exp.prompts).take(200)}
    sessions = _sessions(outcome)
    cut = 0
    for session, turns in sessions.items():
        assert [t["turn"] for t in turns] == list(range(1, len(turns) + 1)), session
        assert all(t["status"] == "ok" for t in turns)
        opening = openings[turns[0]["prompt_id"].removesuffix("@1")]
        conversation = opening.conversation
        cut += len(turns) < conversation.turns     # the request quota ends at most one session per user
        assert len(turns) <= conversation.turns
        seen = [truth[t["request_id"]] for t in turns]
        assert seen[0]["prompt_chars"] == len(opening.text)
        for k in range(1, len(turns)):
            before, now = seen[k - 1], seen[k]
            follow_up = conversation.follow_ups[k - 1]
            # the whole answer the server produced, then the next message: nothing lost, nothing added
            assert now["prompt_chars"] == (before["prompt_chars"] + before["output_chars"] + 2
                                           + len(transcript_turn(follow_up)))
            # and the server had all of it cached: the previous prompt and its answer, in its 4-character tokens
            assert now["cached_tokens"] == (before["prompt_chars"] + before["output_chars"]) // 4
        for t, s in zip(turns, seen):
            assert t["cached_tokens"] == s["cached_tokens"] and t["prompt_tokens"] == s["prompt_tokens"]
            assert t["shared_prefix"] == opening.shared_prefix and t["prompt_kind"] == opening.kind
    assert sum(len(t) for t in sessions.values()) == 40 and cut <= USERS


def test_a_first_turn_hits_its_shared_context_once_the_server_holds_it(closed):
    outcome, truth, exp = closed
    openings = {p.prompt_id: p for p in PromptMix(exp.prompts).take(200)}
    done_at: dict[str, int] = {}            # when a request with each context first finished
    for r in sorted(_rows(outcome, "SELECT * FROM requests"), key=lambda r: r["t_sent_ns"]):
        if r["turn"] == 1:
            opening = openings[r["prompt_id"].removesuffix("@1")]
            context = len(opening.text.split(CLOSING, 1)[0] + CLOSING)
            if done_at.get(r["shared_prefix"], r["t_sent_ns"]) < r["t_sent_ns"]:
                assert truth[r["request_id"]]["cached_tokens"] >= context // 4
        done_at[r["shared_prefix"]] = min(done_at.get(r["shared_prefix"], r["t_done_ns"]), r["t_done_ns"])


def test_a_closed_loop_level_counts_users(closed):
    """At most C sessions at a time (each from its first send to its last answer), and C reached; while users think
    the level holds fewer requests, so the client's in-flight target is not C."""
    outcome, _, _ = closed
    events = []
    for turns in _sessions(outcome).values():
        events += [(turns[0]["t_sent_ns"], 1), (turns[-1]["t_done_ns"], -1)]
    live, most = 0, 0
    for _, step in sorted(events):
        live += step
        most = max(most, live)
    assert most == USERS
    samples = _rows(outcome, "SELECT target_in_flight FROM client_samples")
    assert samples and all(s["target_in_flight"] is None for s in samples)


def test_queries_by_turn_and_workload_check(closed):
    outcome, _, _ = closed
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    by_turn = analysis.run_query(con, "by_turn").to_pylist()
    assert [r["turn"] for r in by_turn] == sorted(r["turn"] for r in by_turn) and by_turn[0]["turn"] == 1
    assert all(r["cached_pct"] > 90 and r["hit_pct"] == 100 for r in by_turn if r["turn"] >= 2)
    assert by_turn[0]["cached_pct"] < 60                         # a first turn has only the shared context cached
    assert sum(r["requests"] for r in by_turn) == 40
    [check] = analysis.run_query(con, "workload_check").to_pylist()
    assert check["flags"] is None and check["cached_tokens"] is None   # planned hits are not unplanned reuse
    [prefix] = analysis.run_query(con, "prefix_cache").to_pylist()
    assert prefix["prefixes"] == 2 and prefix["hit_pct"] > 0


def test_an_open_loop_rate_counts_session_arrivals(ray_local, emulator_factory, tmp_path_factory):
    outcome, truth, _ = _run(ray_local, emulator_factory, tmp_path_factory,
                             # a window long enough for sessions to reach their later turns inside it, even when a
                             # loaded machine starts the worker seconds late (its first arrivals then go at once)
                             {"mode": "open", "rates": [4], "arrival": "constant", "warmup_s": 0.5, "measure_s": 8.0,
                              "drain_timeout_s": 30.0, "realtime_priority": False})
    assert outcome.status == "complete", outcome.reason
    rows = _rows(outcome, "SELECT * FROM requests ORDER BY t_scheduled_ns")
    firsts = [r for r in rows if r["turn"] == 1]
    gaps = {b["t_scheduled_ns"] - a["t_scheduled_ns"] for a, b in zip(firsts, firsts[1:])}
    assert gaps == {250_000_000}                                  # sessions arrive on the schedule, 4 a second
    later = [r for r in rows if r["turn"] > 1 and r["status"] == "ok"]
    assert later and all(truth[r["request_id"]]["cached_tokens"] == r["cached_tokens"] for r in later)
    assert any((r["t_scheduled_ns"] - firsts[0]["t_scheduled_ns"]) % 250_000_000 for r in later)   # off the grid
