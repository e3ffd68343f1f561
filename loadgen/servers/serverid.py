"""Which server answers at a URL: SGLang, llama.cpp's llama-server, vLLM, or some other OpenAI server.

`identify` asks each server's own identity route once, in this order, and stops at the first that answers in
that server's shape:
- SGLang: `GET /get_server_info` -> a JSON object with `version` (and its flattened launch args);
- llama.cpp: `GET /props` -> a JSON object with `build_info` / `default_generation_settings`
  (tools/server/server-context.cpp, get_res_props);
- vLLM: `GET /version` -> `{"version": "..."}` (vllm/entrypoints/openai/api_server.py, show_version); its
  `/metrics` names start with `vllm:`;
- otherwise a generic OpenAI server, if `GET /v1/models` lists a model.
It also notes whether `/metrics` answers, so a sampler polls only routes that exist (a 404 route is asked once,
here, not every second). The result is plain data that goes into the steps table (`server_info` JSON) and
decides the flavour of a target whose `flavor = "auto"`.

Each route is asked once, never retried, so a refused connection ends the preflight at once: a server loadgen
launched has passed its health wait before (loadgen.servers.health, the one wait for a server still starting), and a
`url` target is one the user says is running. (The driver refuses what it can tell before Ray starts:
loadgen.driver.reach.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import orjson

from loadgen.errors import TargetError

_TIMEOUT = aiohttp.ClientTimeout(total=10)

SGLANG, LLAMACPP, VLLM, OPENAI = "sglang", "llama.cpp", "vllm", "openai"


@dataclass(frozen=True)
class ServerId:
    name: str                         # sglang | llama.cpp | vllm | openai
    version: str | None = None
    model: str | None = None
    flavor: str = "openai-completions"  # what `auto` resolves to
    metrics: bool = False             # GET /metrics answered 200 (Prometheus text)
    speculative: dict = field(default_factory=dict)  # whatever the server says about its drafting
    routes: dict = field(default_factory=dict)       # route -> HTTP status seen when probed (once)
    limits: dict = field(default_factory=dict)       # admission limits it reports, under SGLang's names

    def as_dict(self) -> dict:
        return asdict(self)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def _get(session: aiohttp.ClientSession, url: str, route: str, api_key: str | None) -> tuple[int, bytes]:
    try:
        async with session.get(f"{url}{route}", headers=_headers(api_key), timeout=_TIMEOUT) as resp:
            return resp.status, await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TargetError(f"{url}: unreachable ({exc.__class__.__name__}: {exc}); "
                          "check the URL and that the server is up") from exc


def _json(status: int, body: bytes) -> Any:
    if status != 200:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


async def identify(session: aiohttp.ClientSession, url: str, api_key: str | None = None) -> ServerId:
    """Probe `url` once per identity route; TargetError if it is unreachable or answers 401."""
    routes: dict[str, int] = {}

    async def get(route: str) -> Any:
        status, body = await _get(session, url, route, api_key)
        routes[route] = status
        if status == 401:
            raise TargetError(f"{url}: 401 Unauthorized; set the target's api_key_env or api_key_file to its key")
        return _json(status, body)

    metrics_status, metrics_body = await _get(session, url, "/metrics", api_key)
    routes["/metrics"] = metrics_status
    metrics = metrics_status == 200
    metric_text = metrics_body.decode("utf-8", "replace") if metrics else ""

    info = await get("/get_server_info")
    if isinstance(info, dict) and "version" in info:
        return ServerId(SGLANG, str(info.get("version")), _str(info.get("served_model_name") or info.get("model_path")),
                        "sglang", metrics, sglang_speculative(info), routes)
    props = await get("/props")
    if isinstance(props, dict) and ("build_info" in props or "default_generation_settings" in props):
        return ServerId(LLAMACPP, _str(props.get("build_info")),
                        _str(props.get("model_alias") or props.get("model_path")), "openai-completions", metrics,
                        llamacpp_speculative(props, metric_text), routes, llamacpp_limits(props))
    version = await get("/version")
    if (isinstance(version, dict) and isinstance(version.get("version"), str)) or "vllm:" in metric_text:
        model = await _first_model(get)
        return ServerId(VLLM, version.get("version") if isinstance(version, dict) else None, model,
                        "openai-completions", metrics, vllm_speculative(metric_text), routes)
    model = await _first_model(get)
    if model is None:
        raise TargetError(f"{url}: not SGLang (/get_server_info), llama.cpp (/props) or vLLM (/version), and "
                          f"GET /v1/models lists no model (HTTP {routes.get('/v1/models')}); is this an LLM "
                          "server? Set the target's flavor explicitly if it speaks a known API")
    return ServerId(OPENAI, None, model, "openai-completions", metrics, {}, routes)


async def _first_model(get: Callable[[str], Awaitable[Any]]) -> str | None:
    body = await get("/v1/models")
    data = body.get("data") if isinstance(body, dict) else None
    if isinstance(data, list):
        for m in data:
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                return m["id"]
    return None


def sglang_speculative(info: dict) -> dict:
    return {k: info[k] for k in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                                 "speculative_num_draft_tokens", "speculative_draft_model_path") if k in info}


def llamacpp_speculative(props: dict, metric_text: str) -> dict:
    """llama.cpp does not expose its draft settings in /props beyond `speculative.types` of the default
    generation params (`speculative.n_max` etc. are request fields); its /metrics says whether drafts ran."""
    params = ((props.get("default_generation_settings") or {}).get("params") or {})
    out = {k: v for k, v in params.items() if isinstance(k, str) and k.startswith("speculative")}
    if "llamacpp:spec_decode_num_drafts_total" in metric_text:
        out["metrics"] = "llamacpp:spec_decode_*"
    return out


def llamacpp_limits(props: dict) -> dict:
    """llama-server's slots (`-np`: requests decoded at once, SGLang's max_running_requests) and the KV cache they
    share (each slot's n_ctx x slots, SGLang's max_total_num_tokens)."""
    slots = props.get("total_slots")
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        return {}
    out = {"max_running_requests": slots}
    if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0:
        out["max_total_num_tokens"] = n_ctx * slots
    return out


def vllm_speculative(metric_text: str) -> dict:
    return {"metrics": "vllm:spec_decode_*"} if "vllm:spec_decode_num_drafts" in metric_text else {}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
