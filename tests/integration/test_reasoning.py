"""Reasoning models: the emulator's thinking (its ledger is the truth) read through the client's adapters, the
`reasoning` query on a folder whose answers are worked out by hand, and the thinking controls of an experiment."""

from __future__ import annotations

import asyncio
import json
import tomllib
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import chain_draft_profile, emulator
from loadgen.client.http_stream import Endpoint, ReadLoop, stream_request
from loadgen.client.preflight import ServerControl
from loadgen.client.protocol import adapter_for
from loadgen.client.protocol.base import FrameBuffer, SamplingSpec, StreamState
from loadgen.client.protocol.openai import OpenAIChatAdapter, OpenAIOptions
from loadgen.clock import now_ns
from loadgen.config import TargetConfig
from loadgen.errors import ConfigError, TargetError
from loadgen.prompts import Prompt
from loadgen.prompts.config import parse_prompts_config
from loadgen.results import analysis, answer
from sqlfixtures import Results, ns

THINK = 24          # --reasoning-tokens: <think>, 22 thoughts, </think>
PROFILE = chain_draft_profile("thinker", reasoning=0.85)


def _emulator_flags(tmp_path: Path, *extra: str) -> list[str]:
    profile = tmp_path / "thinker.toml"
    profile.write_text(PROFILE)
    # steps of ~8 ms (gb10 modelled 4x faster): every verify step is its own read of the client's
    return ["--model-path", "m", "--speculative-algorithm", "NEXTN", "--algorithm-profile", str(profile),
            "--time-scale", "4", "--reasoning-tokens", str(THINK), *extra]


def _stream(url: str, prompts: list[Prompt], sampling: SamplingSpec, tag: str = "r"
            ) -> tuple[list[StreamState], FrameBuffer]:
    """Each prompt as one streaming chat request, one after the other, as a worker sends them."""
    adapter = OpenAIChatAdapter(OpenAIOptions(model="m", sglang=True, server="sglang"))
    frames = FrameBuffer()

    async def run() -> list[StreamState]:
        endpoint, reads, states = Endpoint(url), ReadLoop(), []
        for k, prompt in enumerate(prompts):
            state = StreamState(f"{tag}{k}", prompt, "measure", now_ns(), frames)
            await stream_request(endpoint, adapter, state, adapter.body(state.request_id, prompt, sampling),
                                 {}, reads)
            states.append(state)
        endpoint.close_idle()
        return states
    return asyncio.run(run()), frames


def _ledger(url: str) -> dict[str, dict]:
    rows = json.loads(urllib.request.urlopen(url + "/emulator/requests").read())["requests"]
    return {r["rid"]: r for r in rows}


def _phase_tokens(state: StreamState, frames: FrameBuffer) -> tuple[list[int], list[int], list[int]]:
    """The request's frame tokens before its first answer output (the query's split), of the read that brought it,
    and after it; a read of several frames (the client or the server fell behind) leaves out the steps it merged."""
    mine = [(t, n) for rid, t, n in zip(frames.request_id, frames.t_ns, frames.tokens) if rid == state.request_id]
    answer_at = state.t_first_answer_ns
    assert answer_at is not None
    alone = [(t, n) for t, n in mine if sum(1 for u, _ in mine if u == t) == 1]
    return ([n for t, n in alone if t < answer_at], [n for t, n in mine if t == answer_at],
            [n for t, n in alone if t > answer_at])


PROMPT = Prompt("p", "prose", "t", messages=({"role": "user", "content": "Explain speculative decoding."},))
THINKING_OFF = Prompt("q", "prose", "t", messages=PROMPT.messages)


def test_reasoning_parser_counts_match_the_emulator(tmp_path):
    """With SGLang's reasoning parser: the server's reasoning_tokens are the ledger's, the first thought comes
    before the first answer, and the thinking drafts better than the answer (0.85 vs 0.3), as the ledger says."""
    sampling = SamplingSpec(64, ignore_eos=True)
    with emulator(*_emulator_flags(tmp_path, "--reasoning-parser", "qwen3")) as url:
        states, frames = _stream(url, [PROMPT] * 6, sampling)
        off, _ = _stream(url, [THINKING_OFF], SamplingSpec(64, True, 0.0,
                                                           (("chat_template_kwargs", {"enable_thinking": False}),)),
                         tag="off")
        ledger = _ledger(url)
    think_tokens = think_frames = answer_tokens = answer_frames = truth_tokens = truth_steps = 0
    for s in states:
        truth = ledger[s.request_id]
        assert s.status == "ok" and s.completion_tokens == 64
        assert s.reasoning_tokens == truth["reasoning_tokens"] == THINK and s.reasoning_from == "server"
        assert s.t_first_token_ns < s.t_first_answer_ns <= s.t_last_token_ns
        thinking, crossing, answering = _phase_tokens(s, frames)
        before = s.reasoning_cum   # tokens of the reads before the answer's
        assert before <= THINK < before + sum(crossing)   # the read of the first answer output crossed </think>
        think_tokens, think_frames = think_tokens + sum(thinking[1:]), think_frames + len(thinking) - 1
        answer_tokens, answer_frames = answer_tokens + sum(answering), answer_frames + len(answering)
        truth_tokens, truth_steps = truth_tokens + truth["think_verify_tokens"], truth_steps + truth["think_verify_ct"]
    truth_think = truth_tokens / truth_steps
    assert truth_think > 2.5   # p 0.85 over 3 drafts
    assert think_tokens / think_frames == pytest.approx(truth_think, rel=0.15)
    assert answer_tokens / answer_frames < 0.7 * truth_think   # p 0.3: about 1.4 a step
    [o] = off
    assert (o.reasoning_tokens, o.reasoning_from, ledger[o.request_id]["reasoning_tokens"]) == (0, "stream", 0)
    assert o.t_first_answer_ns == o.t_first_token_ns


def test_inline_think_tags_are_counted_from_the_stream(tmp_path):
    """Without a parser the thinking is inline <think>...</think> content and the server says 0: loadgen counts
    the frames read before the answer, short of the ledger's count by the thinking inside the read that crossed
    </think> (one verify step, fewer than its draft tokens, unless a loaded machine merged reads)."""
    with emulator(*_emulator_flags(tmp_path)) as url:
        states, frames = _stream(url, [PROMPT] * 4, SamplingSpec(48, ignore_eos=True))
        ledger = _ledger(url)
    for s in states:
        assert s.reasoning_from == "stream" and s.status == "ok"
        assert s.t_first_answer_ns is not None and s.reasoning_tokens is not None
        _, crossing, _ = _phase_tokens(s, frames)
        assert 0 <= ledger[s.request_id]["reasoning_tokens"] - s.reasoning_tokens < sum(crossing)
        assert s.t_first_token_ns < s.t_first_answer_ns


def test_thinking_cut_by_max_tokens_is_all_reasoning(tmp_path):
    """max_tokens below the thinking: no answer arrives, every token was thinking (counted from the stream)."""
    with emulator(*_emulator_flags(tmp_path)) as url:
        [s], _ = _stream(url, [PROMPT], SamplingSpec(10, ignore_eos=True))
    assert (s.reasoning_tokens, s.t_first_answer_ns, s.completion_tokens) == (10, None, 10)


def test_reasoning_query_by_hand(tmp_path):
    """One thinking request (frames worked out by hand) and one that answers at once."""
    r = Results()
    r.run("run")
    r.step("run", 0, "t")
    # prefill frame, 3 thinking steps (3, 3, 2), then the answer from 1050 ms: 3 (crossed </think>), 4, 4
    r.request("run", 0, "t", "a", sent_ms=1000, spec_verify_ct=6, reasoning_tokens=10, reasoning_from="server",
              t_first_answer_ns=ns(1050),
              frames=[(1010, 1), (1020, 3), (1030, 3), (1040, 2), (1050, 3), (1060, 4), (1070, 4)])
    r.request("run", 0, "t", "b", sent_ms=1000, reasoning_tokens=0, reasoning_from="stream",
              t_first_answer_ns=ns(1005), frames=[(1005, 1), (1015, 2)])
    con = analysis.open_results(r.write(tmp_path))
    [row] = analysis.run_query(con, "reasoning").to_pylist()
    assert (row["requests"], row["thinking"], row["reasoning_tokens"], row["answer_tokens"]) == (2, 1, 10, 10)
    assert (row["ttft_p50_ms"], row["answer_p50_ms"]) == (10, 50)
    assert row["think_accept_len"] == pytest.approx(8 / 3, abs=1e-3)   # prefill frame left out
    assert row["answer_accept_len"] == 4                               # crossing frame left out
    assert row["think_decode_tok_s"] == pytest.approx(8 / 0.030, abs=0.1)
    assert row["answer_decode_tok_s"] == pytest.approx(8 / 0.020, abs=0.1)
    assert answer.reasoning_lines(con) == ["t thinks 10 tokens before a 10-token answer: C=1 TTFT 10 ms, answer "
                                           "50 ms, tokens/frame 2.67 thinking vs 4.00 answering"]


def test_old_results_without_reasoning_columns_still_query(tmp_path):
    """A schema-6 file (no reasoning columns) reads with them NULL: the query has no row for it."""
    r = Results()
    r.run("old", schema_version=6)
    r.step("old", 0, "t")
    r.request("old", 0, "t", "o", sent_ms=1000, frames=[(1010, 2)])
    root = r.write(tmp_path)
    for path in (root / "requests").rglob("*.parquet"):
        table = pq.read_table(path)
        keep = [c for c in table.column_names if c not in ("t_first_answer_ns", "reasoning_tokens", "reasoning_from")]
        pq.write_table(pa.Table.from_arrays([table[c] for c in keep], names=keep), path)
    assert analysis.run_query(analysis.open_results(root), "reasoning").num_rows == 0


def test_extra_body_a_server_refuses_stops_at_preflight(tmp_path):
    """A thinking control the server answers with HTTP 400: one line naming the field and the fix, before any load
    (the emulator, as SGLang's request model, refuses a chat_template_kwargs that is not an object); one it takes
    passes."""
    async def check(url: str, extra: tuple) -> None:
        target = TargetConfig(name="thinker", flavor="openai-chat", url=url, emulator_args=(), node="local",
                              api_key_env=None)
        control = ServerControl(target, url, SamplingSpec(16, True, 0.0, extra), ReadLoop())
        control.configure(OpenAIOptions(model="m", flavor="openai-chat"))
        await control._check_extra_body()

    with emulator(*_emulator_flags(tmp_path)) as url:
        asyncio.run(check(url, (("chat_template_kwargs", {"enable_thinking": False}), ("seed", 3))))
        with pytest.raises(TargetError) as err:
            asyncio.run(check(url, (("seed", 3), ("chat_template_kwargs", "off"))))
    line = str(err.value)
    assert "\n" not in line and "prompts.extra_body.chat_template_kwargs = 'off'" in line and "fix:" in line


@pytest.mark.parametrize("extra, key, fix", [
    ('"off"', "prompts.extra_body", "extra_body = {"),
    ("{ max_tokens = 5 }", "prompts.extra_body.max_tokens", "prompts.max_new_tokens"),
    ("{ stream = false }", "prompts.extra_body.stream", "drop it"),
])
def test_extra_body_config_errors(extra, key, fix):
    table = tomllib.loads(f'extra_body = {extra}\n[[sources]]\nkind = "prose"\n')
    with pytest.raises(ConfigError) as err:
        parse_prompts_config(table)
    assert err.value.key == key and fix in str(err.value)


def test_extra_body_is_kept_and_sent():
    table = tomllib.loads('max_new_tokens = 64\nextra_body = { chat_template_kwargs = { enable_thinking = false } }\n'
                          '[[sources]]\nkind = "prose"\n')
    cfg = parse_prompts_config(table)
    body = json.loads(OpenAIChatAdapter().body("r", PROMPT, SamplingSpec(64, True, 0.0, cfg.extra_body)))
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["max_tokens"] == 64


def _feed(flavor: str, texts: list[str], usage_every_frame: bool, usage_reasoning: int = 0) -> StreamState:
    """A completions / chat stream of one text piece per frame, 2 tokens each, read one frame per read."""
    state = StreamState("r", PROMPT, "measure", 0, FrameBuffer())
    adapter = adapter_for(flavor, OpenAIOptions(model="m"))
    for k, text in enumerate(texts, start=1):
        choice = ({"index": 0, "text": text, "finish_reason": None} if flavor == "openai-completions"
                  else {"index": 0, "delta": {"content": text}, "finish_reason": None})
        usage = {"prompt_tokens": 5, "completion_tokens": 2 * k} if usage_every_frame else None
        adapter.on_payload(state, json.dumps({"choices": [choice], "usage": usage}).encode(), 10 * k)
    n = 2 * len(texts)
    adapter.on_payload(state, json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n,
                                                                   "reasoning_tokens": usage_reasoning}}).encode(),
                       10 * len(texts) + 1)
    finish = ({"index": 0, "text": "", "finish_reason": "length"} if flavor == "openai-completions"
              else {"index": 0, "delta": {}, "finish_reason": "length"})
    adapter.on_payload(state, json.dumps({"choices": [finish]}).encode(), 10 * len(texts) + 2)
    state.close(10 * len(texts) + 3)
    return state


@pytest.mark.parametrize("flavor", ["openai-completions", "openai-chat"])
def test_inline_tags_on_both_routes(flavor):
    """Inline thinking: the frames before the first answer text are counted (white space after </think> is not yet
    the answer); without per-frame counts the stream cannot count them (NULL); the server's own count wins."""
    texts = ["<think>", " so", " then</think>", "\n\n", "The", " answer"]
    counted = _feed(flavor, texts, usage_every_frame=True)
    assert (counted.reasoning_tokens, counted.reasoning_from, counted.t_first_answer_ns) == (8, "stream", 50)
    assert counted.t_first_token_ns == 10
    blind = _feed(flavor, texts, usage_every_frame=False)
    assert (blind.reasoning_tokens, blind.t_first_answer_ns) == (None, 50)
    told = _feed(flavor, texts, usage_every_frame=False, usage_reasoning=6)
    assert (told.reasoning_tokens, told.reasoning_from) == (6, "server")
    plain = _feed(flavor, ["\n", "def", " f"], usage_every_frame=True)   # no thinking: white space is the answer
    assert (plain.reasoning_tokens, plain.t_first_answer_ns) == (0, 10)
