"""The emulator's native /generate route and server-state routes, checked on the wire (real HTTP on loopback)."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import time

import orjson
import pytest

from conftest import wait_until
from httpcalls import FOREVER, engine_counts, open_generation, request
from loadgen.emulator.launch import EmulatorProcess, EmulatorThread

DFLASH2 = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "loadgen/emulator/drafts/dflash2",
           "--speculative-num-draft-tokens", "8"]
FAST = ["--time-scale", "50"]
FRAME = re.compile(rb"data: (\{.*?\}|\[DONE\])\n\n", re.S)
CODE = "def add(a, b):\n    return a + b\n# write tests for add() using pytest\n"


def sse_frames(data: bytes) -> list[bytes]:
    """Split an SSE body into frame payloads, asserting nothing but whole frames is in it."""
    frames = FRAME.findall(data)
    assert b"".join(b"data: " + f + b"\n\n" for f in frames) == data
    return frames


def generate(port: int, text: str = CODE, stream: bool = True, rid: str | None = None, **sp) -> list[dict] | dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": 40, "ignore_eos": True, **sp}, "stream": stream}
    if rid is not None:
        body["rid"] = rid
    status, _, data = request(port, "POST", "/generate", body)
    assert status == 200, data
    if not stream:
        return orjson.loads(data)
    frames = sse_frames(data)
    assert frames[-1] == b"[DONE]"
    return [orjson.loads(f) for f in frames[:-1]]


@pytest.fixture(scope="module")
def dflash():
    with EmulatorThread(DFLASH2 + FAST + ["--decode-log-interval", "5"]) as emu:
        yield emu


def test_stream_frames_are_compact_json_and_end_with_done(dflash):
    status, headers, data = request(dflash.port, "POST", "/generate",
                                    {"text": CODE, "sampling_params": {"max_new_tokens": 30, "ignore_eos": True},
                                     "stream": True})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert headers.get("Transfer-Encoding") == "chunked"
    frames = sse_frames(data)
    assert data.endswith(b"data: [DONE]\n\n") and frames.count(b"[DONE]") == 1
    for f in frames[:-1]:
        assert orjson.dumps(orjson.loads(f)) == f          # compact: no spaces, no keep-alives
        assert set(orjson.loads(f)) == {"text", "output_ids", "meta_info"}


def test_cumulative_output_and_completion_tokens(dflash):
    frames = generate(dflash.port, max_new_tokens=60)
    ids_prev, text_prev, ct_prev = [], "", 0
    for f in frames:
        m = f["meta_info"]
        assert f["output_ids"][:len(ids_prev)] == ids_prev and f["text"].startswith(text_prev)
        assert m["completion_tokens"] == len(f["output_ids"]) > ct_prev
        for key in ("id", "finish_reason", "prompt_tokens", "cached_tokens", "weight_version", "num_retractions"):
            assert key in m
        ids_prev, text_prev, ct_prev = f["output_ids"], f["text"], m["completion_tokens"]
    assert all(f["meta_info"]["finish_reason"] is None for f in frames[:-1])
    last = frames[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 60} and last["completion_tokens"] == 60
    assert last["spec_accept_length"] == pytest.approx(60 / last["spec_verify_ct"])
    assert "e2e_latency" in last and "e2e_latency" not in frames[0]["meta_info"]
    # under speculation one frame carries a whole verify step: fewer frames than tokens
    assert len(frames) == 1 + last["spec_verify_ct"] < 60


def test_incremental_streaming_output_sends_deltas():
    with EmulatorThread(DFLASH2 + FAST + ["--incremental-streaming-output"]) as emu:
        frames = generate(emu.port, max_new_tokens=50)
        whole = generate(emu.port, stream=False, max_new_tokens=50)
    ids = [i for f in frames for i in f["output_ids"]]
    assert len(ids) == 50 == frames[-1]["meta_info"]["completion_tokens"]
    assert [f["meta_info"]["completion_tokens"] for f in frames] == \
        [sum(len(g["output_ids"]) for g in frames[:i + 1]) for i in range(len(frames))]   # still cumulative
    assert "".join(f["text"] for f in frames) and len(whole["output_ids"]) == 50


def test_rid_is_the_response_id_and_ground_truth_matches(dflash):
    request(dflash.port, "POST", "/emulator/reset")
    frames = generate(dflash.port, max_new_tokens=33, rid="my-rid-1")
    assert {f["meta_info"]["id"] for f in frames} == {"my-rid-1"}
    other = generate(dflash.port, max_new_tokens=5)
    assert re.fullmatch(r"[0-9a-f]{32}", other[0]["meta_info"]["id"])
    _, _, data = request(dflash.port, "GET", "/emulator/requests")
    rows = {r["id"]: r for r in orjson.loads(data)["requests"]}
    row = rows["my-rid-1"]
    assert row["rid"] == "my-rid-1" and row["kind"] == "code" and row["status"] == "finished"
    assert row["completion_tokens"] == 33 and row["spec_verify_ct"] == frames[-1]["meta_info"]["spec_verify_ct"]
    assert row["finish_reason"] == "length" and row["fault"] is None
    assert row["t_received_ns"] <= row["t_first_ns"] <= row["t_done_ns"]
    assert abs(row["t_received_ns"] - time.time_ns()) < 60e9
    assert row["prompt_tokens"] == -(-len(CODE) // 4)


def test_accepted_per_verify_step_sums_to_completion_tokens(dflash):
    request(dflash.port, "POST", "/emulator/reset")
    for n in (1, 2, 17, 64):
        generate(dflash.port, max_new_tokens=n)
    reqs = dflash.call(lambda: list(dflash.emu.engine.ledger))
    assert [r.completion_tokens for r in reqs] == [1, 2, 17, 64]
    for r in reqs:
        assert len(r.accepted) == r.spec_verify_ct
        assert 1 + sum(r.accepted) == r.completion_tokens      # prefill's token + every verify step's
        assert all(1 <= a <= 8 for a in r.accepted)


def test_without_ignore_eos_a_natural_stop_ends_with_eos(dflash):
    ends = [generate(dflash.port, stream=False, max_new_tokens=2000, ignore_eos=False) for _ in range(4)]
    for out in ends:
        fr = out["meta_info"]["finish_reason"]
        n = out["meta_info"]["completion_tokens"]
        if fr["type"] == "stop":
            assert fr["matched"] == 151645 and out["output_ids"][-1] == 151645 and n < 2000
        else:
            assert fr == {"type": "length", "length": 2000} and n == 2000
    assert any(o["meta_info"]["finish_reason"]["type"] == "stop" for o in ends)


@pytest.mark.parametrize("sp,message", [
    ({"max_new_tokens": 128.0}, "invalid type: floating point `128.0`, expected i64"),
    ({"bogus": 1}, "unknown field `bogus`, expected one of `max_new_tokens`, `stop`,"),
    ({"ignore_eos": "yes"}, 'invalid type: string "yes", expected a boolean'),
])
def test_sampling_params_are_strict(dflash, sp, message):
    status, _, data = request(dflash.port, "POST", "/generate", {"text": "hi", "sampling_params": sp})
    assert status == 400
    err = orjson.loads(data)["error"]
    assert isinstance(err, str) and err.startswith(message)


def test_server_info_reports_spec_args_and_refreshes_accept_length(dflash):
    _, _, data = request(dflash.port, "GET", "/get_server_info")
    info = orjson.loads(data)
    assert info["speculative_algorithm"] == "DFLASH" and info["speculative_num_draft_tokens"] == 8
    assert info["speculative_num_steps"] == 1 and info["speculative_eagle_topk"] == 1
    assert info["emulated"] is True and info["emulator"]["hardware"] == "gb10"
    assert info["emulator"]["model_profile"] == "qwen3.8-27b-nvfp4" and info["version"] == "0.5.23"
    assert request(dflash.port, "POST", "/flush_cache")[0] == 200
    generate(dflash.port, max_new_tokens=200)
    st = orjson.loads(request(dflash.port, "GET", "/server_info")[2])["internal_states"][0]
    c = dflash.call(lambda: dflash.emu.engine.counters)
    refreshed_at = c.decode_steps - c.decode_steps % 5
    assert refreshed_at > 0 and 2.0 < st["avg_spec_accept_length"] < 8.0
    assert st["last_gen_throughput"] > 0


def test_flush_cache_is_refused_while_busy_and_resets_counters(dflash):
    busy = open_generation(dflash.port, FOREVER)
    wait_until(lambda: engine_counts(dflash) == (1, 0), what="the request running")
    status, _, body = request(dflash.port, "POST", "/flush_cache")
    busy.close()
    wait_until(lambda: engine_counts(dflash) == (0, 0), what="the closed request gone")
    assert status == 400
    assert request(dflash.port, "POST", "/flush_cache")[0] == 200
    assert dflash.call(lambda: dflash.emu.engine.counters.verify_steps) == 0


def test_headers_come_at_once_and_disconnect_frees_the_slot():
    with EmulatorThread(DFLASH2 + ["--max-running-requests", "1", "--time-scale", "5"]) as emu:
        s = open_generation(emu.port, {"text": "x" * 400, "rid": "long", "stream": True,
                                       "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}})
        head = s.recv(65536)
        assert head.startswith(b"HTTP/1.1 200")
        while b"data:" not in head:                         # a token frame: it is generating
            head += s.recv(65536)
        s.close()                                           # client goes away mid-stream
        wait_until(lambda: engine_counts(emu) == (0, 0), what="the slot freed")   # not after 5000 tokens
        frames = generate(emu.port, max_new_tokens=3)
        assert frames[-1]["meta_info"]["completion_tokens"] == 3
        rows = {r["id"]: r for r in orjson.loads(request(emu.port, "GET", "/emulator/requests")[2])["requests"]}
        assert rows["long"]["status"] == "client_disconnected"
        assert 0 < rows["long"]["completion_tokens"] < 5000 and rows["long"]["t_done_ns"]


def test_queued_request_gets_headers_before_its_first_token():
    with EmulatorThread(DFLASH2 + ["--max-running-requests", "1", "--time-scale", "5"]) as emu:
        blocker = open_generation(emu.port, FOREVER)        # holds the only slot until it is closed
        wait_until(lambda: engine_counts(emu) == (1, 0), what="the blocker running")
        conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=30)
        conn.request("POST", "/generate", body=json.dumps({"text": "hello", "stream": True,
                     "sampling_params": {"max_new_tokens": 2}}), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()                           # status + headers ...
        queued = engine_counts(emu)                         # ... while it still waits for the slot: no token yet
        blocker.close()
        body = resp.read()
        assert resp.status == 200 and queued == (1, 1) and body.endswith(b"data: [DONE]\n\n")


def test_cli_rejects_unknown_flag_and_serves_from_a_process():
    out = subprocess.run([sys.executable, "-m", "loadgen.emulator", "--model-path", "m", "--no-such-flag"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--no-such-flag" in out.stderr
    with EmulatorProcess(["--speculative-algorithm", "NEXTN", "--hardware", "zero", "--served-model-name", "q"]) as p:
        info = orjson.loads(request(p.port, "GET", "/get_server_info")[2])
        assert info["speculative_algorithm"] == "NEXTN" and info["speculative_num_draft_tokens"] == 4
        assert info["served_model_name"] == "q" and info["emulator"]["hardware"] == "zero"
        frames = generate(p.port, max_new_tokens=10)
        assert frames[-1]["meta_info"]["completion_tokens"] == 10
        assert request(p.port, "GET", "/health")[0] == 200
        assert request(p.port, "GET", "/health_generate")[0] == 200
        models = orjson.loads(request(p.port, "GET", "/v1/models")[2])
        assert models["data"][0]["id"] == "q"
