"""A plain OpenAI server (an aiohttp app: completions only, no usage, no /metrics or identity routes) that
ignores ignore_eos, run with flavor "auto" on a real local Ray: it is named as a generic OpenAI server, each
route it lacks is asked once (not polled), its early stops are flagged in SQL, and tokens it never counted stay
unknown (NULL), never 0."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from conftest import serve_app
from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis

REQUESTS = 6
MAX_TOKENS = 16


def _app(hits: Counter, bodies: list) -> web.Application:
    ids = itertools.count()

    @web.middleware
    async def count(request, handler):
        hits[request.path] += 1
        return await handler(request)

    async def models(_):
        return web.json_response({"object": "list", "data": [{"id": "plain", "object": "model"}]})

    async def completions(request):
        body = await request.json()
        bodies.append(body)
        rid = f"c-{next(ids)}"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(5):   # stops after 5 words whatever ignore_eos says
            chunk = {"id": rid, "object": "text_completion",
                     "choices": [{"index": 0, "text": f" w{i}", "finish_reason": "stop" if i == 4 else None}]}
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            await asyncio.sleep(0.01)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application(middlewares=[count])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    return app


@pytest.fixture(scope="module")
def plain_run(ray_local, tmp_path_factory):
    hits, bodies = Counter(), []
    with serve_app(_app(hits, bodies)) as url:
        exp = parse_experiment({
            "run": {"name": "plain-auto"},
            "load": {"concurrency": [2], "requests": REQUESTS},
            "prompts": {"seed": 1, "max_new_tokens": MAX_TOKENS, "ignore_eos": True},
            "targets": [{"name": "plain", "url": url}],
        }, Path("."))
        outcome = run_experiment(exp, str(tmp_path_factory.mktemp("results")), log=lambda *a: None)
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    return outcome, con, hits, bodies


def test_named_as_a_generic_openai_server(plain_run):
    outcome, con, _, bodies = plain_run
    assert outcome.status == "complete"
    flavor, info = con.execute("SELECT flavor, server_info FROM steps").fetchone()
    info = json.loads(info)
    assert flavor == "openai-completions" and info["server"] == "openai" and info["model"] == "plain"
    assert all(b["ignore_eos"] is True and "cache_prompt" not in b and "rid" not in b for b in bodies)


def test_missing_routes_are_asked_once_not_polled(plain_run):
    _, _, hits, _ = plain_run
    assert hits["/v1/completions"] == REQUESTS
    for route in ("/get_server_info", "/props", "/version", "/metrics"):
        assert hits[route] == 1, (route, hits)


def test_early_stops_are_flagged(plain_run):
    _, con, _, _ = plain_run
    [row] = analysis.run_query(con, "workload_check", {}).to_pylist()
    assert row["server"] == "openai" and row["asked_ignore_eos"] is True
    assert row["early_stops"] == row["ok_requests"] == REQUESTS
    assert row["flags"] == "ignores ignore_eos"


def test_uncounted_tokens_stay_unknown_not_zero(plain_run):
    _, con, _, _ = plain_run
    tokens = con.execute("SELECT count(*), count(completion_tokens) FROM requests").fetchone()
    assert tokens == (REQUESTS, 0)   # the server never said: NULL, not a count of text pieces
    tp = con.execute("SELECT tok_s, tok_s_ok, frames_unknown_tokens, token_method FROM step_throughput").fetchone()
    assert tp[0] is None and tp[1] is None and tp[2] > 0 and tp[3] is None
