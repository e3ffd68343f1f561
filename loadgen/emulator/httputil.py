"""Small pieces every route shares: JSON responses and SGLang error bodies."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def error_body(message: str, status: int, type_: str | None = None) -> dict:
    """SGLang's ErrorResponse body (HTTP errors and OpenAI-route errors)."""
    return {"object": "error", "message": message, "type": type_ or str(status), "param": None, "code": status}
