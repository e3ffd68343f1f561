"""Trace files read as published (the shipped Azure excerpt, Mooncake lines, loadgen's own formats), the replay's
selection (window, seeded thinning), its config and the prompts built for its rows. The replay against an
emulator: tests/e2e/test_workloads_end_to_end.py."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from loadgen.client.protocol import adapter_for
from loadgen.client.protocol.base import SamplingSpec
from loadgen.client.protocol.openai import OpenAIOptions
from loadgen.config import parse_experiment
from loadgen.errors import ConfigError
from loadgen.prompts.length import LengthFit, LengthModel, prompt_texts
from loadgen.prompts.replay import replay_prompts
from loadgen.prompts.traces import read_trace

REPO = Path(__file__).parents[2]
EXCERPT = REPO / "jobs/experiments/traces/azure-llm-conv-2023-excerpt.csv"
# The first lines of kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl, as published
MOONCAKE = """{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}
{"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]}
{"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41]}
"""  # noqa: E501
TARGET = {"name": "t", "url": "http://127.0.0.1:9"}


def test_the_shipped_azure_excerpt_reads_as_published():
    trace = read_trace(EXCERPT, None, "k")
    assert trace.format == "azure" and trace.name == "azure-llm-conv-2023-excerpt" and len(trace.rows) == 300
    lines = EXCERPT.read_text().splitlines()
    assert lines[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    first, second, last = trace.rows[0], trace.rows[1], trace.rows[-1]
    assert (first.t_s, first.input_tokens, first.output_tokens) == (0.0, 374, 44)      # 18:15:46.6805900
    assert (second.input_tokens, second.output_tokens) == (396, 109)                  # 18:15:50.9951690
    assert second.t_s == pytest.approx(4.314579, abs=1e-9)                             # microseconds kept exactly
    assert last.index == 299 and last.t_s == pytest.approx(84.029102, abs=1e-6)       # 18:17:10.7096920


def test_mooncake_lines_ms_timestamps_and_a_gzipped_copy(tmp_path):
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text(MOONCAKE)
    zipped = tmp_path / "conv.jsonl.gz"
    zipped.write_bytes(gzip.compress(MOONCAKE.encode()))
    for p in (path, zipped):
        trace = read_trace(p, None, "k")
        assert trace.format == "mooncake"
        assert [(r.t_s, r.input_tokens, r.output_tokens) for r in trace.rows] == [
            (0.0, 6758, 500), (0.0, 7322, 490), (3.052, 7234, 794)]


def test_loadgen_jsonl_and_csv_with_text_and_sessions(tmp_path):
    rows = [{"timestamp_s": 2.5, "input_tokens": 900, "output_tokens": 20, "session_id": 7},
            {"timestamp_s": 1.0, "output_tokens": 5, "text": "Hello there", "session_id": "a"}]
    jsonl = tmp_path / "own.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    csv = tmp_path / "own.csv"
    csv.write_text("timestamp_s,input_tokens,output_tokens,session_id,text\n2.5,900,20,7,\n1.0,,5,a,Hello there\n")
    for path, fmt in ((jsonl, "jsonl"), (csv, "csv")):
        trace = read_trace(path, None, "k")
        assert trace.format == fmt
        # sorted by time, the file's row index kept, times from the first row
        assert [(r.index, r.t_s, r.input_tokens, r.output_tokens, r.session_id, r.text) for r in trace.rows] == [
            (1, 0.0, None, 5, "a", "Hello there"), (0, 1.5, 900, 20, "7", None)]


@pytest.mark.parametrize("text,fmt,problem", [
    ('{"timestamp": 0, "input_length": 10}\n', None, 'line 1: has no "output_length"'),
    ('{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": "x", "input_length": 1, '
     '"output_length": 1}\n', None, "line 2: timestamp 'x' is not a number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1.5,3\n", None,
     "line 2: ContextTokens '1.5' is not a whole number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,3\n", None, "TIMESTAMP 'yesterday' is not a date"),
    ('{"timestamp_s": 0, "input_tokens": 3, "output_tokens": 2, "colour": 1}\n', None, "unknown key 'colour'"),
    ('{"timestamp_s": 0, "output_tokens": 2, "text": "hi"}\n', "mooncake", 'has no "timestamp"'),
    ("a,b,c\n1,2,3\n", None, "is not a trace loadgen knows"),
])
def test_a_bad_trace_is_one_line_with_the_line_number(tmp_path, text, fmt, problem):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match="load.trace.path") as err:
        read_trace(path, fmt, "load.trace.path")
    assert problem in str(err.value) and "\n" not in str(err.value)


def test_selection_is_a_window_then_a_seeded_thinning():
    trace = read_trace(EXCERPT, None, "k")
    part = trace.select(10.0, 20.0, 1.0, 0)
    inside = [r for r in trace.rows if 10.0 <= r.t_s < 30.0]
    assert [r.index for r in part.rows] == [r.index for r in inside]
    assert part.rows[0].t_s == 0.0 and part.rows[-1].t_s == pytest.approx(inside[-1].t_s - inside[0].t_s)
    one, again, other = (trace.select(0.0, None, 0.3, s) for s in (5, 5, 6))
    assert [r.index for r in one.rows] == [r.index for r in again.rows] != [r.index for r in other.rows]
    # each row kept with probability 0.3: 300 draws, a binomial count within 5 standard deviations
    assert abs(len(one.rows) - 90) <= 5 * math.sqrt(300 * 0.3 * 0.7)


def _exp(load: dict, prompts: dict | None = None) -> dict:
    return {"load": load, "prompts": prompts or {}, "targets": [TARGET]}


def test_trace_mode_config_levels_and_prompts():
    load = {"mode": "trace", "max_in_flight": 64,
            "trace": {"path": str(EXCERPT), "speedup": [1, 10], "sample": 0.5, "seed": 3}}
    exp = parse_experiment(_exp(load), REPO)
    trace = exp.load.trace
    assert trace is not None and trace.speedups == (1.0, 10.0) and trace.max_in_flight == 64
    assert exp.load.warmup_s == 0.0                           # a replay measures from its first row by default
    rows = trace.trace.rows
    assert trace.rate(10) == pytest.approx(10 * len(rows) / rows[-1].t_s, rel=5e-4)
    assert exp.prompts.ignore_eos is True                     # output lengths are met: ignore_eos by default
    assert exp.prompts.input_tokens is not None
    lengths = [r.input_tokens for r in rows]
    assert exp.prompts.input_tokens.max == max(lengths) and exp.prompts.input_tokens.min == max(min(lengths), 400)
    from loadgen.plan.steps import grid_steps
    steps = grid_steps(exp, exp.targets)
    assert [(s.loads[0].speedup, s.loads[0].rate, s.loads[0].concurrency) for s in steps] == [
        (1.0, trace.rate(1), 64), (10.0, trace.rate(10), 64)]


@pytest.mark.parametrize("load,prompts,problem", [
    ({"mode": "trace"}, None, "load.trace: is required in trace mode"),
    ({"mode": "trace", "concurrency": [1], "trace": {"path": "x"}}, None, "load.concurrency: does not apply"),
    ({"mode": "trace", "trace": {"path": "nope.jsonl"}}, None, "load.trace.path: no such file"),
    ({"mode": "trace", "trace": {"path": str(EXCERPT), "speedup": 0}}, None, "load.trace.speedup: must be a number"),
    ({"mode": "trace", "trace": {"path": str(EXCERPT), "speedup": [2, 2]}}, None, "must list distinct speedups"),
    ({"mode": "trace", "trace": {"path": str(EXCERPT), "sample": 1.5}}, None, "load.trace.sample: must be a share"),
    ({"mode": "trace", "trace": {"path": str(EXCERPT), "format": "parquet"}}, None, "unknown format 'parquet'"),
    ({"mode": "trace", "trace": {"path": str(EXCERPT), "start_s": 500}}, None, "selects no row"),
    ({"mode": "trace", "trace": {"path": str(EXCERPT), "speedup": 10}, "warmup_s": 9}, None,
     "load.warmup_s: 9 s is as long as the whole replay at speedup 10"),
    ({"mode": "trace", "trace": {"path": str(EXCERPT)}, "warmup_s": 1, "warmup_requests": 5}, None,
     "load.warmup_requests: cannot be combined with warmup_s"),
    ({"mode": "trace", "trace": {"path": str(EXCERPT)}}, {"max_new_tokens": 64}, "prompts.max_new_tokens: is set by"),
    ({"mode": "open", "rates": [1], "trace": {"path": str(EXCERPT)}}, None, "load.trace: only applies to trace"),
    ({"mode": "trace", "rates": [1], "trace": {"path": str(EXCERPT)}}, None, "load.rates: only applies to open"),
])
def test_bad_trace_config_is_one_line(load, prompts, problem):
    with pytest.raises(ConfigError) as err:
        parse_experiment(_exp(load, prompts), REPO)
    assert problem in str(err.value)


def test_replay_prompts_meet_each_rows_lengths(tmp_path):
    """With a fit that is the server's count (the emulator's: 4 characters a token), each row's prompt is built to
    its own input length (within the mix's 1%, or cut for a row below the shortest whole task) and asks for its
    own output length; a row with text is sent as it is."""
    lines = ["timestamp_s,input_tokens,output_tokens,session_id,text", "0,2000,7,s1,", "0.5,150,3,s1,",
             "1,,9,,Translate this sentence please.", "2,700,1,,"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    exp = parse_experiment(_exp({"mode": "trace", "trace": {"path": str(path)}}), REPO)
    assert exp.load.trace is not None
    fit = LengthModel((("*", LengthFit(0.0, 0.25)),), counted=True)
    [prompts] = replay_prompts(exp.prompts, [fit], exp.load.trace.trace)
    assert [p.prompt_id for p in prompts] == ["t#0", "t#1", "t#2", "t#3"]
    assert [(p.max_new_tokens, p.session_id) for p in prompts] == [(7, "s1"), (3, "s1"), (9, None), (1, None)]
    assert [p.target_tokens for p in prompts] == [2000, 150, None, 700]
    tokens = [fit.fit(p.kind).estimate(prompt_texts(p)) for p in prompts]
    assert tokens[0] == pytest.approx(2000, rel=0.01) and tokens[3] == pytest.approx(700, rel=0.01)
    assert 0.95 * 150 <= tokens[1] <= 150   # cut at a word break below its length in characters
    assert prompts[2].text == "Translate this sentence please." and prompts[2].kind == "trace"
    chat = parse_experiment(_exp({"mode": "trace", "trace": {"path": str(path)}}, {"chat": True}), REPO)
    assert chat.load.trace is not None
    [messages] = replay_prompts(chat.prompts, [fit], chat.load.trace.trace)
    assert messages[2].messages == ({"role": "user", "content": "Translate this sentence please."},)
    assert fit.fit("*").estimate(prompt_texts(messages[0])) == pytest.approx(2000, rel=0.01)


def test_a_trace_rows_request_asks_its_length_and_shares_no_prefix(tmp_path):
    """A row that names a session is recorded with it, but its prompt shares nothing with the session's other
    rows, so its request still opts out of the server's prefix reuse (llama.cpp cache_prompt, vLLM cache_salt),
    unlike a conversation's turn; its body asks the row's output length with ignore_eos."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp_s": 0, "input_tokens": 600, "output_tokens": 33, "session_id": "s9"}\n')
    exp = parse_experiment(_exp({"mode": "trace", "trace": {"path": str(path)}}), REPO)
    assert exp.load.trace is not None
    [[prompt]] = replay_prompts(exp.prompts, [None], exp.load.trace.trace)
    assert prompt.session_id == "s9" and not prompt.reuses_prefix
    sampling = SamplingSpec(exp.prompts.max_new_tokens, exp.prompts.ignore_eos, exp.prompts.temperature)
    adapter = adapter_for("openai-completions", OpenAIOptions("m", cache_prompt=False, cache_salt=True))
    body = json.loads(adapter.body("r1", prompt, sampling.for_prompt(prompt)))
    assert (body["max_tokens"], body["ignore_eos"], body["cache_prompt"], body["cache_salt"]) == (33, True, False, "r1")
