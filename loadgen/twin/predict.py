"""An experiment whose targets are twins, run in virtual time: the same plan as a measured run (a grid, or the
capacity search on the twin's own verdicts), the same tables, every step marked `predicted` (docs/twin.md).

Each step simulates every target's level with the emulator's engine on the twin's numbers (vtime.py) under the
step's window, and writes its requests and frames as a worker would: the views compute every figure from them,
so every query, the answer and the report read a prediction as they read a measurement, and say PREDICTED. A
predicted level measures at least MIN_REQUESTS requests and PER_STREAM per unit of concurrency (virtual time is
cheap): its figures are the twin's expectation, not one noisy sample of it.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadgen import __version__
from loadgen.clock import anchor, now_ns
from loadgen.config import Experiment, config_hash
from loadgen.emulator.gpu import GpuModel, counters_at
from loadgen.emulator.simulate import LevelRun, SimPrompt
from loadgen.errors import ConfigError
from loadgen.plan.steps import PlannedStep, TargetLoad, Verdicts, make_plan
from loadgen.prompts import Prompt
from loadgen.prompts.config import PromptsConfig
from loadgen.prompts.length import prompt_texts
from loadgen.prompts.mix import PromptMix
from loadgen.results import analysis, schema
from loadgen.results.sink import ResultsWriter, check_writable
from loadgen.servers.secrets import masked
from loadgen.twin.model import Twin
from loadgen.twin.vtime import Protocol, simulate
from loadgen.twin.whatif import load_target

MIN_REQUESTS = 200      # a predicted level measures at least this many requests, and 16 per unit of concurrency:
PER_STREAM = 16         # TTFT is a mix of one-prefill and queued waits, whose median jumps on small samples
PROMPT_POOL = 4096      # as driver/bringup.py's
STEP_GAP_NS = 1_000_000_000   # virtual time between a predicted step's end and the next one's start


@dataclass(frozen=True)
class _Target:
    name: str
    index: int
    node: str
    twin: Twin
    prompts: list[Prompt]
    sim: list[SimPrompt]


def twin_targets(exp: Experiment) -> bool:
    """True when the experiment's targets are twins; ConfigError when twins and servers are mixed."""
    twins = [t.twin is not None for t in exp.targets]
    if any(twins) and not all(twins):
        i = twins.index(True)
        raise ConfigError(f"targets[{i}].twin", "a twin runs in virtual time, the other targets on servers",
                          "put the twins in an experiment of their own (`loadgen twin predict --config`)")
    if any(twins) and exp.fleet is not None:
        raise ConfigError("fleet", "a fleet's nodes are servers, not twins", "predict each node's twin on its own")
    if any(twins) and exp.load.open_loop is not None:
        raise ConfigError("load.mode", "a twin predicts closed-loop levels only", 'use mode = "closed"')
    return any(twins)


def run_predicted(exp: Experiment, results_dir: str | Path, log: Callable[[str], None] = print) -> str:
    """Run every step of `exp` on its twins in virtual time, writing a predicted run under `results_dir`; its id."""
    twin_targets(exp)
    results = Path(results_dir).resolve()
    check_writable(results)
    targets = [_target(exp, i) for i in range(len(exp.targets))]
    run_id = f"{exp.name}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    writer = ResultsWriter(str(results), run_id)
    started = now_ns()
    _write_run(writer, exp, run_id, started, None, "running", "")
    for t in targets:
        log(f"target {t.name}: PREDICTED by the {t.twin.describe_source()}"
            + (f", what-if {t.twin.what_if}" if t.twin.what_if else ""))
        if t.twin.error is not None:
            log(f"  {t.twin.error.describe()}")
            if (line := t.twin.error.over_limit()) is not None:
                log(f"  twin {t.name}: {line}")
    plan = make_plan(exp, exp.targets)
    names = [t.name for t in targets]

    def judge() -> Verdicts:
        writer.flush()
        return analysis.level_verdicts(results, run_id, names)

    clock, steps = started, 0
    step = plan.next_step(steps, judge)
    while step is not None:
        clock = _run_step(exp, writer, run_id, step, targets, clock, log) + STEP_GAP_NS
        steps += 1
        step = plan.next_step(steps, judge)
    _write_run(writer, exp, run_id, started, now_ns(), "complete", "")
    writer.flush()
    log(f"run {run_id}: {steps} predicted steps, virtual time {(clock - started) / 1e9:.0f} s -> {results}")
    return run_id


def _target(exp: Experiment, i: int) -> _Target:
    config = exp.targets[i]
    assert config.twin is not None
    twin = load_target(config.twin, f"targets[{i}].twin")
    prompts, sim = twin_prompts(twin, exp.prompts)
    return _Target(config.name, i, config.node, twin, prompts, sim)


def twin_prompts(twin: Twin, config: PromptsConfig) -> tuple[list[Prompt], list[SimPrompt]]:
    """The workload's prompts, and each as the twin's engine sees it (its kind, its length as the server counts)."""
    lengths = twin.lengths if config.input_tokens is not None else None
    prompts = PromptMix(config, lengths).take(PROMPT_POOL)
    return prompts, [SimPrompt(p.kind, p.target_tokens or twin.prompt_tokens(p.kind, prompt_texts(p)))
                     for p in prompts]


def protocol(exp: Experiment, step: PlannedStep, load: TargetLoad) -> Protocol:
    """The step's window as the runner would hold it (warm-up, at least measure_s, open until enough requests were
    sent in it, then the drain), with at least MIN_REQUESTS and PER_STREAM x C measured (longer than max_measure_s
    if need be)."""
    cfg = exp.load
    if cfg.requests is not None:   # fixed-count steps: no warm-up, N requests measured
        return Protocol(0.0, 1e-6, max(cfg.requests, MIN_REQUESTS), 1e9, cfg.drain_timeout_s)
    need = max(cfg.min_measured or max(load.concurrency, step.min_measured or 0), MIN_REQUESTS,
               PER_STREAM * load.concurrency)
    return Protocol(cfg.warmup_s, step.measure_s or cfg.measure_s, need, 1e6, cfg.drain_timeout_s)


def _seed(run_id: str, target: str, step_id: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{run_id}/{target}/{step_id}".encode()).digest()[:4], "big")


def _run_step(exp: Experiment, writer: ResultsWriter, run_id: str, step: PlannedStep, targets: list[_Target],
              t0: int, log: Callable[[str], None]) -> int:
    """Simulate each target's level of the step from t0 (ns); write its rows; returns the step's end (ns)."""
    by_name = {t.name: t for t in targets}
    end = t0
    rows = []
    for load in step.loads:
        t = by_name[load.target]
        proto = protocol(exp, step, load)
        run = simulate(t.twin, load.concurrency, t.sim, proto, _seed(run_id, t.name, step.step_id),
                       exp.prompts.max_new_tokens)
        _write_requests(writer, run_id, step.step_id, t, run, proto, t0)
        if t.twin.hardware.max_power_w > 0:   # a twin with a power model: its GPU's samples, as a measured run's
            writer.write("gpu_samples", schema.batch_from_rows("gpu_samples", _gpu_rows(run_id, step.step_id, t,
                                                                                        run, t0)))
        t_end = t0 + round(run.end * 1e9)
        rows.append(_step_row(exp, run_id, step, load, t, (t0, t0 + round(proto.warmup_s * 1e9),
                                                           t0 + round(run.measure_end * 1e9), t_end)))
        end = max(end, t_end)
        ok = sum(1 for r in run.requests if r.done is not None)
        why = f" ({load.probe})" if load.probe else ""
        log(f"[predicted step {step.step_id + 1}] {t.name} C={load.concurrency}{why}: {ok} requests, "
            f"{run.end:.0f} s virtual")
    writer.write("steps", schema.batch_from_rows("steps", rows))
    writer.flush()
    return end


def _write_requests(writer: ResultsWriter, run_id: str, step_id: int, t: _Target, run: LevelRun, proto: Protocol,
                    t0: int) -> None:
    """A requests row per simulated request (ok when it finished, else cut at the step's end: cancelled) and a
    frames row per step that gave it tokens."""
    def ns(seconds: float | None) -> int | None:
        return None if seconds is None else t0 + round(seconds * 1e9)

    spec = t.twin.server.draft != "none"
    req_rows: list[dict] = []
    frame_cols: tuple[list, ...] = ([], [], [], [], [])
    for r in run.requests:
        prompt = t.prompts[r.index % len(t.prompts)]
        rid = f"{run_id[-6:]}-s{step_id}-{t.name}-p{r.index}"
        phase = "warmup" if r.sent < proto.warmup_s else "measure" if r.sent < run.measure_end else "drain"
        done = r.done is not None
        req_rows.append({
            "run_id": run_id, "step_id": step_id, "request_id": rid, "server_request_id": None, "target": t.name,
            "node": t.node, "worker": f"{t.name}.twin", "phase": phase, "prompt_id": prompt.prompt_id,
            "prompt_kind": prompt.kind, "template": prompt.template, "prompt_tokens": r.prompt_tokens,
            "prompt_tokens_target": prompt.target_tokens, "completion_tokens": r.completion_tokens,
            "cached_tokens": 0, "spec_verify_ct": r.spec_verify_ct if spec and done else None,
            "spec_accept_length": None, "finish_reason": "length" if done else None,
            "t_scheduled_ns": ns(r.sent), "t_sent_ns": ns(r.sent), "t_headers_ns": ns(r.sent),
            "t_first_token_ns": ns(r.first), "t_last_token_ns": ns(r.last),
            "t_done_ns": ns(r.done if done else run.end), "server_e2e_s": None if r.done is None else r.done - r.sent,
            "num_frames": len(r.frames), "status": "ok" if done else "cancelled", "http_status": 200,
            "error": None if done else "cut at the step's end (drain)"})
        cum = 0
        for seq, (ft, n) in enumerate(r.frames):
            cum += n
            for col, v in zip(frame_cols, (rid, seq, ns(ft), n, cum)):
                col.append(v)
    writer.write("requests", schema.batch_from_rows("requests", req_rows))
    if frame_cols[0]:
        writer.write("frames", schema.batch_from_columns("frames", dict(zip(
            ("request_id", "seq", "t_ns", "tokens", "cum_tokens"), frame_cols)),
            {"run_id": run_id, "step_id": step_id}))


def _gpu_rows(run_id: str, step_id: int, t: _Target, run: LevelRun, t0: int) -> list[dict]:
    """The twin's modelled GPU sampled at the level's start, once a virtual second and at its end: its energy
    counter and the power and utilisation over the second before (source `twin`)."""
    gpu = GpuModel(t.twin.hardware, t.twin.time_scale)
    times = [float(k) for k in range(math.ceil(run.end))] + [run.end]
    rows, before = [], (0.0, 0.0, 0.0)
    for k, (tau, (energy_j, busy_s)) in enumerate(zip(times, counters_at(gpu, run.forwards, times))):
        span = tau - before[0]
        rows.append({
            "run_id": run_id, "step_id": step_id, "target": t.name, "node": t.node, "t_ns": t0 + round(tau * 1e9),
            "moment": "step_start" if k == 0 else "step_end" if k == len(times) - 1 else "during",
            "source": "twin", "gpu": "0",
            "power_w": (energy_j - before[1]) / (span * gpu.time_scale) if span > 0 else t.twin.hardware.idle_power_w,
            "energy_j": energy_j, "utilization_pct": 100 * (busy_s - before[2]) / span if span > 0 else 0.0,
            "sm_clock_max_mhz": t.twin.hardware.sm_clock_max_mhz})
        before = (tau, energy_j, busy_s)
    return rows


def _step_row(exp: Experiment, run_id: str, step: PlannedStep, load: TargetLoad, t: _Target,
              times: tuple[int, int, int, int]) -> dict:
    twin, server = t.twin, t.twin.server
    info = {"server": "twin", "twin": t.twin.provenance(), "speculative_algorithm": server.algorithm,
            "speculative_num_draft_tokens": server.draft_tokens, "speculative_num_steps": server.num_steps,
            "speculative_eagle_topk": server.topk, "max_running_requests": server.max_running,
            "max_total_num_tokens": server.kv_pool_tokens, "max_prefill_tokens": server.max_prefill_tokens,
            "hardware": twin.hardware.name, "model": twin.model.name, "time_scale": twin.time_scale}
    t_start, t_ms, t_me, t_end = times
    return {
        "run_id": run_id, "step_id": step.step_id, "target": t.name, "target_index": t.index, "node": t.node,
        "flavor": "twin", "emulated": bool(twin.source.get("emulated")), "predicted": True,
        "algorithm": server.algorithm, "draft_tokens": server.draft_tokens, "num_steps": server.num_steps,
        "topk": server.topk, "server_version": f"twin of {twin.source.get('server')}",
        "server_info": json.dumps(info, sort_keys=True, default=str), "mode": "closed",
        "concurrency": load.concurrency, "rate": None,
        "repeat": step.repeat if load.repeat is None else load.repeat, "probe": load.probe,
        "prompt_mix": exp.prompts.describe(), "t_start_ns": t_start, "t_measure_start_ns": t_ms,
        "t_measure_end_ns": t_me, "t_end_ns": t_end, "status": "complete", "status_reason": "",
    }


def _write_run(writer: ResultsWriter, exp: Experiment, run_id: str, started: int, finished: int | None, status: str,
               reason: str) -> None:
    row = {
        "run_id": run_id, "name": exp.name, "started_at_ns": started, "finished_at_ns": finished, "status": status,
        "status_reason": reason, "config": json.dumps(masked(exp.raw), sort_keys=True, default=str),
        "loadgen_version": __version__, "schema_version": schema.SCHEMA_VERSION, "git_commit": None,
        "host": json.dumps({"hostname": socket.gethostname(), "python": platform.python_version(),
                            "platform": platform.platform(), "predicted": True}),
        "clock_anchor": json.dumps(anchor()), "slo": exp.slo.to_json() if exp.slo else None,
        "config_hash": config_hash(exp), "written_at_ns": now_ns(), "superseded_steps": None,
    }
    writer.write("runs", schema.batch_from_rows("runs", [row]))
