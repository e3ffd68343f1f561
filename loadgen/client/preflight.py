"""The worker's calls to its server outside the load: preflight (the server's identity, its info, the request
options of an OpenAI-compatible server, what llama.cpp drafts), calibration, the cache flush, the prompts'
fetch, the control session. A mix-in of LoadWorker (a Ray actor is one class), which sets the attributes
declared here."""

from __future__ import annotations

import asyncio
import os
import re

import aiohttp
import ray

from loadgen.client import calibrate, drafting
from loadgen.client.http_stream import Endpoint, ReadLoop, stream_request
from loadgen.client.protocol import adapter_for
from loadgen.client.protocol.base import Adapter, FrameBuffer, SamplingSpec, StreamState
from loadgen.client.protocol.openai import OpenAIOptions
from loadgen.clock import now_ns
from loadgen.config import TargetConfig
from loadgen.errors import TargetError
from loadgen.prompts import Prompt
from loadgen.servers import probe, serverid

DRAFT_PROBE_TIMEOUT_S = 60.0  # llama.cpp's drafting probe before any load (client/drafting.py)
CONTROL_PROBE_TIMEOUT_S = 60.0  # one prompts.extra_body key's one-token request before any load
_CONTROL_PROMPT = Prompt("preflight-extra-body", "prose", "preflight", text="Say hello.")


class ServerControl:
    """The control calls of a LoadWorker, run where the server is reachable."""

    target: TargetConfig
    url: str
    api_key: str | None
    key_problem: str | None
    flavor: str | None
    adapter: Adapter | None
    options: OpenAIOptions | None
    identity: dict | None
    endpoint: Endpoint
    reads: ReadLoop
    session: aiohttp.ClientSession | None
    prompt_source: tuple[str, int]
    sampling: SamplingSpec
    prompts: list[Prompt]

    async def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        return self.session

    async def server_info(self) -> dict:
        """SGLang's /get_server_info; for openai-* flavours whatever the server says (algorithm UNKNOWN when it
        is not SGLang), so steps rows carry the algorithm and draft tokens whenever they can be known."""
        session, url = await self._session(), self.url
        ident = self.identity or {}
        if self.flavor == "sglang" or ident.get("server") == serverid.SGLANG:
            return dict(await probe.server_info(session, url, self.api_key), **ident)
        if ident:  # another server: what preflight learnt (its routes are not asked again)
            return dict(ident)
        info = await probe.sglang_server_info(session, url, self.api_key)
        return info if info is not None else {"speculative_algorithm": "UNKNOWN", "version": "unknown"}

    async def _counters(self) -> dict[str, float]:
        """The server's unlabelled /metrics series now (empty where /metrics does not answer)."""
        if (self.identity or {}).get("routes", {}).get("/metrics", 200) != 200:
            return {}
        samples = await probe.metrics_samples(await self._session(), self.url, self.api_key)
        return {name: value for name, value, labels in samples if not labels}

    async def preflight(self) -> tuple[dict, OpenAIOptions | None]:
        """Before any load: the server info, and for openai-* flavours the resolved request options (GET
        /v1/models must answer an OpenAI list; the model defaults to its first id). TargetError otherwise,
        with the control session closed (the run ends there, and an open one is reported as leaked)."""
        try:
            return await self._preflight()
        except TargetError:
            await self.close()
            raise

    async def _preflight(self) -> tuple[dict, OpenAIOptions | None]:
        if self.key_problem:
            raise TargetError(f"target {self.target.name}: {self.key_problem}")
        t = self.target
        ident = await serverid.identify(await self._session(), self.url, self.api_key)
        self.flavor = t.flavor if t.flavor != "auto" else ident.flavor
        self.identity = identity_info(ident, self.flavor)
        if self.flavor == "sglang":
            self.adapter = adapter_for("sglang")
            return await self.server_info(), None
        models = await probe.openai_models(await self._session(), self.url, self.api_key)
        if t.model is not None and t.model not in models:
            raise TargetError(f"target {t.name}: model {t.model!r} is not served by {self.url} (it serves "
                              f"{', '.join(models)}); fix the target's `model` or leave it out")
        info = await self.server_info()
        sglang = ident.name == serverid.SGLANG
        spec = t.spec_details if t.spec_details is not None else sglang and _version(info["version"]) >= (0, 5, 23)
        options = OpenAIOptions(t.model or models[0], t.continuous_usage, bool(spec), sglang=sglang,
                                server=ident.name, flavor=self.flavor,
                                cache_prompt=ident.name != serverid.LLAMACPP,  # no prefix reuse (docs/real-servers.md)
                                cache_salt=ident.name == serverid.VLLM)
        self.configure(options)
        await self._check_extra_body()
        if ident.name == serverid.LLAMACPP and self.adapter is not None:   # what it does over what it says
            observed = await drafting.observe(self.endpoint, self.adapter, self.reads, DRAFT_PROBE_TIMEOUT_S,
                                              self._counters)
            info = self.identity = drafting.with_observed(info, observed)
        return info, options

    async def _check_extra_body(self) -> None:
        """Each prompts.extra_body field in its own one-token request before any load: a field the server refuses
        (HTTP 400, e.g. a thinking control it does not know) stops the run with one line naming it."""
        assert self.adapter is not None   # configure() chose it
        for name, value in self.sampling.extra_body:
            state = StreamState(f"preflight-{name}", _CONTROL_PROMPT, "warmup", now_ns(), FrameBuffer())
            body = self.adapter.body(state.request_id, _CONTROL_PROMPT, SamplingSpec(1, False, 0.0, ((name, value),)))
            try:
                await asyncio.wait_for(stream_request(self.endpoint, self.adapter, state, body, {}, self.reads),
                                       CONTROL_PROBE_TIMEOUT_S)
            except TimeoutError:
                continue   # no answer is no refusal: the load's own timeouts will say more
            if state.http_status == 400:
                said = " ".join((state.error or "").split())[:300]
                raise TargetError(f"target {self.target.name}: the server refuses prompts.extra_body.{name} = "
                                  f"{value!r} (HTTP 400: {said}); fix: correct that field for this server or drop it")

    def configure(self, options: OpenAIOptions | None) -> None:
        """Use the preflight's request options (every worker of a target gets the first one's)."""
        if options is not None:
            self.options = options
            self.flavor = options.flavor or self.target.flavor
            self.adapter = adapter_for(self.flavor, options)
        elif self.flavor is None:  # `auto` that preflight resolved to SGLang's native API
            self.flavor = "sglang"
            self.adapter = adapter_for("sglang")

    async def calibrate(self, prompts: list[Prompt], timeout_s: float) -> list[tuple[int | None, str | None]]:
        """The server's own prompt token count for each prompt (one-token requests, after preflight): the data of
        the target's input-length fit (loadgen.client.calibrate)."""
        assert self.adapter is not None   # chosen by preflight
        return await calibrate.server_counts(self.endpoint, self.adapter, self.reads, prompts, timeout_s)

    async def fetch_prompts(self) -> None:
        """Fetch this worker's prompt shard. Done before the first step: fetched at a step's start, a shard took
        up to 2 s on a loaded machine, and the step's first arrivals (a trace's first rows) were sent that late."""
        pool, shard = self.prompt_source
        self.prompts = await ray.get_actor(pool).shard.remote(shard)

    async def flush_cache(self) -> None:
        if self.options is not None and not self.options.sglang:
            return  # an OpenAI server other than SGLang has no /flush_cache
        await probe.flush_cache(await self._session(), self.url, self.api_key)

    async def close(self) -> None:
        """Release the control-call connection pool (end of run)."""
        if self.session is not None:
            await self.session.close()
            self.session = None

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


def identity_info(ident: serverid.ServerId, flavor: str) -> dict:
    """The server's identity as steps.server_info keys: `server`, `server_version`, `model`, the resolved
    `flavor`, what it says of its drafting, the routes probed; for a server other than SGLang also `version`
    and `speculative_algorithm` (UNKNOWN unless it says; NONE for a vLLM whose /metrics has no spec-decode counters:
    vLLM registers them only with a speculative config, vllm/v1/spec_decode/metrics.py SpecDecodingProm)."""
    info = {"server": ident.name, "server_version": ident.version, "model": ident.model, "flavor": flavor,
            "server_speculative": ident.speculative, "routes": ident.routes}
    if ident.name != serverid.SGLANG:
        info.update(ident.limits)
        types = ident.speculative.get("speculative.types")
        info["version"] = ident.version or "unknown"
        info["speculative_algorithm"] = (str(types).upper() if isinstance(types, str) and types
                                         else "NONE" if ident.name == serverid.VLLM and ident.metrics
                                         and not ident.speculative else "UNKNOWN")
    return info


def read_api_key(target: TargetConfig) -> tuple[str | None, str | None]:
    """(key, problem): from the environment or a file on this node; the problem is raised at preflight."""
    if target.api_key_env:
        key = os.environ.get(target.api_key_env)
        return (key, None) if key else (None, f"api_key_env {target.api_key_env} is not set on this node")
    if target.api_key_file:
        try:
            key = open(target.api_key_file, encoding="utf-8").read().strip()
        except OSError as exc:
            return None, f"api_key_file {target.api_key_file} cannot be read here ({exc.strerror})"
        return (key, None) if key else (None, f"api_key_file {target.api_key_file} is empty")
    return None, None


def _version(text: str) -> tuple[int, ...]:
    """'0.5.23' -> (0, 5, 23); unparsable parts count as 0 (a dev build compares as its release)."""
    return tuple(_leading_int(p) for p in str(text).split(".")[:3])


def _leading_int(part: str) -> int:
    """The number a version part starts with; 0 when it starts with no digit."""
    digits = re.match(r"\d*", part)   # always matches, maybe the empty string
    return int(digits.group()) if digits and digits.group() else 0
