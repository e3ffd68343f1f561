"""One blocking HTTP request to a local server, for tests that check bytes and headers exactly; requests held
open on a raw socket, and an in-process emulator's queue, for tests that need a slot taken."""

from __future__ import annotations

import http.client
import socket

import orjson

from loadgen.emulator.launch import EmulatorThread


def request(port: int, method: str, path: str, body: dict | None = None, headers: dict | None = None,
            timeout: float = 30) -> tuple[int, dict, bytes]:
    """(status, headers, de-chunked body bytes) of one HTTP request to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=orjson.dumps(body) if body is not None else None, headers=h)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def open_generation(port: int, body: dict) -> socket.socket:
    """POST /generate on a raw socket and return it unread: the request runs (or waits in the queue) until the
    test closes the socket, e.g. a blocker holding the emulator's only slot for as long as a test needs it."""
    data = orjson.dumps(body)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(data)).encode() + b"\r\n\r\n" + data)
    return sock


def engine_counts(emu: EmulatorThread) -> tuple[int, int]:
    """(running, waiting) requests of an in-process emulator's engine, read on its own loop."""
    return emu.call(lambda: (len(emu.emu.engine.running), len(emu.emu.engine.waiting)))


# a generation that runs until its socket is closed (the emulator's output is bounded only by max_new_tokens)
FOREVER = {"text": "a", "sampling_params": {"max_new_tokens": 1_000_000, "ignore_eos": True}, "stream": True}
