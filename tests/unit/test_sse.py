"""SSE splitting must not depend on how TCP cut the bytes."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.client.protocol.sse import SseSplitter

FRAMES = [b'{"text":"a","meta_info":{"completion_tokens":1}}', b'{"text":"ab\\n\\n","meta_info":{}}',
          b"x" * 70_000, b"[DONE]"]
STREAM = b"".join(b"data: " + f + b"\n\n" for f in FRAMES)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    splitter, out, last = SseSplitter(), [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out += splitter.feed(data[last:cut])
        last = cut
    assert splitter.pending == 0
    return out


def test_one_read_holds_every_frame():
    assert _split(STREAM, []) == FRAMES


def test_every_single_byte_cut():
    """Every cut, but inside the 70 KB frame's run of x (all alike) only every 97th and its two ends'."""
    run = STREAM.index(b"x" * 70_000)
    inside = range(run + 2, run + 70_000 - 1)
    for cut in (c for c in range(1, len(STREAM)) if c not in inside or (c - run) % 97 == 0):
        assert _split(STREAM, [cut]) == FRAMES, cut


def test_read_ending_inside_the_data_prefix_and_separator():
    first = STREAM.index(b"\n\n")
    for cut in (3, 5, 6, first + 1):  # "dat|a", "data|:", "data:| ", between the two newlines
        assert _split(STREAM, [cut]) == FRAMES


def test_byte_at_a_time():
    assert _split(STREAM, list(range(1, len(STREAM)))) == FRAMES


def test_crlf_comments_event_lines_and_multiline_data():
    raw = b": keepalive\r\n\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata:[DONE]\r\n\r\n"
    for cut in range(1, len(raw)):
        assert _split(raw, [cut]) == [b'{"a":\n1}', b"[DONE]"], cut


def test_truncated_event_is_pending():
    splitter = SseSplitter()
    assert splitter.feed(b"data: {\"a\":1}\n\ndata: {\"b\"") == [b'{"a":1}']
    assert splitter.pending > 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=40))
def test_random_cuts(cuts):
    assert _split(STREAM, cuts) == FRAMES


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(min_value=0, max_value=400), max_size=10))
def test_never_raises_and_is_cut_independent(data, cuts):
    cuts = [c for c in cuts if c <= len(data)]
    reference = SseSplitter().feed(data)
    splitter, out, last = SseSplitter(), [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out += splitter.feed(data[last:cut])
        last = cut
    assert out == reference


def test_many_frames_random_reads_large_stream():
    rng = random.Random(7)
    frames = [b'{"i":%d,"pad":"%s"}' % (i, b"y" * rng.randrange(0, 3000)) for i in range(500)]
    data = b"".join(b"data: " + f + b"\n\n" for f in frames)
    cuts = sorted(rng.sample(range(1, len(data)), 2000))
    assert _split(data, cuts) == frames
