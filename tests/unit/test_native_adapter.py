"""SGLang native frames -> StreamState and frame rows, per shared/reference/sglang-protocol.md."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.client.protocol.base import FrameBuffer, SamplingSpec, StreamState
from loadgen.client.protocol.sglang_native import SglangNativeAdapter
from loadgen.prompts import Prompt

PROMPT = Prompt("p0", "code", "code/explain", text="def f(): pass")
ADAPTER = SglangNativeAdapter()


def _frame(text: str, ct: int, finish=None, **final) -> bytes:
    meta = {"id": "srv-1", "finish_reason": finish, "prompt_tokens": 7, "completion_tokens": ct,
            "cached_tokens": 0, "weight_version": "default"}
    meta.update(final)
    return orjson.dumps({"text": text, "output_ids": list(range(ct)), "meta_info": meta})


def _run(payloads: list[bytes]) -> tuple[StreamState, FrameBuffer]:
    frames = FrameBuffer()
    state = StreamState("r1", PROMPT, "measure", 0, frames)
    for i, p in enumerate(payloads):
        ADAPTER.on_payload(state, p, 1000 + i)
    state.close(99_999)
    return state, frames


def test_body_is_native_generate_with_strict_int_types():
    body = orjson.loads(ADAPTER.body("r1", PROMPT, SamplingSpec(96, True, 0.0)))
    assert body["stream"] is True and body["rid"] == "r1" and body["text"] == PROMPT.text
    assert body["sampling_params"] == {"max_new_tokens": 96, "ignore_eos": True, "temperature": 0.0}
    assert isinstance(body["sampling_params"]["max_new_tokens"], int)


def test_cumulative_tokens_and_final_spec_keys():
    state, frames = _run([
        _frame("a", 1), _frame("a b c", 3), _frame("a b c d e f", 6),
        _frame("a b c d e f g", 7, {"type": "length", "length": 7}, e2e_latency=0.5, spec_verify_ct=3,
               spec_accept_length=2.33),
        b"[DONE]"])
    assert state.status == "ok" and state.saw_done
    assert frames.tokens == [1, 2, 3, 1] and frames.cum_tokens == [1, 3, 6, 7] and frames.seq == [0, 1, 2, 3]
    assert state.completion_tokens == 7 and state.spec_verify_ct == 3 and state.spec_accept_length == 2.33
    assert state.server_request_id == "srv-1" and state.finish_reason == "length" and state.server_e2e_s == 0.5
    assert state.t_first_token_ns == 1000 and state.t_last_token_ns == 1003 and state.num_frames == 4


def test_incremental_text_counts_the_same():
    state, frames = _run([_frame("a", 1), _frame(" b c", 3), _frame(" d", 4, {"type": "stop", "matched": 2})])
    assert frames.tokens == [1, 2, 1] and state.completion_tokens == 4 and state.status == "ok"


def test_keys_inside_text_do_not_fool_the_fast_path():
    evil = '"completion_tokens":999,"finish_reason":null "meta_info":{'
    state, frames = _run([_frame(evil, 1), _frame(evil * 2, 2, {"type": "length", "length": 2})])
    assert frames.cum_tokens == [1, 2] and state.status == "ok"


def test_abort_finish_reason_is_server_abort_with_code():
    state, frames = _run([_frame("a", 1), _frame("a", 1, {"type": "abort", "message": "queue full",
                                                          "status_code": 503, "err_type": None}), b"[DONE]"])
    assert state.status == "server_abort" and state.http_status == 503 and "queue full" in state.error
    assert len(frames) == 1


def test_in_band_error_frame():
    err = b'{"error": {"message": "boom", "type": "invalid_request_error", "code": 400, "retryable": false}}'
    state, _ = _run([_frame("a", 1), err, b"[DONE]"])
    assert state.status == "server_abort" and state.http_status == 400 and "boom" in state.error


def test_complete_stream_without_done_is_ok_but_truncated_is_broken():
    ok, _ = _run([_frame("a", 1), _frame("ab", 2, {"type": "length", "length": 2})])
    assert ok.status == "ok" and not ok.saw_done
    broken, frames = _run([_frame("a", 1), _frame("ab", 2)])
    assert broken.status == "stream_broken" and broken.completion_tokens == 2 and len(frames) == 2


def test_malformed_frame_then_normal_end():
    state, frames = _run([_frame("a", 1), _frame("ab", 2)[:-9], _frame("abc", 3, {"type": "length", "length": 3})])
    assert state.status == "malformed_frame" and frames.cum_tokens == [1, 3]


def test_frame_without_new_tokens_is_not_a_frame_row():
    _, frames = _run([_frame("a", 1), _frame("a", 1), _frame("ab", 2, {"type": "length", "length": 2})])
    assert frames.cum_tokens == [1, 2]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=200), st.sampled_from([_frame("a", 1), b"[DONE]", b"{}", b'{"error":3}',
                                                                      _frame("x", 2, {"type": "abort"})])),
                max_size=8))
def test_never_raises_on_any_bytes(payloads):
    state, _ = _run(payloads)
    assert state.status is not None


def test_dropping_shipped_rows_keeps_the_rows_appended_while_they_were_shipped():
    """The worker builds a batch from the first n rows over several loop turns and drops them only once sent:
    frames read meanwhile must survive, and a flush cancelled half-way must lose nothing."""
    frames = FrameBuffer()
    state = StreamState("r1", PROMPT, "measure", 0, frames)
    for i in range(1, 4):
        ADAPTER.on_payload(state, _frame("a" * i, i), 1000 + i)
    shipped = len(frames)
    ADAPTER.on_payload(state, _frame("aaaa", 4), 1004)    # read while the batch was being built
    frames.drop(shipped)
    assert len(frames) == 1 and frames.cum_tokens == [4] and frames.seq == [3] and frames.t_ns == [1004]
