"""OpenAI adapters on hand-built frames in the shapes of SGLang 0.5.23, vLLM and llama.cpp's server."""

from __future__ import annotations

import json

import orjson
import pytest

from loadgen.client.protocol import adapter_for
from loadgen.client.protocol.base import FrameBuffer, SamplingSpec, StreamState
from loadgen.client.protocol.openai import OpenAIOptions
from loadgen.prompts import Prompt

TEXT = Prompt("p1", "code", "explain", text="def f(): pass")
CHAT = Prompt("p2", "prose", "essay", messages=({"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Write."}))
SAMPLING = SamplingSpec(max_new_tokens=8, ignore_eos=True, temperature=0.0)


def _run(flavor: str, frames: list, options: OpenAIOptions | None = None) -> tuple[StreamState, FrameBuffer]:
    """Feed frames (dicts, or raw bytes) at t = 1, 2, ...; close as http_stream does at the end."""
    buf = FrameBuffer()
    state = StreamState("r1", TEXT, "measure", 0, buf)
    adapter = adapter_for(flavor, options)
    for t, frame in enumerate(frames, start=1):
        adapter.on_payload(state, frame if isinstance(frame, bytes) else orjson.dumps(frame), t)
    state.close(len(frames) + 1)
    return state, buf


def _chunk(choices, usage=None, **extra) -> dict:
    return {"id": "abc123", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": choices,
            "usage": usage, **extra}


def _delta(content=None, reasoning=None, finish=None, role=None) -> dict:
    delta = {"reasoning_content": reasoning, "content": content}
    if role:
        delta["role"] = role
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}


def _usage(prompt: int, completion: int, cached: int | None = None) -> dict:
    u = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u


SPEC = {"spec_tokens_details": {"spec_verify_ct": 2, "spec_accept_length": 2.5, "spec_accept_rate": 0.5}}


def test_sglang_chat_with_continuous_usage_and_spec_details():
    state, buf = _run("openai-chat", [
        _chunk([_delta("", role="assistant")]),                       # role frame: no output
        _chunk([_delta("Hel")], _usage(9, 1)),
        _chunk([_delta("lo, w")], _usage(9, 3)),
        _chunk([_delta("orld")], _usage(9, 4)),
        _chunk([_delta(finish="stop")]),                              # separate finish frame
        _chunk([], sglext=SPEC),
        _chunk([], _usage(9, 5, cached=4)),                           # EOS had no text: 5 > 4
        b"[DONE]",
    ])
    assert state.status == "ok" and state.finish_reason == "stop" and state.saw_done
    assert (state.prompt_tokens, state.completion_tokens, state.cached_tokens) == (9, 5, 4)
    assert (state.spec_verify_ct, state.spec_accept_length) == (2, 2.5)
    assert state.server_request_id == "abc123"
    assert buf.tokens == [1, 2, 1, 1] and buf.cum_tokens == [1, 3, 4, 5] and sum(buf.tokens) == 5
    assert buf.t_ns == [2, 3, 4, 7] and state.t_first_token_ns == 2   # TTFT at the first frame with output


def test_chat_without_usage_keeps_frames_with_unknown_tokens():
    state, buf = _run("openai-chat", [
        _chunk([_delta("", role="assistant")]), _chunk([_delta("a")]), _chunk([_delta("b")]),
        _chunk([_delta(finish="length")]), b"[DONE]"])
    assert state.status == "ok" and state.finish_reason == "length"
    assert (state.completion_tokens, state.prompt_tokens, state.spec_verify_ct) == (None, None, None)
    assert buf.tokens == [None, None] and buf.cum_tokens == [None, None] and state.num_frames == 2


def test_reasoning_content_is_output():
    state, buf = _run("openai-chat", [
        _chunk([_delta(None, role="assistant")]), _chunk([_delta(reasoning="think")]), _chunk([_delta("ans")]),
        _chunk([_delta(finish="stop")]), _chunk([], _usage(3, 7))])
    assert state.t_first_token_ns == 2 and state.num_frames == 2
    assert state.completion_tokens == 7 and buf.tokens == [None, None]   # totals only: frames stay unknown


def test_usage_only_on_the_last_frame_is_not_attributed_to_it():
    """llama.cpp-style: usage once, on the final chunk with choices; earlier frames had none."""
    state, buf = _run("openai-completions", [
        {"id": "x", "choices": [{"index": 0, "text": "a", "finish_reason": None}]},
        {"id": "x", "choices": [{"index": 0, "text": "b", "finish_reason": "stop"}], "usage": _usage(2, 6)}])
    assert state.status == "ok" and state.completion_tokens == 6 and state.prompt_tokens == 2
    assert buf.tokens == [None, None]


def test_completions_with_continuous_usage_counts_empty_text_frames_that_advance():
    frames = [{"id": "c1", "object": "text_completion", "choices": [
        {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}], "usage": _usage(4, n)}
        for text, n, reason in [("x", 1, None), ("", 1, None), ("", 2, None), ("yz", 4, "length")]]
    state, buf = _run("openai-completions", frames + [{"id": "c1", "choices": [], "usage": _usage(4, 4)}])
    assert state.status == "ok" and state.completion_tokens == 4
    assert buf.tokens == [1, 1, 2] and buf.t_ns == [1, 3, 4]


@pytest.mark.parametrize("flavor", ["openai-completions", "openai-chat"])
def test_error_chunk_and_abort_are_server_aborts(flavor):
    err = b'{"error": {"object": "error", "message": "The request queue is full.", "type": "SERVICE_UNAVAILABLE", ' \
          b'"param": null, "code": 503}}'
    state, _ = _run(flavor, [err, b"[DONE]"])
    assert (state.status, state.http_status) == ("server_abort", 503) and "queue is full" in state.error
    choice = ({"index": 0, "text": "", "finish_reason": "abort"} if flavor == "openai-completions"
              else _delta(finish="abort"))
    state, _ = _run(flavor, [_chunk([choice]), b"[DONE]"])
    assert state.status == "server_abort" and state.finish_reason == "abort"


def test_stream_without_finish_is_broken_and_garbage_is_malformed():
    state, buf = _run("openai-chat", [_chunk([_delta("a")], _usage(1, 1)), b"[DONE]"])
    assert state.status == "stream_broken" and state.completion_tokens == 1 and buf.tokens == [1]
    state, _ = _run("openai-chat", [b"not json", _chunk([_delta(finish="stop")])])
    assert state.status == "malformed_frame" and state.finished   # read to its end, the bad frame named
    state, _ = _run("openai-chat", [b"[1, 2]"])
    assert state.status == "malformed_frame" and "not a JSON object" in state.error
    state, _ = _run("openai-chat", [{"id": "q", "object": "mystery"}, b"[DONE]"])
    assert state.status == "malformed_frame" and "without choices" in state.error


def test_bodies():
    opts = OpenAIOptions(model="qwen", continuous_usage=True, spec_details=True, sglang=True)
    body = json.loads(adapter_for("openai-chat", opts).body("r9", CHAT, SAMPLING))
    assert body == {"messages": list(CHAT.messages), "model": "qwen", "max_tokens": 8, "temperature": 0.0,
                    "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                    "ignore_eos": True, "return_spec_tokens_details": True, "rid": "r9"}
    plain = OpenAIOptions(model="m", continuous_usage=False)
    body = json.loads(adapter_for("openai-completions", plain).body("r9", CHAT, SamplingSpec(4, False, 0.7)))
    assert body == {"prompt": "Be brief.\n\nWrite.", "model": "m", "max_tokens": 4, "temperature": 0.7,
                    "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": False}}
    body = json.loads(adapter_for("openai-chat", plain).body("r9", TEXT, SAMPLING))
    assert body["messages"] == [{"role": "user", "content": "def f(): pass"}]
    assert adapter_for("openai-chat", plain).path == "/v1/chat/completions"
    assert adapter_for("openai-completions", plain).path == "/v1/completions"


def test_config_knows_every_flavour_the_client_has_an_adapter_for():
    from loadgen.client.protocol import ADAPTERS
    from loadgen.config.targets import FLAVORS
    assert set(FLAVORS) == set(ADAPTERS)
