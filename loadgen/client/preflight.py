"""A worker's calls to its server outside the load: preflight (the server's identity, its info, the request
options of an OpenAI-compatible server, what llama.cpp drafts), calibration, the cache flush, the server's figures
sampled beside a step, over their own control session. What preflight learns (flavor, adapter, options, identity)
is read by the worker's requests."""

from __future__ import annotations

import asyncio
import json
import os
import re

import aiohttp

from loadgen.client import calibrate, drafting
from loadgen.client.http_stream import Endpoint, ReadLoop, stream_request
from loadgen.client.messages import StepSpec
from loadgen.client.protocol import adapter_for
from loadgen.client.protocol.base import Adapter, FrameBuffer, SamplingSpec, StreamState
from loadgen.client.protocol.openai import OpenAIOptions
from loadgen.clock import now_ns
from loadgen.config import TargetConfig
from loadgen.errors import LoadgenError, TargetError
from loadgen.prompts import Prompt
from loadgen.servers import probe, serverid

DRAFT_PROBE_TIMEOUT_S = 60.0  # llama.cpp's drafting probe before any load (client/drafting.py)
CONTROL_PROBE_TIMEOUT_S = 60.0  # one prompts.extra_body key's one-token request before any load
_CONTROL_PROMPT = Prompt("preflight-extra-body", "prose", "preflight", text="Say hello.")


class ServerControl:
    """One target's server as a worker talks to it outside the load, and what it learnt of it."""

    def __init__(self, target: TargetConfig, url: str, sampling: SamplingSpec, reads: ReadLoop) -> None:
        self.target = target
        self.url = url
        self.sampling = sampling
        self.api_key, self.key_problem = read_api_key(target)
        self.endpoint = Endpoint(url, self.api_key)   # the load's connections too: probes go where requests go
        self.reads = reads
        # flavor "auto": the adapter is chosen by preflight/configure, from the server's identity
        self.flavor: str | None = None if target.flavor == "auto" else target.flavor
        self.adapter: Adapter | None = adapter_for(target.flavor) if self.flavor else None
        self.options: OpenAIOptions | None = None  # openai-*: set by preflight/configure before any load
        self.identity: dict | None = None  # loadgen.servers.serverid's answer (first worker of a target: preflight)
        self.session: aiohttp.ClientSession | None = None

    @property
    def configured(self) -> bool:
        """Preflight or the driver's configure() has run (a restarted actor's control has not)."""
        return self.flavor is not None and (self.options is not None or self.flavor == "sglang")

    async def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        return self.session

    async def server_info(self, within_s: float = 10.0) -> dict:
        """SGLang's /get_server_info; for openai-* flavours whatever the server says (algorithm UNKNOWN when it
        is not SGLang), so steps rows carry the algorithm and draft tokens whenever they can be known. A refused
        connect is retried for `within_s`."""
        session, url = await self._session(), self.url
        ident = self.identity or {}
        if self.flavor == "sglang" or ident.get("server") == serverid.SGLANG:
            return dict(await probe.server_info(session, url, self.api_key, within_s), **ident)
        if ident:  # another server: what preflight learnt (its routes are not asked again)
            return dict(ident)
        info = await probe.sglang_server_info(session, url, self.api_key, within_s)
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

    async def flush_cache(self) -> None:
        if self.options is not None and not self.options.sglang:
            return  # an OpenAI server other than SGLang has no /flush_cache
        await probe.flush_cache(await self._session(), self.url, self.api_key)

    async def close(self) -> None:
        """Release the control-call connection pool (end of run)."""
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def server_rows(self, step: StepSpec) -> list[dict]:
        """The server's figures now, as server_samples rows: its /metrics (unless preflight found none) and, from
        SGLang, its running figures (acceptance, throughput)."""
        session, t = await self._session(), now_ns()
        ident = self.identity or {}
        routes = ident.get("routes") or {}
        # Routes that preflight found missing are not polled (a 404 every second fills the server's log).
        samples = (await probe.metrics_samples(session, self.url, self.api_key)
                   if routes.get("/metrics", 200) == 200 else [])
        if not ident or ident.get("server") == serverid.SGLANG:
            try:
                info = await probe.server_info(session, self.url, self.api_key, within_s=1.0)
                samples += [(n, v, dict(labels, when="during")) for n, v, labels in probe.server_info_samples(info)]
            except LoadgenError:
                pass  # a busy server that misses one sample is not a failure of the step
        return [{"run_id": step.run_id, "step_id": step.step_of(t), "target": self.target.name,
                 "node": self.target.node, "t_ns": t, "name": name, "value": value,
                 "labels": json.dumps(labels, sort_keys=True)} for name, value, labels in samples]


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
