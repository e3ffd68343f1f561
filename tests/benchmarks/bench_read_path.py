"""The worker's whole per-read path on real loopback sockets, next to its parts, in one process.

    python tests/benchmarks/bench_read_path.py          # ROUNDS=400 by default

256 kept-open TCP streams on 127.0.0.1 (the worker's own `Endpoint` sockets, kernel receive stamps on). Each
round writes one SGLang frame (one HTTP chunk) into every server-side socket, then reads all 256 once, in one
of four ways, taken in turns:
  - `tick`:        `ReadLoop._tick`, the worker's poll: epoll, then per socket `on_readable` (recvmsg with
                   the stamp, httptools, SSE, adapter, frame row);
  - `interleaved`: per socket a bare `recvmsg_into` then `data_received`, no poll and no stamp handling;
  - `recv`:        the bare `recvmsg_into` per socket alone (the syscall and its Python call);
  - `parse`:       `data_received` alone on the same bytes (no socket).
Only the reading thread's CPU is counted (RUSAGE_THREAD), user and system apart; the writes are not. The
differences say what interleaving syscalls with parsing costs the kernel (its caches go cold between reads),
and what the poll and `on_readable` add on top.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import time
from collections.abc import Callable

from loadgen.client.http_stream import _ANCILLARY_SIZE, Endpoint, ReadLoop, StreamExchange
from loadgen.client.protocol.base import FrameBuffer, StreamState
from loadgen.client.protocol.sglang_native import SglangNativeAdapter
from loadgen.prompts import Prompt

STREAMS = 256
ROUNDS = int(os.environ.get("ROUNDS", 400))
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def frame(i: int) -> bytes:
    """One middle frame of a 120-byte-text SGLang stream as one HTTP chunk."""
    body = (b'{"text":"%s","output_ids":[7],"meta_info":{"id":"abc","finish_reason":null,"prompt_tokens":9,'
            b'"weight_version":"default","completion_tokens":%d,"cached_tokens":0}}') % (b" hello" * 20, i)
    event = b"data: " + body + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def thread_cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime, usage.ru_stime


async def main() -> None:
    listener = socket.create_server(("127.0.0.1", 0), backlog=STREAMS)
    endpoint = Endpoint(f"http://127.0.0.1:{listener.getsockname()[1]}")
    reads, frames, adapter = ReadLoop(), FrameBuffer(), SglangNativeAdapter()
    clients = [await endpoint.open() for _ in range(STREAMS)]
    servers = [listener.accept()[0] for _ in range(STREAMS)]
    exchanges = []
    for n, sock in enumerate(clients):
        state = StreamState(f"r{n}", Prompt("p", "code", "t", text="x"), "measure", 0, frames)
        exchange = StreamExchange(state, adapter, b"", reads, endpoint)
        exchange.sock = sock
        reads.add_reader(sock.fileno(), exchange.on_readable)  # its timer never fires: nothing awaits below
        exchanges.append(exchange)
    for sock in servers:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.send(HEADERS)
    time.sleep(0.01)
    reads._tick()

    def tick(_: bytes) -> None:
        reads._tick()

    def interleaved(_: bytes) -> None:
        view = reads.view
        for exchange, sock in zip(exchanges, clients):
            size = sock.recvmsg_into(reads.buffers, _ANCILLARY_SIZE)[0]
            exchange.data_received(view[:size], 0)

    def recv(_: bytes) -> None:
        for sock in clients:
            sock.recvmsg_into(reads.buffers, _ANCILLARY_SIZE)

    def parse(chunk: bytes) -> None:
        for exchange in exchanges:
            exchange.data_received(chunk, 0)

    ways: dict[str, Callable[[bytes], None]] = {"tick": tick, "interleaved": interleaved, "recv": recv,
                                                "parse": parse}
    spent = {name: [0.0, 0.0] for name in ways}
    seq = 0
    for _ in range(ROUNDS):
        for name, way in ways.items():
            seq += 1
            chunk = frame(seq)
            if name != "parse":
                for sock in servers:
                    sock.send(chunk)
                time.sleep(0.0005)  # let loopback deliver every segment before reading
            user0, sys0 = thread_cpu()
            way(chunk)
            user1, sys1 = thread_cpu()
            spent[name][0] += user1 - user0
            spent[name][1] += sys1 - sys0
        if len(frames) > 100_000:
            frames.clear()
    n = ROUNDS * STREAMS
    us = {name: (user / n * 1e6, system / n * 1e6) for name, (user, system) in spent.items()}
    print(f"{STREAMS} streams x {ROUNDS} rounds, one frame per socket per round; CPU us per read")
    print(f"  {'way':12s} {'user':>6s} {'system':>7s} {'total':>6s}")
    for name, (user, system) in us.items():
        print(f"  {name:12s} {user:6.2f} {system:7.2f} {user + system:6.2f}")
    total = {name: sum(v) for name, v in us.items()}
    beyond = total["interleaved"] - total["recv"] - total["parse"]
    beyond_system = us["interleaved"][1] - us["recv"][1] - us["parse"][1]
    print(f"interleaving reads with parsing, beyond recv + parse: {beyond:+.2f} us (system {beyond_system:+.2f})")
    tick = total["tick"] - total["interleaved"]
    print(f"the poll and on_readable (stamp, dispatch), beyond interleaved: {tick:+.2f} us")
    for sock in clients + servers:
        sock.close()


if __name__ == "__main__":
    asyncio.run(main())
