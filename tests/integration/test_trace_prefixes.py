"""Mooncake traces that share prefixes: each row's prompt built from its hash ids' blocks, so rows that share leading
ids share that text in the server's tokens; checked on the text itself, then replayed against an emulator whose
prefix cache reports the tokens it reused (its ground truth), against the trace's own reusable prefix per row."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.errors import ConfigError
from loadgen.prompts.length import LengthFit, LengthModel, prompt_texts
from loadgen.prompts.replay import replay_prompts
from loadgen.prompts.traces import BLOCK_TOKENS, read_trace
from loadgen.results import analysis

REPO = Path(__file__).parents[2]
TARGET = {"name": "t", "url": "http://127.0.0.1:9"}
EMULATOR_FIT = LengthModel((("*", LengthFit(0.0, 0.25)),), counted=True)   # the emulator's count: 4 characters
WORDS_FIT = LengthModel((("*", LengthFit(9.0, 0.8, "pieces", 3.9)),), counted=True)   # a tokenizer-like one
EMU = ("--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")


def mooncake_rows(n: int, seed: int, gap_ms: int) -> list[dict]:
    """A Mooncake-like trace: each row takes its first ids from an earlier row (never that row's last, partial
    block, as in Mooncake's own traces) about two times in three, then new ids; its length ends inside its last
    block."""
    rng = random.Random(seed)
    rows: list[dict] = []
    fresh = 0
    for i in range(n):
        parents = [r["hash_ids"] for r in rows if len(r["hash_ids"]) > 1]
        ids = []
        if parents and rng.random() < 0.67:
            parent = rng.choice(parents)
            ids = parent[:rng.randint(1, len(parent) - 1)]
        new = rng.randint(1, 3)
        ids = ids + list(range(fresh, fresh + new))
        fresh += new
        rows.append({"timestamp": i * gap_ms, "input_length": len(ids) * BLOCK_TOKENS - rng.randrange(400),
                     "output_length": 4, "hash_ids": ids})
    return rows


def _write(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "mc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _exp(path: Path, prompts: dict | None = None, speedup: float = 1.0) -> dict:
    return {"load": {"mode": "trace", "trace": {"path": str(path), "speedup": speedup}},
            "prompts": prompts or {}, "targets": [TARGET]}


@pytest.mark.parametrize(("ids", "problem"), [
    ([1, 2, 3], "line 2: hash_ids names 3 blocks of 512 tokens, more than its input_length 1024 holds (2); "
                "give at most 2 ids or a longer input_length"),
    ("7", "line 2: hash_ids '7' is not a list of whole numbers"),
    ([1, 2.5], "line 2: hash_ids [1, 2.5] is not a list of whole numbers"),
])
def test_hash_ids_that_do_not_fit_the_row_are_one_line_before_any_load(tmp_path, ids, problem):
    rows = [{"timestamp": 0, "input_length": 513, "output_length": 1, "hash_ids": [0, 1]},
            {"timestamp": 5, "input_length": 1024, "output_length": 1, "hash_ids": ids}]
    with pytest.raises(ConfigError) as err:
        parse_experiment(_exp(_write(tmp_path, rows)), REPO)
    assert problem in str(err.value) and "\n" not in str(err.value)


def test_the_traces_reusable_prefix_is_its_leading_ids_seen_before(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1500, "output_length": 1, "hash_ids": [0, 1, 2]},
            {"timestamp": 1, "input_length": 1400, "output_length": 1, "hash_ids": [0, 1, 3]},
            {"timestamp": 2, "input_length": 600, "output_length": 1, "hash_ids": [4, 1]},    # 1 is not leading
            {"timestamp": 3, "input_length": 900, "output_length": 1, "hash_ids": [0, 1]}]    # capped at its length
    assert read_trace(_write(tmp_path, rows), None, "k").reusable_tokens() == [0, 1024, 0, 900]


@pytest.mark.parametrize("fit", [EMULATOR_FIT, WORDS_FIT], ids=["characters", "pieces"])
def test_rows_that_share_ids_share_those_blocks_in_the_servers_tokens(tmp_path, fit):
    """Each row is its input length by the fit (within 1%); two rows share exactly the text of their common leading
    blocks (BLOCK_TOKENS each by the fit) and no more than a word beyond; the text is seeded (the same again, another
    with another seed)."""
    rows = mooncake_rows(30, seed=3, gap_ms=1000)
    path = _write(tmp_path, rows)
    exp = parse_experiment(_exp(path, {"seed": 5}), REPO)
    assert exp.load.trace is not None
    [prompts] = replay_prompts(exp.prompts, [fit], exp.load.trace.trace)
    prose = fit.fit("prose")
    texts = [p.text or "" for p in prompts]
    for row, prompt in zip(rows, prompts):
        assert prose.estimate(prompt_texts(prompt)) == pytest.approx(row["input_length"], rel=0.01)
        assert prompt.shared_prefix == f"mc#{row['hash_ids'][0]}" and prompt.reuses_prefix
    for i, a in enumerate(rows):
        for j in range(i):
            b = rows[j]
            common = next((k for k, (x, y) in enumerate(zip(a["hash_ids"], b["hash_ids"])) if x != y),
                          min(len(a["hash_ids"]), len(b["hash_ids"])))
            shared = os.path.commonprefix([texts[i], texts[j]])
            tokens = prose.estimate([shared]) - prose.overhead
            last_whole = min(common, len(b["hash_ids"]) - 1, len(a["hash_ids"]) - 1)   # a last block is cut
            assert last_whole * BLOCK_TOKENS * 0.99 <= tokens <= common * BLOCK_TOKENS * 1.01 + 8
    [again] = replay_prompts(exp.prompts, [fit], exp.load.trace.trace)
    assert [p.text for p in again] == texts
    other = parse_experiment(_exp(path, {"seed": 6}), REPO)
    assert other.load.trace is not None
    [reseeded] = replay_prompts(other.prompts, [fit], other.load.trace.trace)
    assert all(len(os.path.commonprefix([p.text or "", t])) < 40 for p, t in zip(reseeded, texts))


def test_a_chat_row_is_its_blocks_as_one_user_message(tmp_path):
    rows = mooncake_rows(4, seed=1, gap_ms=1000)
    exp = parse_experiment(_exp(_write(tmp_path, rows), {"chat": True}), REPO)
    assert exp.load.trace is not None
    [prompts] = replay_prompts(exp.prompts, [EMULATOR_FIT], exp.load.trace.trace)
    [text] = replay_prompts(parse_experiment(_exp(_write(tmp_path, rows)), REPO).prompts, [EMULATOR_FIT],
                            exp.load.trace.trace)
    assert [p.messages for p in prompts] == [({"role": "user", "content": t.text},) for t in text]


def test_a_replay_reuses_what_the_trace_says_on_the_emulators_prefix_cache(ray_local, emulator_factory, tmp_path):
    """Against the emulator's radix cache (as large as its KV pool: it holds the whole trace), each row's cached
    tokens are its reusable prefix (its leading hash ids x 512) among the rows prefilled before it: at most the
    trace's own (every earlier row), at least the one among the rows whose first token had come back when it was
    sent (a loaded machine may send rows together), within a few tokens of a block's sizing; the replay's hit rate
    is the trace's own within 5%; prefix_cache reads the same hits, and their TTFT below the misses'."""
    rows = mooncake_rows(36, seed=11, gap_ms=600)
    path = _write(tmp_path, rows)
    truth = read_trace(path, None, "k").reusable_tokens()
    with emulator_factory(*EMU, "--stream-interval", "4", "--time-scale", "20") as url:   # prefills in ~250 ms
        exp = _exp(path, {"seed": 2})
        exp["load"].update(drain_timeout_s=60.0, warmup_requests=0)
        exp.update(run={"name": "mooncake"}, targets=[{"name": "emu", "url": url}])
        outcome = run_experiment(parse_experiment(exp, REPO), str(tmp_path / "results"), log=lambda *a: None)
    assert outcome.status == "complete", outcome.reason
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    got = {int(r["prompt_id"].removeprefix("mc#")): r for r in con.sql(
        "SELECT prompt_id, status, prompt_tokens, cached_tokens, t_sent_ns, t_first_token_ns FROM requests"
    ).to_arrow_table().to_pylist()}
    assert sorted(got) == list(range(len(rows))) and all(r["status"] == "ok" for r in got.values())
    for i, (row, most) in enumerate(zip(rows, truth)):
        r = got[i]
        held = {h for j in range(len(rows)) if got[j]["t_first_token_ns"] < r["t_sent_ns"] for h in rows[j]["hash_ids"]}
        lead = next((k for k, h in enumerate(row["hash_ids"]) if h not in held), len(row["hash_ids"]))
        least = min(lead * BLOCK_TOKENS, row["input_length"])
        assert r["prompt_tokens"] == pytest.approx(row["input_length"], rel=0.01)
        assert least * 0.985 - 2 <= r["cached_tokens"] <= most + 8, (i, r, least, most)
    trace_rate = sum(truth) / sum(r["input_length"] for r in rows)
    replay_rate = sum(r["cached_tokens"] for r in got.values()) / sum(r["prompt_tokens"] for r in got.values())
    assert trace_rate > 0.3 and replay_rate == pytest.approx(trace_rate, rel=0.05)
    [prefix] = analysis.run_query(con, "prefix_cache").to_pylist()
    assert prefix["source"] == "mc" and prefix["requests"] == len(rows)
    assert prefix["cached_pct"] == pytest.approx(100 * replay_rate, abs=0.1)
    hits = sum(r["cached_tokens"] > 0 for r in got.values())
    assert prefix["hit_pct"] == pytest.approx(100 * hits / len(rows), abs=0.1)
    assert prefix["ttft_hit_vs_miss"] < 1
    print(f"trace hit rate {trace_rate:.4f}, replay {replay_rate:.4f}; TTFT hit/miss {prefix['ttft_hit_vs_miss']}")
