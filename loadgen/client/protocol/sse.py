"""Server-sent-events splitting that does not care how TCP cut the bytes.

SGLang sends exactly `data: <json>\n\n` per event; other servers may use CRLF, several `data:` lines, `event:`
lines or `:` comments. The fast path handles SGLang's shape with one `find` per event; anything else goes through
the general line parser. Only the unconsumed tail is kept between reads, and a search never rescans bytes
already searched, so a huge frame spread over many reads costs linear time.
"""

from __future__ import annotations


class SseSplitter:
    """Feed body bytes as they arrive; get back the data payload of every event completed so far."""

    __slots__ = ("_buf", "_scan_from", "_held_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._scan_from = 0
        self._held_cr = False

    def feed(self, chunk: bytes) -> list[bytes]:
        if (not self._buf and not self._held_cr and chunk.startswith(b"data: ")
                and chunk.find(b"\n") == len(chunk) - 2 and chunk.endswith(b"\n\n") and chunk[-3:-2] != b"\r"):
            return [chunk[6:-2]]  # the common case: exactly one whole SGLang event in this read
        if self._held_cr:
            chunk = b"\r" + chunk
            self._held_cr = False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):  # a CRLF may be cut between reads: decide with the next read
                chunk, self._held_cr = chunk[:-1], True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        start = 0
        out: list[bytes] = []
        end = buf.find(b"\n\n", self._scan_from)
        while end >= 0:
            if buf.startswith(b"data: ", start) and buf.find(b"\n", start, end) < 0:
                out.append(buf[start + 6:end])
            else:
                payload = _parse_event(buf[start:end])
                if payload is not None:
                    out.append(payload)
            start = end + 2
            end = buf.find(b"\n\n", start)
        self._buf = buf[start:]
        # Next search may start one byte early: the tail may end with the first "\n" of a separator.
        self._scan_from = max(len(self._buf) - 1, 0)
        return out

    @property
    def pending(self) -> int:
        """Bytes of an event not yet completed (non-zero at end of stream means a truncated event)."""
        return len(self._buf.strip(b"\n"))


def _parse_event(event: bytes) -> bytes | None:
    """General SSE event: join its `data:` lines; comments and other fields are ignored."""
    data = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(data) if data else None
