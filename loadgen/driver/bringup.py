"""A stage's bring-up and tear-down: launch its servers, create its workers, preflight and describe every
target, calibrate and build the prompts; at the end close the workers, stop the servers, keep their logs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from loadgen.client import drafting
from loadgen.client.calibrate import calibration_prompts, describe, length_model, prompts_for
from loadgen.client.protocol.base import SamplingSpec
from loadgen.client.worker import LoadWorker
from loadgen.config import TargetConfig
from loadgen.driver import stop, telemetry
from loadgen.driver.context import RunContext, actor
from loadgen.driver.placement import LocalPlacement
from loadgen.driver.progress import grouped
from loadgen.errors import TargetError
from loadgen.prompts.length import LengthModel
from loadgen.prompts.replay import replay_prompts
from loadgen.servers.process import ServerProcess
from loadgen.values import counted

PROMPT_POOL = 4096          # prompts per run; every step walks the same seeded sequence from its start


@dataclass
class Target:
    config: TargetConfig
    index: int
    url: str
    workers: list
    info: dict
    prompts: list = field(default_factory=list)  # per worker, (ObjectRef,) of its prompt shard: alive while held
    server: Any = None                           # its ServerProcess actor, when loadgen launched it
    input_fit: dict | None = None                # prompts.input_tokens: its chars-to-tokens fit (steps.server_info)
    gpu: telemetry.Sampler | None = None         # its GPU sampler (gpu_samples) and steps.hardware


def bring_up(ctx: RunContext, stage_targets: tuple[TargetConfig, ...], placement: LocalPlacement, servers: list
             ) -> list[Target]:
    """Launch the stage's servers on their nodes, create workers where the placement says, and preflight
    every target before any load. `servers` gets each server actor with its launch, as soon as it is made."""
    exp, log, log_dir = ctx.exp, ctx.log, ctx.log_dir
    stop.during("bring-up")
    urls: dict[str, str] = {}
    launched = {}
    for t in stage_targets:
        if t.url is None:
            server = actor(ServerProcess).options(**placement.server_options(t)).remote(t.name, str(log_dir))
            launched[t.name] = server
            servers.append((server, placement.launch(server, t)))
        else:
            urls[t.name] = t.url
    for name, (_, ref) in zip(launched, servers):
        try:
            urls[name] = stop.get(ref, timeout_s=placement.health_timeout_s + 60)
        except ray.exceptions.GetTimeoutError:
            raise TargetError(f"server {name} was not up within {placement.health_timeout_s:g} s + 60 s "
                              "(its actor could not be placed, or the launch hung)") from None
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
    n = exp.load.workers_per_target
    sampling = SamplingSpec(exp.prompts.max_new_tokens, exp.prompts.ignore_eos, exp.prompts.temperature,
                            exp.prompts.extra_body)
    targets = []
    for t in stage_targets:
        workers = [actor(LoadWorker).options(**placement.worker_options(t, i)).remote(
                       f"{t.name}.w{i}", t, urls[t.name], sampling, ctx.sink_name)
                   for i in range(n)]
        targets.append(Target(t, exp.targets.index(t), urls[t.name], workers, {}, [],
                               launched.get(t.name)))
    placement.verify([(t.config, t.workers) for t in targets], launched, log)
    preflights = stop.get([t.workers[0].preflight.remote() for t in targets])
    for target, (info, options) in zip(targets, preflights):
        ray.get([w.configure.remote(options) for w in target.workers[1:]])
        target.info = info
    for line in grouped("target", [(f"{t.config.name} ({t.url})", describe_server(t.info)) for t in targets]):
        log(line)
    samplers = telemetry.start_samplers([(t.config, t.url, t.info, t.server) for t in targets], placement, log)
    for target, sampler in zip(targets, samplers):
        target.gpu = sampler
    stop.during("calibration")
    samples = calibration_prompts(exp.prompts)   # none without prompts.input_tokens
    if samples:
        log(f"calibrating input tokens: {counted(len(samples), 'prompt')} per target")
    counts = (stop.get([t.workers[0].calibrate.remote(samples, exp.load.request_timeout_s) for t in targets])
              if samples else [])
    stop.during("bring-up")
    models: list[LengthModel | None] = [length_model(t.config.name, samples, c) for t, c in zip(targets, counts)]
    fits = models or [None] * len(targets)
    built = (replay_prompts(exp.prompts, fits, exp.load.trace.trace) if exp.load.trace else
             prompts_for(exp.prompts, fits, PROMPT_POOL))
    if exp.load.trace and any(r.hash_ids for r in exp.load.trace.trace.rows):
        trace = exp.load.trace.trace
        share = sum(trace.reusable_tokens()) / max(sum(r.input_tokens or 0 for r in trace.rows), 1)
        log(f"trace {trace.name}: {100 * share:.1f}% of its input tokens are blocks (hash_ids) of earlier rows, "
            "what a large enough prefix cache reuses")
    # each worker's shard in the object store, built after preflight (prompts.input_tokens: with its target's fit)
    for target, prompts in zip(targets, built):
        target.prompts = [(ray.put(prompts[i::n]),) for i in range(n)]
    ray.get([w.fetch_prompts.remote(shard) for t in targets for w, shard in zip(t.workers, t.prompts)])
    for target, model in zip(targets, models):
        if model is not None:
            target.input_fit = model.to_json()
    for line in grouped("target", [(t.config.name, f"input tokens by {describe(m)}")
                                   for t, m in zip(targets, models) if m is not None]):
        log(line)
    stop.check()
    return targets


def tear_down(targets: list[Target], servers: list[tuple[Any, Any]], log_dir: Path) -> None:
    """End a stage: close and remove its workers, stop its servers and keep their logs with the results
    (a server on another node wrote its log there), then remove the server actors. `servers`: (actor, launch)."""
    workers = [w for t in targets for w in t.workers]
    # A server still starting when a stop signal came cannot be asked to stop: its actor is busy until /health
    # answers (minutes for SGLang). It is only killed, below, and dies with its actor.
    idle = [a for a, launch in servers if not stop.requested() or ray.wait([launch], timeout=0)[0]]
    logs = []
    try:
        ray.get([w.close.remote() for w in workers], timeout=30)
        ray.get([s.stop.remote() for s in idle], timeout=60)
        logs = ray.get([s.read_log.remote() for s in idle], timeout=60)
    except (ray.exceptions.RayError, TimeoutError):
        pass  # an actor that never started or already died: ray.kill below still ends its server
    finally:
        for actor in workers + [a for a, _ in servers]:
            ray.kill(actor)   # the server dies with its actor (PR_SET_PDEATHSIG)
        for t in targets:
            if t.gpu is not None:
                t.gpu.close()
    for name, data in logs:
        dest = log_dir / name
        if data and (not dest.exists() or dest.stat().st_size != len(data)):
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)


def describe_server(info: dict) -> str:
    label = " (emulated)" if info.get("emulated") else ""
    server = info.get("server") or "sglang"
    if server != "sglang":  # llama.cpp, vLLM, another OpenAI server (loadgen.servers.serverid)
        name = {"llama.cpp": "llama.cpp", "vllm": "vLLM"}.get(server, "OpenAI-compatible server")
        spec = info.get("server_speculative") or {}
        said = f"speculative {json.dumps(spec, sort_keys=True) if spec else 'not reported'}"
        if "speculative_observed" in info:   # what its requests show first (loadgen/client/drafting.py)
            said = f"{info.get('speculative_algorithm')}: {drafting.describe(spec, info['speculative_observed'])}"
        return (f"{name} {info.get('server_version') or 'version unknown'}, flavor {info.get('flavor')}, "
                f"{said}, model {info.get('model')}")
    drafts = info.get("speculative_num_draft_tokens")
    algorithm = info.get("speculative_algorithm") or "NONE"
    spec = f"algorithm {algorithm}" + (f", draft tokens {drafts}" if drafts is not None else "")
    return f"SGLang {info.get('version')}{label}, {spec}, model {info.get('model_path')}"
