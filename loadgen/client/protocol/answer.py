"""The answer's text, kept for conversation requests only: a session's next turn appends it to the history, so the
server caches exactly what it produced. Every other request goes through its adapter alone (the hot path reads no
text: two `find`s per native frame).

`AnswerText` wraps a request's adapter: each payload goes to the adapter first, then its text is taken:
- SGLang native: `text` is the whole answer so far (the default, and `output_ids` as long as `completion_tokens`),
  or the newest piece (--incremental-streaming-output: fewer ids than completion_tokens). SGLang 0.5.3 sent
  cumulative text with delta ids, which reads as pieces here: its histories would repeat text (and miss the cache);
  a frame without output_ids is cumulative when it starts with the answer so far;
- OpenAI completions: `choices[0].text` pieces; chat: `choices[0].delta.content` pieces (reasoning_content is not
  part of the answer a chat history carries).

For an agent session's turn (`agent=True`) it also merges chat's `delta.tool_calls` entries (by index: id and name
once, arguments appended) and, at the finish frame, says what the turn was (`requests.turn_kind`): `tool_call` when
the server called a tool (structured calls, or a `<tool_call>` in the text of a server without a tool parser),
`answer` otherwise.
"""

from __future__ import annotations

import orjson

from loadgen.client.protocol.base import Adapter, SamplingSpec, StreamState
from loadgen.prompts import Prompt


class AnswerText(Adapter):
    """One request's adapter, which also keeps the answer's text (`text`)."""

    def __init__(self, adapter: Adapter, agent: bool = False) -> None:
        self.adapter = adapter
        self.flavor, self.path = adapter.flavor, adapter.path
        self.parts: list[str] = []
        self.agent = agent
        self.calls: dict[int, dict] = {}   # agent turns: the tool calls streamed, by index

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def body(self, request_id: str, prompt: Prompt, sampling: SamplingSpec) -> bytes:
        return self.adapter.body(request_id, prompt, sampling)

    def on_payload(self, state: StreamState, payload: bytes, t_ns: int) -> None:
        self.adapter.on_payload(state, payload, t_ns)
        if payload == b"[DONE]":
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return   # the adapter has classified it
        if isinstance(obj, dict):
            self._take(obj)
            if self.agent and state.turn_kind is None and state.finished:
                state.turn_kind = "tool_call" if self.called else "answer"

    @property
    def called(self) -> bool:
        """The server answered with a tool call."""
        return bool(self.calls) or "<tool_call>" in self.text

    def exchange(self, result: str) -> tuple[dict, dict]:
        """The turn's call as chat history: the assistant's message, then the tool message carrying `result`."""
        if not self.calls:   # inline text (no tool parser): the model's own words, answered as one call
            return {"role": "assistant", "content": self.text}, {"role": "tool", "content": result}
        calls = [{"id": c.get("id") or f"call_{k}", "type": "function",
                  "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")}}
                 for k, c in sorted(self.calls.items())]
        message = {"role": "assistant", "content": self.text or None, "tool_calls": calls}
        return message, {"role": "tool", "tool_call_id": calls[0]["id"], "content": result}

    def _take(self, obj: dict) -> None:
        if self.flavor == "sglang":
            text, ids, meta = obj.get("text"), obj.get("output_ids"), obj.get("meta_info")
            if not isinstance(text, str):
                return
            count = meta.get("completion_tokens") if isinstance(meta, dict) else None
            so_far = self.text
            cumulative = len(ids) == count if isinstance(ids, list) else text.startswith(so_far)
            self.parts = [text] if cumulative else [*self.parts, text]
            return
        choices = obj.get("choices")
        if not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        delta = choice.get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(piece, str):
            self.parts.append(piece)
        entries = delta.get("tool_calls") if isinstance(delta, dict) else None
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict):
                self._merge(entry)

    def _merge(self, entry: dict) -> None:
        """One `delta.tool_calls` entry: the call's id and name arrive once, its arguments in pieces."""
        index, function, call_id = entry.get("index"), entry.get("function"), entry.get("id")
        call = self.calls.setdefault(index if isinstance(index, int) else 0, {})
        if isinstance(call_id, str):
            call["id"] = call_id
        if not isinstance(function, dict):
            return
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str):
            call["name"] = name
        if isinstance(arguments, str):
            call["arguments"] = call.get("arguments", "") + arguments
