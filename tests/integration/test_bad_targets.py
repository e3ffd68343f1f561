"""Targets that are unreachable or not SGLang stop the run before any load, with a message naming them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from conftest import serve_app
from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.errors import LoadgenError
from loadgen.servers.ports import free_port


@contextmanager
def not_sglang_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback that is not SGLang (a web page); records every request path."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return web.Response(text="<html>hello</html>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    with serve_app(app) as url:
        yield url, seen


def _exp(url: str) -> object:
    return parse_experiment({"load": {"concurrency": [1], "measure_s": 1.0}, "prompts": {"max_new_tokens": 4},
                             "targets": [{"name": "x", "url": url}]}, Path("."))


def test_unreachable_target_fails_the_run_before_load(ray_local, tmp_path):
    import duckdb
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(LoadgenError, match=r"unreachable.*check the URL") as err:
        run_experiment(_exp(url), str(tmp_path))
    assert url in str(err.value)
    rows = duckdb.sql(f"SELECT status, status_reason FROM read_parquet('{tmp_path}/runs/*/*.parquet') "
                      "ORDER BY finished_at_ns NULLS FIRST").fetchall()
    assert rows[0][0] == "running" and rows[-1][0] == "failed" and "unreachable" in rows[-1][1]
    requests = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/requests/*/*.parquet')").fetchall()
    assert requests == [(0,)]


def test_server_that_is_not_sglang_gets_no_load(ray_local, tmp_path):
    """flavor = "auto" (the default) asks each identity route once; a server that is none of them (and lists
    no OpenAI model) is refused before any load: only GETs reached it."""
    with not_sglang_server() as (url, seen):
        with pytest.raises(LoadgenError, match="is this an LLM server"):
            run_experiment(_exp(url), str(tmp_path))
    assert "GET /get_server_info" in seen and all(s.startswith("GET ") for s in seen), seen

