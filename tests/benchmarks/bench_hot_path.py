"""Client hot path cost per frame, in-process: httptools de-chunking + SSE split + native adapter + frame buffer.

    python tests/benchmarks/bench_hot_path.py

Feeds pre-built HTTP responses (200-token SGLang native streams, cumulative text, chunked encoding) to the
same protocol object the worker uses, in reads of one frame and of many frames, and prints CPU microseconds
per frame next to a baseline in the same process: orjson-parsing every frame (what most clients do).
"""

from __future__ import annotations

import asyncio
import time

import orjson

from loadgen.client.http_stream import Endpoint, ReadLoop, StreamExchange
from loadgen.client.protocol.base import FrameBuffer, StreamState
from loadgen.client.protocol.sglang_native import SglangNativeAdapter
from loadgen.prompts import Prompt

TOKENS = 200
PROMPT = Prompt("p", "code", "t", text="x")


def response(tokens: int = TOKENS) -> list[bytes]:
    """The chunks of one streamed response: headers, then one HTTP chunk per SSE frame."""
    chunks = [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"]
    for i in range(1, tokens + 1):
        finish = f'{{"type":"length","length":{tokens}}}' if i == tokens else "null"
        extra = ',"e2e_latency":1.0,"spec_verify_ct":90' if i == tokens else ""
        text, ids = " hello" * i, ",".join("7" for _ in range(i))
        body = (f'{{"text":"{text}","output_ids":[{ids}],"meta_info":{{"id":"abc","finish_reason":{finish},'
                f'"prompt_tokens":9,"weight_version":"default","completion_tokens":{i},"cached_tokens":0{extra}}}}}')
        frame = b"data: " + body.encode() + b"\n\n"
        chunks.append(b"%x\r\n%s\r\n" % (len(frame), frame))
    done = b"data: [DONE]\n\n"
    chunks.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
    return chunks


def run_loadgen(chunks: list[bytes], streams: int, per_read: int) -> float:
    """CPU seconds per frame for `streams` responses fed `per_read` chunks at a time."""
    async def main() -> float:
        adapter, frames, read_loop = SglangNativeAdapter(), FrameBuffer(), ReadLoop()
        endpoint = Endpoint("http://127.0.0.1:1")  # never connected: reads are fed in directly
        reads = [b"".join(chunks[i:i + per_read]) for i in range(0, len(chunks), per_read)]
        t0 = time.process_time()
        for n in range(streams):
            state = StreamState(f"r{n}", PROMPT, "measure", 0, frames)
            proto = StreamExchange(state, adapter, b"", read_loop, endpoint)
            for data in reads:
                proto.data_received(data, 0)
            if len(frames) > 50_000:
                frames.clear()
        return (time.process_time() - t0) / (streams * TOKENS)
    return asyncio.run(main())


def run_baseline(chunks: list[bytes], streams: int) -> float:
    """Parse every frame's JSON fully (the usual client), SSE already split: a lower bound for that approach."""
    payloads = [c.split(b"\r\n", 1)[1][6:-4] for c in chunks[1:-1]]
    t0 = time.process_time()
    for _ in range(streams):
        for p in payloads:
            orjson.loads(p)["meta_info"]["completion_tokens"]
    return (time.process_time() - t0) / (streams * TOKENS)


if __name__ == "__main__":
    chunks = response()
    streams = 300
    one = run_loadgen(chunks, streams, 1)
    many = run_loadgen(chunks, streams, 16)
    base = run_baseline(chunks, streams)
    print(f"frames per stream {TOKENS}, streams {streams}")
    print(f"loadgen hot path, one frame per read : {one * 1e6:6.2f} us/frame")
    print(f"loadgen hot path, 16 frames per read : {many * 1e6:6.2f} us/frame")
    print(f"baseline orjson.loads per frame only : {base * 1e6:6.2f} us/frame (no HTTP, no SSE, no rows)")
    print(f"ratio loadgen(one per read) / baseline: {one / base:.2f}")
