"""OpenAI `/v1/completions` and `/v1/chat/completions` streaming (SGLang, vLLM, llama.cpp's server, ...).

One `orjson.loads` per frame (OpenAI frames carry no cumulative counter that two `find`s could read). What is
counted and from where (see shared/reference/sglang-protocol.md):
- totals from the `usage` chunk (`stream_options.include_usage`, always asked for);
- per-frame tokens from the cumulative `usage.completion_tokens` on every frame when the server honours
  `continuous_usage_stats` (an option); otherwise the frame row still exists with `tokens` NULL: unknown,
  never guessed from text. Tokens without text (chat sends no frame for an EOS) show up when the usage chunk
  says more than the frames did: a frame at that chunk's arrival, so frame tokens still sum to the total;
- speculative stats from SGLang's (>= 0.5.23) `sglext.spec_tokens_details` chunk (`return_spec_tokens_details`),
  or from llama.cpp's `timings` object on the last chunk (`_timings`: its `draft_n_accepted` mapped to SGLang's
  verify-step count, derived from llama.cpp's server source; cached prompt tokens from `cache_n`), or from vLLM's
  per-request `metrics.speculative_decoding` on the usage chunk (`--per-request-spec-decode-metrics`; `_vllm_spec`);
  vLLM's per-request times there give its own e2e time (`--enable-per-request-metrics`);
- TTFT at the first frame with output: non-empty text / content / reasoning_content, or advancing usage. Chat's
  role frame and the separate finish frame carry none;
- reasoning: until the answer starts, each frame's output is looked at (StreamState.see_output): chat's
  `delta.reasoning_content` (a reasoning parser) or text inside inline `<think>...</think>` is thinking, the first
  other text is the answer (t_first_answer_ns); the server's `usage.reasoning_tokens` (SGLang, top level) or
  `usage.completion_tokens_details.reasoning_tokens` (OpenAI's place) is taken where it is non-zero. After the
  answer starts a frame costs nothing more;
- `finish_reason` "abort" and the in-band `{"error": {...}}` chunk are server aborts; a stream that ends without
  a finish reason is `stream_broken` (StreamState.close).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.client.protocol.base import Adapter, SamplingSpec, StreamState
from loadgen.prompts import Prompt
from loadgen.values import as_int


@dataclass(frozen=True)
class OpenAIOptions:
    """Per-target request options, resolved at preflight (`model` from GET /v1/models when not configured)."""

    model: str | None = None
    continuous_usage: bool = True   # ask for usage on every frame (per-frame token counts)
    spec_details: bool = False      # ask for SGLang's sglext spec_tokens_details chunk
    sglang: bool = False            # the server is SGLang: send our id as `rid`; its cache can be flushed
    server: str = "openai"          # who answers (loadgen.servers.serverid): sglang | llama.cpp | vllm | openai
    flavor: str | None = None       # the flavour `auto` resolved to (None: the configured one)
    cache_prompt: bool = True       # llama.cpp: False sends `cache_prompt: false` (no prefix reuse)
    cache_salt: bool = False        # vLLM: True sends the request id as `cache_salt` (no prefix shared with another)


class _OpenAIAdapter(Adapter):
    """What both routes share: the body's common fields and the frame parser; subclasses say where the
    prompt goes and where a frame's output is."""

    def __init__(self, options: OpenAIOptions | None = None) -> None:
        self.options = options or OpenAIOptions()

    @abstractmethod
    def _prompt_fields(self, prompt: Prompt) -> dict:
        """The body's prompt field(s) in this route's form."""

    @staticmethod
    @abstractmethod
    def _texts(choice: dict) -> tuple[object, object]:
        """The frame's (answer text, reasoning text); any non-empty string counts as output."""

    def body(self, request_id: str, prompt: Prompt, sampling: SamplingSpec) -> bytes:
        o = self.options
        body: dict = self._prompt_fields(prompt)
        if o.model is not None:
            body["model"] = o.model
        body.update(max_tokens=sampling.max_new_tokens, temperature=sampling.temperature, stream=True,
                    stream_options={"include_usage": True, "continuous_usage_stats": o.continuous_usage})
        if sampling.ignore_eos:
            body["ignore_eos"] = True
        body.update(sampling.extra_body)   # thinking controls and the like; none of them is a field set here
        if o.spec_details:
            body["return_spec_tokens_details"] = True
        if o.sglang:
            body["rid"] = request_id
        if not o.cache_prompt and not prompt.reuses_prefix:
            # llama.cpp: no reuse of a slot's cached prefix (tools/server/server-schema.cpp); a conversation turn or a
            # shared context is meant to reuse it
            body["cache_prompt"] = False
        if o.cache_salt and not prompt.reuses_prefix:
            body["cache_salt"] = request_id  # vLLM: prefix-cache blocks are keyed by the salt too (v1 engine)
        return orjson.dumps(body)

    def on_payload(self, state: StreamState, payload: bytes, t_ns: int) -> None:
        if payload == b"[DONE]":
            state.saw_done = True
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            state.fail("malformed_frame", f"frame is not a JSON object: {payload[:200]!r}")
            return
        choices = obj.get("choices")
        if choices is None and "error" in obj:
            _error_chunk(state, obj["error"])
            return
        if state.server_request_id is None and isinstance(obj.get("id"), str):
            state.server_request_id = obj["id"]
        usage: Any = obj.get("usage")   # server JSON; a dict whenever cum is not None
        cum = as_int(usage.get("completion_tokens")) if isinstance(usage, dict) else None
        ext = obj.get("sglext")
        if isinstance(ext, dict):
            _spec_details(state, ext.get("spec_tokens_details"))
        if not choices:  # [] (the usage / sglext chunks) or absent
            if cum is not None:
                if state.cum_tokens and cum > state.cum_tokens:  # tokens without text (chat's EOS): a frame
                    state.add_frame(t_ns, cum - state.cum_tokens, cum, len(payload))
                    state.cum_tokens = cum
                _totals(state, usage, cum)
                timings = obj.get("timings")  # llama.cpp (chat): on the usage chunk
                if timings is not None:
                    _timings(state, timings)
                metrics = obj.get("metrics")  # vLLM: per-request metrics on its final usage chunk
                if isinstance(metrics, dict):
                    _vllm_metrics(state, metrics, cum)
            elif choices is None and not isinstance(ext, dict):
                state.fail("malformed_frame", f"frame without choices, usage or error: {payload[:200]!r}")
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            state.fail("malformed_frame", f"choice is not an object: {payload[:200]!r}")
            return
        if state.t_first_answer_ns is None:   # thinking or answer: only until the answer starts
            state.see_output(*self._texts(choice), t_ns)
        # Per-frame counts only from a stream whose every output frame carried usage: a server that puts
        # usage on the last frame alone must not have the whole total attributed to that frame.
        if cum is not None and (state.cum_tokens or not state.num_frames):
            if cum > state.cum_tokens:
                state.add_frame(t_ns, cum - state.cum_tokens, cum, len(payload))
                state.cum_tokens = cum
        else:
            answer, reasoning = self._texts(choice)
            if (answer and isinstance(answer, str)) or (reasoning and isinstance(reasoning, str)):
                state.add_frame(t_ns, None, None, len(payload))
        reason = choice.get("finish_reason")
        if reason is not None:
            if cum is not None:
                _totals(state, usage, cum)
            timings = obj.get("timings")  # llama.cpp (completions): on the finish chunk
            if timings is not None:
                _timings(state, timings)
            _finish(state, reason)


class OpenAICompletionsAdapter(_OpenAIAdapter):
    flavor = "openai-completions"
    path = "/v1/completions"

    def _prompt_fields(self, prompt: Prompt) -> dict:
        return {"prompt": prompt_text(prompt)}

    @staticmethod
    def _texts(choice: dict) -> tuple[object, object]:
        return choice.get("text"), None


class OpenAIChatAdapter(_OpenAIAdapter):
    flavor = "openai-chat"
    path = "/v1/chat/completions"

    def _prompt_fields(self, prompt: Prompt) -> dict:
        messages = prompt.messages if prompt.messages is not None else ({"role": "user", "content": prompt.text},)
        if prompt.agent is not None:   # an agent session's turn offers its tools
            return {"messages": list(messages), "tools": list(prompt.agent.tools)}
        return {"messages": list(messages)}

    @staticmethod
    def _texts(choice: dict) -> tuple[object, object]:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return None, None
        return delta.get("content"), delta.get("reasoning_content")  # reasoning is output too (TTFT)


def prompt_text(prompt: Prompt) -> str:
    """A prompt for a text route: its text, or a chat prompt's turns as plain paragraphs."""
    if prompt.text is not None:
        return prompt.text
    return "\n\n".join(str(m.get("content", "")) for m in prompt.messages or ())


def _finish(state: StreamState, reason: object) -> None:
    state.finished = True
    state.finish_reason = reason if isinstance(reason, str) else str(reason)
    if reason == "abort":
        state.fail("server_abort", "finish_reason abort")


def _totals(state: StreamState, usage: dict, completion_tokens: int) -> None:
    """The usage chunk: the server's totals for the request."""
    state.completion_tokens = completion_tokens
    state.prompt_tokens = as_int(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        state.cached_tokens = as_int(details.get("cached_tokens"))
    completion_details = usage.get("completion_tokens_details")
    reasoning = usage.get("reasoning_tokens")   # SGLang: top level; OpenAI (vLLM): completion_tokens_details
    if reasoning is None and isinstance(completion_details, dict):
        reasoning = completion_details.get("reasoning_tokens")
    state.reasoning_tokens = as_int(reasoning)


def _spec_details(state: StreamState, details: object) -> None:
    if isinstance(details, dict):
        state.spec_verify_ct = as_int(details.get("spec_verify_ct"))
        accept = details.get("spec_accept_length")
        if isinstance(accept, (int, float)) and not isinstance(accept, bool):
            state.spec_accept_length = float(accept)


def _timings(state: StreamState, timings: object) -> None:
    """llama.cpp's `timings` (tools/server/server-common.cpp, server_slot_stats::to_json) on a request's last chunk.

    Its generated tokens `predicted_n` are: 1 from the prompt pass, then for every target-model decode pass
    (one verifying a draft, or a plain one when no draft was made) the draft tokens it accepted plus the one it
    samples itself (server-context.cpp: `n_gen += 1` per token of `ids`, `n_draft_accepted += ids.size() - 1`).
    A draft never exceeds the remaining budget (`get_n_draft_max`), so none is cut by max_tokens. Hence the
    number of target decode passes, SGLang's `spec_verify_ct` (its verify passes after the prefill), is
        spec_verify_ct = predicted_n - 1 - draft_n_accepted
    and completion_tokens / spec_verify_ct means what SGLang's acceptance length means (bonus included). It can
    only be off when a stop string or EOS ends the request inside an accepted run (ignore_eos keeps EOS out).
    `draft_n` is present only when something was drafted (a server without speculation sends none: NULL).
    llama.cpp's own "mean len" (1 + accepted / verification steps with a draft) is a different figure: it leaves
    out plain decode passes. `cache_n` = prompt tokens reused from the cache (usage's cached_tokens, same value).
    """
    if not isinstance(timings, dict):
        return
    cached = as_int(timings.get("cache_n"))
    if cached is not None and state.cached_tokens is None:
        state.cached_tokens = cached
    accepted = as_int(timings.get("draft_n_accepted"))
    predicted = as_int(timings.get("predicted_n"))
    if accepted is not None and predicted is not None and as_int(timings.get("draft_n")) is not None:
        state.spec_verify_ct = max(predicted - 1 - accepted, 0) or None
    prompt_ms, predicted_ms = timings.get("prompt_ms"), timings.get("predicted_ms")
    if isinstance(prompt_ms, (int, float)) and isinstance(predicted_ms, (int, float)) and state.server_e2e_s is None:
        state.server_e2e_s = (prompt_ms + predicted_ms) / 1000.0  # from the slot's start to its last token
        state.server_ttft_s = prompt_ms / 1000.0                  # from the slot's start to its first token


def _vllm_metrics(state: StreamState, metrics: dict, completion_tokens: int) -> None:
    """vLLM's per-request `metrics` (vllm/entrypoints/generate/base: `--enable-per-request-metrics` times,
    `--per-request-spec-decode-metrics` acceptance). Its queue, first-token and generation times together run
    from the request's entry into the engine's queue to its last token: the server's own e2e time; the first two,
    to its first token."""
    times = [metrics.get(k) for k in ("queue_time_ms", "time_to_first_token_ms", "generation_time_ms")]
    numbers = [float(t) for t in times if isinstance(t, (int, float)) and not isinstance(t, bool)]
    if len(numbers) == len(times) and state.server_e2e_s is None:
        state.server_e2e_s = sum(numbers) / 1000.0
        state.server_ttft_s = (numbers[0] + numbers[1]) / 1000.0
    _vllm_spec(state, metrics.get("speculative_decoding"), completion_tokens)


def _vllm_spec(state: StreamState, spec: object, completion_tokens: int) -> None:
    """vLLM's per-request `speculative_decoding` metrics (vllm/v1/metrics/stats.py RequestSpecDecodeMetrics,
    sent with `--per-request-spec-decode-metrics summary|detailed`): `num_spec_steps` target passes verified a
    draft and accepted `num_accepted_draft_tokens` in all. As in llama.cpp's `_timings`, the first token comes
    from the prompt pass and every later target pass (with a draft or without) yields its accepted draft tokens
    plus one, so SGLang's `spec_verify_ct` = completion_tokens - 1 - accepted. But vLLM does not trim a draft to
    the remaining max_tokens budget: tokens its last pass accepted past the budget are counted as accepted and
    dropped, and that figure is then short by them (seen: one pass in 157 at one request at a time, against the
    engine's step count). Each streamed frame that advanced the token count came from at least one pass (vLLM
    streams a pass's tokens together; a slow reader gets passes merged), so frames after the first are a second
    lower bound that counts such a last pass; the larger of the two (and of the passes that verified a draft) is
    the figure. Its own `mean_acceptance_length` (1 + accepted / num_spec_steps) goes to spec_accept_length, the
    server's figure beside ours."""
    if not isinstance(spec, dict):
        return
    accepted, steps = as_int(spec.get("num_accepted_draft_tokens")), as_int(spec.get("num_spec_steps"))
    if accepted is None or steps is None:
        return
    state.spec_verify_ct = max(completion_tokens - 1 - accepted, steps, state.num_frames - 1) or None
    mean = spec.get("mean_acceptance_length")
    if isinstance(mean, (int, float)) and not isinstance(mean, bool):
        state.spec_accept_length = float(mean)


def _error_chunk(state: StreamState, error: object) -> None:
    """`data: {"error": {...}}`: the server aborted the request mid-stream (e.g. 503 queue full)."""
    message = error.get("message") if isinstance(error, dict) else error
    code = error.get("code") if isinstance(error, dict) else None
    state.fail("server_abort", f"error frame: {message}", as_int(code))
    state.finished = True

