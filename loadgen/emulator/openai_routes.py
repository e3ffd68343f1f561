"""OpenAI-compatible `/v1/completions` and `/v1/chat/completions`, shaped byte for byte like SGLang 0.5.23:

- content chunks of chat are msgspec-encoded (`usage` omitted unless continuous_usage_stats, `reasoning_content`
  always present in the delta); completions chunks, the `sglext` chunk and the usage chunk are pydantic dumps
  (all fields, nulls included; the completions usage chunk with exclude_none);
- chat: a role frame first, content frames only for non-empty deltas, finish_reason in a separate frame;
  completions: frames with empty text are sent too and the last one carries finish_reason;
- status and headers only go out with the first output (validation errors are a plain JSON 400);
- an abort with a status code becomes the streaming error chunk `data: {"error": {...}}` (json.dumps, with spaces);
- a model that thinks (--reasoning-tokens): with --reasoning-parser, chat streams the thinking as
  `delta.reasoning_content` (tags stripped) before `delta.content`, a step that crosses `</think>` as a reasoning
  chunk then a content chunk with the same usage (serving_chat._generate_stream_content), and usage counts
  `reasoning_tokens` through `</think>` (Req.update_reasoning_tokens); without a parser the thinking is inline
  `<think>...</think>` content and reasoning_tokens stays 0. `chat_template_kwargs.enable_thinking = false` turns
  thinking off (Qwen3's template);
- a chat request with `tools` may answer with a tool call (toolcalls.py): with --tool-call-parser as
  `delta.tool_calls` chunks and finish_reason `tool_calls`, without one as inline `<tool_call>...</tool_call>` text.
"""

from __future__ import annotations

import json
import time
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web

from loadgen.emulator import streaming, toolcalls
from loadgen.emulator.httputil import error_body, json_response
from loadgen.emulator.promptinfo import estimate_tokens
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.state import EmulatorState, emulator


class BadRequest(ValueError):
    """An OpenAI request the server refuses with 400 BadRequestError."""


def _bad(message: str) -> web.Response:
    return json_response(error_body(message, 400, "BadRequestError"), 400)


def _int_field(body: dict, key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise BadRequest(f"1 validation error for request\n{key}\n  Input should be a valid integer "
                         f"[type=int_type, input_value={v!r}]")
    if v < 0:
        raise BadRequest(f"{key} must be non-negative, got {v}.")
    return v


def _bool_field(body: dict, key: str) -> bool:
    v = body.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadRequest(f"1 validation error for request\n{key}\n  Input should be a valid boolean "
                         f"[type=bool_type, input_value={v!r}]")
    return v


def chat_prompt(messages: Any) -> str:
    """The prompt text a Qwen-style chat template would build (used for kind and token estimates)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of {role, content} objects.")
    parts = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise BadRequest("each message needs a role and content.")
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|im_start|>{m['role']}\n{content}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def usage(prompt: int, completion: int, drop_none: bool = False, cached: int | None = None,
          reasoning: int = 0) -> dict[str, Any]:
    """SGLang's UsageInfo; `cached`: prompt_tokens_details.cached_tokens (only with --enable-cache-report)."""
    details = None if cached is None else {"cached_tokens": cached}
    u: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                         "completion_tokens": completion, "prompt_tokens_details": details,
                         "reasoning_tokens": reasoning,
                         "completion_tokens_details": None}
    return {k: v for k, v in u.items() if v is not None} if drop_none else u


def spec_details(emu: EmulatorState, req: EmuRequest) -> dict[str, Any] | None:
    """SpecTokensDetails of a finished request (None when speculation is off or never verified)."""
    spec = emu.spec
    if not spec.enabled or req.spec_verify_ct == 0:
        return None
    n = req.completion_tokens
    proposed = req.spec_verify_ct * (spec.verify_tokens - 1)
    return {"spec_accept_rate": req.correct_drafts / proposed if proposed else 0.0,
            "spec_accept_length": n / req.spec_verify_ct, "spec_cap_length": 0.0,
            "spec_block_accept_length": 0.0, "spec_num_correct_drafts": req.correct_drafts,
            "spec_num_proposed_drafts": proposed, "spec_verify_ct": req.spec_verify_ct,
            "spec_correct_drafts_histogram": [], "spec_cap_lens_histogram": []}


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class _OpenAIFormat:
    """What both OpenAI routes share: options, the trailing sglext/usage frames and the error chunk."""

    headers_after_first = True
    obj = ""

    def __init__(self, emu: EmulatorState, body: dict, model: str) -> None:
        self.emu, self.model = emu, model
        self.created = int(time.time())
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict):
            raise BadRequest("stream_options must be an object.")
        self.include_usage = bool(opts.get("include_usage"))
        self.continuous = bool(opts.get("continuous_usage_stats"))
        self.want_spec = _bool_field(body, "return_spec_tokens_details")
        self.parse_reasoning = False   # chat with a reasoning parser on: thinking goes to reasoning_content
        self.call: toolcalls.CallStream | None = None   # a tool call the parser streams as delta.tool_calls

    def head(self, req: EmuRequest) -> dict[str, Any]:
        return {"id": req.id, "object": self.obj, "created": self.created, "model": self.model}

    def final_usage(self, req: EmuRequest, drop_none: bool = False) -> dict[str, Any]:
        """A finished request's usage: the cached prompt tokens too when the server reports them."""
        cached = req.cached_tokens if self.emu.args.enable_cache_report else None
        n = req.completion_tokens
        return usage(req.prompt_tokens, n, drop_none, cached, self.reasoning(req, n))

    def reasoning(self, req: EmuRequest, n: int) -> int:
        """usage.reasoning_tokens after n output tokens: counted only where the parser separates the thinking."""
        return min(n, req.think_len) if self.parse_reasoning else 0

    def finish(self, req: EmuRequest) -> tuple[str | None, Any]:
        fr = req.finish_reason or {}
        if self.call is not None and fr.get("type") == "stop":   # SGLang: a parsed call ends as tool_calls
            return "tool_calls", None
        return fr.get("type"), fr.get("matched")

    def trailer(self, req: EmuRequest, usage_drop_none: bool) -> bytes:
        out = b""
        details = spec_details(self.emu, req) if self.want_spec else None
        if details is not None:
            out += _sse({**self.head(req), "choices": [], "usage": None, "sglext": {"spec_tokens_details": details}})
        if self.include_usage:
            out += _sse({**self.head(req), "choices": [],
                         "usage": self.final_usage(req, usage_drop_none)})
        return out

    def abort_frames(self, req: EmuRequest) -> bytes:
        fr = req.finish_reason or {}
        code = int(fr.get("status_code") or 503)
        err = {"object": "error", "message": fr.get("message", "Generation aborted."),
               "type": HTTPStatus(code).name, "param": None, "code": code}
        out = b"data: " + json.dumps({"error": err}).encode() + b"\n\n"
        if self.include_usage:
            out += _sse({**self.head(req), "choices": [],
                         "usage": self.final_usage(req, isinstance(self, CompletionsFormat))})
        return out

    def is_error_abort(self, req: EmuRequest) -> bool:
        fr = req.finish_reason or {}
        return fr.get("type") == "abort" and bool(fr.get("status_code"))


class CompletionsFormat(_OpenAIFormat):
    obj = "text_completion"

    def frames(self, req: EmuRequest, start: int, end: int, final: bool) -> bytes:
        if final and self.is_error_abort(req):
            return self.abort_frames(req)
        reason, matched = self.finish(req) if final else (None, None)
        chunk = {**self.head(req), "choices": [{"index": 0, "text": req.text_between(start, end), "logprobs": None,
                                                "finish_reason": reason, "matched_stop": matched}],
                 "usage": usage(req.prompt_tokens, end) if self.continuous else None}
        out = _sse(chunk)
        return out + self.trailer(req, usage_drop_none=True) if final else out

    def whole(self, req: EmuRequest) -> dict[str, Any]:
        reason, matched = self.finish(req)
        body = {**self.head(req), "choices": [{"index": 0, "text": req.text, "logprobs": None,
                                               "finish_reason": reason, "matched_stop": matched}],
                "usage": self.final_usage(req), "metadata": None}
        details = spec_details(self.emu, req) if self.want_spec else None
        if details is not None:
            body["sglext"] = {"spec_tokens_details": details}
        return body


class ChatFormat(_OpenAIFormat):
    obj = "chat.completion.chunk"

    def _choice(self, delta: dict, reason: str | None = None, matched: Any = None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason, "matched_stop": matched}

    def frames(self, req: EmuRequest, start: int, end: int, final: bool) -> bytes:
        if final and self.is_error_abort(req):
            return self.abort_frames(req)
        out = b""
        if start == 0:
            out += _sse({**self.head(req), "choices": [self._choice(
                {"reasoning_content": None, "role": "assistant", "content": ""})]})
        thought, delta = (req.thinking_between(start, end) if self.parse_reasoning
                          else ("", req.text_between(start, end)))
        step_usage = usage(req.prompt_tokens, end, reasoning=self.reasoning(req, end)) if self.continuous else None
        parts: list[dict[str, Any] | None] = [{"reasoning_content": thought} if thought else None]
        if self.call is not None:
            parts += [{"tool_calls": [entry]} for entry in self.call.deltas(req.text_upto(end))]
        else:
            parts.append({"reasoning_content": None, "content": delta} if delta else None)
        for part in parts:
            if part is not None:
                chunk = {**self.head(req), "choices": [self._choice(part)]}
                if step_usage is not None:
                    chunk["usage"] = step_usage
                out += _sse(chunk)
        if final:
            reason, matched = self.finish(req)
            out += _sse({**self.head(req), "choices": [self._choice({"reasoning_content": None}, reason, matched)]})
            out += self.trailer(req, usage_drop_none=False)
        return out

    def whole(self, req: EmuRequest) -> dict[str, Any]:
        reason, matched = self.finish(req)
        thought, answer = req.thinking_between(0, req.completion_tokens) if self.parse_reasoning else (None, req.text)
        message: dict[str, Any] = {"role": "assistant", "content": answer, "reasoning_content": thought or None}
        if self.call is not None:
            message.update(content=None, tool_calls=[self.call.message()])
        body = {**self.head(req), "object": "chat.completion",
                "choices": [{"index": 0, "message": message,
                             "logprobs": None, "finish_reason": reason, "matched_stop": matched}],
                "usage": self.final_usage(req), "metadata": None}
        details = spec_details(self.emu, req) if self.want_spec else None
        if details is not None:
            body["sglext"] = {"spec_tokens_details": details}
        return body


async def _serve(request: web.Request, chat: bool) -> web.StreamResponse:
    emu = emulator(request)
    if request.content_type != "application/json":
        return _bad(f"Unsupported Media Type: Only 'application/json' is allowed, got {request.content_type!r}")
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        return _bad(f"JSON decode error: {exc}")
    if not isinstance(body, dict):
        return _bad("The request body must be a JSON object.")
    try:
        if chat:
            prompt: str | list[int] = chat_prompt(body.get("messages"))
            max_tokens = _int_field(body, "max_completion_tokens")
            if max_tokens is None:
                max_tokens = _int_field(body, "max_tokens")
        else:
            raw = body.get("prompt")
            if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
                raw = raw[0]
            if isinstance(raw, str):
                prompt = raw
            elif isinstance(raw, list) and raw and all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
                prompt = raw
            else:
                raise BadRequest("prompt must be a string or a list of token ids (one prompt per request).")
            max_tokens = _int_field(body, "max_tokens")
            if max_tokens is None:
                max_tokens = 16
        n = _int_field(body, "n")
        if n not in (None, 1):
            raise BadRequest(f"n={n} is not supported by the emulator (use n=1).")
        min_tokens = _int_field(body, "min_tokens") or 0
        ignore_eos = _bool_field(body, "ignore_eos")
        stream = _bool_field(body, "stream")
        rid = body.get("rid")
        if rid is not None and not isinstance(rid, str):
            raise BadRequest("rid must be a string.")
        model = body.get("model") or emu.served_model_name
        fmt = (ChatFormat if chat else CompletionsFormat)(emu, body, str(model))
        call = _planned_call(emu, body) if chat else None
        thinking = chat and _thinking_on(body) and emu.args.reasoning_tokens > 0 and call is None
        fmt.parse_reasoning = thinking and emu.args.reasoning_parser is not None \
            and body.get("separate_reasoning") is not False
        if call is not None and emu.args.tool_call_parser is not None:
            fmt.call = toolcalls.CallStream(call)
    except (BadRequest, toolcalls.BadTools) as exc:
        return _bad(str(exc))
    if max_tokens is None:                       # chat without a limit: clip to the remaining context
        ptoks = estimate_tokens(prompt) if isinstance(prompt, str) else len(prompt)
        max_tokens = max(1, emu.model.context_len - ptoks)
    if min_tokens > max_tokens:
        return _bad(f"min_tokens ({min_tokens}) must be <= max_tokens ({max_tokens}).")
    req = emu.new_request(prompt, "chat" if chat else "completions", rid=rid, max_new_tokens=max_tokens,
                          min_new_tokens=min_tokens, ignore_eos=ignore_eos, stream_interval=None, stream=stream,
                          thinking=thinking, script=call.pieces if call is not None else ())
    if req.fault is not None and req.fault.type == "http":
        return emu.http_fault(req)
    await emu.ready()
    emu.submit(req)
    if stream:
        return await streaming.stream(request, req, emu.engine, fmt)
    return await emu.wait_whole(req, lambda: emu.abort_error(req) or json_response(fmt.whole(req)))


def _planned_call(emu: EmulatorState, body: dict) -> toolcalls.ToolCall | None:
    """The tool call this chat request answers with, if it is one's turn (toolcalls.calls_due); bad tools: 400."""
    if body.get("tools") is None:
        return None
    toolcalls.tool_names(body["tools"])
    if not toolcalls.calls_due(body, emu.args.tool_calls):
        return None
    return toolcalls.plan_call(emu.engine.rng, body["tools"])


def _thinking_on(body: dict) -> bool:
    """Whether the chat template lets the model think: Qwen3's `chat_template_kwargs.enable_thinking` (on unless
    false). A `chat_template_kwargs` that is not an object is refused, as SGLang's request model does."""
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        return True
    if not isinstance(kwargs, dict):
        raise BadRequest(f"1 validation error for ChatCompletionRequest\nchat_template_kwargs\n  Input should be a "
                         f"valid dictionary [type=dict_type, input_value={kwargs!r}]")
    return kwargs.get("enable_thinking") is not False


async def completions(request: web.Request) -> web.StreamResponse:
    return await _serve(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _serve(request, chat=True)
