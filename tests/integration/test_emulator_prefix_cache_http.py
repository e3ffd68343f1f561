"""The emulator's radix cache and task families: what it reports is what it was sent (ground truth for the
conversation and shared-prefix tests), a cached prefix costs less prefill, and each family accepts as its profile
says (the Spec-Bench ratios in profiles/algorithms/*.toml)."""

from __future__ import annotations

import re

from httpcalls import request
from loadgen.emulator.launch import EmulatorThread


def _post(port: int, path: str, body: dict) -> dict:
    status, _, data = request(port, "POST", path, body)
    assert status == 200, data
    return __import__("json").loads(data)


def test_cached_tokens_are_reported_where_sglang_reports_them():
    """Native meta_info always; OpenAI usage.prompt_tokens_details only with --enable-cache-report; the ground
    truth (/emulator/requests) has the same count; /flush_cache empties the cache."""
    system = "You answer questions about the harbour's timetable. " * 30
    with EmulatorThread(["--hardware", "zero", "--enable-cache-report", "--enable-metrics"]) as emu:
        first = _post(emu.port, "/v1/chat/completions", {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "When?"}],
            "max_tokens": 8, "rid": "c1"})
        answer = first["choices"][0]["message"]["content"]
        second = _post(emu.port, "/v1/chat/completions", {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "When?"},
                         {"role": "assistant", "content": answer}, {"role": "user", "content": "And after?"}],
            "max_tokens": 8, "rid": "c2"})
        native = _post(emu.port, "/generate", {"text": system + "Is there a ferry?", "rid": "n1",
                                               "sampling_params": {"max_new_tokens": 4}})
        assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > len(system) // 4       # the system prompt, the first question and the answer
        truth = {r["rid"]: r for r in __import__("json").loads(request(emu.port, "GET", "/emulator/requests")[2])
                 ["requests"]}
        assert truth["c2"]["cached_tokens"] == cached
        assert native["meta_info"]["cached_tokens"] == truth["n1"]["cached_tokens"] == 0  # another template
        metrics = request(emu.port, "GET", "/metrics")[2].decode()
        total = sum(t["cached_tokens"] for t in truth.values())
        assert re.search(rf"^sglang:cached_tokens_total{{[^}}]*}} {float(total)}$", metrics, re.M), total
        request(emu.port, "POST", "/flush_cache")
        again = _post(emu.port, "/v1/chat/completions", {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "When?"}],
            "max_tokens": 8})
        assert again["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    with EmulatorThread(["--hardware", "zero"]) as emu:   # SGLang reports no details without the flag
        body = {"messages": [{"role": "user", "content": system}], "max_tokens": 4}
        _post(emu.port, "/v1/chat/completions", body)
        assert _post(emu.port, "/v1/chat/completions", body)["usage"]["prompt_tokens_details"] is None
