"""The emulator answers tool calls as SGLang's qwen25 tool parser streams them (loadgen/emulator/toolcalls.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from conftest import emulator

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "search", "parameters": {
             "type": "object", "properties": {"query": {"type": "string"}}}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _post(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _chunks(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]


def _stream(url: str, messages: list[dict], **extra) -> list[dict]:
    status, text = _post(url, {"messages": messages, "tools": TOOLS, "max_tokens": 64, "stream": True, **extra})
    assert status == 200, text
    return _chunks(text)


def test_tool_call_streams_as_sglangs_parser_then_the_answer():
    with emulator("--model-path", "m", "--hardware", "zero", "--speculative-algorithm", "NEXTN",
                  "--tool-call-parser", "qwen25", "--tool-calls", "2") as url:
        chunks = _stream(url, ASK)
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        calls = [entry for d in deltas for entry in d.get("tool_calls", [])]
        assert calls[0]["function"] == {"name": calls[0]["function"]["name"], "arguments": ""} and calls[0]["id"]
        assert all("name" not in c["function"] and "id" not in c for c in calls[1:])
        arguments = json.loads("".join(c["function"]["arguments"] for c in calls))
        tool = {t["function"]["name"]: t for t in TOOLS}[calls[0]["function"]["name"]]
        assert set(arguments) == set(tool["function"]["parameters"]["properties"])
        assert not any(d.get("content") for d in deltas)
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
        result = {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny, 21 C"}
        called = {"role": "assistant", "content": None, "tool_calls": [
            {"id": calls[0]["id"], "type": "function", "function": {"name": tool["function"]["name"],
                                                                    "arguments": json.dumps(arguments)}}]}
        second = _stream(url, ASK + [called, result])            # --tool-calls 2: one more call
        assert any(c["choices"] and c["choices"][0]["delta"].get("tool_calls") for c in second)
        final = _stream(url, ASK + [called, result, called, result], ignore_eos=True)   # then the answer in prose
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in final if c["choices"])
        assert [c["choices"][0]["finish_reason"] for c in final if c["choices"]][-1] == "length"
        ledger = json.loads(urllib.request.urlopen(url + "/emulator/requests").read())["requests"]
    assert [r["kind"] for r in ledger][:2] == ["tool_call", "tool_call"] and ledger[2]["kind"] != "tool_call"
    assert ledger[0]["finish_reason"] == "stop" and ledger[0]["completion_tokens"] < 64


def test_without_a_parser_the_call_is_inline_text_and_bad_tools_are_refused():
    with emulator("--model-path", "m", "--hardware", "zero") as url:
        chunks = _stream(url, ASK)
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert text.startswith("<tool_call>\n{\"name\": ") and text.endswith("}\n</tool_call>")
        assert json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])["name"] in ("get_weather", "search")
        status, body = _post(url, {"messages": ASK, "tools": [{"type": "function"}], "max_tokens": 8})
        assert status == 400 and "function.name" in body
        none = _stream(url, ASK, tool_choice="none")          # tool_choice none: no call
        assert "<tool_call>" not in "".join(c["choices"][0]["delta"].get("content") or ""
                                            for c in none if c["choices"])
