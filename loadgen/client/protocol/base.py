"""What every API flavour shares: the per-request record, the frame column buffer, the adapter interface.

An adapter turns a request spec into an HTTP body and each SSE payload into updates of a `StreamState`
(one per request) plus rows in a `FrameBuffer` (one per worker). Adapters never raise on server bytes:
whatever arrives is classified into the request's status.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from loadgen.prompts import Prompt
from loadgen.results import schema


@dataclass(frozen=True, slots=True)
class SamplingSpec:
    """Output policy shared by every request of a run."""

    max_new_tokens: int
    ignore_eos: bool = True
    temperature: float = 0.0
    extra_body: tuple[tuple[str, Any], ...] = ()   # prompts.extra_body: more fields of an OpenAI route's body

    def for_prompt(self, prompt: Prompt) -> SamplingSpec:
        """The policy for one prompt: its own output length (a trace row's) when it has one."""
        if prompt.max_new_tokens is None or prompt.max_new_tokens == self.max_new_tokens:
            return self
        return SamplingSpec(prompt.max_new_tokens, self.ignore_eos, self.temperature, self.extra_body)


class FrameBuffer:
    """Column lists for the `frames` table; appending costs a few list appends per frame."""

    __slots__ = ("request_id", "seq", "t_ns", "tokens", "cum_tokens", "bytes")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.request_id: list[str] = []
        self.seq: list[int] = []
        self.t_ns: list[int] = []
        self.tokens: list[int | None] = []
        self.cum_tokens: list[int | None] = []
        self.bytes: list[int] = []

    def drop(self, n: int) -> None:
        """Forget the first `n` rows (shipped); rows appended meanwhile stay."""
        for column in self.columns().values():
            del column[:n]

    def __len__(self) -> int:
        return len(self.t_ns)

    def columns(self) -> dict[str, list]:
        return {name: getattr(self, name) for name in self.__slots__}


# `requests` columns that say where a request ran and what it asked, not what was measured: the worker fills
# them when it builds the row (loadgen.client.shipping). Every other column is the StreamState field of that name.
CONTEXT_COLUMNS = ("run_id", "step_id", "target", "node", "worker", "prompt_id", "prompt_kind", "template",
                   "session_id", "turn", "shared_prefix", "prompt_tokens_target", "completion_tokens_target")
MEASURED = tuple(name for name in schema.REQUESTS.names if name not in CONTEXT_COLUMNS)


class StreamState:
    """Everything measured about one request; becomes exactly one `requests` row. Its fields are the
    MEASURED columns (slots: attribute access on the hot path stays slot access), plus its working state."""

    __slots__ = MEASURED + ("prompt", "cum_tokens", "finished", "saw_done", "frames", "thought", "think_open",
                            "reasoning_cum")
    # Types of the fields __init__ sets to None in chains (declarations only: nothing is stored on the class).
    server_request_id: str | None
    finish_reason: str | None
    error: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    spec_verify_ct: int | None
    spec_accept_length: float | None
    server_e2e_s: float | None
    server_ttft_s: float | None
    t_sent_ns: int | None
    t_headers_ns: int | None
    t_first_token_ns: int | None
    t_first_answer_ns: int | None
    reasoning_tokens: int | None
    reasoning_from: str | None
    turn_kind: str | None
    t_last_token_ns: int | None
    t_done_ns: int | None

    def __init__(self, request_id: str, prompt: Prompt, phase: str, t_scheduled_ns: int, frames: FrameBuffer):
        self.request_id = request_id
        self.prompt = prompt
        self.phase = phase
        self.frames = frames
        self.t_scheduled_ns = t_scheduled_ns
        self.server_request_id = self.finish_reason = self.error = None
        self.prompt_tokens = self.completion_tokens = self.cached_tokens = None
        self.spec_verify_ct = self.spec_accept_length = self.server_e2e_s = self.server_ttft_s = None
        self.t_sent_ns = self.t_headers_ns = self.t_first_token_ns = self.t_last_token_ns = None
        self.t_done_ns = self.t_first_answer_ns = self.reasoning_tokens = self.reasoning_from = self.turn_kind = None
        self.http_status: int | None = None
        self.status: str | None = None
        self.num_frames = 0
        self.cum_tokens = 0
        self.resent = False     # sent again on a new connection (loadgen.client.http_stream)
        self.finished = False   # a frame with a finish reason arrived
        self.saw_done = False   # `data: [DONE]` arrived
        self.thought = False    # thinking arrived (reasoning_content, or text after an inline <think>)
        self.think_open = False  # inside inline <think> ... </think> text
        self.reasoning_cum = 0  # tokens of the frames read before the read that held the first answer output

    def see_output(self, answer: object, reasoning: object, t_ns: int) -> None:
        """Until the answer starts (t_first_answer_ns is None), a frame's output before its tokens are added:
        `reasoning` is a reasoning parser's text, `answer` the route's own text (maybe inline think tags)."""
        if t_ns != self.t_last_token_ns:
            self.reasoning_cum = self.cum_tokens   # the frames of earlier reads: all thinking so far
        if reasoning and isinstance(reasoning, str):
            self.thought = True
        if answer and isinstance(answer, str) and _answers(self, answer):
            self.t_first_answer_ns = t_ns

    def add_frame(self, t_ns: int, tokens: int | None, cum_tokens: int | None, nbytes: int) -> None:
        """Record one frame that carries output."""
        f = self.frames
        f.request_id.append(self.request_id)
        f.seq.append(self.num_frames)
        f.t_ns.append(t_ns)
        f.tokens.append(tokens)
        f.cum_tokens.append(cum_tokens)
        f.bytes.append(nbytes)
        self.num_frames += 1
        if self.t_first_token_ns is None:
            self.t_first_token_ns = t_ns
        self.t_last_token_ns = t_ns

    def fail(self, status: str, error: str | None, http_status: int | None = None) -> None:
        """Mark a failure. The first one wins (a timeout's own disconnect is no "broken stream"), except that a
        malformed frame, after which reading goes on, gives way to whatever ends the stream later."""
        if self.status is None or (self.status == "malformed_frame" and status != "malformed_frame"):
            self.status = status
            if error is not None:
                self.error = error[:2000]
            if http_status is not None:
                self.http_status = http_status

    def close(self, t_done_ns: int) -> None:
        """End of the HTTP exchange: decide `ok` vs `stream_broken` if nothing failed before."""
        self.t_done_ns = t_done_ns
        if self.status is None:
            if self.finished:
                self.status = "ok"
            else:
                self.status = "stream_broken"
                self.error = self.error or "stream ended without a finish frame"
        if self.completion_tokens is None and self.num_frames:
            self.completion_tokens = self.cum_tokens or None
        self._reasoning()

    def _reasoning(self) -> None:
        """Thinking tokens: the server's count where it gives one, else counted from the frames before the answer
        (NULL when the frames carried no token counts); no thinking seen: 0, and the first output is the answer."""
        if self.reasoning_tokens:
            self.reasoning_from = "server"
        elif self.thought:
            answered = self.t_first_answer_ns is not None
            self.reasoning_tokens = (self.reasoning_cum or None) if answered else self.completion_tokens
            self.reasoning_from = "stream"
        elif self.num_frames:
            self.reasoning_tokens, self.reasoning_from = 0, "stream"
            self.t_first_answer_ns = self.t_first_token_ns


def _answers(state: StreamState, text: str) -> bool:
    """Whether output text carries answer (not inline thinking): `<think>` opens thinking when nothing but white
    space precedes it, `</think>` closes it; after thinking, white space alone is not yet the answer."""
    if state.think_open:
        end = text.find("</think>")
        if end < 0:
            return False
        state.think_open = False
        return bool(text[end + 8:].strip())
    start = text.find("<think>")
    if start >= 0 and not text[:start].strip():
        state.thought = state.think_open = True
        return _answers(state, text[start + 7:])
    return not state.thought or bool(text.strip())


class Adapter(ABC):
    """One API flavour (SGLang native, OpenAI completions, OpenAI chat)."""

    flavor: str
    path: str

    @abstractmethod
    def body(self, request_id: str, prompt: Prompt, sampling: SamplingSpec) -> bytes:
        """The JSON request body for one streaming request."""

    @abstractmethod
    def on_payload(self, state: StreamState, payload: bytes, t_ns: int) -> None:
        """Consume one SSE data payload that arrived at `t_ns`; never raises on server bytes."""
