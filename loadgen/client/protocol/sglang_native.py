"""SGLang native `POST /generate` streaming (see shared/reference/sglang-protocol.md).

Tokens are counted from `meta_info.completion_tokens` (cumulative in every version), never from text, so
cumulative and incremental text modes are the same to us. Middle frames are read with two `find`s and one
`int()`; only a request's first frame (for its server id) and its final frame (finish reason, spec stats)
are fully JSON-parsed. Keys inside the JSON-escaped text cannot match: their quotes are escaped.
"""

from __future__ import annotations

import orjson

from loadgen.client.protocol.base import Adapter, SamplingSpec, StreamState
from loadgen.prompts import Prompt
from loadgen.values import as_int

_CT_KEY = b'"completion_tokens":'
_META_KEY = b'"meta_info":'
_NOT_FINISHED = b'"finish_reason":null'


class SglangNativeAdapter(Adapter):
    flavor = "sglang"
    path = "/generate"

    def body(self, request_id: str, prompt: Prompt, sampling: SamplingSpec) -> bytes:
        text = prompt.text if prompt.text is not None else _messages_as_text(prompt.messages or ())
        return orjson.dumps({
            "text": text,
            "rid": request_id,
            "stream": True,
            "sampling_params": {
                "max_new_tokens": sampling.max_new_tokens,
                "ignore_eos": sampling.ignore_eos,
                "temperature": sampling.temperature,
            },
        })

    def on_payload(self, state: StreamState, payload: bytes, t_ns: int) -> None:
        if payload == b"[DONE]":
            state.saw_done = True
            return
        i = payload.rfind(_CT_KEY)
        if i < 0 or not (payload.startswith(b"{") and payload.endswith(b"}")):
            _non_token_frame(state, payload)
            return
        j = i + len(_CT_KEY)
        end = payload.find(b",", j)
        if end < 0:
            end = payload.find(b"}", j)
        try:
            cum = int(payload[j:end])
        except ValueError:
            state.fail("malformed_frame", f"bad completion_tokens in frame: {payload[:200]!r}")
            return
        first = state.server_request_id is None and state.num_frames == 0
        meta_at = payload.rfind(_META_KEY, 0, i)
        final = payload.find(_NOT_FINISHED, meta_at if meta_at >= 0 else 0) < 0
        if first or final:
            meta = _meta(state, payload)
            if meta is None:
                return
            if first:
                state.server_request_id = meta.get("id")
            if final:
                _finish(state, meta)
        delta = cum - state.cum_tokens
        if delta < 0:   # cumulative counts never shrink: a negative frame would subtract tokens in every sum
            state.fail("malformed_frame", f"completion_tokens went back from {state.cum_tokens} to {cum}")
        elif delta:
            state.cum_tokens = cum
            state.add_frame(t_ns, delta, cum, len(payload))


def _meta(state: StreamState, payload: bytes) -> dict | None:
    try:
        meta = orjson.loads(payload)["meta_info"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        state.fail("malformed_frame", f"frame is not valid JSON with meta_info: {payload[:200]!r}")
        return None
    return meta if isinstance(meta, dict) else None


def _finish(state: StreamState, meta: dict) -> None:
    """The final frame: finish reason, server-side totals and speculative stats."""
    state.finished = True
    reason = meta.get("finish_reason")
    kind = reason.get("type") if isinstance(reason, dict) else reason
    state.finish_reason = kind if isinstance(kind, str) else str(kind)
    state.completion_tokens = as_int(meta.get("completion_tokens"))
    state.prompt_tokens = as_int(meta.get("prompt_tokens"))
    state.cached_tokens = as_int(meta.get("cached_tokens"))
    state.reasoning_tokens = as_int(meta.get("reasoning_tokens"))  # the text is not read: no count of our own
    state.spec_verify_ct = as_int(meta.get("spec_verify_ct"))
    accept = meta.get("spec_accept_length")
    state.spec_accept_length = float(accept) if isinstance(accept, (int, float)) else None
    e2e = meta.get("e2e_latency")
    state.server_e2e_s = float(e2e) if isinstance(e2e, (int, float)) else None
    if kind == "abort":
        status_code = reason.get("status_code") if isinstance(reason, dict) else None
        message = reason.get("message") if isinstance(reason, dict) else None
        state.fail("server_abort", str(message) if message is not None else "aborted by server",
                   status_code if isinstance(status_code, int) else None)


def _non_token_frame(state: StreamState, payload: bytes) -> None:
    """A frame without completion_tokens: an in-band error frame, or garbage."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        obj = None
    error = obj.get("error") if isinstance(obj, dict) else None
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        code = error.get("code") if isinstance(error, dict) else None
        state.fail("server_abort", f"error frame: {message}", code if isinstance(code, int) else None)
        state.finished = True
    else:
        state.fail("malformed_frame", f"unexpected frame: {payload[:200]!r}")



def _messages_as_text(messages: tuple[dict, ...]) -> str:
    """Chat-only prompts sent to a text route: the turns as plain text, one per paragraph."""
    return "\n\n".join(str(m.get("content", "")) for m in messages)
