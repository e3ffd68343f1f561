"""Frames/s ceiling of the zero-cost emulator (`--hardware zero`), the number that says how hard it can push a client.

    python tests/benchmarks/bench_emulator_frames.py [--procs 1] [--clients 1] [--concurrency 64] [--seconds 8]

--procs N starts N emulator processes on ONE port (SO_REUSEPORT, `--reuse-port`); the kernel spreads
connections over them. The load comes from --clients raw-socket client processes that only count frames
(no JSON parsing), so the client is cheap; on a 2-core box client and server still share the CPU, so the
printed number is a floor for the server alone.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time

import orjson

from loadgen.emulator.launch import EmulatorProcess, free_port


async def _stream_loop(port: int, deadline: float, counts: list[int], tokens: int, incremental: bool) -> None:
    body = orjson.dumps({"text": "x", "stream": True,
                         "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}})
    head = (f"POST /generate HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < deadline:
            writer.write(head)
            tail = b""
            while True:
                chunk = await reader.read(262144)
                if not chunk:
                    return
                counts[0] += chunk.count(b"data: ")
                tail = (tail + chunk)[-64:]
                if b"data: [DONE]\n\n\r\n0\r\n\r\n" in tail:
                    counts[0] -= 1
                    break
    finally:
        writer.close()


def _client(port: int, concurrency: int, seconds: float, tokens: int, incremental: bool, out) -> None:
    import uvloop

    async def main() -> int:
        counts = [0]
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(_stream_loop(port, deadline, counts, tokens, incremental) for _ in range(concurrency)))
        return counts[0]

    out.put(uvloop.run(main()))


def run(procs: int, clients: int, concurrency: int, seconds: float, tokens: int, incremental: bool) -> float:
    port = free_port()
    flags = ["--hardware", "zero", "--port", str(port), "--max-running-requests", str(concurrency * clients),
             "--reuse-port"] + (["--incremental-streaming-output"] if incremental else [])
    servers = [EmulatorProcess(flags) for _ in range(procs)]
    for s in servers:
        s.__enter__()
    try:
        q: mp.Queue = mp.Queue()
        workers = [mp.Process(target=_client, args=(port, concurrency, seconds, tokens, incremental, q))
                   for _ in range(clients)]
        t0 = time.monotonic()
        for w in workers:
            w.start()
        total = sum(q.get() for _ in workers)
        elapsed = time.monotonic() - t0
        for w in workers:
            w.join()
    finally:
        for s in servers:
            s.__exit__(None, None, None)
    return total / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=64, help="streams per client process")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--tokens", type=int, default=256, help="max_new_tokens per request (one frame per token)")
    p.add_argument("--incremental", action="store_true", help="--incremental-streaming-output (delta frames)")
    a = p.parse_args()
    fps = run(a.procs, a.clients, a.concurrency, a.seconds, a.tokens, a.incremental)
    print(f"emulator zero-cost: procs={a.procs} clients={a.clients} streams={a.concurrency * a.clients} "
          f"tokens/request={a.tokens} incremental={a.incremental}: {fps:,.0f} frames/s")


if __name__ == "__main__":
    main()
