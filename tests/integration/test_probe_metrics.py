"""/metrics samples, parsed with prometheus_client's parser from a real server on loopback."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from conftest import serve_app
from loadgen.servers.probe import metrics_samples

METRICS = """\
# HELP sglang:num_requests_total Requests finished.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",path="/a,/b"} 12 1733100000000
# HELP sglang:num_running_reqs Running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",note="a \\"quoted\\", list"} 4
# HELP sglang:e2e_request_latency_seconds Latency.
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="1.0"} 3
sglang:e2e_request_latency_seconds_bucket{le="+Inf"} 5
sglang:e2e_request_latency_seconds_count 5
sglang:e2e_request_latency_seconds_sum 7.5
"""


def test_timestamps_and_commas_in_label_values_are_read_as_written():
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=METRICS, content_type="text/plain")

    async def scrape(url: str):
        async with aiohttp.ClientSession() as session:
            return await metrics_samples(session, url)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    with serve_app(app) as url:
        samples = asyncio.run(scrape(url))
    assert samples == [
        # the value, not the millisecond timestamp after it; a comma inside quotes is part of the value
        ("sglang:num_requests_total", 12.0, {"model_name": "m", "path": "/a,/b"}),
        ("sglang:num_running_reqs", 4.0, {"model_name": "m", "note": 'a "quoted", list'}),
        ("sglang:e2e_request_latency_seconds_count", 5.0, {}),   # buckets left out
        ("sglang:e2e_request_latency_seconds_sum", 7.5, {}),
    ]
