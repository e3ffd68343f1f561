"""Protocol rules beyond the frame shapes: OpenAI stream rules, auth, queue limit, metrics, start-up, drafts."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time

import orjson
import pytest

from conftest import wait_until
from httpcalls import FOREVER, engine_counts, open_generation, request
from loadgen.emulator.launch import EmulatorThread


def post(port: int, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict, bytes]:
    return request(port, "POST", path, body, headers)


def get(port: int, path: str, headers: dict | None = None) -> tuple[int, bytes]:
    status, _, data = request(port, "GET", path, headers=headers)
    return status, data


def payloads(data: bytes) -> list[dict]:
    found = re.findall(rb"data: (.*?)\n\n", data, re.S)
    assert found[-1] == b"[DONE]"
    return [json.loads(f) for f in found[:-1]]


@pytest.fixture(scope="module")
def mtp():
    with EmulatorThread(["--speculative-algorithm", "NEXTN", "--time-scale", "50", "--enable-metrics"]) as emu:
        yield emu


def test_chat_stream_role_frame_nonempty_deltas_and_separate_finish(mtp):
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 30, "ignore_eos": True, "stream": True}
    status, _, data = post(mtp.port, "/v1/chat/completions", body)
    fs = payloads(data)
    assert status == 200 and fs[0]["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant",
                                                                 "content": ""}
    middle, last = fs[1:-1], fs[-1]
    assert all(f["choices"][0]["delta"]["content"] and f["choices"][0]["finish_reason"] is None for f in middle)
    assert last["choices"][0]["delta"] == {"reasoning_content": None}
    assert last["choices"][0]["finish_reason"] == "length"
    assert "usage" not in fs[1]                          # no usage without stream_options
    assert len({f["id"] for f in fs}) == 1 and re.fullmatch(r"[0-9a-f]{32}", fs[0]["id"])


def test_completions_stream_sends_empty_deltas_and_finish_on_last_text_frame():
    with EmulatorThread(["--speculative-algorithm", "NEXTN", "--time-scale", "50"]) as emu:
        emu.call(lambda: emu.emu.engine.rng.seed(3))
        status, _, data = post(emu.port, "/v1/completions", {"prompt": "x", "max_tokens": 40, "ignore_eos": True,
                                                              "stream": True, "rid": "c1"})
        texts = [f["choices"][0]["text"] for f in payloads(data)]
        fs = payloads(data)
        rows = orjson.loads(get(emu.port, "/emulator/requests")[1])["requests"]
    assert status == 200 and fs[-1]["choices"][0]["finish_reason"] == "length" and fs[0]["id"] == "c1"
    assert rows[0]["completion_tokens"] == 40 and rows[0]["route"] == "completions"
    assert len(fs) == 1 + rows[0]["spec_verify_ct"]      # one frame per output, even with empty text
    assert "".join(texts) and all(isinstance(t, str) for t in texts)


def test_openai_headers_only_after_first_output():
    flags = ["--speculative-algorithm", "NEXTN", "--time-scale", "5", "--max-running-requests", "1"]
    with EmulatorThread(flags) as emu:
        blocker = open_generation(emu.port, FOREVER)   # holds the only slot until it is closed
        wait_until(lambda: engine_counts(emu) == (1, 0), what="the blocker running")
        headers_at: list[int] = []

        def complete() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=60)
            conn.request("POST", "/v1/completions", body=b'{"prompt":"q","max_tokens":2,"stream":true}',
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()              # blocks until the first output exists
            headers_at.append(time.time_ns())
            assert resp.status == 200
            resp.read()
        client = threading.Thread(target=complete)
        client.start()
        wait_until(lambda: engine_counts(emu) == (1, 1), what="the completion queued")
        time.sleep(0.3)                            # held in the queue (the blocker runs until closed): no headers
        early = list(headers_at)
        blocker.close()
        client.join()
        rows = {r["route"]: r for r in orjson.loads(get(emu.port, "/emulator/requests")[1])["requests"]}
    assert early == [] and headers_at[0] >= rows["completions"]["t_first_ns"]   # the emulator's own clock


def test_api_key_guards_all_but_health_and_metrics():
    with EmulatorThread(["--api-key", "sekret", "--hardware", "zero", "--enable-metrics"]) as emu:
        status, _, data = post(emu.port, "/generate", {"text": "x"})
        assert status == 401 and orjson.loads(data) == {"error": "Unauthorized"}
        assert get(emu.port, "/get_server_info")[0] == 401
        assert get(emu.port, "/get_server_info", {"Authorization": "Bearer wrong"})[0] == 401
        assert get(emu.port, "/get_server_info", {"Authorization": "Bearer sekret"})[0] == 200
        assert get(emu.port, "/health")[0] == 200 and get(emu.port, "/metrics")[0] == 200
        ok, _, _ = post(emu.port, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}},
                        {"Authorization": "Bearer sekret"})
        assert ok == 200


def test_queue_full_aborts_with_503():
    with EmulatorThread(["--time-scale", "5", "--max-running-requests", "1", "--max-queued-requests", "1"]) as emu:
        slow = {"text": "a", "sampling_params": {"max_new_tokens": 100, "ignore_eos": True}}
        held = [open_generation(emu.port, FOREVER)]
        wait_until(lambda: engine_counts(emu) == (1, 0), what="one running")
        held.append(open_generation(emu.port, FOREVER))
        wait_until(lambda: engine_counts(emu) == (1, 1), what="one running, one queued")
        status, _, data = post(emu.port, "/generate", {**slow, "stream": True})
        frame = payloads(data)[-1]
        status2, _, body2 = post(emu.port, "/generate", slow)
        for sock in held:
            sock.close()
    assert status == 200 and frame["meta_info"]["finish_reason"] == {
        "type": "abort", "message": "The request queue is full.", "status_code": 503, "err_type": None}
    assert status2 == 503 and orjson.loads(body2) == {"object": "error", "message": "The request queue is full.",
                                                      "type": "503", "param": None, "code": 503}


def test_metrics_page_has_sglang_names_and_counts(mtp):
    post(mtp.port, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}})
    status, page = get(mtp.port, "/metrics")
    text = page.decode()
    for name in ("num_running_reqs", "num_queue_reqs", "gen_throughput", "token_usage", "cache_hit_rate",
                 "spec_accept_length", "spec_accept_rate", "spec_num_draft_tokens", "spec_verify_calls_total",
                 "prompt_tokens_total", "generation_tokens_total", "num_requests_total"):
        assert re.search(rf'^sglang:{name}{{model_name="[^"]+",tp_rank="0",dp_rank="0"}} [0-9.e+-]+$', text, re.M), name
    gen = float(re.search(r"^sglang:generation_tokens_total\{.*\} (\S+)$", text, re.M).group(1))
    itl = int(re.search(r"^sglang:inter_token_latency_seconds_count\{.*\} (\S+)$", text, re.M).group(1))
    ttft = int(re.search(r"^sglang:time_to_first_token_seconds_count\{.*\} (\S+)$", text, re.M).group(1))
    assert status == 200 and gen >= 20 and itl == gen - ttft     # every token after the first is one ITL sample
    assert 'sglang:e2e_request_latency_seconds_bucket{model_name="' in text and 'le="+Inf"' in text


def test_metrics_absent_without_flag():
    with EmulatorThread(["--hardware", "zero"]) as emu:
        assert get(emu.port, "/metrics")[0] == 404


def test_health_generate_is_503_while_starting_and_requests_wait():
    with EmulatorThread(["--hardware", "zero", "--startup-delay-s", "2.0"]) as emu:
        assert get(emu.port, "/health_generate")[0] == 503 and get(emu.port, "/health")[0] == 503
        status, _, _ = post(emu.port, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 3}})
        assert status == 200
        assert get(emu.port, "/health_generate")[0] == 200
        [row] = orjson.loads(get(emu.port, "/emulator/requests")[1])["requests"]
        up_ns = emu.call(lambda: emu.emu.startup_time + emu.args.startup_delay_s) * 1e9
    assert row["completion_tokens"] <= 3 and row["t_received_ns"] < up_ns <= row["t_first_ns"] + 1e6   # it waited


def test_client_disconnect_while_queued_is_recorded():
    with EmulatorThread(["--time-scale", "5", "--max-running-requests", "1"]) as emu:
        blocker = open_generation(emu.port, FOREVER)   # holds the only slot until it is closed
        wait_until(lambda: engine_counts(emu) == (1, 0), what="the blocker running")
        s = open_generation(emu.port, {"text": "b", "rid": "gone", "sampling_params": {"max_new_tokens": 5}})
        wait_until(lambda: engine_counts(emu) == (1, 1), what="'gone' queued")
        s.close()

        def recorded() -> dict:
            return {r["id"]: r for r in orjson.loads(get(emu.port, "/emulator/requests")[1])["requests"]}
        wait_until(lambda: "gone" in recorded(), what="the disconnect recorded")
        rows, counts = recorded(), engine_counts(emu)
        blocker.close()
    assert rows["gone"]["status"] == "client_disconnected" and rows["gone"]["completion_tokens"] == 0
    assert counts == (1, 0)   # the blocker still runs; the queue is empty
