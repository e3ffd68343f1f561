"""Property tests: the frame parser classifies any bytes and never raises; the config loader answers any input
with an Experiment or a ConfigError that names a key, never with another exception."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen.client.protocol.base import FrameBuffer, StreamState
from loadgen.client.protocol.sglang_native import SglangNativeAdapter
from loadgen.client.protocol.sse import SseSplitter
from loadgen.config import parse_experiment
from loadgen.errors import ConfigError
from loadgen.prompts import Prompt
from loadgen.results import schema

PROMPT = Prompt(prompt_id="p", kind="code", template="t", text="x")

FRAME = b'data: {"text":"a","meta_info":{"id":"x","completion_tokens":%d,"finish_reason":null}}\n\n'
FINAL = (b'data: {"text":"a","meta_info":{"id":"x","completion_tokens":9,"prompt_tokens":3,'
         b'"finish_reason":{"type":"length","length":9},"spec_verify_ct":3}}\n\n')
# pieces a hostile or broken server could send, mixed with random bytes
PIECES = st.one_of(st.binary(max_size=64), st.sampled_from([
    FRAME % 1, FRAME % 5, FINAL, b"data: [DONE]\n\n", b"data: {\"error\":{\"message\":\"x\",\"code\":503}}\n\n",
    b"data: {\"meta_info\":{\"completion_tokens\":\"x\"}}\n\n", b"data: {\n\n", b"\r\n", b"\r", b"\n\n", b":c\n\n",
    b"event: x\ndata: 1\ndata: 2\n\n", b"data: " + b"9" * 40 + b"\n\n",
    b'data: {"meta_info":{"completion_tokens":3,"finish_reason":{"type":"abort","status_code":"x"}}}\n\n']))


def _state() -> StreamState:
    return StreamState("r", PROMPT, "measure", 0, FrameBuffer())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES, max_size=30), st.data())
def test_splitter_and_adapter_never_raise_and_always_classify(pieces, data):
    body = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=8)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
    adapter, splitter, state = SglangNativeAdapter(), SseSplitter(), _state()
    for i, chunk in enumerate(chunks):
        for payload in splitter.feed(chunk):
            adapter.on_payload(state, payload, i)
    if splitter.pending:
        state.fail("stream_broken", "truncated")
    state.close(len(chunks))
    assert state.status in schema.STATUSES
    assert state.num_frames == len(state.frames)
    assert all(t is None or t > 0 for t in state.frames.tokens)   # a frame is kept only when tokens grew
    if state.status == "ok":
        assert state.finished


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=20), st.integers(1, 40))
def test_the_same_stream_split_anywhere_gives_the_same_result(cums, cut):
    cums = sorted(set(cums))
    final = FINAL.replace(b'"completion_tokens":9', b'"completion_tokens":%d' % (cums[-1] + 1))
    body = b"".join(FRAME % c for c in cums) + final + b"data: [DONE]\n\n"
    results = []
    for size in (len(body), cut):
        adapter, splitter, state = SglangNativeAdapter(), SseSplitter(), _state()
        for i in range(0, len(body), size):
            for payload in splitter.feed(body[i:i + size]):
                adapter.on_payload(state, payload, 0)
        state.close(1)
        results.append((state.status, state.completion_tokens, list(state.frames.tokens)))
    assert results[0] == results[1] and results[0][0] == "ok"


TOML_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12).filter(lambda v: v is not None)
SECTION_KEYS = st.sampled_from(["concurrency", "requests", "warmup_s", "measure_s", "mode", "error_budget",
                                "on_worker_death", "stall_timeout_s", "name", "url", "flavor", "emulator",
                                "max_new_tokens", "sources", "seed", "weight", "kind", "path", "rates"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional={
    "run": st.dictionaries(SECTION_KEYS, TOML_VALUES, max_size=3),
    "load": st.dictionaries(SECTION_KEYS, TOML_VALUES, max_size=4) | st.just({"concurrency": [1, 2]}),
    "prompts": st.dictionaries(SECTION_KEYS, TOML_VALUES, max_size=3),
    "targets": st.lists(st.dictionaries(SECTION_KEYS, TOML_VALUES, max_size=4), max_size=2)
               | st.just([{"name": "a", "url": "http://127.0.0.1:1"}]),
    "extra": TOML_VALUES,
}))
def test_config_loader_answers_anything_with_a_config_error(data):
    try:
        exp = parse_experiment(data, Path("/nonexistent"), "fuzz")
    except ConfigError as exc:
        assert exc.key is not None and exc.problem
    else:
        assert exp.targets and exp.load.concurrency
