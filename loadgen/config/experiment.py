"""The experiment file: load, prompts, SLO and targets (or a fleet), validated completely before any request is
sent. Unknown keys are errors (a misspelt key that is silently ignored is a wrong experiment that looks right).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loadgen.config.cost import Prices, read_prices
from loadgen.config.fleet import Fleet, parse_fleet
from loadgen.config.openloop import OpenLoopConfig, parse_open_loop
from loadgen.config.ramp import RampConfig, parse_ramp, ramp_given
from loadgen.config.search import SearchConfig, parse_search
from loadgen.config.tables import StrictTable, check_name, load_toml
from loadgen.config.targets import TargetConfig, TwinRef, parse_target, parse_twin_ref
from loadgen.config.trace import TraceConfig, check_warmup, parse_trace, trace_prompts
from loadgen.errors import ConfigError
from loadgen.prompts.mix import PromptsConfig, parse_prompts_config
from loadgen.results.slo import Slo, parse_slo
from loadgen.servers.secrets import masked


@dataclass(frozen=True)
class LoadConfig:
    mode: str
    concurrency: tuple[int, ...]
    repeats: int
    warmup_s: float
    measure_s: float
    drain_timeout_s: float
    stall_timeout_s: float
    request_timeout_s: float
    workers_per_target: int
    schedule: str                    # together: every target in the same step; one_at_a_time: each alone
    flush_cache: bool
    open_loop: OpenLoopConfig | None = None  # mode "open": rates and arrival process (concurrency is empty)
    requests: int | None = None      # fixed-count steps: exactly this many requests per target, all measured
    min_measured: int | None = None  # closed loop: the window stays open until this many were sent in it
    max_measure_s: float = 0.0       # ... but no longer than this (0: measure_s x 5)
    error_budget: float | None = None  # failed requests a step may have: a count (>= 1) or a share (< 1)
    on_worker_death: str = "continue"  # continue | stop: what a run does after a load worker died
    on_server_death: str = "restart"   # restart | stop: after a server died or hung (docs/failures.md)
    server_retry_s: float = 60.0       # how long a url target that stopped answering is retried before it is dropped
    realtime_priority: bool = True   # workers read at SCHED_FIFO (see worker._raise_priority)
    search: SearchConfig | None = None  # search = "capacity": levels chosen from finished steps' SLO verdicts
    stop_after_slo_failures: int | None = None  # grids: drop a target after this many failed levels in a row
    trace: TraceConfig | None = None  # mode "trace": the rows replayed and the speedups (the steps' levels)
    ramp: RampConfig | None = None    # the level ramps between the listed levels within one step
    warmup_requests: int | None = None  # counted steps and traces: the first K requests per target are warm-up
    false_verdict: float | None = None  # window = "sequential": a window ends once its SLO call is clear at this rate


@dataclass(frozen=True)
class Experiment:
    name: str
    results: str | None
    load: LoadConfig
    prompts: PromptsConfig
    targets: tuple[TargetConfig, ...]  # with a fleet: every stage's targets
    source: str = ""                 # the file it came from, for messages
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    fleet: Fleet | None = None       # when the file has [fleet] instead of [[targets]]
    slo: Slo | None = None           # [slo]: what an acceptable experience is; steps pass or fail it
    cost: Prices | None = None       # [cost]: what a node hour and a kWh cost; a [[targets]]'s own: TargetConfig.cost


def load_experiment(path: str | Path, slo: dict[str, float] | None = None) -> Experiment:
    """Read and validate an experiment TOML file; `slo` (from --slo) sets or overrides lines of its [slo]."""
    path = Path(path)
    data = load_toml(path, "--config", "give the path of an experiment .toml file")
    if slo:
        data["slo"] = {**data.get("slo", {}), **slo}
    return parse_experiment(data, path.parent.resolve(), str(path))


def parse_experiment(data: dict, base_dir: Path, source: str = "experiment") -> Experiment:
    top = StrictTable(data, "")
    run = StrictTable(top.get("run", dict, {}), "run")
    name = check_name(run.get("name", str, Path(source).stem), "run.name", " (it becomes part of paths and SQL)")
    results = run.get("results", str, None)
    run.done()
    load = _parse_load(StrictTable(top.get("load", dict, {}), "load"), base_dir)
    prompts_table = top.get("prompts", dict, {})
    prompts = parse_prompts_config(prompts_table, "prompts", base_dir)
    if load.trace is not None:
        prompts = trace_prompts(prompts, prompts_table, load.trace)
    slo_table = top.get("slo", dict, None)
    slo = None if slo_table is None else parse_slo(slo_table)
    if load.false_verdict is not None:
        slo = _sequential_slo(load, slo)
    if slo is None and (load.search or load.stop_after_slo_failures):
        key = "load.search" if load.search else "load.stop_after_slo_failures"
        raise ConfigError(key, "needs an SLO to judge steps by",
                          "add an [slo] table, e.g. ttft_ms = 2000 and tpot_ms = 100 (or --slo)")
    cost_table = top.get("cost", dict, None)
    cost = None if cost_table is None else read_prices(cost_table)   # checked before a target's table over it
    fleet_table = top.get("fleet", dict, None)
    raw_targets = top.get("targets", list, ... if fleet_table is None else [])
    top.done()
    fleet = None
    if fleet_table is not None:
        if raw_targets:
            raise ConfigError("targets", "cannot be combined with [fleet]", "the fleet's nodes are the targets")
        fleet = parse_fleet(fleet_table, base_dir)
        targets = fleet.all_targets()
    elif not raw_targets:
        raise ConfigError("targets", "is empty", "add at least one [[targets]] table")
    else:
        targets = tuple(parse_target(t, f"targets[{i}]", base_dir, cost_table) for i, t in enumerate(raw_targets))
    names = [t.name for t in targets]
    for i, t in enumerate(targets):
        if names.index(t.name) != i:
            raise ConfigError(f"targets[{i}].name", f"duplicate target name {t.name!r}",
                              "give every target a unique name")
    urls = [t.url for t in targets if t.url]
    if len(urls) != len(set(urls)):
        raise ConfigError("targets", "two targets have the same url", "list each server once")
    if load.search is not None and isinstance(load.search.twin, dict):
        load = replace(load, search=replace(load.search, twin=_search_twins(load.search.twin, names, base_dir)))
    return Experiment(name, results, load, prompts, targets, source, data, fleet, slo, cost)


def _search_twins(table: dict, names: list[str], base_dir: Path) -> tuple[tuple[str, TwinRef], ...]:
    """search_twin as a table: every target's twin file (or [targets.twin]-like table), and no other name."""
    for name in table:
        if name not in names:
            raise ConfigError(f"load.search_twin.{name}", "is not a target", f"use the targets' names: {names}")
    missing = [n for n in names if n not in table]
    if missing:
        raise ConfigError(f"load.search_twin.{missing[0]}", "is required: every target's search starts from its twin",
                          'give its twin file, e.g. mtp = "mtp.toml", or search_twin = "<run id>" to fit each')
    return tuple((n, parse_twin_ref(table[n], f"load.search_twin.{n}", base_dir)) for n in names)


def parse_load_table(data: dict, base_dir: Path = Path(".")) -> LoadConfig:
    """A [load] table on its own (a recorded run's, runs.config): its settings with every default filled in."""
    return _parse_load(StrictTable(data, "load"), base_dir)


def _parse_load(t: StrictTable, base_dir: Path) -> LoadConfig:
    mode = t.get("mode", str, "closed")
    if mode not in ("closed", "open", "trace"):
        raise ConfigError("load.mode", f"unknown mode {mode!r}", "use \"closed\" (fixed concurrency), \"open\" "
                          "(arrivals at a rate) or \"trace\" (a trace's arrivals, [load.trace])")
    trace = parse_trace(t, mode, base_dir)
    search = parse_search(t, rates=mode == "open")
    open_loop = parse_open_loop(t, mode, searching=search is not None)
    levels = t.get("concurrency", list) if open_loop is None and search is None and trace is None else []
    if not levels and open_loop is None and search is None and trace is None:
        raise ConfigError("load.concurrency", "is empty", "list the levels to sweep, e.g. [1, 2, 4, 8]")
    for i, c in enumerate(levels):
        if not isinstance(c, int) or isinstance(c, bool) or c < 1:
            raise ConfigError(f"load.concurrency[{i}]", f"must be a whole number >= 1, got {c!r}")
    if len(set(levels)) != len(levels) and not ramp_given(t):
        raise ConfigError("load.concurrency", "has a level twice", "use `repeats` to run a level again")
    repeats = t.get("repeats", int, 1)
    if repeats < 1:
        raise ConfigError("load.repeats", f"must be >= 1, got {repeats}")
    workers = t.get("workers_per_target", int, 1)
    if workers < 1:
        raise ConfigError("load.workers_per_target", f"must be >= 1, got {workers}")
    if open_loop is not None and open_loop.max_in_flight < workers:
        raise ConfigError("load.max_in_flight", f"{open_loop.max_in_flight} is below workers_per_target = {workers}",
                          "every worker needs at least one slot: raise max_in_flight")
    schedule = t.get("schedule", str, "together")
    if schedule not in ("together", "one_at_a_time"):
        raise ConfigError("load.schedule", f"unknown schedule {schedule!r}", "use \"together\" or \"one_at_a_time\"")
    requests = t.get("requests", int, None)
    if requests is not None and requests < 1:
        raise ConfigError("load.requests", f"must be >= 1, got {requests}", "or leave it out for timed windows")
    if requests is not None and ("measure_s" in t.data or "warmup_s" in t.data):
        raise ConfigError("load.requests", "fixed-count steps have no timed window",
                          "drop measure_s/warmup_s, or drop requests")
    warmup_requests = t.get("warmup_requests", int, None)
    if warmup_requests is not None and (warmup_requests < 0 or requests is None and trace is None):
        raise ConfigError("load.warmup_requests", f"must be a count >= 0 of requests sent before the measured ones, "
                          f"with requests = N or a trace (got {warmup_requests})",
                          "set load.requests, or warm up by time with warmup_s")
    if trace is not None:
        check_warmup(trace, warmup_requests, t.get("warmup_s", float, None))
    measure_s = t.positive("measure_s", 20.0)
    ramp = parse_ramp(t, [float(c) for c in levels] or list(open_loop.rates if open_loop else []), measure_s)
    config = LoadConfig(
        requests=requests, mode=mode, concurrency=tuple(levels), repeats=repeats, open_loop=open_loop,
        warmup_s=t.positive("warmup_s", 0.0 if trace else 3.0, allow_zero=True), measure_s=measure_s,
        drain_timeout_s=t.positive("drain_timeout_s", 120.0, allow_zero=True),
        stall_timeout_s=t.positive("stall_timeout_s", 60.0), request_timeout_s=t.positive("request_timeout_s", 900.0),
        workers_per_target=workers, schedule=schedule, flush_cache=t.get("flush_cache", bool, True),
        error_budget=_error_budget(t), on_worker_death=_choice(t, "on_worker_death", ("continue", "stop")),
        on_server_death=_choice(t, "on_server_death", ("restart", "stop")),
        server_retry_s=t.positive("server_retry_s", 60.0),
        min_measured=t.get("min_measured_requests", int, None), max_measure_s=t.positive("max_measure_s", 0.0, True),
        realtime_priority=t.get("realtime_priority", bool, True), search=search,
        stop_after_slo_failures=t.get("stop_after_slo_failures", int, None), trace=trace, ramp=ramp,
        warmup_requests=warmup_requests, false_verdict=_false_verdict(t))
    t.done()
    if config.stop_after_slo_failures is not None and (search or config.stop_after_slo_failures < 1):
        raise ConfigError("load.stop_after_slo_failures", "must be >= 1, and only applies to a grid of levels",
                          "e.g. 2: stop a target once it failed the SLO at two levels in a row")
    if config.min_measured is not None and config.min_measured < 1:
        raise ConfigError("load.min_measured_requests", f"must be >= 1, got {config.min_measured}",
                          "or leave it out: at least one request per unit of concurrency")
    if config.max_measure_s and config.max_measure_s < config.measure_s:
        raise ConfigError("load.max_measure_s", f"{config.max_measure_s:g} is below measure_s = {config.measure_s:g}",
                          "the window can only be extended: raise it or leave it out")
    return config


def _error_budget(t: StrictTable) -> float | None:
    """A whole number is a count of failed requests per step; a fraction below 1 is a share of them."""
    raw = t.data.get("error_budget")
    value = t.get("error_budget", (int, float), None)
    if value is None:
        return None
    fix = "a whole number of failed requests per step (e.g. 10), or a share below 1 (e.g. 0.05)"
    if isinstance(raw, int) and value < 0 or isinstance(raw, float) and not 0 < value < 1:
        raise ConfigError("load.error_budget", f"must be {fix}, got {raw!r}", "or leave it out: never stop")
    return value


def _false_verdict(t: StrictTable) -> float | None:
    """window = "sequential": the sequential test's error rate (default 0.05); None for fixed windows."""
    window = _choice(t, "window", ("fixed", "sequential"))
    if window == "fixed":
        if "false_verdict" in t.data:
            raise ConfigError("load.false_verdict", "only applies to sequential windows", 'add window = "sequential"')
        return None
    rate = t.get("false_verdict", float, 0.05)
    if not 0 < rate < 0.5:
        raise ConfigError("load.false_verdict", f"must be a share between 0 and 0.5, got {rate:g}", "e.g. 0.05")
    return rate


def _sequential_slo(load: LoadConfig, slo: Slo | None) -> Slo:
    """The SLO judged by the sequential test (loadgen/results/sequential.py): closed-loop timed windows only."""
    if slo is None:
        raise ConfigError("load.window", "a sequential window ends on an SLO call", "add an [slo] table (or --slo)")
    if load.open_loop is not None or load.requests is not None or load.trace or load.ramp:
        raise ConfigError("load.window", "sequential windows are closed-loop timed windows only",
                          'remove window = "sequential", or use mode = "closed" without requests, trace or ramp')
    if slo.attainment >= 1:
        raise ConfigError("slo.attainment", "a sequential test needs misses to be allowed (attainment < 1)",
                          'e.g. attainment = 0.99, or remove window = "sequential"')
    return replace(slo, false_verdict=load.false_verdict)


def _choice(t: StrictTable, name: str, options: tuple[str, ...]) -> str:
    value = t.get(name, str, options[0])
    if value not in options:
        raise ConfigError(f"load.{name}", f"unknown value {value!r}", "use " + " or ".join(f'"{o}"' for o in options))
    return value


def experiment_document(exp: Experiment) -> dict:
    """What the hash covers: the experiment as written (secrets masked, --slo applied) and every target as
    resolved (a fleet's profiles are in other files). Paths are left out: `ray job submit` unpacks the
    working directory somewhere new each time."""
    targets = [{"name": t.name, "flavor": t.flavor, "url": t.url, "emulator_args": list(t.emulator_args),
                "node": t.node, "model": t.model} for t in exp.targets]
    return {"config": masked(exp.raw), "targets": targets}


def config_hash(exp: Experiment) -> str:
    text = json.dumps(experiment_document(exp), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
