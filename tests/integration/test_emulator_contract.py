"""Contract test: the emulator's OpenAI frames and responses, validated with SGLang 0.5.23's own pydantic models.

The models come from the released wheel (`pip download --no-deps sglang==0.5.23`), of which only
`sglang/srt/entrypoints/openai/protocol.py` is extracted and imported behind a stub `sglang` package (the
real package __init__ pulls in torch). Needs `openai` and `msgspec` (protocol.py imports them). Beyond
validation, every frame must re-serialize to the very bytes the emulator sent, the way SGLang serializes it
(pydantic model_dump_json, or SGLang's msgspec encoder for chat content chunks).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path

import pytest

from httpcalls import request
from loadgen.emulator.launch import EmulatorThread

pytest.importorskip("openai", reason="SGLang's protocol.py imports openai (pip install openai)")
msgspec = pytest.importorskip("msgspec", reason="SGLang's protocol.py imports msgspec (pip install msgspec)")

WHEEL_VERSION = "0.5.23"
MEMBER = "sglang/srt/entrypoints/openai/protocol.py"
CACHE = Path(os.environ.get("LOADGEN_SGLANG_WHEEL_DIR", Path(tempfile.gettempdir()) / "loadgen-sglang-wheel"))


def _protocol_source() -> Path:
    """protocol.py from the sglang wheel (downloaded once into CACHE); skip if the wheel cannot be had."""
    target = CACHE / MEMBER
    if target.is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = list(CACHE.glob(f"sglang-{WHEEL_VERSION}-*.whl"))
    if not wheels:
        out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"sglang=={WHEEL_VERSION}",
                              "-d", str(CACHE), "-q"], capture_output=True, text=True, timeout=300)
        wheels = list(CACHE.glob(f"sglang-{WHEEL_VERSION}-*.whl"))
        if out.returncode != 0 or not wheels:
            pytest.skip(f"cannot obtain the sglang {WHEEL_VERSION} wheel: {out.stderr.strip()[-300:]}")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extract(MEMBER, CACHE)
    return target


@pytest.fixture(scope="module")
def proto():
    path = _protocol_source()
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    for name in ("sglang", "sglang.srt", "sglang.srt.entrypoints", "sglang.srt.entrypoints.openai"):
        pkg = types.ModuleType(name)
        pkg.__path__ = []
        sys.modules[name] = pkg
    utils = types.ModuleType("sglang.utils")
    utils.convert_json_schema_to_str = lambda s: s if isinstance(s, str) else json.dumps(s)
    sys.modules["sglang.utils"] = utils
    spec = importlib.util.spec_from_file_location("sglang.srt.entrypoints.openai.protocol", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
        del sys.modules[k]
    sys.modules.update(saved)


@pytest.fixture(scope="module")
def server():
    with EmulatorThread(["--speculative-algorithm", "NEXTN", "--time-scale", "50"]) as emu:
        yield emu


def post(port: int, path: str, body: dict) -> tuple[int, bytes]:
    status, _, data = request(port, "POST", path, body)
    return status, data


def frames(data: bytes) -> list[bytes]:
    found = re.findall(rb"data: (.*?)\n\n", data, re.S)
    assert b"".join(b"data: " + f + b"\n\n" for f in found) == data and found[-1] == b"[DONE]"
    return found[:-1]


class StreamDelta(msgspec.Struct, omit_defaults=True):
    """Mirrors SGLang's sse_utils.StreamDelta: chat content chunks are encoded with these, not pydantic."""

    reasoning_content: str | None
    role: str | None = None
    content: str | None = None


class StreamChoice(msgspec.Struct):
    index: int
    delta: StreamDelta
    logprobs: dict | None = None
    finish_reason: str | None = None
    matched_stop: None | int | str = None


class StreamChunk(msgspec.Struct, omit_defaults=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[StreamChoice]
    usage: dict | None = None


def msgspec_chat_chunk(raw: bytes) -> bytes:
    """SGLang's own encoding (sse_utils.build_sse_content) of a chat content chunk."""
    return msgspec.json.encode(msgspec.json.decode(raw, type=StreamChunk))


BASE = {"model": "m", "max_tokens": 24, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}, "return_spec_tokens_details": True}


def test_completions_stream_frames_are_sglang_models(proto, server):
    status, data = post(server.port, "/v1/completions", {**BASE, "prompt": "def f(x):\n    return x"})
    assert status == 200
    fs = frames(data)
    *content, sglext, usage = fs
    for f in content:
        m = proto.CompletionStreamResponse.model_validate_json(f)
        assert m.model_dump_json().encode() == f
    assert proto.CompletionStreamResponse.model_validate_json(content[-1]).choices[0].finish_reason == "length"
    s = proto.CompletionStreamResponse.model_validate_json(sglext)
    assert s.choices == [] and s.sglext.spec_tokens_details.spec_verify_ct > 0
    assert s.model_dump_json().encode() == sglext
    u = proto.CompletionStreamResponse.model_validate_json(usage)
    assert u.usage.completion_tokens == 24 and u.model_dump_json(exclude_none=True).encode() == usage


def test_chat_stream_frames_are_sglang_models(proto, server):
    body = {**BASE, "messages": [{"role": "user", "content": "Tell me about lighthouses."}],
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    status, data = post(server.port, "/v1/chat/completions", body)
    assert status == 200
    fs = frames(data)
    role, *content, finish, sglext, usage = fs
    r = proto.ChatCompletionStreamResponse.model_validate_json(role)
    assert r.choices[0].delta.role == "assistant" and r.choices[0].delta.content == ""
    assert msgspec_chat_chunk(role) == role and b'"reasoning_content":null' in role
    total = 0
    for f in content:
        m = proto.ChatCompletionStreamResponse.model_validate_json(f)
        assert m.choices[0].delta.content and m.choices[0].finish_reason is None
        assert msgspec_chat_chunk(f) == f
        assert m.usage.completion_tokens > total
        total = m.usage.completion_tokens
    fin = proto.ChatCompletionStreamResponse.model_validate_json(finish)
    assert fin.choices[0].finish_reason == "length" and fin.choices[0].delta.content is None
    assert msgspec_chat_chunk(finish) == finish
    s = proto.ChatCompletionStreamResponse.model_validate_json(sglext)
    assert s.model_dump_json().encode() == sglext
    details = s.sglext.spec_tokens_details
    assert details.spec_accept_length == pytest.approx(24 / details.spec_verify_ct)
    u = proto.ChatCompletionStreamResponse.model_validate_json(usage)
    assert u.usage.completion_tokens == 24 == total and u.model_dump_json().encode() == usage


def test_non_streaming_responses_are_sglang_models(proto, server):
    status, data = post(server.port, "/v1/completions", {**BASE, "stream": False, "prompt": "Once upon a time"})
    assert status == 200
    c = proto.CompletionResponse.model_validate_json(data)
    assert c.usage.completion_tokens == 24 and c.sglext.spec_tokens_details.spec_verify_ct > 0
    assert c.model_dump_json().encode() == data
    status, data = post(server.port, "/v1/chat/completions",
                        {**BASE, "stream": False, "messages": [{"role": "user", "content": "hi"}]})
    ch = proto.ChatCompletionResponse.model_validate_json(data)
    assert status == 200 and ch.choices[0].message.role == "assistant" and ch.usage.completion_tokens == 24
    assert ch.model_dump_json().encode() == data


def test_error_bodies_are_sglang_error_responses(proto, server):
    status, data = post(server.port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                              "max_tokens": 1.5, "stream": True})
    assert status == 400
    err = proto.ErrorResponse.model_validate_json(data)
    assert err.type == "BadRequestError" and err.code == 400 and err.model_dump_json().encode() == data
