"""One blocking HTTP request to a local server, for tests that check bytes and headers exactly."""

from __future__ import annotations

import http.client

import orjson


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
