"""Tool calls as a Qwen2.5-style model writes them and SGLang's tool parser (`--tool-call-parser qwen25`) streams them.

The model's text: `<tool_call>\\n{"name": "<tool>", "arguments": {...}}\\n</tool_call>`, then its end-of-turn token.
With the parser, chat streams no content for it but `delta.tool_calls`: first the call's id, type and name with
empty arguments once the name is complete, then the arguments' JSON text as it is generated
(base_format_detector.parse_streaming_increment sends the name first, then argument diffs), and the finish reason
`tool_calls` instead of `stop`. SGLang holds back a partial value until its partial-JSON parse is stable; the
emulator sends each step's characters (a frame's boundaries differ, its tokens do not).

When a request answers with a call: it carries `tools` (tool_choice not "none") and fewer tool results follow the
last user message than --tool-calls allows; otherwise it answers in prose, as after the last tool result.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from dataclasses import dataclass
from typing import Any

from loadgen.emulator import vocab

OPEN, CLOSE = "<tool_call>\n", "\n</tool_call>"   # <tool_call> and </tool_call> are one token each
_PIECE = re.compile(r" ?\w+| ?[^\w\s]|\s")   # one token: a word, a punctuation mark or a white-space character


class BadTools(ValueError):
    """A `tools` list the server refuses (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One planned call: its id, tool name, arguments JSON, and the text the model writes for it, token by token."""

    id: str
    name: str
    arguments: str
    pieces: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def tool_names(tools: Any) -> list[str]:
    """The function names of an OpenAI `tools` list; BadTools when it is not one."""
    if not isinstance(tools, list):
        raise BadTools("tools must be a list of {type: function, function: {name, parameters}} objects.")
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadTools(f"each tool needs function.name, got {tool!r}.")
        names.append(function["name"])
    return names


def calls_due(body: dict, allowed: int) -> bool:
    """Whether this chat request answers with a tool call: tools offered, and fewer than `allowed` tool results
    since the last user message."""
    if not body.get("tools") or body.get("tool_choice") == "none" or allowed < 1:
        return False
    messages = body.get("messages") or []
    results = 0
    for message in reversed(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            break
        results += role == "tool"
    return results < allowed


def plan_call(rng: random.Random, tools: list[dict]) -> ToolCall:
    """A call of one of the offered tools, each of its declared parameters given a short value."""
    function = tools[int(rng.random() * len(tools))]["function"]
    params = function.get("parameters")
    properties = params.get("properties") if isinstance(params, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    words = [p.strip() for p in vocab.PIECES[:30] if p.strip().isalpha()]
    arguments = {name: " ".join(words[int(rng.random() * len(words))] for _ in range(1 + int(rng.random() * 4)))
                 for name in properties}
    args_json = json.dumps(arguments)   # SGLang's own rendering of the arguments (json.dumps, default separators)
    body = json.dumps({"name": function["name"], "arguments": arguments})
    pieces = ("<tool_call>", "\n", *_PIECE.findall(body), "\n", "</tool_call>")
    return ToolCall(f"call_{uuid.UUID(int=rng.getrandbits(128)).hex[:24]}", function["name"], args_json, pieces)


class CallStream:
    """What SGLang's parser sends of one call as its text grows: the name chunk once, then argument diffs."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        self.name_sent = False
        self.args_sent = 0
        head = OPEN + json.dumps({"name": call.name, "arguments": None})[:-5]   # text up to the arguments' value
        self._name_end = len(OPEN) + len(json.dumps({"name": call.name}))  # past the closing quote of the name
        self._args_start = len(head)

    def deltas(self, text: str) -> list[dict]:
        """The `tool_calls` delta entries for the call's text so far (its first characters, any length)."""
        out: list[dict] = []
        if not self.name_sent and len(text) >= self._name_end:
            self.name_sent = True
            out.append({"id": self.call.id, "index": 0, "type": "function",
                        "function": {"name": self.call.name, "arguments": ""}})
        if self.name_sent:
            upto = min(max(0, len(text) - self._args_start), len(self.call.arguments))
            if upto > self.args_sent:
                out.append({"index": 0, "type": "function",
                            "function": {"arguments": self.call.arguments[self.args_sent:upto]}})
                self.args_sent = upto
        return out

    def message(self) -> dict:
        """The call as a non-streaming message's tool_calls entry."""
        return {"id": self.call.id, "index": 0, "type": "function",
                "function": {"name": self.call.name, "arguments": self.call.arguments}}
