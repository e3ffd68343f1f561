"""Control calls to a target: health, server info, cache flush, /metrics samples.

These are not measurements, so they are retried (tenacity) with backoff; measured requests never are.
They run inside the worker actors, which sit next to their server, so a server bound to loopback on a
remote node is reachable.
"""

from __future__ import annotations

import math
from typing import Any

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_delay,
    wait_exponential,
)

from loadgen.errors import TargetError
from loadgen.servers.secrets import masked_server_info

_TIMEOUT = aiohttp.ClientTimeout(total=10)


class _Busy(Exception):
    """The server refused a flush because requests are still running."""


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def _get_json(session: aiohttp.ClientSession, url: str, route: str, api_key: str | None,
                    within_s: float) -> tuple[int, Any]:
    """GET a control route: (HTTP status, parsed JSON or None); retried while the connection fails."""
    try:
        async for attempt in AsyncRetrying(stop=stop_after_delay(within_s), reraise=True,
                                           wait=wait_exponential(multiplier=0.1, max=1.0),
                                           retry=retry_if_exception_type(aiohttp.ClientConnectionError)):
            with attempt:
                async with session.get(f"{url}{route}", headers=_headers(api_key), timeout=_TIMEOUT) as resp:
                    body = await resp.read()
                    status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TargetError(f"{url}: unreachable ({exc.__class__.__name__}: {exc}); "
                          "check the URL and that the server is up") from exc
    if status == 401:
        raise TargetError(f"{url}: 401 Unauthorized; set the target's api_key_env or api_key_file to its key")
    try:
        return status, orjson.loads(body) if status == 200 else None
    except orjson.JSONDecodeError:
        return status, None


async def server_info(session: aiohttp.ClientSession, url: str, api_key: str | None = None,
                      within_s: float = 10.0) -> dict[str, Any]:
    """`/get_server_info` as a dict; TargetError naming the URL if it is unreachable or not SGLang."""
    info = await sglang_server_info(session, url, api_key, within_s)
    if info is None:
        raise TargetError(f"{url}: GET /get_server_info answered without SGLang's server info; "
                          "is this an SGLang server? (for other servers use an openai-* flavor)")
    return info


async def sglang_server_info(session: aiohttp.ClientSession, url: str, api_key: str | None = None,
                             within_s: float = 10.0) -> dict[str, Any] | None:
    """`/get_server_info` when the server is SGLang, None when it answers but is not (vLLM, llama.cpp, ...).
    Secret fields are masked here: SGLang reports its api_key and launch command, and the info is stored."""
    _, info = await _get_json(session, url, "/get_server_info", api_key, within_s)
    return masked_server_info(info) if isinstance(info, dict) and "version" in info else None


async def openai_models(session: aiohttp.ClientSession, url: str, api_key: str | None = None,
                        within_s: float = 10.0) -> list[str]:
    """The model ids of `GET /v1/models`; TargetError unless it answers an OpenAI list with at least one."""
    status, body = await _get_json(session, url, "/v1/models", api_key, within_s)
    data = body.get("data") if isinstance(body, dict) else None
    ids = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(
        data, list) else []
    if not ids:
        raise TargetError(f"{url}: GET /v1/models answered HTTP {status} without an OpenAI model list "
                          '({"object": "list", "data": [{"id": ...}]}); is this an OpenAI-compatible server? '
                          "(for SGLang's native /generate use flavor = \"sglang\")")
    return ids


async def flush_cache(session: aiohttp.ClientSession, url: str, api_key: str | None = None,
                      within_s: float = 30.0) -> None:
    """`POST /flush_cache`, retried while the server is still busy finishing cut requests or drops a connection. A
    refused connect is not retried: the server is gone, and the caller brings it back or drops it within
    server_retry_s (driver/serverdeath.py), not after this call's own `within_s` on top."""
    try:
        async for attempt in AsyncRetrying(stop=stop_after_delay(within_s), reraise=True,
                                           wait=wait_exponential(multiplier=0.05, max=1.0),
                                           retry=retry_if_exception_type((_Busy, aiohttp.ClientConnectionError))
                                           & retry_if_not_exception_type(aiohttp.ClientConnectorError)):
            with attempt:
                async with session.post(f"{url}/flush_cache", headers=_headers(api_key), timeout=_TIMEOUT) as resp:
                    await resp.read()
                    if resp.status == 400:
                        raise _Busy()
                    if resp.status != 200:
                        raise TargetError(f"{url}: POST /flush_cache answered HTTP {resp.status}")
    except _Busy:
        raise TargetError(f"{url}: still busy after {within_s:g} s, /flush_cache kept answering 400") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TargetError(f"{url}: unreachable for /flush_cache ({exc.__class__.__name__}: {exc}); "
                          "did the server die?") from exc


def server_info_samples(info: dict[str, Any]) -> list[tuple[str, float, dict]]:
    """Numeric per-rank figures of `internal_states` as (name, value, labels)."""
    out = []
    for rank, state in enumerate(info.get("internal_states") or []):
        if not isinstance(state, dict):
            continue
        for name in ("avg_spec_accept_length", "last_gen_throughput", "memory_usage"):
            value = state.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                out.append((name, float(value), {"dp_rank": rank}))
    return out


async def metrics_samples(session: aiohttp.ClientSession, url: str,
                          api_key: str | None = None) -> list[tuple[str, float, dict]]:
    """`/metrics` gauges and counters (histogram buckets skipped); [] when metrics are not enabled."""
    try:
        async with session.get(f"{url}/metrics", headers=_headers(api_key), timeout=_TIMEOUT) as resp:
            if resp.status != 200:
                return []
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError):
        return []
    return parse_prometheus(text)


def parse_prometheus(text: str) -> list[tuple[str, float, dict]]:
    """Prometheus text format -> (name, value, labels), with prometheus_client's parser (quoted label values
    with commas, escapes, sample timestamps); `_bucket` series are left out (too many rows). A malformed line
    ends the parse: the samples before it are kept."""
    out = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.endswith("_bucket") and math.isfinite(sample.value):
                    out.append((sample.name, float(sample.value), dict(sample.labels)))
    except ValueError:
        pass
    return out
