"""The socket read path: kernel receive stamps, kept-alive connections, no reference cycles.

The server here is a plain blocking socket server in a thread, so it can send while the client's event loop
is deliberately blocked, and it counts the TCP connections it accepted.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from loadgen.client.http_stream import Endpoint, ReadLoop, StreamExchange, stream_request
from loadgen.client.protocol.base import FrameBuffer, SamplingSpec, StreamState
from loadgen.client.protocol.sglang_native import SglangNativeAdapter
from loadgen.clock import now_ns
from loadgen.prompts import Prompt

PROMPT = Prompt("p", "code", "t", text="hello")
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n%s\r\n"


def chunk(payload: bytes) -> bytes:
    frame = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(frame), frame)


def token_frame(n: int, final: bool) -> bytes:
    finish = b'{"type":"length","length":%d}' % n if final else b"null"
    return chunk(b'{"text":"x","meta_info":{"id":"srv","finish_reason":%s,"prompt_tokens":3,'
                 b'"completion_tokens":%d}}' % (finish, n))


END = chunk(b"[DONE]") + b"0\r\n\r\n"


class Server:
    """Answers each request on a connection with `respond(conn, index)`; keeps the connection open for the next
    request unless `respond` returns False. Records accepted connections and the wall time of sends."""

    def __init__(self, respond: Callable[[socket.socket, int], bool]) -> None:
        self.respond = respond
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                index, self.requests = self.requests, self.requests + 1
                if not self.respond(conn, index):
                    return


def simple(tokens: int = 2, close: bool = False) -> Callable[[socket.socket, int], bool]:
    def respond(conn: socket.socket, index: int) -> bool:
        conn.sendall((HEAD % (b"Connection: close\r\n" if close else b""))
                     + b"".join(token_frame(n, n == tokens) for n in range(1, tokens + 1)) + END)
        return not close
    return respond


@pytest.fixture
def frames() -> Iterator[FrameBuffer]:
    yield FrameBuffer()


async def run(endpoint: Endpoint, frames: FrameBuffer, rid: str = "r", reads: ReadLoop | None = None,
              registry: dict | None = None) -> StreamState:
    adapter, state = SglangNativeAdapter(), StreamState(rid, PROMPT, "measure", 0, frames)
    await stream_request(endpoint, adapter, state, adapter.body(rid, PROMPT, SamplingSpec(2)),
                         {} if registry is None else registry, reads or ReadLoop())
    return state


def run_while_the_loop_is_blocked(server: Server, blocked: threading.Event, sent: threading.Event,
                                  frames: FrameBuffer, reads: ReadLoop | None = None) -> tuple[StreamState, int]:
    """One request whose event loop is blocked once `blocked` lets the server go on sending, until 50 ms after the
    server says it `sent`: what it sent waits that long in the socket. Returns its state and when the loop was
    free again."""
    async def main() -> tuple[StreamState, int]:
        task = asyncio.create_task(run(Endpoint(server.url), frames, "r", reads))
        while not server.requests:
            await asyncio.sleep(0.005)
        blocked.set()
        assert sent.wait(30)
        time.sleep(0.05)
        unblocked = now_ns()
        return await task, unblocked

    return asyncio.run(main())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS receive stamps are Linux's")
def test_a_read_is_dated_when_it_arrived_not_when_a_busy_client_got_to_it(frames):
    blocked, done, sent = threading.Event(), threading.Event(), []

    def respond(conn: socket.socket, index: int) -> bool:
        conn.sendall(HEAD % b"")
        blocked.wait(5)
        sent.append(now_ns())
        conn.sendall(token_frame(1, False))
        sent.append(now_ns())
        done.set()
        time.sleep(0.15)  # after the client is back
        conn.sendall(token_frame(2, True) + END)
        return False

    reads = ReadLoop()
    state, unblocked = run_while_the_loop_is_blocked(Server(respond), blocked, done, frames, reads)  # frame 1 waits
    assert state.status == "ok" and frames.cum_tokens == [1, 2]
    # dated once it was sent, before the blocked loop got to it (>= 50 ms later), however busy the machine is
    assert sent[0] <= frames.t_ns[0] < unblocked, f"first frame dated {(frames.t_ns[0] - sent[0]) / 1e6:.1f} ms " \
        f"after it was sent (the loop was free {(unblocked - sent[0]) / 1e6:.1f} ms after)"
    # the wait is seen as a read delay instead: at least the time it sat there while the loop was blocked
    assert (unblocked - sent[1]) / 1e6 <= reads.take() <= (state.t_done_ns - sent[0]) / 1e6
    assert reads.take() == 0  # and reset by take()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS receive stamps are Linux's")
def test_a_finished_exchange_is_dated_when_its_last_bytes_arrived(frames):
    """e2e latency ends at the read that completed the response, not when the (polling, or busy) worker got
    to it: here the whole response waits ~70 ms in the socket."""
    blocked, done, sent = threading.Event(), threading.Event(), []

    def respond(conn: socket.socket, index: int) -> bool:
        blocked.wait(5)
        sent.append(now_ns())
        conn.sendall(HEAD % b"" + token_frame(1, False) + token_frame(2, True) + END)
        done.set()
        return False

    state, unblocked = run_while_the_loop_is_blocked(Server(respond), blocked, done, frames)
    assert state.status == "ok"
    # dated once its last bytes were sent, before the blocked loop got to them (>= 50 ms later)
    assert sent[0] <= state.t_done_ns < unblocked, f"end dated {(state.t_done_ns - sent[0]) / 1e6:.1f} ms after " \
        f"the last bytes were sent (the loop was free {(unblocked - sent[0]) / 1e6:.1f} ms after)"


async def one_after_another(server, frames, n: int) -> list[StreamState]:
    """n requests sent one after another over one endpoint (its kept-alive connection reused)."""
    endpoint = Endpoint(server.url)
    states = [await run(endpoint, frames, f"r{i}") for i in range(n)]
    endpoint.close_idle()
    return states


def test_requests_of_one_endpoint_share_a_kept_alive_connection(frames):
    server = Server(simple())

    states = asyncio.run(one_after_another(server, frames, 5))
    assert [s.status for s in states] == ["ok"] * 5 and frames.cum_tokens == [1, 2] * 5
    assert (server.requests, server.connections) == (5, 1)


def test_a_connection_the_server_closes_is_never_reused(frames):
    server = Server(simple(close=True))  # answers with Connection: close, then closes

    async def main() -> list[str]:
        endpoint = Endpoint(server.url)
        return [(await run(endpoint, frames, f"r{i}")).status for i in range(3)]

    assert asyncio.run(main()) == ["ok"] * 3
    assert server.connections == 3


def test_an_idle_connection_closed_under_us_is_detected_before_sending(frames):
    closers: list[socket.socket] = []

    def respond(conn: socket.socket, index: int) -> bool:
        simple()(conn, index)
        closers.append(conn)
        return index > 0  # the first connection: keep-alive advertised, then closed while idle

    server = Server(respond)

    async def main() -> list[str]:
        endpoint = Endpoint(server.url)
        first = await run(endpoint, frames, "a")
        while not (closers and closers[0].fileno() == -1):  # the server closes the idle connection meanwhile
            await asyncio.sleep(0.005)
        return [first.status, (await run(endpoint, frames, "b")).status]

    assert asyncio.run(main()) == ["ok", "ok"]
    assert (server.requests, server.connections) == (2, 2)


def test_a_cut_stream_closes_its_connection(frames):
    def respond(conn: socket.socket, index: int) -> bool:
        conn.sendall(HEAD % b"" + token_frame(1, False))
        if index == 0:
            conn.settimeout(30)
            assert conn.recv(1) == b""  # until the client cuts this one: it closes the connection
            return False
        conn.sendall(token_frame(2, True) + END)
        return True

    server = Server(respond)

    async def main() -> list[str]:
        endpoint, registry = Endpoint(server.url), {}
        task = asyncio.create_task(run(endpoint, frames, "cut", registry=registry))
        while not frames.t_ns:
            await asyncio.sleep(0.005)
        registry["cut"].cut("cancelled", "step ended")
        return [(await task).status, (await run(endpoint, frames, "next")).status]

    assert asyncio.run(main()) == ["cancelled", "ok"]
    assert server.connections == 2


def test_a_finished_exchange_leaves_no_reference_cycle(frames):
    """The parser refers back to its exchange; a cycle per request made the GC stall reads for ms."""
    server = Server(simple())

    async def main() -> None:
        endpoint = Endpoint(server.url)
        await run(endpoint, frames, "warm")
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for i in range(5):
                await run(endpoint, frames, f"r{i}")
            gc.collect()
            leaked = [o for o in gc.garbage if isinstance(o, StreamExchange)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        assert leaked == []

    asyncio.run(main())


def test_a_cut_while_a_huge_request_is_still_being_sent_ends_at_once(frames):
    """A server that never reads: the request (8 MB, more than the socket buffers hold) cannot be sent."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    adapter = SglangNativeAdapter()

    async def main() -> StreamState:
        state, registry = StreamState("big", PROMPT, "measure", 0, frames), {}
        body = adapter.body("big", Prompt("p", "code", "t", text="x" * 8_000_000), SamplingSpec(2))
        task = asyncio.create_task(stream_request(Endpoint(f"http://127.0.0.1:{listener.getsockname()[1]}"),
                                                  adapter, state, body, registry, ReadLoop()))
        await asyncio.sleep(0.3)
        assert not task.done() and state.t_sent_ns is None  # still sending
        registry["big"].cut("timeout", "stall")
        await asyncio.wait_for(task, 10)   # at once; the bound only catches a hang
        return state

    state = asyncio.run(main())
    assert state.status == "timeout" and state.t_done_ns is not None
    listener.close()


def test_frames_larger_than_the_receive_buffer_arrive_whole_and_in_order(frames):
    """Every read goes into one reused buffer: a frame spread over many reads, with frames of other streams
    read in between, must come out byte for byte."""
    payloads = [b'{"text":"%s","meta_info":{"id":"srv","finish_reason":%s,"completion_tokens":%d}}' % (
        b"x" * (300_000 + 7 * n), b'{"type":"length"}' if n == 3 else b"null", n)
        for n in range(1, 4)]  # each larger than the 256 KiB read buffer

    def respond(conn: socket.socket, index: int) -> bool:
        body = HEAD % b"" + b"".join(chunk(p) for p in payloads) + END
        for i in range(0, len(body), 50_000):  # small sends: the client reads many times per frame
            conn.sendall(body[i:i + 50_000])
        return True

    endpoint, reads = Endpoint(Server(respond).url), ReadLoop()

    async def main() -> list[StreamState]:
        return list(await asyncio.gather(*(run(endpoint, frames, f"r{k}", reads) for k in range(3))))

    states = asyncio.run(main())
    assert [s.status for s in states] == ["ok"] * 3
    expected = [len(p) for p in payloads]
    for state in states:
        rows = [i for i, rid in enumerate(frames.request_id) if rid == state.request_id]
        assert [frames.bytes[i] for i in rows] == expected and [frames.cum_tokens[i] for i in rows] == [1, 2, 3]


def test_a_reader_that_fails_is_dropped_and_the_other_sockets_are_still_read():
    """A bug in one stream's reader must not stop the shared poll: the others keep being read, the failure
    goes to the event loop's exception handler once (not at every poll), and its socket is no longer read."""
    errors, got, calls = [], [], []
    (a_in, a_out), (b_in, b_out) = socket.socketpair(), socket.socketpair()

    def broken() -> None:
        calls.append(1)
        raise RuntimeError("reader bug")

    def reader() -> None:
        got.append(b_in.recv(100))

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
        reads = ReadLoop()
        for sock in (a_in, b_in):
            sock.setblocking(False)
        reads.add_reader(a_in.fileno(), broken)
        reads.add_reader(b_in.fileno(), reader)
        a_out.send(b"x")
        for k in range(5):
            b_out.send(b"frame %d" % k)
            await asyncio.sleep(0.01)
        reads.remove_reader(b_in.fileno())

    asyncio.run(main())
    assert got == [b"frame %d" % k for k in range(5)]
    assert len(calls) == 1 and len(errors) == 1  # a_in still holds its byte: it was not polled again
    assert isinstance(errors[0]["exception"], RuntimeError)
    for sock in (a_in, a_out, b_in, b_out):
        sock.close()


def dropping(keep: int, fresh_too: bool = False, rst: bool = False, mid_stream: bool = False
             ) -> tuple[Callable[[socket.socket, int], bool], list[int]]:
    """A server whose connections answer `keep` requests each (keep-alive advertised) and then close on the next
    one: unanswered (FIN, or a reset with `rst`), or after the headers and one frame with `mid_stream`. With
    `fresh_too` the first request of a connection is dropped as well. Returns it and the `now_ns` of each drop."""
    drops: list[int] = []
    answered: dict[int, int] = {}

    def respond(conn: socket.socket, index: int) -> bool:
        n = answered.get(conn.fileno(), 0)
        if n < keep and not (fresh_too and drops):
            answered[conn.fileno()] = n + 1
            return simple()(conn, index)
        drops.append(now_ns())
        if mid_stream:
            conn.sendall(HEAD % b"" + token_frame(1, False))
        elif rst:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        answered.pop(conn.fileno(), None)
        return False

    return respond, drops


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
def test_a_kept_alive_connection_closed_unread_is_resent_once_on_a_new_one(frames, rst):
    """The server answers one request per connection and closes the next as it arrives (the kept-alive race,
    forced): every request after the first goes out twice, the second time on a new connection, and is ok;
    its t_sent_ns is the resend's, after the server dropped the first attempt."""
    respond, drops = dropping(keep=1, rst=rst)
    server = Server(respond)

    states = asyncio.run(one_after_another(server, frames, 4))
    assert [(s.status, s.resent) for s in states] == [("ok", False)] + [("ok", True)] * 3
    assert (server.requests, server.connections, len(drops)) == (7, 4, 3)
    assert all(s.t_sent_ns > dropped for s, dropped in zip(states[1:], drops))   # measured from the resend
    assert frames.cum_tokens == [1, 2] * 4   # nothing recorded from the dropped attempts


def test_a_failure_after_the_first_response_byte_is_not_resent(frames):
    respond, drops = dropping(keep=1, mid_stream=True)
    server = Server(respond)

    first, second = asyncio.run(one_after_another(server, frames, 2))
    assert (first.status, second.status, second.resent) == ("ok", "stream_broken", False)
    assert "mid-stream" in (second.error or "") and (server.requests, server.connections) == (2, 1)


def test_a_new_connection_closed_before_a_response_is_a_failure_not_resent(frames):
    respond, drops = dropping(keep=0)
    server = Server(respond)
    state = asyncio.run(run(Endpoint(server.url), frames))
    assert (state.status, state.resent) == ("stream_broken", False) and "before a response" in (state.error or "")
    assert (server.requests, server.connections) == (1, 1)


def test_a_resend_that_fails_again_is_a_failure_and_there_is_no_third_send(frames):
    respond, drops = dropping(keep=1, fresh_too=True)   # after the first drop, every request is dropped
    server = Server(respond)

    first, second = asyncio.run(one_after_another(server, frames, 2))
    assert first.status == "ok" and (second.status, second.resent) == ("stream_broken", True)
    assert "resent on a fresh connection" in (second.error or "")
    assert (server.requests, server.connections) == (3, 2)
