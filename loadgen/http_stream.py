"""One streaming HTTP/1.1 exchange on a raw asyncio protocol: the worker's hot path.

Why not aiohttp: a stream reader wakes a coroutine per read and per line; here each TCP read is timestamped
once, de-chunked by httptools (C), split into SSE events and handed to the adapter inside `data_received`,
with no coroutine switch per frame. Frames that arrive in one read share its timestamp, which is the truth
of when the client saw them.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httptools

from loadgen.clock import now_ns
from loadgen.protocol.base import Adapter, StreamState
from loadgen.protocol.sse import SseSplitter

_MAX_ERROR_BODY = 4096


class Endpoint:
    """Host, port and the fixed part of every request's header block for one target."""

    __slots__ = ("host", "port", "_head")

    def __init__(self, url: str, api_key: str | None = None) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = (f"Host: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                      f"Accept: text/event-stream\r\nConnection: close\r\n{auth}").encode()

    def request_bytes(self, path: str, body: bytes) -> bytes:
        return b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            path.encode(), self._head, len(body), body)


class _StreamProtocol(asyncio.Protocol):
    """Feeds one response into an adapter; resolves `done` when the exchange is over, however it ended."""

    def __init__(self, state: StreamState, adapter: Adapter, request: bytes) -> None:
        self.state = state
        self.adapter = adapter
        self.request = request
        self.parser = httptools.HttpResponseParser(self)
        self.splitter = SseSplitter()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.t_read = 0
        self.t_last_read = now_ns()  # the stall clock starts when the request is created
        self.status_code = 0
        self.error_body = b""
        self.complete = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.done.done():  # cut while still connecting
            transport.abort()  # type: ignore[attr-defined]
            return
        transport.write(self.request)  # type: ignore[attr-defined]
        self.state.t_sent_ns = self.t_last_read = now_ns()

    def data_received(self, data: bytes) -> None:
        self.t_read = self.t_last_read = now_ns()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.state.fail("stream_broken", f"invalid HTTP from server: {exc}")
            self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.complete:
            if self.state.t_headers_ns is None and self.status_code == 0:
                self.state.fail("stream_broken", f"connection closed before a response: {exc or 'EOF'}")
            elif self.status_code == 200:
                self.state.fail("stream_broken", f"connection closed mid-stream: {exc or 'EOF'}")
            else:
                self._http_error()
        self._finish()

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status_code = self.parser.get_status_code()
        self.state.t_headers_ns = self.t_read
        self.state.http_status = self.status_code

    def on_body(self, body: bytes) -> None:
        if self.status_code != 200:
            if len(self.error_body) < _MAX_ERROR_BODY:
                self.error_body += body
            return
        on_payload, state, t = self.adapter.on_payload, self.state, self.t_read
        for payload in self.splitter.feed(body):
            on_payload(state, payload, t)

    def on_message_complete(self) -> None:
        self.complete = True
        if self.status_code != 200:
            self._http_error()
        elif self.splitter.pending:
            self.state.fail("stream_broken", "stream ended inside an event (truncated frame)")
        self._finish()

    # helpers
    def _http_error(self) -> None:
        text = self.error_body[:_MAX_ERROR_BODY].decode("utf-8", "replace").strip()
        self.state.fail("http_error", text or f"HTTP {self.status_code}", self.status_code)

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def cut(self, status: str, reason: str) -> None:
        """End the exchange from our side (timeout, end of step); the server sees a disconnect."""
        self.state.fail(status, reason)
        if self.transport is not None:
            self.transport.abort()
        self._finish()


async def stream_request(endpoint: Endpoint, adapter: Adapter, state: StreamState, body: bytes,
                         registry: dict[str, _StreamProtocol]) -> None:
    """Run one request to its end. `registry` lets the worker's watchdog cut stalled or leftover streams."""
    loop = asyncio.get_running_loop()
    request = endpoint.request_bytes(adapter.path, body)
    protocol = _StreamProtocol(state, adapter, request)
    registry[state.request_id] = protocol
    try:
        try:
            await loop.create_connection(lambda: protocol, endpoint.host, endpoint.port)
        except OSError as exc:
            state.fail("client_error", f"cannot connect to {endpoint.host}:{endpoint.port}: {exc}")
            return
        await protocol.done
    finally:
        registry.pop(state.request_id, None)
        state.close(now_ns())
