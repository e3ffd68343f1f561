"""Fault injection: each fault does what the firehose's does on the wire, and is recorded in the ground truth."""

from __future__ import annotations

import asyncio
import re
import socket
import time

import orjson

from httpcalls import request
from loadgen.emulator.faults import Fault
from loadgen.emulator.launch import EmulatorThread
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.streaming import _apply

BODY = {"text": "def f():\n    pass\n", "stream": True, "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}


def raw_stream(port: int, path: str = "/generate", body: dict = BODY) -> tuple[bytes, str]:
    """Everything the server sent on one connection, and how it ended: 'eof' or 'reset'."""
    data = orjson.dumps(body)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
              "\r\nConnection: close\r\n\r\n".encode() + data)
    out, how = b"", "eof"
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        how = "reset"
    s.close()
    return out, how


def dechunk(raw: bytes) -> tuple[bytes, bool]:
    """HTTP/1.1 chunked body and whether its terminating zero chunk arrived."""
    body = raw.split(b"\r\n\r\n", 1)[1]
    out, complete = b"", False
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            complete = True
            break
        out, body = out + rest[:size], rest[size + 2:]
    return out, complete


def truth(port: int) -> dict:
    return orjson.loads(request(port, "GET", "/emulator/requests", timeout=10)[2])["requests"][-1]


def faulted(*flags: str):
    return EmulatorThread(["--speculative-algorithm", "NEXTN", "--time-scale", "50", "--fault-rate", "1",
                           "--fault-frame", "3", *flags])


def test_close_after_n_frames_fin_and_rst():
    for mode, expect in (("fin", "eof"), ("rst", "reset")):
        with faulted("--fault-close-after", "2", "--fault-close-mode", mode) as emu:
            raw, how = raw_stream(emu.port)
            body, complete = dechunk(raw)
            row = truth(emu.port)
        assert how == expect and not complete
        assert body.count(b"data: ") == 2 and b"[DONE]" not in body
        assert row["fault"] == {"type": "close", "at": 2, "applied": True, "mode": mode}
        assert row["status"] == "faulted" and row["completion_tokens"] < 60


def test_http_fault_answers_at_once_with_sglang_error_body():
    with faulted("--fault-http", "429") as emu:
        raw, _ = raw_stream(emu.port)
        row = truth(emu.port)
    assert raw.startswith(b"HTTP/1.1 429")
    err = orjson.loads(raw.split(b"\r\n\r\n", 1)[1])
    assert err["object"] == "error" and err["code"] == 429 and err["type"] == "429" and row["id"] in err["message"]
    assert row["fault"]["type"] == "http" and row["status"] == "faulted" and row["completion_tokens"] == 0


def test_stall_delays_frame_k():
    with faulted("--fault-stall-ms", "400") as emu:
        t0 = time.monotonic()
        raw, _ = raw_stream(emu.port)
        elapsed = time.monotonic() - t0
        row = truth(emu.port)
    body, complete = dechunk(raw)
    assert complete and body.endswith(b"data: [DONE]\n\n") and elapsed > 0.4
    assert row["fault"] == {"type": "stall", "at": 3, "applied": True, "ms": 400.0} and row["status"] == "finished"


def test_malformed_frame_then_normal_stream():
    with faulted("--fault-malformed") as emu:
        body, complete = dechunk(raw_stream(emu.port)[0])
        row = truth(emu.port)
    frames = re.findall(rb"data: (.*?)\n\n", body, re.S)
    bad = [f for f in frames if f != b"[DONE]" and not _is_json(f)]
    assert complete and len(bad) == 1 and frames.index(bad[0]) == 3 and frames[-1] == b"[DONE]"
    assert orjson.loads(frames[-2])["meta_info"]["completion_tokens"] == 60 and row["fault"]["applied"]


def _is_json(b: bytes) -> bool:
    try:
        orjson.loads(b)
        return True
    except orjson.JSONDecodeError:
        return False


def test_abort_native_and_openai():
    with faulted("--fault-abort") as emu:
        body, complete = dechunk(raw_stream(emu.port)[0])
        native = re.findall(rb"data: (.*?)\n\n", body, re.S)
        oa, _ = dechunk(raw_stream(emu.port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "x"}], "max_tokens": 60, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}})[0])
        row = truth(emu.port)
    fin = orjson.loads(native[-2])["meta_info"]["finish_reason"]
    assert complete and native[-1] == b"[DONE]" and len(native) == 5
    assert fin["type"] == "abort" and fin["status_code"] == 503
    frames = re.findall(rb"data: (.*?)\n\n", oa, re.S)
    err = [f for f in frames if f.startswith(b'{"error": ')]
    assert len(err) == 1 and b'"code": 503' in err[0] and b'"type": "SERVICE_UNAVAILABLE"' in err[0]
    assert orjson.loads(frames[-2])["choices"] == [] and frames[-1] == b"[DONE]"
    assert row["fault"]["type"] == "abort" and row["status"] == "faulted"


def test_no_done_ends_body_cleanly_after_k_frames_or_drops_only_done():
    with faulted("--fault-no-done") as emu:
        body, complete = dechunk(raw_stream(emu.port)[0])
        row = truth(emu.port)
    assert complete and body.count(b"data: ") == 3 and b"[DONE]" not in body
    assert row["fault"]["applied"] and row["status"] == "faulted"
    with faulted("--fault-no-done", "--fault-frame", "1000") as emu:
        body, complete = dechunk(raw_stream(emu.port)[0])
        row = truth(emu.port)
    last = re.findall(rb"data: (.*?)\n\n", body, re.S)[-1]
    assert complete and b"[DONE]" not in body and orjson.loads(last)["meta_info"]["finish_reason"]["type"] == "length"
    assert row["fault"]["applied"] and row["status"] == "faulted" and row["completion_tokens"] == 60


def test_slow_first_token():
    with faulted("--fault-slow-first-token-ms", "500") as emu:
        raw_stream(emu.port)
        row = truth(emu.port)
    assert (row["t_first_ns"] - row["t_received_ns"]) / 1e9 > 0.5 and row["status"] == "finished"
    assert row["fault"] == {"type": "slow_first_token", "at": 0, "applied": True, "ms": 500.0}


def test_rate_seed_and_skip_pick_repeatably():
    def picks() -> list:
        with EmulatorThread(["--hardware", "zero", "--fault-abort", "--fault-rate", "0.5", "--fault-seed", "7",
                             "--fault-skip", "2"]) as emu:
            out = []
            for _ in range(12):
                raw_stream(emu.port)
                out.append(truth(emu.port)["fault"])
            return out
    a, b = picks(), picks()
    assert a == b and a[0] is None and a[1] is None
    hits = sum(f is not None for f in a)
    assert 2 <= hits <= 10


def test_fault_is_null_without_fault_flags_and_when_spared():
    with EmulatorThread(["--hardware", "zero"]) as emu:
        raw_stream(emu.port)
        assert truth(emu.port)["fault"] is None
    with EmulatorThread(["--hardware", "zero", "--fault-abort", "--fault-rate", "0"]) as emu:
        body, complete = dechunk(raw_stream(emu.port)[0])
        assert truth(emu.port)["fault"] is None and complete and body.endswith(b"data: [DONE]\n\n")


def test_a_fault_due_after_the_request_finished_does_not_claim_an_abort_or_a_cut():
    """A slow stream task can reach frame K after the engine finished the request. SGLang cannot abort it then,
    and the ground truth must not say 'aborted' (or 'cut without a finish frame') for a stream that ends
    normally: the fault stays unapplied, and the stream goes on (a no_done then drops only [DONE])."""
    for kind in ("abort", "no_done"):
        req = EmuRequest("id", "rid", "code", "/generate", 5, 8, True, 1)
        req.finish_reason = {"type": "length", "length": 8}
        fault = Fault(kind, 3)
        asyncio.run(_apply(None, None, req, None, None, fault))  # nothing of the connection is touched
        assert not fault.applied and req.finish_reason["type"] == "length"


def _send(s: socket.socket, path: str = "/generate", body: dict = BODY) -> None:
    data = orjson.dumps(body)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
              "\r\n\r\n".encode() + data)


def _read_response(s: socket.socket) -> tuple[bytes, str]:
    """One whole chunked response on a kept-alive connection ('complete'), or what arrived before it ended
    ('eof' / 'reset')."""
    out = b""
    try:
        while not out.endswith(b"\r\n0\r\n\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                return out, "eof"
            out += chunk
    except ConnectionResetError:
        return out, "reset"
    return out, "complete"


def test_keepalive_limit_closes_the_next_request_unanswered_and_counts_it():
    """--fault-keepalive-requests 2: a connection answers two generation requests, keeping itself alive (no
    `Connection: close`), and the third is closed as it arrives, without a byte: not in the ledger, counted in
    keepalive_closed. Control routes are not limited, and a new connection starts again at zero."""
    for mode, ended in (("fin", "eof"), ("rst", "reset")):
        with EmulatorThread(["--hardware", "zero", "--fault-keepalive-requests", "2",
                             "--fault-close-mode", mode]) as emu:
            s = socket.create_connection(("127.0.0.1", emu.port), timeout=10)
            answers = []
            for _ in range(2):
                _send(s)
                answers.append(_read_response(s))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            health = s.recv(65536)
            _send(s)
            dropped = _read_response(s)
            s.close()
            again = raw_stream(emu.port)   # a new connection
            status, _, body = request(emu.port, "GET", "/emulator/requests")
        assert [how for _, how in answers] == ["complete"] * 2 and health.startswith(b"HTTP/1.1 200")
        assert all(b"connection: close" not in raw.lower() for raw, _ in answers)
        assert dropped == (b"", ended) and dechunk(again[0])[1]
        truth_now = orjson.loads(body)
        assert len(truth_now["requests"]) == 3 and truth_now["keepalive_closed"] == 1
        assert {r["status"] for r in truth_now["requests"]} == {"finished"}


def test_reset_answers_the_finished_records_it_clears():
    with EmulatorThread(["--hardware", "zero"]) as emu:
        for _ in range(3):
            raw_stream(emu.port)
        taken = orjson.loads(request(emu.port, "POST", "/emulator/reset")[2])
        left = orjson.loads(request(emu.port, "GET", "/emulator/requests")[2])
    assert taken["ok"] and len(taken["requests"]) == 3 and {r["status"] for r in taken["requests"]} == {"finished"}
    assert left["requests"] == [] and left["keepalive_closed"] == 0
