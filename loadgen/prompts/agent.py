"""Agent sessions (`kind = "agent"`): a session opens with a built-in task and the tools an agent offers; each time
the server answers with a tool call, a seeded tool result of the stated length is appended and the next turn sent,
until the server answers in prose (or `max_calls` results were sent).

Chat routes carry the tools as OpenAI `tools` and the history as messages (the assistant's call, then a `tool`
message with the result); text routes describe the tools in the prompt (Qwen2.5's `<tool_call>` convention) and
append each call and result to a transcript. The worker runs the turns (loadgen/client/sessions.py), reading each
call from the stream (loadgen/client/protocol/answer.py).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace

from loadgen.errors import ConfigError
from loadgen.keys import Bounds, Key
from loadgen.prompts import Agent, Prompt

CHARS_PER_TOKEN = 4      # a tool result's length in characters per stated token
MAX_CALLS = 50
MAX_RESULT_TOKENS = 32768


def _tool(name: str, description: str, **params: str) -> dict:
    properties = {p: {"type": "string", "description": text} for p, text in params.items()}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(params)}}}


# What a coding or research agent offers; `tools = N` offers the first N.
CATALOGUE = (
    _tool("search_docs", "Search the project documentation.", query="what to look for"),
    _tool("read_file", "Read a file of the repository.", path="the file's path"),
    _tool("run_tests", "Run the test suite, or part of it.", selection="a pytest selection"),
    _tool("get_weather", "Current weather for a city.", city="the city", unit="celsius or fahrenheit"),
    _tool("web_search", "Search the web.", query="the search terms"),
    _tool("write_file", "Write a file of the repository.", path="the file's path", content="the new content"),
    _tool("list_directory", "List a directory of the repository.", path="the directory"),
    _tool("run_shell", "Run a shell command in the sandbox.", command="the command line"),
)
_WORDS = ("the", "result", "of", "a", "call", "returned", "data", "for", "this", "request", "with", "status", "ok",
          "and", "rows", "matching", "query", "in", "file", "line", "value", "error", "none", "found")

# An agent source's own keys (kind = "agent"; `tasks` is a conversation's too)
AGENT_KEYS = (
    Key("tools", int, 4, "agent: how many of the catalogue's tools it offers", Bounds(1, len(CATALOGUE))),
    Key("tool_result_tokens", int, 200, "agent: each tool result's length", Bounds(1, MAX_RESULT_TOKENS)),
    Key("max_calls", int, 8, "agent: tool calls a session allows", Bounds(1, MAX_CALLS)),
)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """An agent source: how many tools it offers, how long each tool result is, how many calls a session allows."""

    tools: int
    tool_result_tokens: int
    max_calls: int
    tasks: tuple[str, ...]

    @property
    def agent(self) -> Agent:
        return Agent(CATALOGUE[:self.tools], self.tool_result_tokens * CHARS_PER_TOKEN, self.max_calls)


def parse_agent(entry: dict, key: str, tasks: tuple[str, ...]) -> AgentConfig:
    """The agent keys of a source (AGENT_KEYS; `tasks` checked by the caller)."""
    tools, result_tokens, calls = (_whole(entry, k, key) for k in AGENT_KEYS)
    return AgentConfig(tools, result_tokens, calls, tasks)


def _whole(entry: dict, k: Key, key: str) -> int:
    value = entry.get(k.name, k.default)
    if isinstance(value, bool) or not isinstance(value, int) or k.problem(value):
        assert k.check is not None
        raise ConfigError(f"{key}.{k.name}", f"must be a whole number {k.check.describe()}, got {value!r}",
                          f"e.g. {k.name} = {k.default}")
    return value


def tools_text(agent: Agent) -> str:
    """The tools described in a text route's prompt, as Qwen2.5's chat template lists them."""
    listed = "\n".join(json.dumps(t) for t in agent.tools)
    return (f"# Tools\n\nYou may call one or more functions to assist with the user query.\n\n<tools>\n{listed}\n"
            "</tools>\n\nFor each function call, return a json object with function name and arguments within "
            '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
            "\n</tool_call>")


def tool_result(session_id: str, call: int, chars: int) -> str:
    """The result of a session's call-th tool call: seeded words, `chars` characters long."""
    rng = random.Random(f"{session_id}/tool/{call}")
    words: list[str] = []
    length = 0
    while length < chars:
        word = _WORDS[int(rng.random() * len(_WORDS))]
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


def agent_turn(first: Prompt, exchanges: list[tuple[dict, dict]], session_id: str) -> Prompt:
    """Turn len(exchanges) + 1 of a session that opened with `first`: its history, then each call the server made
    (the assistant message) and the tool result sent back (the tool message)."""
    turn = len(exchanges) + 1
    if first.messages is not None:
        later = tuple(m for pair in exchanges for m in pair)
        return replace(first, prompt_id=f"{first.prompt_id}@{turn}", messages=first.messages + later,
                       target_tokens=None, session_id=session_id, turn=turn)
    assert first.text is not None
    text = first.text + "".join(f"{call.get('content') or ''}\n\nTool result: {result['content']}\n\nAssistant:"
                                for call, result in exchanges)
    return replace(first, prompt_id=f"{first.prompt_id}@{turn}", text=text, target_tokens=None,
                   session_id=session_id, turn=turn)
