"""One streaming HTTP/1.1 exchange on a non-blocking socket: the worker's hot path.

Why not aiohttp: a stream reader wakes a coroutine per read and per line; here each TCP read is timestamped
once, de-chunked by httptools (C), split into SSE events and handed to the adapter inside one reader
callback, with no coroutine switch per frame. The sockets are polled together once per millisecond (see
`ReadLoop`) instead of waking the event loop for every arriving packet.

Why not an asyncio transport: the time a read is *seen* includes every delay of the client itself (a busy
event loop, another process on the core). On Linux the socket asks the kernel to stamp each arriving
segment (SO_TIMESTAMPNS, software receive timestamps) and `recvmsg` hands that stamp back: a read is dated
when its last segment reached the socket, however late the worker got to it. Frames that arrive in one read
share its timestamp. Where the kernel gives no stamp, the read is dated when it is read.

Connections are kept alive between the requests of one worker (as aiohttp's pool does), for at most
`KEEP_IDLE_S` idle: a TCP connect and close on loopback cost ~50 us of kernel time each, and with equal-length
requests 256 streams end and restart together, so per-request set-up stalled the reads of every other stream.

A kept-alive connection can be closed by the server just as a request goes out on it (an idle timeout, a
per-connection request limit; llama-server closes after every streamed response without saying so), and the
server never reads that request. Only in that case (a reused connection, closed or reset before a single byte
of the response arrived) the request is sent again, once, on a fresh connection, and its row says so
(`resent`); its `t_sent_ns` is the resend, the send the server read, so TTFT is measured from it. Any failure
after the first response byte, or on a fresh connection, stays a failure (docs/client.md).
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httptools

from loadgen.client.protocol.base import Adapter, StreamState
from loadgen.client.protocol.sse import SseSplitter
from loadgen.clock import now_ns

_MAX_ERROR_BODY = 4096
_READ_SIZE = 256 * 1024
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not export it
_STAMP = struct.Struct("@qq")                              # struct timespec, CLOCK_REALTIME
_ANCILLARY_SIZE = socket.CMSG_SPACE(_STAMP.size)
POLL_PERIOD_S = 0.001  # see ReadLoop
_POLL, _READABLE = (select.epoll, select.EPOLLIN) if hasattr(select, "epoll") else (select.poll, select.POLLIN)
KEEP_IDLE_S = 1.0  # far below any server's keep-alive timeout (uvicorn's default is 5 s), so none closes under us


class ReadLoop:
    """What every read of one worker shares: one poll set checked every `POLL_PERIOD_S`, the receive buffer,
    and what the kernel stamps reveal about the client itself (how long data waited in a socket before the
    worker's poll found it, the worst since the last `take`; large values mean frames got coalesced into one
    read).

    Why poll: woken by each arriving packet, the event loop switches in thousands of times a second at tens of
    thousands of frames/s; polled once per millisecond, the same reads take a few hundred wake-ups, which costs less
    CPU per frame (the measurements: docs/instrument.md). Timing does not suffer: a read is
    dated by the kernel's stamp of its last segment, not by when it was polled, and a 1 ms poll never puts two
    frames of one stream in one read, since a server's frames come several ms apart. Where the kernel gives no
    stamps, a read is dated up to one period late.

    One preallocated buffer serves every read: a fresh 256 KiB bytes object per read cost an mmap, mremap
    and munmap on one read in eight (strace). Reads never overlap (one event loop), and httptools copies
    whatever it hands on."""

    __slots__ = ("max_delay_ns", "t_poll_wall_ns", "stamp_offset_ns", "buffers", "view", "_poll", "_readers",
                 "_timer")

    def __init__(self) -> None:
        self.max_delay_ns = 0
        self._read_clocks()
        buffer = bytearray(_READ_SIZE)
        self.buffers = [buffer]
        self.view = memoryview(buffer)
        self._poll = _POLL()
        self._readers: dict[int, Callable[[], None]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add_reader(self, fd: int, reader: Callable[[], None]) -> None:
        """Call `reader` at the next poll where `fd` has data, EOF or an error, until `remove_reader`."""
        self._poll.register(fd, _READABLE)
        self._readers[fd] = reader
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(POLL_PERIOD_S, self._tick)

    def remove_reader(self, fd: int) -> None:
        if self._readers.pop(fd, None) is not None:
            self._poll.unregister(fd)

    def _read_clocks(self) -> None:
        """The poll's wall time, and the offset from the kernel's (wall-clock) stamps to `now_ns`: read once
        per poll rather than twice per read (~160 ns a read)."""
        self.t_poll_wall_ns = wall = time.time_ns()
        self.stamp_offset_ns = wall - now_ns()

    def _tick(self) -> None:
        """One poll: every socket with data (or EOF, or an error) gets one read."""
        loop, readers = asyncio.get_running_loop(), self._readers
        self._timer = loop.call_later(POLL_PERIOD_S, self._tick) if readers else None
        self._read_clocks()
        for fd, _ in self._poll.poll(0):
            reader = readers.get(fd)
            if reader is None:  # removed by an earlier reader of this round
                continue
            try:
                reader()
            except Exception as exc:  # a bug (readers classify whatever arrives): the other streams go on
                self.remove_reader(fd)  # its request ends at the stall timeout instead of failing every poll
                loop.call_exception_handler({"message": f"socket reader of fd {fd} failed", "exception": exc})

    def take(self) -> float:
        """The worst read delay in ms since the previous call."""
        worst, self.max_delay_ns = self.max_delay_ns, 0
        return worst / 1e6


class Endpoint:
    """Host, port, resolved address, idle kept-alive connections and the fixed part of every request's header
    block for one target."""

    __slots__ = ("host", "port", "_head", "_address", "_idle")

    def __init__(self, url: str, api_key: str | None = None) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = (f"Host: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                      f"Accept: text/event-stream\r\n{auth}").encode()
        self._address: tuple[socket.AddressFamily, tuple] | None = None
        self._idle: list[tuple[socket.socket, float]] = []

    def request_bytes(self, path: str, body: bytes) -> bytes:
        return b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            path.encode(), self._head, len(body), body)

    def kept(self) -> socket.socket | None:
        """A kept-alive connection that is fresh and still open, or None (stale ones are closed)."""
        while self._idle:
            sock, since = self._idle.pop()
            if time.monotonic() - since < KEEP_IDLE_S and _still_open(sock):
                return sock
            sock.close()
        return None

    async def open(self) -> socket.socket:
        """A new connected non-blocking socket with receive timestamps on (the address is resolved once per
        endpoint)."""
        loop = asyncio.get_running_loop()
        family: socket.AddressFamily
        if self._address is None:
            family, _, _, _, address = (await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM))[0]
            self._address = (family, address)
        family, address = self._address
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError:
                pass  # no kernel stamps here: reads are dated when read
            await loop.sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        return sock

    def keep(self, sock: socket.socket) -> None:
        """Take back the connection of a finished exchange for the next request."""
        self._idle.append((sock, time.monotonic()))

    def close_idle(self) -> None:
        """Close every kept connection (end of a step: no server should hold our idle sockets)."""
        for sock, _ in self._idle:
            sock.close()
        self._idle.clear()


def _still_open(sock: socket.socket) -> bool:
    """Neither closed by the server nor holding stray bytes: safe to send the next request on."""
    try:
        sock.recv(1, socket.MSG_PEEK)  # returns only with bytes or at EOF: either way not reusable
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        pass
    return False


class StreamExchange:
    """Feeds one response into an adapter; resolves `done` when the exchange is over, however it ended."""

    def __init__(self, state: StreamState, adapter: Adapter, request: bytes, reads: ReadLoop,
                 endpoint: Endpoint, reused: bool = False) -> None:
        self.state = state
        self.reused = reused    # on a kept-alive connection: one closed before any response byte is resent
        self.unread = False     # it was: the server closed it without reading the request
        self.endpoint = endpoint  # where a cleanly finished connection goes back
        self.adapter = adapter
        self.request = request
        self.reads = reads
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self.splitter = SseSplitter()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sock: socket.socket | None = None
        self.t_read = 0
        self.t_last_read = now_ns()  # the stall clock starts when the request is created
        self.status_code = 0
        self.error_body = b""
        self.complete = False
        self.t_complete: int | None = None  # the stamp of the read that completed the response

    async def run(self, sock: socket.socket) -> None:
        """Send the request on a connected socket, then read until the exchange ends."""
        if self.done.done():  # cut while still connecting
            sock.close()
            return
        self.sock = sock
        # stamped before the send that hands over the last byte: the server cannot start before it, however long
        # this process is descheduled after the call returns
        t_sent = now_ns()
        try:
            sent = sock.send(self.request)  # a request fits the socket buffer unless its prompt is huge
        except BlockingIOError:
            sent = 0
        if sent < len(self.request):
            if not await self._send_rest(sock, memoryview(self.request)[sent:]):
                return
            t_sent = now_ns()
        self.state.t_sent_ns = self.t_last_read = t_sent
        if not self.done.done():
            self.reads.add_reader(sock.fileno(), self.on_readable)
        await self.done

    async def _send_rest(self, sock: socket.socket, rest: memoryview) -> bool:
        """Send what did not fit at once, unless the exchange is cut meanwhile (then False)."""
        send = asyncio.ensure_future(asyncio.get_running_loop().sock_sendall(sock, rest))
        await asyncio.wait([send, self.done], return_when=asyncio.FIRST_COMPLETED)
        if not send.done():
            send.cancel()
            return False
        send.result()  # OSError: the server went away while we sent
        return True

    def on_readable(self) -> None:
        """One TCP read, dated by the kernel's stamp of its last segment."""
        reads = self.reads
        try:
            size, ancillary, _, _ = self.sock.recvmsg_into(reads.buffers, _ANCILLARY_SIZE)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.connection_lost(exc)
            return
        if ancillary:
            seconds, nanoseconds = _STAMP.unpack_from(ancillary[0][2])
            stamp = seconds * 1_000_000_000 + nanoseconds
            t = stamp - reads.stamp_offset_ns
            delay = reads.t_poll_wall_ns - stamp
            if delay > reads.max_delay_ns:
                reads.max_delay_ns = delay
        else:
            t = now_ns()
        if size:
            self.data_received(reads.view[:size], t)
        else:
            self.connection_lost(None)

    def data_received(self, data: bytes | memoryview, t_ns: int) -> None:
        """Parse one read that arrived at `t_ns`."""
        self.t_read = self.t_last_read = t_ns
        try:
            self.parser.feed_data(data)  # type: ignore[union-attr]
        except httptools.HttpParserError as exc:
            self.state.fail("stream_broken", f"invalid HTTP from server: {exc}")
            self.finish()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.complete:
            if self.reused and not self.t_read and self.state.status is None:
                self.unread = True  # not a failure: stream_request sends it again on a fresh connection
            elif self.state.t_headers_ns is None and self.status_code == 0:
                again = " (resent on a fresh connection: the kept-alive one had closed)" if self.state.resent else ""
                self.state.fail("stream_broken", f"connection closed before a response: {exc or 'EOF'}{again}")
            elif self.status_code == 200:
                self.state.fail("stream_broken", f"connection closed mid-stream: {exc or 'EOF'}")
            else:
                self._http_error()
        self.finish()

    # httptools callbacks
    def on_headers_complete(self) -> None:
        if self.parser is None:  # bytes after the end of the exchange
            return
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
        self.t_complete = self.t_read
        if self.status_code != 200:
            self._http_error()
        elif self.splitter.pending:
            self.state.fail("stream_broken", "stream ended inside an event (truncated frame)")
        self.finish()

    # helpers
    def _http_error(self) -> None:
        text = self.error_body[:_MAX_ERROR_BODY].decode("utf-8", "replace").strip()
        self.state.fail("http_error", text or f"HTTP {self.status_code}", self.status_code)

    def finish(self) -> None:
        """Resolve `done` and close the socket (the server sees a disconnect if it was still sending). Drops
        the parser, which refers back to this object: no reference cycle is left for the GC to find (its
        passes over thousands of finished exchanges stalled every read for milliseconds). A connection whose
        response ended cleanly and may be kept alive goes back to the endpoint."""
        reusable = self.complete and self.parser is not None and self.parser.should_keep_alive()
        self.parser = None
        if not self.done.done():
            self.done.set_result(None)
        sock, self.sock = self.sock, None
        if sock is not None:
            self.reads.remove_reader(sock.fileno())
            if reusable:
                self.endpoint.keep(sock)
            else:
                sock.close()

    def cut(self, status: str, reason: str) -> None:
        """End the exchange from our side (timeout, end of step)."""
        self.state.fail(status, reason)
        self.finish()


async def stream_request(endpoint: Endpoint, adapter: Adapter, state: StreamState, body: bytes,
                         registry: dict[str, StreamExchange], reads: ReadLoop) -> None:
    """Run one request to its end. `registry` lets the worker's watchdog cut stalled or leftover streams. A
    kept-alive connection the server closed without reading the request: sent again once, on a new connection
    (module docstring)."""
    request = endpoint.request_bytes(adapter.path, body)
    exchange: StreamExchange | None = None
    try:
        exchange = await _attempt(endpoint, adapter, state, request, registry, reads, endpoint.kept())
        if exchange.unread and state.status is None:  # not cut meanwhile
            state.resent = True
            state.t_sent_ns = None   # the resend's, once sent: a request never read has no send time
            exchange = await _attempt(endpoint, adapter, state, request, registry, reads, None)
    finally:
        registry.pop(state.request_id, None)
        # a complete response ends when its last bytes arrived
        state.close(exchange.t_complete if exchange is not None and exchange.t_complete else now_ns())


async def _attempt(endpoint: Endpoint, adapter: Adapter, state: StreamState, request: bytes,
                   registry: dict[str, StreamExchange], reads: ReadLoop, sock: socket.socket | None
                   ) -> StreamExchange:
    """Send the request on `sock` (kept alive) or on a new connection (None) and read the exchange to its end."""
    exchange = StreamExchange(state, adapter, request, reads, endpoint, reused=sock is not None)
    registry[state.request_id] = exchange
    try:
        if sock is None:
            try:
                sock = await endpoint.open()
            except OSError as exc:
                state.fail("client_error", f"cannot connect to {endpoint.host}:{endpoint.port}: {exc}")
                return exchange
        try:
            await exchange.run(sock)
        except OSError as exc:  # the request could not be sent
            if not exchange.done.done():
                exchange.connection_lost(exc)
    finally:
        exchange.finish()
    return exchange
