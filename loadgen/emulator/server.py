"""The emulator's aiohttp application: state shared by the routes, server-state routes, ground truth."""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import time
import uuid
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from loadgen import __version__ as loadgen_version
from loadgen.emulator import profiles
from loadgen.emulator.costmodel import CostModel
from loadgen.emulator.engine import Engine, QueueFull, resolve_min_free_slots
from loadgen.emulator.faults import FaultPicker, KeepAliveLimit
from loadgen.emulator.gpu import GpuModel
from loadgen.emulator.httputil import error_body, json_response
from loadgen.emulator.metrics import Metrics, render
from loadgen.emulator.native import generate
from loadgen.emulator.openai_routes import chat_completions, completions
from loadgen.emulator.promptinfo import estimate_tokens, infer_kind
from loadgen.emulator.request import EmuRequest
from loadgen.emulator.spec import SpecConfig, resolve, with_profile
from loadgen.emulator.state import EMU, emulator
from loadgen.emulator.streaming import close_connection

SGLANG_VERSION = "0.5.23"
GENERATION_ROUTES = frozenset({"/generate", "/v1/completions", "/v1/chat/completions"})
ARRIVED_NS: contextvars.ContextVar[int | None] = contextvars.ContextVar("arrived_ns")   # per handler task


class Emulator:
    """Everything one emulated server holds: flags, resolved spec config, cost model, engine, faults."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.hardware = profiles.load("hardware", args.hardware)
        self.model = profiles.load("models", args.model_profile)
        self.spec: SpecConfig = with_profile(resolve(args.speculative_algorithm, args.speculative_num_steps,
                                                     args.speculative_eagle_topk, args.speculative_num_draft_tokens,
                                                     args.speculative_draft_model_path), args.algorithm_profile)
        degraded = args.degraded_power_factor if args.fault == "degraded-power" else 1.0
        self.cost = CostModel(self.hardware, self.model, self.spec, args.time_scale / degraded)
        self.engine = Engine(self.cost, self.spec, self.model, max_running=args.max_running_requests,
                             max_queued=args.max_queued_requests, seed=args.seed,
                             decode_log_interval=args.decode_log_interval,
                             max_prefill_tokens=args.max_prefill_tokens,
                             min_free_slots=resolve_min_free_slots(args.min_free_slots_delay,
                                                                   args.max_running_requests,
                                                                   self.spec.algorithm == "DFLASH"),
                             prefix_cache=not args.disable_radix_cache)
        self.faults = FaultPicker(args)
        # the modelled GPU (none for a hardware profile without one, e.g. `zero`); degraded-power is not in the
        # server's info, as the real trap is not: only the GPU's telemetry shows it
        self.gpu = (GpuModel(self.hardware, args.time_scale, degraded, f"loadgen-emulator {loadgen_version}")
                    if self.hardware.gpu_name else None)
        self.engine.gpu = self.gpu
        limit = args.fault_keepalive_requests
        self.keepalive = KeepAliveLimit(limit) if limit is not None else None
        self.metrics = Metrics()
        if args.enable_metrics:
            self.engine.observer = self.metrics
        self.served_model_name = args.served_model_name or args.model_path
        self.t_start = time.perf_counter()
        self.startup_time = time.time()

    # ---- readiness
    @property
    def starting(self) -> bool:
        return time.perf_counter() - self.t_start < self.args.startup_delay_s

    async def ready(self) -> None:
        """Requests sent while the server is starting wait until it is up."""
        left = self.args.startup_delay_s - (time.perf_counter() - self.t_start)
        if left > 0:
            await asyncio.sleep(left)

    # ---- requests
    def expected_tokens_per_step(self, kind: str) -> float:
        """Mean accepted tokens per verify step for a kind (the truncated-geometric mean)."""
        if not self.spec.enabled:
            return 1.0
        prof, total, term = self.spec.profile, 1.0, 1.0
        p = prof.p_for(kind)
        for _ in range(self.spec.verify_tokens - 1):
            term *= p
            total += term
            p *= prof.accept_decay
        return total

    def new_request(self, prompt: str | list[int], route: str, *, rid: str | None, max_new_tokens: int,
                    min_new_tokens: int, ignore_eos: bool, stream_interval: int | None,
                    stream: bool, thinking: bool = False, script: tuple[str, ...] = ()) -> EmuRequest:
        if isinstance(prompt, str):
            kind, ptoks = infer_kind(prompt), estimate_tokens(prompt)
        else:
            kind, ptoks = "prose", max(1, len(prompt))
        interval = stream_interval or self.args.stream_interval
        kind = "tool_call" if script else kind   # its output is the call's JSON, whatever the prompt asked
        req = EmuRequest(id=rid or uuid.uuid4().hex, rid=rid, kind=kind, route=route, prompt_tokens=ptoks,
                         max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, ignore_eos=ignore_eos,
                         stream_interval=interval, prompt=prompt,
                         think_len=self.args.reasoning_tokens if thinking else 0, script=script,
                         t_arrived_ns=ARRIVED_NS.get(None) or time.time_ns())
        if stream and self.faults.enabled:
            per_frame = max(float(interval), self.expected_tokens_per_step(kind))
            req.fault = self.faults.pick(int(max_new_tokens / per_frame))
        return req

    def submit(self, req: EmuRequest) -> None:
        try:
            self.engine.submit(req)
        except QueueFull:
            self.engine.abort(req, "aborted", "The request queue is full.", 503)

    def http_fault(self, req: EmuRequest) -> web.Response:
        """--fault-http: answer at once with the status and SGLang's error body; recorded, never run."""
        fault = req.fault
        assert fault is not None   # the routes call this for a request whose fault is "http"
        self.engine.ledger.append(req)
        status = fault.info["status"]
        fault.applied = True
        req.status, req.t_done_ns = "faulted", time.time_ns()
        msg = f"emulator fault injection: HTTP {status} (id {req.id})"
        return json_response(error_body(msg, status), status)

    async def wait_whole(self, req: EmuRequest, build: Callable[[], web.Response]) -> web.Response:
        """Non-streaming: wait for the end; a client disconnect aborts the request at once."""
        try:
            while not req.done:
                await req.event.wait()
                req.event.clear()
        except asyncio.CancelledError:
            self.engine.abort(req, "client_disconnected")
            raise
        resp = build()
        req.t_first_ns = req.t_first_ns or time.time_ns()
        req.t_done_ns = req.t_done_ns or time.time_ns()
        return resp

    def abort_error(self, req: EmuRequest) -> web.Response | None:
        """A non-streaming abort with a status code is an HTTP error, as SGLang raises it."""
        fr = req.finish_reason or {}
        code = fr.get("status_code")
        if fr.get("type") == "abort" and code and 400 <= code < 600:
            return json_response(error_body(fr.get("message", "aborted"), code), code)
        return None

    # ---- server state
    def server_args(self) -> dict:
        a, s = self.args, self.spec
        return {
            "model_path": a.model_path, "tokenizer_path": a.model_path, "served_model_name": self.served_model_name,
            "host": a.host, "port": a.port, "random_seed": a.seed,
            "speculative_algorithm": s.algorithm, "speculative_num_steps": s.num_steps,
            "speculative_eagle_topk": s.eagle_topk, "speculative_num_draft_tokens": s.num_draft_tokens,
            "speculative_draft_model_path": s.draft_model_path,
            "max_running_requests": a.max_running_requests, "max_queued_requests": a.max_queued_requests,
            "max_prefill_tokens": a.max_prefill_tokens, "min_free_slots_delay": a.min_free_slots_delay,
            "stream_interval": a.stream_interval, "incremental_streaming_output": a.incremental_streaming_output,
            "enable_metrics": a.enable_metrics, "decode_log_interval": a.decode_log_interval,
            "disable_radix_cache": a.disable_radix_cache, "enable_cache_report": a.enable_cache_report,
            "context_length": self.model.context_len, "max_total_num_tokens": self.engine.kv_budget,
            "tp_size": 1, "dp_size": 1,
        }

    def server_info(self) -> dict:
        c = self.engine.counters
        state = {"avg_spec_accept_length": c.avg_spec_accept_length if self.spec.enabled else None,
                 "last_gen_throughput": c.last_gen_throughput,
                 "memory_usage": {"weight": self.model.weight_gb, "kvcache": 0.0,
                                  "token_capacity": self.engine.kv_budget},
                 "num_running_reqs": len(self.engine.running), "num_waiting_reqs": len(self.engine.waiting)}
        return {**self.server_args(), "startup_time": self.startup_time, "internal_states": [state],
                "version": SGLANG_VERSION, "frontend": "python", "emulated": True,
                "emulator": {"hardware": self.hardware.name, "model_profile": self.model.name,
                             "algorithm_profile": self.spec.variant, "time_scale": self.args.time_scale,
                             "seed": self.args.seed, "loadgen_version": loadgen_version,
                             "dflash_version": self.spec.dflash.version if self.spec.dflash else None}}


# ---- routes
async def get_server_info(request: web.Request) -> web.Response:
    return json_response(emulator(request).server_info())


async def get_model_info(request: web.Request) -> web.Response:
    emu = emulator(request)
    return json_response({"model_path": emu.args.model_path, "served_model_name": emu.served_model_name,
                          "tokenizer_path": emu.args.model_path, "is_generation": True,
                          "preferred_sampling_params": None, "weight_version": "default",
                          "model_type": "qwen3_5", "architectures": emu.model.architectures})


async def v1_models(request: web.Request) -> web.Response:
    emu = emulator(request)
    return json_response({"object": "list", "data": [
        {"id": emu.served_model_name, "object": "model", "created": int(emu.startup_time), "owned_by": "sglang",
         "root": emu.served_model_name, "parent": None, "max_model_len": emu.model.context_len}]})


async def flush_cache(request: web.Request) -> web.Response:
    emu = emulator(request)
    if emu.engine.busy:
        return web.Response(status=400, text="Flush cache failed.\n")
    emu.engine.flush()
    return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                             "running or waiting requests, the operation will not be performed.)\n")


async def health(request: web.Request) -> web.Response:
    return web.Response(status=503 if emulator(request).starting else 200)


async def health_generate(request: web.Request) -> web.Response:
    """200 after a 1-token generation succeeds (not recorded as load); 503 while starting."""
    emu = emulator(request)
    if emu.starting:
        return web.Response(status=503)
    if not emu.engine.busy:
        req = emu.new_request([0], "health", rid=None, max_new_tokens=1, min_new_tokens=0, ignore_eos=True,
                              stream_interval=None, stream=False)
        emu.engine.submit(req)
        emu.engine.ledger.remove(req)
        await emu.wait_whole(req, lambda: web.Response())
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    emu = emulator(request)
    if not emu.args.enable_metrics:
        raise web.HTTPNotFound()
    page = render(emu.metrics, emu.engine, emu.spec, emu.served_model_name)
    return web.Response(text=page, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type": "text/plain; version=0.0.4"})


async def dcgm_metrics(request: web.Request) -> web.Response:
    """The modelled GPU as a DCGM exporter's /metrics (loadgen/emulator/gpu.py); 404 without a modelled GPU."""
    gpu = emulator(request).gpu
    if gpu is None:
        raise web.HTTPNotFound(text="this hardware profile models no GPU (no gpu_name)\n")
    return web.Response(text=gpu.render(), content_type="text/plain", charset="utf-8")


async def emulator_requests(request: web.Request) -> web.Response:
    emu = emulator(request)
    return json_response({"requests": [r.record() for r in emu.engine.ledger],
                          "keepalive_closed": emu.keepalive.closed if emu.keepalive else 0})


async def emulator_reset(request: web.Request) -> web.Response:
    """Clear the finished requests from the ledger and answer their records (taken once: a long run can read
    everything the server served without the ledger growing)."""
    return json_response({"ok": True, "requests": [r.record() for r in emulator(request).engine.reset_ledger()]})


@web.middleware
async def keepalive_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """--fault-keepalive-requests: a generation request past its connection's limit is not answered; the
    connection is closed as it arrives (faults.KeepAliveLimit)."""
    limit = emulator(request).keepalive
    if limit is None or request.path not in GENERATION_ROUTES or request.transport is None:
        return await handler(request)
    if limit.admit(request.transport):
        return await handler(request)
    close_connection(request, emulator(request).args.fault_close_mode)
    return web.Response(status=503)   # never written: the connection is closed


@web.middleware
async def arrival_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Stamp when the request's head arrived, before its body is read: the ground truth of send times
    (GET /emulator/requests `t_arrived_ns`)."""
    ARRIVED_NS.set(time.time_ns())
    return await handler(request)


@web.middleware
async def api_key_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """--api-key: every route but /health*, /ready, /metrics and the GPU's exporter needs `Authorization: Bearer
    KEY` (a DCGM exporter asks for none)."""
    key = emulator(request).args.api_key
    path = request.path
    if key and not path.startswith(("/health", "/ready", "/metrics", "/emulator/dcgm/")):
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or token != key:
            return json_response({"error": "Unauthorized"}, 401)
    return await handler(request)


def build_app(emu: Emulator) -> web.Application:
    app = web.Application(middlewares=[arrival_middleware, keepalive_middleware, api_key_middleware],
                          client_max_size=64 * 1024 * 1024)
    app[EMU] = emu
    r = app.router
    r.add_route("POST", "/generate", generate)
    r.add_route("PUT", "/generate", generate)
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_get("/get_server_info", get_server_info)
    r.add_get("/server_info", get_server_info)
    r.add_get("/get_model_info", get_model_info)
    r.add_get("/model_info", get_model_info)
    r.add_get("/v1/models", v1_models)
    r.add_route("*", "/flush_cache", flush_cache)
    r.add_get("/health", health)
    r.add_get("/ready", health)
    r.add_get("/health_generate", health_generate)
    r.add_get("/metrics", metrics)
    r.add_get("/emulator/dcgm/metrics", dcgm_metrics)
    r.add_get("/emulator/requests", emulator_requests)
    r.add_post("/emulator/reset", emulator_reset)

    async def on_startup(app: web.Application) -> None:
        emu.engine.start()

    async def on_cleanup(app: web.Application) -> None:
        await emu.engine.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app
