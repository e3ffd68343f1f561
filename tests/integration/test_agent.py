"""Agent sessions (`kind = "agent"`) against the emulator's tool calls, whose ledger is the truth: each call is read
from the stream, its seeded result sent back with the next turn, and every turn says what it was."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest

from conftest import chain_draft_profile, emulator
from loadgen.client import sessions
from loadgen.client.http_stream import Endpoint, ReadLoop, stream_request
from loadgen.client.protocol.base import Adapter, FrameBuffer, SamplingSpec, StreamState
from loadgen.client.protocol.openai import OpenAIChatAdapter, OpenAIOptions
from loadgen.clock import now_ns
from loadgen.errors import ConfigError
from loadgen.prompts import Prompt
from loadgen.prompts.config import parse_prompts_config
from loadgen.prompts.mix import PromptMix
from loadgen.results import analysis
from sqlfixtures import Results

PROFILE = chain_draft_profile("agentic", tool_call=0.9)


def _opening(tools: int = 3, result_tokens: int = 50, max_calls: int = 8) -> Prompt:
    cfg = parse_prompts_config({"chat": True, "sources": [{"kind": "agent", "tools": tools, "max_calls": max_calls,
                                                           "tool_result_tokens": result_tokens}]})
    return PromptMix(cfg).take(1)[0]


def _session(url: str, opening: Prompt, max_new_tokens: int = 64) -> tuple[str, list[StreamState]]:
    """One agent session as the worker runs it: every turn streamed, its state kept."""
    adapter = OpenAIChatAdapter(OpenAIOptions(model="m", spec_details=True, sglang=True, server="sglang"))
    frames, states = FrameBuffer(), []

    async def run() -> str:
        endpoint, reads = Endpoint(url), ReadLoop()

        async def send(prompt: Prompt, turn_adapter: Adapter, t: int, suffix: str) -> str:
            state = StreamState(f"a{suffix}", prompt, "measure", t, frames)
            body = turn_adapter.body(state.request_id, prompt, SamplingSpec(max_new_tokens, True, 0.0))
            await stream_request(endpoint, turn_adapter, state, body, {}, reads)
            states.append(state)
            return str(state.status)

        status = await sessions.run_agent_session(opening, "sess", now_ns(), adapter, send, lambda: True)
        endpoint.close_idle()
        return status
    return asyncio.run(run()), states


def _ledger(url: str) -> dict[str, dict]:
    rows = json.loads(urllib.request.urlopen(url + "/emulator/requests").read())["requests"]
    return {r["rid"]: r for r in rows}


def test_session_calls_tools_then_answers_and_each_turn_says_what_it_was(tmp_path: Path):
    profile = tmp_path / "agentic.toml"
    profile.write_text(PROFILE)
    opening = _opening(result_tokens=50)
    with emulator("--model-path", "m", "--hardware", "zero", "--speculative-algorithm", "NEXTN",
                  "--algorithm-profile", str(profile), "--tool-call-parser", "qwen25", "--tool-calls", "2") as url:
        status, states = _session(url, opening)
        ledger = _ledger(url)
    assert status == "ok"
    assert [s.turn_kind for s in states] == ["tool_call", "tool_call", "answer"]
    assert [ledger[s.request_id]["kind"] == "tool_call" for s in states] == [True, True, False]   # the truth
    assert [s.prompt.turn for s in states] == [1, 2, 3] and {s.prompt.session_id for s in states} == {"sess"}
    # each later turn carries the call and a 200-character result: the server's prompt grew by at least that much
    chars = [ledger[s.request_id]["prompt_chars"] for s in states]
    assert all(b - a >= 200 for a, b in zip(chars, chars[1:]))
    messages = states[2].prompt.messages or ()
    assert [m["role"] for m in messages[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert messages[-1]["tool_call_id"] == messages[-2]["tool_calls"][0]["id"]
    assert json.loads(messages[-2]["tool_calls"][0]["function"]["arguments"]) is not None
    for s in states:   # acceptance per turn: the server's own figure, the ledger's
        assert s.spec_verify_ct == ledger[s.request_id]["spec_verify_ct"]
    calls = sum(s.completion_tokens or 0 for s in states[:2]) / sum(s.spec_verify_ct or 0 for s in states[:2])
    answer = (states[2].completion_tokens or 0) / (states[2].spec_verify_ct or 1)
    assert calls > 2.5 > answer   # p 0.9 drafting JSON against 0.3 drafting prose


def test_inline_calls_without_a_parser_and_max_calls():
    """Without a tool parser the call is text; max_calls = 1 ends the session after one result, although the
    server would call again."""
    with emulator("--model-path", "m", "--hardware", "zero", "--tool-calls", "3") as url:
        status, states = _session(url, _opening(max_calls=1), max_new_tokens=64)
    assert status == "ok" and [s.turn_kind for s in states] == ["tool_call", "tool_call"]
    assert (states[1].prompt.messages or ())[-2]["content"].startswith("<tool_call>")


@pytest.mark.parametrize("entry, key", [
    ({"kind": "agent", "tools": 0}, "prompts.sources[0].tools"),
    ({"kind": "agent", "tool_result_tokens": "long"}, "prompts.sources[0].tool_result_tokens"),
    ({"kind": "agent", "turns": 3}, "prompts.sources[0].turns"),
    ({"kind": "agent", "tasks": ["poetry"]}, "prompts.sources[0].tasks"),
])
def test_agent_config_errors(entry, key):
    with pytest.raises(ConfigError) as err:
        parse_prompts_config({"sources": [entry]})
    assert err.value.key == key


def test_text_routes_describe_the_tools_in_the_prompt():
    cfg = parse_prompts_config({"sources": [{"kind": "agent", "tools": 2}]})
    prompt = PromptMix(cfg).take(1)[0]
    assert prompt.text is not None and '"name": "read_file"' in prompt.text and prompt.text.endswith("Assistant:")
    assert "run_tests" not in prompt.text   # tools = 2: the first two of the catalogue
    body = json.loads(OpenAIChatAdapter().body("r", _opening(tools=2), SamplingSpec(8)))
    assert [t["function"]["name"] for t in body["tools"]] == ["search_docs", "read_file"]


def test_agent_query_by_hand(tmp_path: Path):
    r = Results()
    r.run("run")
    r.step("run", 0, "t")
    for k, (kind, sent, first, tokens, steps) in enumerate([("tool_call", 1000, 1020, 30, 10),
                                                           ("tool_call", 1100, 1130, 30, 10),
                                                           ("answer", 1200, 1210, 20, 16)]):
        r.request("run", 0, "t", f"a{k}", sent_ms=sent, frames=[(first, tokens)], spec_verify_ct=steps,
                  session_id="s", turn=k + 1, turn_kind=kind)
    rows = {row["turn_kind"]: row for row in analysis.run_query(analysis.open_results(r.write(tmp_path)), "agent")
            .to_pylist()}
    assert (rows["tool_call"]["requests"], rows["tool_call"]["accept_len"], rows["tool_call"]["ttft_p50_ms"]) == \
        (2, 3.0, 25.0)
    assert (rows["answer"]["requests"], rows["answer"]["accept_len"], rows["answer"]["ttft_p50_ms"]) == (1, 1.25, 10)
